"""Small pure pieces of the training job: data order, stop-string truncation, model path resolution."""

import pytest
from omegaconf import OmegaConf

from data.tokenizer import build_tokenizer
from specdec.loading import Models
from train.rollout import cut_at_stop
from train.trainer import batch_indices


def test_batch_indices_are_a_pure_function_of_seed_and_step_and_cover_each_epoch():
    n, per = 10, 4
    steps = [batch_indices(s, n, per, seed=3) for s in range(5)]  # 20 draws = 2 epochs
    assert steps == [batch_indices(s, n, per, seed=3) for s in range(5)]
    flat = [i for s in steps for i in s]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert steps != [batch_indices(s, n, per, seed=4) for s in range(5)]


def test_cut_at_stop_masks_the_tokens_after_the_stop_string():
    tok = build_tokenizer()
    ids = tok("ab #### 5\nQuestion: more", add_special_tokens=False)["input_ids"]
    text, keep = cut_at_stop(tok, ids, ("\nQuestion:",))
    assert text == "ab #### 5"
    assert tok.decode(ids[:keep]) == "ab #### 5\nQuestion:"
    assert cut_at_stop(tok, ids, ("nothing",)) == (tok.decode(ids), len(ids))


def test_cut_at_stop_ends_a_chat_row_after_its_closed_code_block():
    import re

    from data.tasks import CODE_BLOCK_END

    chat_stop = re.compile(CODE_BLOCK_END, re.S)
    tok = build_tokenizer()
    ids = tok("```python\nx = 1\n```\nNow the tests:\n```python\nassert x\n```", add_special_tokens=False)["input_ids"]
    text, keep = cut_at_stop(tok, ids, (), chat_stop)
    assert text == "```python\nx = 1\n```"
    assert tok.decode(ids[:keep]) == text  # the kept tokens end with the one that closes the block
    # a plain stop string that comes first still wins
    assert cut_at_stop(tok, ids, ("x = 1",), chat_stop)[0] == "```python\n"
    assert cut_at_stop(tok, ids[:6], (), chat_stop) == (tok.decode(ids[:6]), 6)  # block not closed yet


def test_model_paths_from_dir_or_explicit():
    cfg = OmegaConf.create({"dir": "/m", "embedded": False, "target": None, "draft": "/x/d", "amateur": None})
    assert Models(cfg).names() == {"target": "/m/target", "draft": "/x/d", "amateur": "/m/amateur"}
    with pytest.raises(ValueError, match="target"):
        Models(OmegaConf.create({"dir": None, "embedded": False, "target": None, "draft": "d"})).path("target")


def test_plot_metrics_draws_the_curves_and_skips_a_cut_line(tmp_path):
    import json

    from specdec.jsonl import read_jsonl
    from train.plot_metrics import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "task_reward": 0.5, "acceptance_rate": 0.8 + 0.01 * s, "w_mean": 0.9 - 0.1 * s,
             "w_q10": 0.8 - 0.1 * s, "w_q90": 0.95 - 0.1 * s} for s in range(1, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "task_')
    assert read_jsonl(run / "metrics.jsonl") == rows
    out = plot_runs([run], tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_runs([tmp_path / "nothing"], tmp_path / "d.png")


def test_resume_truncation_drops_rerun_steps_and_a_line_cut_mid_write(tmp_path):
    """A kill can land mid-write of a metrics line; resuming from step 2 must neither crash on that line nor keep
    step 3, which the resumed run logs again."""
    import json

    from specdec.jsonl import append_jsonl, read_jsonl, truncate_steps

    path = tmp_path / "metrics.jsonl"
    for s in (1, 2, 3):
        append_jsonl(path, [{"step": s, "loss": 1.0 / s}])
    path.write_text(path.read_text() + '{"step": 4, "lo')
    truncate_steps(path, 2)
    assert read_jsonl(path) == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]
    append_jsonl(path, [{"step": 3, "loss": 0.25}])
    assert [r["step"] for r in map(json.loads, path.read_text().splitlines())] == [1, 2, 3]
    assert read_jsonl(tmp_path / "absent.jsonl") == []
