"""The embedded trio builder: tokenizer, layout, manifest, determinism, resume, ensure_embedded, configs.

Only the micro trio is built here (seconds); the full build is exercised by diagnostics/trio_quality.py.
"""

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from data import build_models as bm
from data.tokenizer import build_tokenizer, encode_fast

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_tokenizer_character_level_roundtrip():
    tok = build_tokenizer()
    text = "Question: Mia has 120 apples.\n    return [x * 2 for x in xs]  #### -45"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert list(encode_fast(text)) == ids[1:]
    digits = [tok(d, add_special_tokens=False).input_ids for d in "0123456789"]
    assert all(len(d) == 1 for d in digits) and len({d[0] for d in digits}) == 10
    assert tok("12", add_special_tokens=False).input_ids == digits[1] + digits[2]
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id}) == 4
    assert not getattr(tok, "chat_template", None)
    assert tok("é", add_special_tokens=False).input_ids == [tok.unk_token_id] == list(encode_fast("é"))


def test_micro_trio_layout_and_manifest(micro_trio):
    tok = AutoTokenizer.from_pretrained(micro_trio / "tokenizer")
    for name in bm.MODEL_NAMES:
        model = AutoModelForCausalLM.from_pretrained(micro_trio / name)
        assert model.config.vocab_size == len(tok)
        assert model.config.eos_token_id == tok.eos_token_id
        assert AutoTokenizer.from_pretrained(micro_trio / name).get_vocab() == tok.get_vocab()
        assert (micro_trio / name / "DONE").exists()
    m = json.loads((micro_trio / "manifest.json").read_text())
    assert m["data"] == "synthetic" and m["seed"] == 0
    assert m["machine"]["torch"] == torch.__version__ and m["machine"]["cpu"]  # weights differ across CPU kinds
    for name in bm.MODEL_NAMES:
        rec = m["models"][name]
        model = AutoModelForCausalLM.from_pretrained(micro_trio / name)
        assert rec["params"] == sum(p.numel() for p in model.parameters())
        assert rec["flops_per_token"]["total"] > 0 and rec["tokens_seen"] > 0
    assert bm.is_built(micro_trio)


def test_training_reduces_loss_on_completions(tmp_path):
    pools = {t: bm.encode_examples(t, bm._rows(t, 64, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    ids, mask = bm.batch_for(bm.step_indices(0, 0, 8, pools, bm.TASK_MIX), pools)
    # the mask covers exactly the completion + eos targets: the token after each masked position
    for r in range(ids.shape[0]):
        nxt = ids[r, 1:][mask[r, :-1].bool()]
        assert nxt[-1] == bm.EOS_ID and (nxt != bm.PAD_ID).all()

    # and training lowers that loss: the completion loss on a fixed batch the run never draws (another seed),
    # before (train_model's own initial weights: same seed) and after 40 steps of train_model
    held_ids, held_mask = bm.batch_for(bm.step_indices(99, 0, 16, pools, bm.TASK_MIX), pools)

    @torch.no_grad()
    def completion_loss(model) -> float:
        logits = model(input_ids=held_ids).logits.float()
        per_tok = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), held_ids[:, 1:], reduction="none")
        return float((per_tok * held_mask[:, :-1]).sum() / held_mask[:, :-1].sum())

    torch.manual_seed(0 * 1000 + bm.MODEL_NAMES.index("target"))
    before = completion_loss(AutoModelForCausalLM.from_config(bm.make_config(bm.MICRO.target)).eval())
    tr = replace(bm.MICRO.train_target, steps=40)
    bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path, seed=0, ckpt_every=1000, progress=False)
    after = completion_loss(AutoModelForCausalLM.from_pretrained(tmp_path / "target").eval())
    assert after < 0.8 * before, (before, after)  # measured 4.56 -> 2.86


