"""Helpers the benchmarks share (bench/contrastive_speed.py): which prompts and which models they run."""

from __future__ import annotations

import json

import pytest

from bench.contrastive_speed import config_paths, task_prompts
from data.loaders import load_examples
from data.tasks import get_task
from specdec.models import load_model


def test_prompts_from_a_data_file_are_the_rows_evaluation_draws(micro_trio, tmp_path):
    _, tok = load_model(micro_trio / "target")
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(10)]
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = task_prompts(tok, ["gsm8k"], 3, 5, data_path=str(path))["gsm8k"]
    drawn = load_examples("gsm8k", path=path, n=3, seed=5).rows
    assert got == [tok(get_task("gsm8k").format_prompt(r), add_special_tokens=True)["input_ids"] for r in drawn]
    assert len({tuple(p) for p in got}) == 3
    with pytest.raises(ValueError, match="one task"):
        task_prompts(tok, ["gsm8k", "mbpp"], 3, 5, data_path=str(path))


def test_model_config_paths_of_the_real_pair():
    paths = config_paths("qwen25coder_15b_05b")
    assert paths == {"target": "artifacts/models/qwen25coder_15b", "draft": "artifacts/models/qwen25coder_05b",
                     "amateur": "artifacts/models/qwen25coder_05b"}
    with pytest.raises(SystemExit, match="no model config"):
        config_paths("no_such_model")


def test_trio_quality_cuts_completions_at_the_task_stop_as_evaluation_does(micro_trio):
    """A greedy completion that runs on into an invented next question is scored on its own answer only."""
    from diagnostics.trio_quality import decode
    from rewards import score

    _, tok = load_model(micro_trio / "target")
    text = "3 + 4 = 7.\n#### 7\nQuestion: Ben has 2 pens and buys 3.\nAnswer: 2 + 3 = 5.\n#### 5"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert decode(tok, [ids], "gsm8k") == ["3 + 4 = 7.\n#### 7"]
    assert score("gsm8k", decode(tok, [ids], "gsm8k"), ["#### 7"]).mean == 1.0


def test_a_constant_head_outputs_its_w_everywhere(micro_trio, tmp_path):
    """diagnostics/const_head.py: the measuring stick of the TV-profile comparison decodes with w = its constant."""
    import torch

    from diagnostics.const_head import constant_head
    from heads import load_head

    out = constant_head(str(micro_trio / "target"), str(micro_trio / "draft"), tmp_path / "head", 0.999)
    head, cfg = load_head(out)
    g = torch.Generator().manual_seed(0)
    w = head(torch.randn(7, cfg["hidden_q"], generator=g), torch.randn(7, cfg["hidden_p"], generator=g),
             torch.randn(7, cfg["num_features"], generator=g))
    assert torch.allclose(w, torch.full_like(w, 0.999), atol=1e-6)
    with pytest.raises(ValueError, match="strictly between"):
        constant_head(str(micro_trio / "target"), str(micro_trio / "draft"), tmp_path / "one", 1.0)
