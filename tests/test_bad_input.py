"""Bad input to the engine (`specdec.generate.generate`), the API (SpeculativeGenerator) and the CLI
(`python -m specdec`): each gets a clear error, and in a prompts file only the bad line fails."""

from __future__ import annotations

import json

import pytest
import torch

from specdec import DraftModelProposer, SpeculativeGenerator, generate
from specdec.__main__ import main as cli_main
from specdec.targets import ContrastiveRule, HeadEnsembleRule
from specdec.testing import random_pair

PROMPTS = [[1, 5, 7], [1, 9, 3]]


@pytest.fixture(scope="module")
def pair():
    return random_pair(vocab_size=32)


def test_generate_rejects_bad_input(pair):
    target, draft = pair
    kw = dict(gamma=2, max_new_tokens=4)
    for bad in ([[1, 32]], [[1, 5], [-1, 2]]):  # the vocabulary is [0, 32)
        with pytest.raises(ValueError, match=r"prompt \d holds token ids outside \[0, 32\)"):
            generate(target, DraftModelProposer(draft), bad, **kw)
    for n in (0, -3):
        with pytest.raises(ValueError, match=f"max_new_tokens must be >= 1, got {n}"):
            generate(target, DraftModelProposer(draft), PROMPTS, gamma=2, max_new_tokens=n)
    with pytest.raises(ValueError, match="no prompts given"):
        generate(target, DraftModelProposer(draft), [], **kw)
    # a contrastive rule, alone or as a head's base, needs the amateur's pass
    for rule in (ContrastiveRule(0.5, 0.1), HeadEnsembleRule(lambda hq, hp, f: torch.ones(f.shape[:-1]),
                                                             base=ContrastiveRule(0.5))):
        with pytest.raises(ValueError, match="needs the amateur model"):
            generate(target, DraftModelProposer(draft), PROMPTS, rule=rule, **kw)
    # the same call with good input decodes (the errors above are about the input, not the set-up)
    out = generate(target, DraftModelProposer(draft), PROMPTS, **kw)
    assert [len(t) for t in out.tokens] == [4, 4]


@pytest.fixture(scope="module")
def sg(micro_trio):
    return SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="static", w=0.5, gamma=3, device="cpu")


def test_api_rejects_bad_input(sg, micro_trio):
    with pytest.raises(ValueError, match="no prompts given"):
        sg.generate([], max_new_tokens=4)
    for n in (0, -1):
        with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
            sg.generate(["Q: 1 + 1 ="], max_new_tokens=n)
    with pytest.raises(TypeError, match="a prompt must be a string"):
        sg.generate([[1, 2, 3]], max_new_tokens=4)
    # explicit model paths: a contrastive method without the amateur is refused before anything loads
    for rule in ("cd", "dcd", "scd"):
        with pytest.raises(ValueError, match="also needs amateur=PATH"):
            SpeculativeGenerator.from_pretrained(target=micro_trio / "target", draft=micro_trio / "draft", rule=rule,
                                                 device="cpu")
    (c,) = sg.generate(["Q: 1 + 1 ="], max_new_tokens=4, seed=0)
    assert 1 <= len(c.token_ids) <= 4


def _cli(micro_trio, *args: str) -> list[str]:
    return ["--models-dir", str(micro_trio), "--device", "cpu", "--max-new-tokens", "4", "--gamma", "2", *args]


def test_cli_prompts_file_fails_only_the_bad_lines(micro_trio, tmp_path):
    good = json.dumps({"prompt": "Q: 2 + 2 =", "id": 1})
    lines = [
        good,
        "[1, 2]",  # JSON, not an object
        '"just a string"',
        "null",
        json.dumps({"prompt": "Q: 3 + 3 =", "temprature": 0.5}),  # a misspelt field
        json.dumps({"prompt": "Q: 4 + 4 =", "max_new_tokens": 0}),
        json.dumps({"prompt": "Q: 5 + 5 =", "temperature": -1}),
        json.dumps({"prompt": "Q: 6 + 6 =", "temperature": float("nan")}),
        json.dumps({"prompt": "Q: 7 + 7 =", "id": "last"}),
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    cli_main(_cli(micro_trio, "--prompts-file", str(src), "--out", str(out), "--batch-size", "2"))
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["line"] for r in recs] == list(range(1, len(lines) + 1))
    errors = {r["line"]: r["error"] for r in recs if "error" in r}
    assert set(errors) == {2, 3, 4, 5, 6, 7, 8}, errors
    for i, kind in ((2, "list"), (3, "str"), (4, "NoneType")):
        assert errors[i] == f'expected a JSON object with a "prompt" field, got {kind}'
    assert "unknown field(s) ['temprature']" in errors[5]
    assert '"max_new_tokens" must be >= 1, got 0' in errors[6]
    assert '"temperature" must be >= 0' in errors[7] and '"temperature" must be' in errors[8]
    ok = [r for r in recs if "error" not in r]
    assert [r["id"] for r in ok] == [1, "last"] and all(1 <= len(r["token_ids"]) <= 4 for r in ok)


def test_cli_refuses_bad_arguments(micro_trio, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"prompt": "Q: 1 + 1 ="}) + "\n")
    out = tmp_path / "out.jsonl"
    cases = [
        (["--prompts-file", str(tmp_path / "missing.jsonl"), "--out", str(out)], "missing.jsonl does not exist"),
        (["--prompts-file", str(src)], "--prompts-file needs --out"),
        (["--prompts-file", str(src), "--out", str(out), "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as e:
            cli_main(_cli(micro_trio, *argv))
        assert e.value.code != 0
        assert message in capsys.readouterr().err
        assert not out.exists()
    # a contrastive rule with explicit models and no amateur: an error message, not a traceback
    with pytest.raises(SystemExit) as e:
        cli_main(["--target", str(micro_trio / "target"), "--draft", str(micro_trio / "draft"), "--rule", "cd",
                  "--device", "cpu", "--prompt", "Q: 1 + 1 ="])
    assert "also needs amateur=PATH" in str(e.value.code)