def test_independent_recipe_draft_is_a_competent_cheaper_model():
    """Issue 10: the independent draft is a smaller model of real capacity (c = draft/target FLOPs in [0.2, 0.4], as
    a real 0.5B drafting for a 1.5B), trained on its own corpus (wording style b), not a near-failure."""
    ind = bm.INDEPENDENT
    ft = bm.flops_per_token(ind.target)["total"]
    fd = bm.flops_per_token(ind.draft)["total"]
    assert 0.2 <= fd / ft <= 0.4
    assert ind.draft.layers >= 2 and ind.draft.hidden < ind.target.hidden
    assert ind.train_draft.style == "b" and ind.train_target.style == "a"
    assert not ind.train_amateur.distill


def test_default_recipe_is_the_style_c_pruned_draft_beside_the_same_target():
    """The default trio: the pruned draft (two of the target's layers, half its MLP) on the style-c corpus for 1500
    steps; target and amateur are the independent recipe's, so only the draft differs between the two."""
    d, ind = bm.DEFAULT, bm.INDEPENDENT
    assert d.train_draft.prune_layers == (0, 2) and d.train_draft.style == "c" and d.train_draft.steps == 1500
    assert d.draft.hidden == d.target.hidden and d.draft.layers == 2 and d.draft.mlp == d.target.mlp // 2
    assert (d.target, d.train_target, d.amateur, d.train_amateur) == (ind.target, ind.train_target, ind.amateur,
                                                                      ind.train_amateur)
    assert bm.RECIPES["default"] is d and bm.build.__defaults__[2] is d


