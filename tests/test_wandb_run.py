"""train/wandb_run.py, the one W&B helper of the jobs: offline runs (WANDB_MODE=offline, no network, no key) whose
run summary holds the final metrics; the logger group or WANDB_MODE=disabled turns W&B off."""

import json
import struct

import pytest
from omegaconf import OmegaConf

from train import wandb_run


def cfg(kind: str = "wandb", mode: str = "offline"):
    return OmegaConf.create({"logger": {"kind": kind, "mode": mode, "project": "specdec-test", "entity": None},
                             "task": {"name": "gsm8k"}, "seed": 0})


def wandb_records(path):
    """The protobuf records of an offline run's .wandb file (wandb 0.31 ships no reader of its own): a ':W&B'
    header (7 bytes), then LevelDB-log framing (32 KiB blocks; records of crc32, length, type, payload)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, buf = path.read_bytes(), 7, 32768, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4) and buf:  # FULL or LAST: a whole record
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            yield rec


def summary_of(run_dir, want: tuple[str, ...] = (), wait_s: float = 30.0) -> dict:
    """The run summary of the one offline run under run_dir, as the run's summary updates leave it. The W&B service
    process writes the run file on its own schedule (once, in CI under load, the summary was not in it yet when
    the test read it), so this reads again until every key in `want` is there or wait_s has passed; the caller
    still asserts the values."""
    import time

    (run,) = (run_dir / "wandb").glob("offline-run-*/*.wandb")
    deadline = time.monotonic() + wait_s
    while True:
        out = {}
        for rec in wandb_records(run):
            if rec.WhichOneof("record_type") == "summary":
                for item in rec.summary.update:
                    out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        if all(k in out for k in want) or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def test_offline_run_logs_steps_and_puts_the_final_metrics_in_the_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb_run.start_run(cfg(), name="unit", run_dir=tmp_path / "train", job_type="train", tags=["gsm8k"])
    assert run is not None
    for step in (1, 2):
        wandb_run.log_step(run, {"step": step, "loss": 1.0 / step, "reward_ranks": [1, 2], "gap": float("nan")},
                           step=step)
    wandb_run.finish(run, {"final": {"task_reward": 0.25, "acceptance_rate": 0.75}, "steps": 2, "note": "text"})
    s = summary_of(tmp_path / "train", want=("final/task_reward", "final/acceptance_rate", "steps"))
    assert s["final/task_reward"] == 0.25 and s["final/acceptance_rate"] == 0.75 and s["steps"] == 2
    assert s["loss"] == 0.5 and "reward_ranks" not in s and "gap" not in s and "note" not in s

    # evaluation: each method's metrics under its label, in the summary of a second run of the same process
    results = [{"label": "sd", "task_score": 0.5, "acceptance_rate": 0.6, "params": {"gamma": 4}},
               {"label": "static w=0.5", "task_score": 0.4, "acceptance_rate": 0.9, "flag": True}]
    wandb_run.log_results(cfg(), results, run_dir=tmp_path / "eval")
    s = summary_of(tmp_path / "eval", want=("sd/task_score", "sd/params/gamma", "static w=0.5/acceptance_rate"))
    assert s["sd/task_score"] == 0.5 and s["sd/params/gamma"] == 4 and s["static w=0.5/acceptance_rate"] == 0.9
    assert "static w=0.5/flag" not in s


@pytest.mark.parametrize("kind,mode,env", [("none", "disabled", None), ("wandb", "disabled", None),
                                           ("wandb", "offline", "disabled")])
def test_off_means_no_run_and_no_files(kind, mode, env, tmp_path, monkeypatch):
    if env:
        monkeypatch.setenv("WANDB_MODE", env)
    else:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    c = cfg(kind, mode)
    assert wandb_run.start_run(c, run_dir=tmp_path) is None
    wandb_run.log_step(None, {"loss": 1.0})
    wandb_run.finish(None, {"final": {"loss": 1.0}})
    wandb_run.log_results(c, [{"label": "sd", "task_score": 1.0}], run_dir=tmp_path / "eval")
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "eval").exists()


def test_auto_mode_is_online_only_with_a_key(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_run.wandb_mode(cfg(mode="auto")) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_run.wandb_mode(cfg(mode="auto")) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_run.wandb_mode(cfg(mode="online")) == "offline"
