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


def test_resuming_from_an_earlier_step_sets_the_later_checkpoints_aside(tmp_path):
    """The replaced trajectory's checkpoints move to abandoned/ (never pruned, never `latest`); nothing is
    deleted, and a second set-aside of the same tag keeps both."""
    import json

    from train.checkpoint import LATEST, MANIFEST, list_checkpoints, set_aside_later, tag_for

    def make(step: int, text: str) -> None:
        d = tmp_path / tag_for(step)
        d.mkdir()
        (d / MANIFEST).write_text(json.dumps({"step": step, "files": {}}))
        (d / "states.pt").write_text(text)

    for s in (1, 2, 3, 4):
        make(s, f"old {s}")
    (tmp_path / LATEST).write_text(tag_for(4))
    moved = set_aside_later(tmp_path, 2)
    assert [m.relative_to(tmp_path).as_posix() for m in moved] == ["abandoned/step000003", "abandoned/step000004"]
    assert list_checkpoints(tmp_path) == ["step000001", "step000002"]
    assert (tmp_path / LATEST).read_text() == "step000002"
    assert (tmp_path / "abandoned" / "step000004" / "states.pt").read_text() == "old 4"
    make(3, "new 3")
    assert set_aside_later(tmp_path, 3) == []  # nothing after step 3 any more
    set_aside_later(tmp_path, 1)
    assert (tmp_path / "abandoned" / "step000003.1" / "states.pt").read_text() == "new 3"
    assert (tmp_path / "abandoned" / "step000003" / "states.pt").read_text() == "old 3"
    assert list_checkpoints(tmp_path) == ["step000001"]
    set_aside_later(tmp_path, 0)
    assert list_checkpoints(tmp_path) == [] and not (tmp_path / LATEST).exists()