def test_a_model_of_another_recipe_is_set_aside_and_rebuilt(tmp_path, caplog, monkeypatch):
    """A DONE model or a checkpoint trained under other settings is never returned or resumed into: it moves to
    replaced/ (kept, not deleted) and the model is trained afresh under the requested recipe."""
    pools = {t: bm.encode_examples(t, bm._rows(t, 32, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    tr = replace(bm.MICRO.train_target, steps=4)
    first = bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path, 0, ckpt_every=100, progress=False)
    assert bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path, 0, ckpt_every=100, progress=False) == first
    other = replace(tr, lr=tr.lr / 2)
    rec = bm.train_model("target", bm.MICRO.target, other, pools, tmp_path, 0, ckpt_every=100, progress=False)
    assert rec["train"]["lr"] == other.lr and "another recipe" in caplog.text
    (kept,) = (tmp_path / "replaced").iterdir()
    assert json.loads((kept / "DONE").read_text())["train"]["lr"] == tr.lr

    # a partial run's checkpoint of another recipe: set aside, training starts from step 0
    longer = replace(tr, steps=6)
    real_lr = bm.lr_at

    def crash_at_3(step, t):
        if step == 3:
            raise KeyboardInterrupt("simulated kill")
        return real_lr(step, t)

    monkeypatch.setattr(bm, "lr_at", crash_at_3)
    with pytest.raises(KeyboardInterrupt):
        bm.train_model("draft", bm.MICRO.draft, longer, pools, tmp_path, 0, ckpt_every=2, progress=False)
    monkeypatch.setattr(bm, "lr_at", real_lr)
    assert (tmp_path / "draft.ckpt" / "latest").exists()
    rec = bm.train_model("draft", bm.MICRO.draft, replace(longer, lr=tr.lr / 3), pools, tmp_path, 0,
                         ckpt_every=100, progress=False)
    assert any(p.name.startswith("draft.ckpt-") for p in (tmp_path / "replaced").iterdir())
    fresh = bm.train_model("draft", bm.MICRO.draft, replace(longer, lr=tr.lr / 3), pools, tmp_path / "fresh", 0,
                           ckpt_every=100, progress=False)
    a, b = _weights(tmp_path, "draft"), _weights(tmp_path / "fresh", "draft")  # from step 0, not the other's step 2
    assert rec["train"] == fresh["train"] and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_styled_pools_change_only_the_completions():
    """The draft's corpus (style b) asks the same kind of problems; the completions are worded differently."""
    a = bm._rows("gsm8k", 300, 0, bm.DEFAULT.gsm8k_knobs)
    b = bm._rows("gsm8k", 300, 0, bm.DEFAULT.gsm8k_knobs, style="b")
    openers = [sum(r["answer"].startswith("We count the ") for r in rows) / 300 for rows in (a, b)]
    assert openers[1] > openers[0] + 0.25


def test_distillation_on_samples_only_trains_gold_rows_with_cross_entropy(tmp_path):
    """sample_frac > 0 without distill: the teacher is called on the sample rows only (KL there), the gold rows
    keep cross-entropy, and training still lowers the loss."""
    pools = {t: bm.encode_examples(t, bm._rows(t, 32, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    teacher = bm.LlamaForCausalLM(bm.make_config(bm.MICRO.target)).eval()
    calls = []
    real_forward = teacher.forward

    def spy(*a, **kw):
        calls.append(kw["input_ids"].shape[0])
        return real_forward(*a, **kw)

    teacher.forward = spy
    tr = replace(bm.MICRO.train_draft, steps=3, batch=8, sample_frac=0.25, distill=False)
    rec = bm.train_model("draft", bm.MICRO.draft, tr, pools, tmp_path, 0, ckpt_every=100, teacher=teacher,
                         sample_pool=pools["gsm8k"][:4], progress=False)
    assert calls == [2, 2, 2] and rec["tokens_seen"] > 0


def test_pruned_draft_is_cut_out_of_the_target(tmp_path):
    """prune_layers: keeping every layer and neuron reproduces the target exactly; a pruned draft keeps the chosen
    layers' attention and the MLP neurons of largest norm, and trains from there; bad shapes are refused."""
    torch.manual_seed(0)
    target = bm.LlamaForCausalLM(bm.make_config(bm.MICRO.target)).eval()
    ids = torch.randint(4, 50, (2, 12))
    full = bm.LlamaForCausalLM(bm.make_config(bm.MICRO.target)).eval()
    full.load_state_dict(bm.pruned_state(target, bm.MICRO.target, (0, 1)))
    assert torch.allclose(full(input_ids=ids).logits, target(input_ids=ids).logits, atol=1e-6)

    arch = bm.Arch(hidden=32, layers=1, heads=2, mlp=16)
    st = bm.pruned_state(target, arch, (1,))
    src = target.state_dict()
    assert torch.equal(st["model.layers.0.self_attn.q_proj.weight"], src["model.layers.1.self_attn.q_proj.weight"])
    d = src["model.layers.1.mlp.down_proj.weight"]
    norms = d.norm(dim=0) * (src["model.layers.1.mlp.gate_proj.weight"].norm(dim=1)
                             + src["model.layers.1.mlp.up_proj.weight"].norm(dim=1))
    kept = norms.topk(16).indices.sort().values
    assert torch.equal(st["model.layers.0.mlp.down_proj.weight"], d[:, kept])
    with pytest.raises(ValueError, match="one kept layer per draft layer"):
        bm.pruned_state(target, arch, (0, 1))
    with pytest.raises(ValueError, match="cannot keep"):
        bm.pruned_state(target, arch, (5,))

    pools = {t: bm.encode_examples(t, bm._rows(t, 32, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    tr = replace(bm.MICRO.train_draft, steps=2, sample_frac=0.0, prune_layers=(1,))
    bm.train_model("draft", arch, tr, pools, tmp_path, 0, ckpt_every=100, teacher=target, progress=False)
    with pytest.raises(ValueError, match="needs the trained target"):
        bm.train_model("amateur", arch, tr, pools, tmp_path, 0, ckpt_every=100, progress=False)
    assert (tmp_path / "draft" / "DONE").exists() and bm.RECIPES["pruned"].train_draft.prune_layers == (0, 2)


def _weights(d: Path, name: str) -> dict:
    return AutoModelForCausalLM.from_pretrained(d / name).state_dict()


def test_build_is_deterministic_by_seed(micro_trio, tmp_path):
    again = bm.build_micro_trio(tmp_path / "again", seed=0)
    for name in bm.MODEL_NAMES:
        a, b = _weights(micro_trio, name), _weights(again, name)
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_interrupted_training_resumes_to_the_same_weights(tmp_path, monkeypatch):
    pools = {t: bm.encode_examples(t, bm._rows(t, 32, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    tr = replace(bm.MICRO.train_target, steps=6)
    bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / "whole", 0, ckpt_every=3, progress=False)

    real_lr = bm.lr_at

    def crash_at_4(step, t):
        if step == 4:
            raise KeyboardInterrupt("simulated kill")
        return real_lr(step, t)

    monkeypatch.setattr(bm, "lr_at", crash_at_4)
    with pytest.raises(KeyboardInterrupt):
        bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / "cut", 0, ckpt_every=3, progress=False)
    ck = tmp_path / "cut" / "target.ckpt"
    assert (ck / "step000003" / "MANIFEST.json").exists() and not (tmp_path / "cut" / "target" / "DONE").exists()
    # an older build's checkpoint (one file, target.ckpt.pt, before specdec.checkpoint) resumes the same way
    state = torch.load(ck / "step000003" / "state.pt", weights_only=True)
    shutil.copytree(tmp_path / "cut", tmp_path / "legacy")
    shutil.rmtree(tmp_path / "legacy" / "target.ckpt")
    torch.save({k: state[k] for k in ("model", "opt", "step", "elapsed", "tokens", "recipe")},
               tmp_path / "legacy" / "target.ckpt.pt")
    monkeypatch.setattr(bm, "lr_at", real_lr)
    for run in ("cut", "legacy"):
        bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / run, 0, ckpt_every=3, progress=False)
        a, b = _weights(tmp_path / "whole", "target"), _weights(tmp_path / run, "target")
        assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a), run
        assert not (tmp_path / run / "target.ckpt").exists() and not (tmp_path / run / "target.ckpt.pt").exists()


def test_a_checkpoint_that_fails_its_sha256_is_set_aside_not_resumed(tmp_path, monkeypatch, caplog):
    pools = {t: bm.encode_examples(t, bm._rows(t, 32, 0, bm.MICRO.gsm8k_knobs)) for t in bm.TASK_MIX}
    tr = replace(bm.MICRO.train_target, steps=4)
    real_lr = bm.lr_at
    monkeypatch.setattr(bm, "lr_at", lambda step, t: (_ for _ in ()).throw(KeyboardInterrupt()) if step == 3
                        else real_lr(step, t))
    with pytest.raises(KeyboardInterrupt):
        bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / "cut", 0, ckpt_every=2, progress=False)
    monkeypatch.setattr(bm, "lr_at", real_lr)
    state = tmp_path / "cut" / "target.ckpt" / "step000002" / "state.pt"
    state.write_bytes(state.read_bytes()[:-1] + b"x")  # same size, other bytes
    bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / "cut", 0, ckpt_every=2, progress=False)
    out = caplog.text
    assert "unusable checkpoint" in out and "state.pt does not match its sha256" in out
    (kept,) = (tmp_path / "cut" / "replaced").iterdir()  # kept for inspection, never deleted
    assert kept.name.startswith("target.ckpt-") and (kept / "step000002" / "state.pt").exists()
    bm.train_model("target", bm.MICRO.target, tr, pools, tmp_path / "whole", 0, ckpt_every=100, progress=False)
    a, b = _weights(tmp_path / "whole", "target"), _weights(tmp_path / "cut", "target")  # trained from step 0
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_ensure_embedded_builds_only_when_missing(micro_trio, tmp_path, monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(bm, "build", lambda out, seed=0: calls.append(out) or out)
    assert bm.ensure_embedded(micro_trio) == micro_trio and not calls
    assert caplog.text == ""
    missing = tmp_path / "nowhere"
    assert bm.ensure_embedded(missing) == missing and calls == [missing]
    assert "building it now" in caplog.text
    caplog.clear()
    # the default directory is brought up to the default recipe; a trio elsewhere is used as it is
    calls.clear()
    monkeypatch.setattr(bm, "DEFAULT_DIR", micro_trio)
    assert bm.ensure_embedded(micro_trio) == micro_trio and calls == [micro_trio]
    assert "another recipe" in caplog.text
    monkeypatch.setattr(bm, "built_by", lambda out, recipe: recipe is bm.DEFAULT)
    calls.clear()
    assert bm.ensure_embedded(micro_trio) == micro_trio and not calls
    monkeypatch.undo()
    monkeypatch.setattr(bm, "build", lambda out, seed=0: calls.append(out) or out)
    assert bm.built_by(micro_trio, bm.MICRO) and not bm.built_by(micro_trio, bm.DEFAULT)
    monkeypatch.setenv(bm.ENV_VAR, str(micro_trio))
    assert bm.resolve_dir(None) == micro_trio
    monkeypatch.delenv(bm.ENV_VAR)
    assert bm.resolve_dir(None) == bm.DEFAULT_DIR and bm.resolve_dir("x/y") == bm.PROJECT_ROOT / "x/y"


def test_a_build_on_first_use_runs_on_every_core_and_restores_the_callers_threads(micro_trio, tmp_path,
                                                                                  monkeypatch, caplog):
    """ensure_embedded builds with torch on every usable core (a job may run thread-limited: OMP_NUM_THREADS=1
    made `make run` build the target on one of two cores, ~20 min instead of ~9), then gives the caller its
    own setting back, also when the build fails. No real build: `build` is replaced by a probe."""
    seen = []
    monkeypatch.setattr(bm, "usable_cores", lambda: 3)  # not this machine's count: the value must come from here
    monkeypatch.setattr(bm, "build", lambda out, seed=0: seen.append(torch.get_num_threads()) or out)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        bm.ensure_embedded(tmp_path / "missing")
        assert seen == [3] and torch.get_num_threads() == 1
        assert "3 threads" in caplog.text
        monkeypatch.setattr(bm, "DEFAULT_DIR", micro_trio)  # the other build path: a trio of another recipe
        bm.ensure_embedded(micro_trio)
        assert seen == [3, 3] and torch.get_num_threads() == 1

        def failing(out, seed=0):
            raise KeyboardInterrupt("killed mid-build")

        monkeypatch.setattr(bm, "build", failing)
        with pytest.raises(KeyboardInterrupt):
            bm.ensure_embedded(tmp_path / "again")
        assert torch.get_num_threads() == 1
        seen.clear()
        monkeypatch.setattr(bm, "build", lambda out, seed=0: seen.append(out) or out)
        monkeypatch.setattr(bm, "built_by", lambda out, recipe: True)
        bm.ensure_embedded(micro_trio)  # nothing to build: the thread count is never touched
        assert not seen and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    monkeypatch.undo()
    assert 1 <= bm.usable_cores() <= (os.cpu_count() or 1)


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(config_name="eval", overrides=overrides)


def test_model_configs(monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.delenv(bm.ENV_VAR, raising=False)
    tiny = OmegaConf.to_container(_compose(["model=tiny"]).model, resolve=True)
    assert tiny["embedded"] is True and tiny["dir"] == "artifacts/models/tiny" and tiny["device"] == "cpu"
    monkeypatch.setenv(bm.ENV_VAR, "/somewhere/trio")
    assert _compose(["model=tiny"]).model.dir == "/somewhere/trio"
    for name, target in [("llama3_8b_1b", "meta-llama/Llama-3.1-8B-Instruct"), ("qwen3_8b_06b", "Qwen/Qwen3-8B"),
                         ("gemma3_12b_4b", "google/gemma-3-12b-it")]:
        m = _compose([f"model={name}"]).model
        assert m.target == target and m.draft and m.amateur and m.embedded is False
        assert m.device == "cuda" and m.dtype == "bfloat16"


def test_real_pair_config_loads_local_copies_through_the_same_code(micro_trio, tmp_path):
    """model=qwen3_8b_06b with local directories (here: the micro checkpoints under other names)."""
    from specdec.registry import Models

    names = {"target": "Qwen3-8B", "draft": "Qwen3-0.6B", "amateur": "Qwen3-1.7B"}
    for role, n in names.items():
        shutil.copytree(micro_trio / role, tmp_path / n)
    cfg = _compose(["model=qwen3_8b_06b", "model.device=cpu", "model.dtype=float32"]
                   + [f"model.{r}={tmp_path / n}" for r, n in names.items()]).model
    models = Models(cfg)
    for role in names:
        lm = models.lm(role)
        logprobs, _ = lm.feed(torch.tensor([[1, 10, 11]]))
        assert logprobs.shape == (1, 3, lm.vocab_size)
        assert np.isclose(float(logprobs[0, -1].exp().sum()), 1.0, atol=1e-4)
