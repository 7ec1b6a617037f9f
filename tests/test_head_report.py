"""diagnostics/head_report.py: token classes (char-level and BPE), the oracle's w, and the report's structure on the micro
trio with a freshly initialised head (constant w = init_w, so every class's mean w is init_w)."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from diagnostics.head_report import CLASSES, main, oracle_w, report, token_class, vocab_classes
from specdec.targets import RoundScores

INIT_W = 0.7


@pytest.mark.parametrize("s,cls", [
    ("7", "digit"), (" 12", "digit"), ("3.5", "digit"), ("1,000", "digit"), ("+", "operator"), (" =", "operator"),
    ("*", "operator"), ("a", "word"), (" the", "word"), ("don't", "word"), (" ", "whitespace"), ("\n", "whitespace"),
    ("\n\n  ", "whitespace"), (".", "punct"), ("?", "punct"), ("$", "punct"), ("):", "punct"), ("x2", "other"),
    ("", "other"), ("12.", "digit"), ("=>", "punct"),
])
def test_token_class(s, cls):
    assert token_class(s) == cls


def test_vocab_classes_bpe_tokenizer():
    """A byte-level BPE (GPT-2 style: 'Ġ' marks a leading space) is classified on its decoded strings."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["the cat has 12 apples + 30 pears = 42 fruit.\n"] * 50, vocab_size=300, min_frequency=2,
                            special_tokens=["<eos>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<eos>")
    classes = vocab_classes(tok, len(tok) + 3)  # model vocabularies may be padded past the tokenizer
    vocab = tok.get_vocab()
    assert classes[vocab["Ġ12"]] == "digit" and classes[vocab["Ġapples"]] == "word" and classes[vocab["Ġ+"]] == "operator"
    assert classes[vocab["Ċ"]] == "whitespace" and classes[vocab["."]] == "punct"  # Ċ: the newline byte
    assert classes[vocab["<eos>"]] == "other" and classes[-1] == "other" and len(classes) == len(tok) + 3


def test_oracle_w_on_digit_mass():
    V = 4  # token 0 is the only digit
    critical = torch.tensor([True, False, False, False])
    p = torch.tensor([[[0.06, 0.94, 0.0, 0.0], [0.04, 0.96, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0]]])
    q = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.5, 0.0, 0.5, 0.0]]])
    scores = RoundScores(p.log(), 1.0, q)
    w = oracle_w(scores, critical, w0=0.2, threshold=0.05)
    assert w.shape == (1, 3) and torch.allclose(w, torch.tensor([[1.0, 0.2, 1.0]])) and V == p.shape[-1]


@pytest.fixture(scope="module")
def fresh_head(micro_trio, tmp_path_factory):
    from heads import EnsembleHead, HeadConfig, export_head
    from specdec.targets import PAIR_FEATURES

    cfgs = {r: json.loads((micro_trio / r / "config.json").read_text()) for r in ("target", "draft")}
    head = EnsembleHead(HeadConfig(hidden_q=cfgs["draft"]["hidden_size"], hidden_p=cfgs["target"]["hidden_size"],
                                   num_features=len(PAIR_FEATURES), init_w=INIT_W))
    return export_head(head, tmp_path_factory.mktemp("head") / "export", {"training": {"lambda": 0.1}})


def _cfg(micro_trio):
    return OmegaConf.create({
        "seed": 0, "temperature": 1.0, "head_path": None, "task": {"name": "gsm8k"}, "data": {},
        "model": {"dir": str(micro_trio)}, "method": {"name": "sd", "gamma": 3, "proposer": "draft"},
        "eval": {"num_samples": 4, "batch_size": 2, "max_new_tokens": 20},
    })


def test_vocab_classes_micro_trio_tokenizer(micro_trio):
    """The character-level tokenizer of the micro trio: one character per token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(micro_trio / "tokenizer"))
    classes = vocab_classes(tok, len(tok))
    for s, cls in (("7", "digit"), ("+", "operator"), ("=", "operator"), ("a", "word"), (" ", "whitespace"),
                   ("\n", "whitespace"), (".", "punct")):
        (i,) = tok(s, add_special_tokens=False)["input_ids"]
        assert classes[i] == cls, (s, i, tok.decode([i]))
    assert classes[tok.eos_token_id] == "other"


def test_report_structure_on_micro_trio(micro_trio, fresh_head, tmp_path):
    out = report(_cfg(micro_trio), [str(fresh_head)], tmp_path, w0=0.0, progress=False)
    assert out["num_prompts"] == 4 and len(out["heads"]) == 1
    h = out["heads"][0]
    assert h["label"] == "diversed(λ=0.1)"
    s = h["summary"]
    assert [r["class"] for r in s["by_class"]] == list(CLASSES)
    n = s["overall"]["n"]
    assert n > 0 and sum(r["n"] for r in s["by_class"]) == n
    assert [r["decile"] for r in s["by_tv_decile"]] == list(range(1, 11)) and sum(r["n"] for r in s["by_tv_decile"]) == n
    for r in s["by_class"] + s["by_tv_decile"]:  # a fresh head outputs init_w everywhere
        if r["n"]:
            assert r["mean_w"] == pytest.approx(INIT_W, abs=1e-5) and r["share_w_below_0.5"] == 0.0
            assert 0.0 <= r["oracle_w"] <= 1.0
    lo = [r["tv_lo"] for r in s["by_tv_decile"]]
    assert lo == sorted(lo)
    # 4 prompts x 20 tokens: every output token is a tested or a bonus position
    assert n + s["bonus_positions"]["n"] <= 4 * 20
    text = (tmp_path / "head_report.md").read_text()
    assert "| class | n | mean w | share w<0.5 | oracle w | mean TV(p,q) |" in text
    assert all(f"| {c} |" in text for c in CLASSES) and "| 10 | [" in text
    assert json.loads((tmp_path / "head_report.json").read_text())["heads"][0]["summary"]["overall"]["n"] == n
    assert (tmp_path / "head_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_with_two_heads(micro_trio, fresh_head, tmp_path, capsys):
    main([f"model.dir={micro_trio}", "task=gsm8k", f"head={fresh_head}", f"head={fresh_head}", "--n", "2",
          "eval.max_new_tokens=12", "eval.batch_size=2", "eval.progress=false", "--out", str(tmp_path)])
    res = json.loads((tmp_path / "head_report.json").read_text())
    assert len(res["heads"]) == 2 and res["heads"][0]["summary"] == res["heads"][1]["summary"]  # same seed
    assert "### diversed(λ=0.1)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no head given"):
        main([f"model.dir={micro_trio}", "--n", "1", "--out", str(tmp_path / "x")])
