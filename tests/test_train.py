"""End-to-end training runs (subprocesses, micro trio, debug=smoke): export, multirun summary, two ranks,
kill-and-resume equivalence, corrupt checkpoints. Runs are shared between assertions to keep this file fast."""

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from heads import load_head, tokenizer_hash

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
       "TOKENIZERS_PARALLELISM": "false", "HYDRA_FULL_ERROR": "1"}
TIMING_KEYS = {"time_rollout", "time_reward", "time_update", "time_step", "tokens_per_s", "train_seconds"}


def run(args: list[str], timeout: int = 300, launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run train/run.py in its own session; on timeout kill the whole group (torchrun's workers included)."""
    cmd = (launcher or [sys.executable]) + ["train/run.py", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def smoke_args(micro_trio: Path, run_dir: Path, *extra: str) -> list[str]:
    return ["task=gsm8k", "lambda=0.1", "debug=smoke", f"model.dir={micro_trio}", f"hydra.run.dir={run_dir}",
            "logger=disabled", *extra]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def gsm8k_run(micro_trio, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("train") / "gsm8k"
    p = run(smoke_args(micro_trio, run_dir))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return run_dir, p


def test_smoke_gsm8k_exports_a_loadable_head(gsm8k_run, micro_trio):
    from transformers import AutoConfig, AutoTokenizer

    run_dir, p = gsm8k_run
    assert f"exported head: {run_dir / 'head'}" in p.stdout
    assert "headline" in p.stdout
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert 0.0 <= r["task_reward"] <= 1.0 and 0.0 <= r["acceptance_rate"] <= 1.0
        assert 0.0 <= r["w_q10"] <= r["w_q50"] <= r["w_q90"] <= 1.0
        assert r["w_recompute_gap"] < 1e-5  # log ν recomputed from stored features = the rollout's ν
        assert r["grad_norm"] > 0
    assert rows[0]["w_mean"] == pytest.approx(0.5, abs=1e-6)  # init_w; then the head moves
    assert rows[-1]["w_mean"] != rows[0]["w_mean"]
    tok = AutoTokenizer.from_pretrained(micro_trio / "target")
    expect = {"hidden_q": AutoConfig.from_pretrained(micro_trio / "draft").hidden_size,
              "hidden_p": AutoConfig.from_pretrained(micro_trio / "target").hidden_size,
              "tokenizer_hash": tokenizer_hash(tok)}
    head, cfg = load_head(run_dir / "head", expect=expect)
    assert cfg["training"]["lambda"] == 0.1 and cfg["data"] == "synthetic" and cfg["target"]["kind"] == "ensemble"
    from specdec.loading import Models

    assert cfg["model_fingerprints"] == Models({"dir": str(micro_trio)}).fingerprints(("target", "draft"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["head"] == str(run_dir / "head") and summary["steps"] == 3


def test_the_run_directory_holds_what_the_run_said(gsm8k_run):
    """Hydra's run.log (the job's log file) records the run's messages, which also reach the console."""
    run_dir, p = gsm8k_run
    log = (run_dir / "run.log").read_text()
    said = f"[train] exported head: {run_dir / 'head'}"
    assert said in log and "[train] headline" in log and "[INFO]" in log
    assert said in p.stdout


def test_exporting_the_last_checkpoint_reproduces_the_trainers_export(gsm8k_run, tmp_path):
    """train/export_checkpoint.py: same weights and the same load-time metadata as the head train/run.py exported."""
    from train.export_checkpoint import export_checkpoint

    run_dir, _ = gsm8k_run
    last = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    out = export_checkpoint(last, tmp_path / "head")
    head, cfg = load_head(out)
    final, want = load_head(run_dir / "head")
    for k, v in final.state_dict().items():
        assert torch.equal(head.state_dict()[k], v), k
    for key in ("tokenizer_hash", "hidden_q", "hidden_p", "lambda", "lambda_meaning", "advantage", "target", "data",
                "model_fingerprints"):
        assert cfg[key] == want[key], key
    assert cfg["checkpoint"]["step"] == 3


def test_choose_head_exports_the_start_and_every_checkpoint(gsm8k_run, tmp_path):
    """eval/choose_head.py export: the start is the checkpoints' KL reference (not the trained weights), each
    checkpoint's head is its own weights, and a second export keeps what is there."""
    import shutil

    from eval.choose_head import export_candidates
    from train.checkpoint import read_model_states

    src, _ = gsm8k_run
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    heads = export_candidates(run_dir)
    names = [h.parent.name for h in heads]
    ckpts = sorted(d.name for d in (run_dir / "checkpoints").iterdir() if d.name.startswith("step"))
    assert names == ["start", *ckpts]
    last = read_model_states(run_dir / "checkpoints" / ckpts[-1])
    start, cfg = load_head(heads[0])
    for k, v in start.state_dict().items():
        assert torch.equal(v, last["ref_head"][k]), k
    assert cfg["checkpoint"]["step"] == 0 and cfg["checkpoint"]["start"] is True
    trained, _ = load_head(heads[-1])
    assert any(not torch.equal(trained.state_dict()[k], v) for k, v in start.state_dict().items())
    mtime = (heads[0] / "config.json").stat().st_mtime_ns
    assert export_candidates(run_dir) == heads and (heads[0] / "config.json").stat().st_mtime_ns == mtime

    # a run started at a rule also offers the rule itself: the start made step-sharp, w = cascade_weight exactly
    from omegaconf import OmegaConf

    from specdec.targets import PAIR_FEATURES, cascade_weight

    cfg_file = run_dir / "train_config.yaml"
    tc = OmegaConf.load(cfg_file)
    tc.head.init_rule, tc.head.init_knob = "cascade", 0.1
    OmegaConf.save(tc, cfg_file)
    with_rule = export_candidates(run_dir)
    assert [h.parent.name for h in with_rule] == ["rule", *names]
    rule, rcfg = load_head(with_rule[0])
    assert rcfg["checkpoint"]["rule"] == "cascade" and rcfg["tokenizer_hash"] == cfg["tokenizer_hash"]
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(500, 40, generator=g), -1)
    q = torch.softmax(3 * torch.randn(500, 40, generator=g), -1)
    from specdec.targets import pair_features

    feats = pair_features(p, q)
    margin = (feats[:, PAIR_FEATURES.index("max_p")] - feats[:, PAIR_FEATURES.index("max_q")] - 0.1).abs()
    keep = margin > 1e-3  # the step is exact away from the threshold itself
    hq, hp = torch.randn(500, rule.cfg.hidden_q, generator=g), torch.randn(500, rule.cfg.hidden_p, generator=g)
    w = rule(hq, hp, feats)
    assert keep.sum() > 450
    assert torch.allclose(w[keep], cascade_weight(p, q, 0.1)[keep], atol=1e-4)


def test_a_flip_head_trains_exports_and_offers_its_rule(micro_trio, tmp_path):
    """head.init_mode=flip: the run trains a rule-correcting head (HeadConfig.base_rule), every export (the trainer's,
    a checkpoint's, the start's) keeps the rule, and choose_head's "rule" candidate is the rule at flip 0."""
    from eval.choose_head import export_candidates
    from train.export_checkpoint import export_checkpoint

    run_dir = tmp_path / "flip"
    p = run(smoke_args(micro_trio, run_dir, "head.init_rule=cascade", "head.init_knob=0.05", "head.init_mode=flip"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    head, cfg = load_head(run_dir / "head")
    assert (head.cfg.base_rule, head.cfg.base_knob) == ("cascade", 0.05)
    last = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    again, _ = load_head(export_checkpoint(last, tmp_path / "again"))
    assert again.cfg == head.cfg and all(torch.equal(again.state_dict()[k], v) for k, v in head.state_dict().items())
    heads = export_candidates(run_dir)
    rule, _ = load_head(heads[0])
    start, _ = load_head(heads[1])
    assert [h.parent.name for h in heads[:2]] == ["rule", "start"]
    assert start.out.bias.item() == pytest.approx(math.log(0.02 / 0.98), abs=1e-5)  # flip 0.02 at the start
    g = torch.Generator().manual_seed(0)
    pp, qq = (torch.softmax(3 * torch.randn(300, 40, generator=g), -1) for _ in range(2))
    from specdec.targets import cascade_weight, pair_features

    hq, hp = torch.randn(300, rule.cfg.hidden_q, generator=g), torch.randn(300, rule.cfg.hidden_p, generator=g)
    assert torch.equal(rule(hq, hp, pair_features(pp, qq)), cascade_weight(pp, qq, 0.05))
    # the family's other end: every decision of the rule flipped (a diagnostic, never among the candidates)
    from eval.choose_head import export_flipped

    flipped, fcfg = load_head(export_flipped(run_dir))
    assert fcfg["checkpoint"]["flipped"] is True and fcfg["target"] == load_head(heads[0])[1]["target"]
    assert torch.equal(flipped(hq, hp, pair_features(pp, qq)), 1 - cascade_weight(pp, qq, 0.05))
    assert "flipped" not in [h.parent.name for h in export_candidates(run_dir)]
    bad = run(smoke_args(micro_trio, tmp_path / "bad", "head.init_mode=flip"))
    assert bad.returncode != 0 and "head.init_mode=flip corrects a rule" in bad.stdout + bad.stderr


def test_smoke_cnndm_and_mbpp_as_a_multirun_with_summary_table(micro_trio, tmp_path):
    """cnndm and mbpp, each over the target and over the contrastive pi_CD (the amateur is loaded for the latter)."""
    sweep = tmp_path / "sweep"
    p = run(["-m", "task=cnndm,mbpp", "target.kind=ensemble,contrastive", "lambda=0.1", "debug=smoke",
             f"model.dir={micro_trio}", f"hydra.sweep.dir={sweep}", "logger=disabled"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    dirs = sorted((d for d in sweep.iterdir() if (d / "summary.json").exists()), key=lambda d: int(d.name.split("_")[0]))
    assert len(dirs) == 4
    for d, (task, kind) in zip(dirs, [(t, k) for t in ("cnndm", "mbpp") for k in ("ensemble", "contrastive")]):
        summary = json.loads((d / "summary.json").read_text())
        assert (summary["task"], summary["target"]) == (task, kind)
        _, cfg = load_head(d / "head")
        assert cfg["target"]["kind"] == kind and cfg["task"] == task
    table = p.stdout[p.stdout.index("[sweep]"):].splitlines()
    assert table[1].split()[:6] == ["task", "lambda", "target", "steps", "reward", "accept"]
    assert sorted(line.split()[0] for line in table[3:7]) == ["cnndm", "cnndm", "mbpp", "mbpp"]


def test_two_ranks_reward_is_the_mean_of_ranks(micro_trio, tmp_path):
    run_dir = tmp_path / "ddp"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    p = run(smoke_args(micro_trio, run_dir, "train.steps=2", "deepspeed=zero1"), launcher=torchrun)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = metrics(run_dir)
    assert len(rows) == 2
    for r in rows:
        assert len(r["reward_ranks"]) == 2
        assert r["task_reward"] == pytest.approx(sum(r["reward_ranks"]) / 2, abs=1e-9)
    # one export, by rank 0; no stray run directories from rank 1
    load_head(run_dir / "head")
    assert not (ROOT / ".hydra").exists()


@pytest.fixture(scope="session")
def resumed_run(micro_trio, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("train") / "killed"
    p = run(smoke_args(micro_trio, run_dir, "fault.kill_at_step=1"))
    assert p.returncode == -9, p.stdout[-3000:] + p.stderr[-3000:]  # SIGKILL mid-step 2
    assert [r["step"] for r in metrics(run_dir)] == [1]
    p = run(smoke_args(micro_trio, run_dir, "resume=true"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "resumed from" in p.stdout
    return run_dir


def test_resume_under_other_settings_is_refused_and_touches_nothing(resumed_run, micro_trio):
    """A resumed run would continue one trajectory under another objective: refused, naming the setting; budgets,
    logging and threads may change."""
    before = {f.name: f.read_bytes() for f in resumed_run.iterdir() if f.is_file()}
    p = run(smoke_args(micro_trio, resumed_run, "resume=true", "lambda=0.3", "seed=1"))
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "lambda: 0.1 there vs 0.3 now" in err and "seed: 0 there vs 1 now" in err
    assert {f.name: f.read_bytes() for f in resumed_run.iterdir() if f.is_file()} == before
    from train.trainer import resume_config_diff

    saved = {"lambda": 0.1, "train": {"steps": 3}, "rollout": {"gamma": 4}, "old_key": 1}
    assert resume_config_diff(saved, {"lambda": 0.1, "train": {"steps": 9}, "rollout": {"gamma": 4}, "new": 2}) == []
    assert resume_config_diff(saved, {"rollout": {"gamma": 2}}) == ["rollout.gamma: 4 there vs 2 now"]


def test_resume_with_other_model_weights_at_the_same_path_is_refused(resumed_run, micro_trio, tmp_path):
    """A trio rebuilt in place keeps its paths (and so the run's settings) but not its weights: the checkpoint's
    weights fingerprints refuse the resume, and nothing in the run is touched."""
    from omegaconf import OmegaConf
    from safetensors.torch import save_file

    trio, run_dir = tmp_path / "trio", tmp_path / "run"
    shutil.copytree(micro_trio, trio)
    shutil.copytree(resumed_run, run_dir)
    saved = OmegaConf.load(run_dir / "train_config.yaml")
    saved.model.dir = str(trio)  # the run was trained on this trio, at this path
    OmegaConf.save(saved, run_dir / "train_config.yaml")
    weights = next((trio / "draft").glob("*.safetensors"))
    save_file({k: v * 1.01 for k, v in load_file(weights).items()}, str(weights))  # rebuilt in place
    def files() -> dict:  # the run's own files (Hydra rewrites its .hydra/ record at every launch)
        return {f: f.read_bytes() for f in run_dir.rglob("*") if f.is_file() and ".hydra" not in f.parts}

    before = files()
    p = run(smoke_args(trio, run_dir, "resume=true"))
    assert p.returncode != 0
    err = p.stdout + p.stderr
    line = next(x for x in err.splitlines() if "ValueError: cannot resume from" in x)
    assert "draft: sha256:" in line and "target: sha256:" not in line  # only the rebuilt model is named
    assert files() == before


def test_resume_from_an_earlier_step_replays_it_and_sets_the_old_later_checkpoints_aside(gsm8k_run, micro_trio,
                                                                                       tmp_path):
    """resume_from=step 2 of a 3-step run: step 3 runs again (deterministically, the same weights) and the old
    step-3 checkpoint is kept under checkpoints/abandoned/, not pruned or mixed with the new one."""
    full, _ = gsm8k_run
    run_dir = tmp_path / "run"
    shutil.copytree(full, run_dir)
    ckpts = run_dir / "checkpoints"
    old3 = {f.relative_to(ckpts / "step000003"): f.read_bytes() for f in (ckpts / "step000003").rglob("*")
            if f.is_file()}
    p = run(smoke_args(micro_trio, run_dir, f"resume_from={ckpts / 'step000002'}"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"moved to {ckpts / 'abandoned' / 'step000003'}" in p.stdout
    kept = ckpts / "abandoned" / "step000003"
    assert {f.relative_to(kept): f.read_bytes() for f in kept.rglob("*") if f.is_file()} == old3
    assert (ckpts / "latest").read_text().strip() == "step000003"
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3]
    wa, wb = load_file(full / "head" / "head.safetensors"), load_file(run_dir / "head" / "head.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_kill_and_resume_equals_an_uninterrupted_run(gsm8k_run, resumed_run):
    full, _ = gsm8k_run
    a, b = metrics(full), metrics(resumed_run)
    assert [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b):
        for k in ra.keys() - TIMING_KEYS:
            assert ra[k] == rb[k], (ra["step"], k, ra[k], rb[k])
    wa, wb = load_file(full / "head" / "head.safetensors"), load_file(resumed_run / "head" / "head.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] == wb[k]).all(), k


def test_corrupt_checkpoint_is_a_clear_error_and_nothing_is_overwritten(micro_trio, resumed_run, tmp_path):
    run_dir = tmp_path / "corrupt"
    shutil.copytree(resumed_run, run_dir)
    root = run_dir / "checkpoints"
    latest = (root / "latest").read_text().strip()
    tags = sorted(d.name for d in root.iterdir() if d.is_dir())
    assert latest == "step000003" and tags == ["step000002", "step000003"]
    bad = next((root / latest).glob("*model_states.pt"))
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    before = {p: sha(p) for p in root.rglob("*") if p.is_file()}
    p = run(smoke_args(micro_trio, run_dir, "resume=true", "train.steps=4"))
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "CheckpointError" in err and "is corrupt" in err and "step000002" in err  # names the fallback
    after = {p: sha(p) for p in root.rglob("*") if p.is_file()}
    assert after == before  # neither the good nor the corrupt checkpoint was touched


def test_forks_advantage_trains_and_stops_at_the_decoded_token_budget(micro_trio, tmp_path):
    """algo.advantage=forks runs end to end; decoded_tokens counts rollouts + forks cumulatively, and
    train.max_decoded_tokens stops the run (with a checkpoint and an export) once it is spent."""
    run_dir = tmp_path / "forks"
    p = run(smoke_args(micro_trio, run_dir, "algo.advantage=forks", "train.steps=50",
                       "train.max_decoded_tokens=400"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = metrics(run_dir)
    assert "budget 400 spent" in p.stdout and 1 <= len(rows) < 50
    dec = [r["decoded_tokens"] for r in rows]
    assert dec == sorted(dec) and dec[-1] >= 400 and (len(rows) == 1 or dec[-2] < 400)
    for r in rows:
        assert r["forks"] > 0 and 0.0 <= r["fork_differ"] <= 1.0
        assert r["decoded_tokens"] - (dec[rows.index(r) - 1] if rows.index(r) else 0) > r["new_tokens"]  # forks count
    assert rows[-1]["w_mean"] != pytest.approx(0.95, abs=1e-6)  # the head moved
    load_head(run_dir / "head")
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == f"step{len(rows):06d}"


def test_forks_step_without_a_fork_position_updates_nothing_and_logs(micro_trio, tmp_path):
    """The draft is the target: TV = 0 at every token (to float noise), so there is no position to fork at. The
    step logs (no update took place: null losses) instead of failing on the missing update statistics."""
    run_dir = tmp_path / "nofork"
    p = run(smoke_args(micro_trio, run_dir, "algo.advantage=forks", "train.steps=1",
                       f"model.draft={micro_trio / 'target'}"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (row,) = metrics(run_dir)
    assert row["forks"] == 0 and row["tv_mean"] < 1e-6
    assert row["pg_loss"] is None and row["clip_frac"] is None and row["adv_scale"] is None


def test_max_minutes_stops_after_the_step_that_spends_it_and_holds_over_resume(micro_trio, tmp_path):
    """train.max_minutes counts the steps' wall time over resumes: a run stops (checkpoint + export) after the step
    that spends it, and resuming the spent run with more steps decodes nothing more."""
    run_dir = tmp_path / "timed"
    p = run(smoke_args(micro_trio, run_dir, "train.steps=50", "train.max_minutes=0.0001"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = metrics(run_dir)
    assert "train.max_minutes=0.0001 reached after step 1" in p.stdout and len(rows) == 1
    assert rows[0]["train_seconds"] > 0.006
    # lambda is per token: the logged objective adds lambda times each row's mean acceptance (in [0, 1])
    r = rows[0]
    assert 0.0 < r["lam_term"] <= 1.0 and r["total_reward"] == pytest.approx(r["task_reward"] + 0.1 * r["lam_term"])
    load_head(run_dir / "head")
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step000001"
    p = run(smoke_args(micro_trio, run_dir, "train.steps=50", "train.max_minutes=0.0001", "resume=true"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert len(metrics(run_dir)) == 1


def test_critic_advantage_trains_and_resumes_exactly(micro_trio, gsm8k_run, tmp_path):
    """algo.advantage=critic: the critic (and its buffer) are checkpointed, so kill + resume equals a full run."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    p = run(smoke_args(micro_trio, full, "algo.advantage=critic"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = metrics(full)
    assert all(r["forks"] > 0 and r["critic_loss"] is not None for r in rows)
    p = run(smoke_args(micro_trio, killed, "algo.advantage=critic", "fault.kill_at_step=1"))
    assert p.returncode == -9
    p = run(smoke_args(micro_trio, killed, "algo.advantage=critic", "resume=true"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for ra, rb in zip(rows, metrics(killed)):
        for k in ra.keys() - TIMING_KEYS - {"time_forks"}:
            assert ra[k] == rb[k], (ra["step"], k, ra[k], rb[k])
    # diagnostics/fork_gaps.py reads the forks the newest checkpoint keeps: the head's inputs and the gaps, one per fork
    from diagnostics.fork_gaps import load_forks

    d = load_forks(full)
    # a gap is a difference of two returns: task reward in [0, 1] plus lambda (0.1) times a mean acceptance
    assert len(d["y"]) == sum(r["forks"] for r in rows) and float(d["y"].abs().max()) <= 1.1
    assert d["feats"].shape == (len(d["y"]), 5) and len(d["h_q"]) == len(d["h_p"]) == len(d["y"])
    with pytest.raises(SystemExit, match="not a critic run"):
        load_forks(gsm8k_run[0])  # a returns run keeps no forks


def test_algo_settings_that_cannot_work_are_clear_errors(micro_trio, tmp_path):
    p = run(smoke_args(micro_trio, tmp_path / "x", "algo.advantage=forks", "target.kind=contrastive"))
    assert p.returncode != 0 and "algo.advantage=forks supports target.kind=ensemble only" in p.stdout + p.stderr
    p = run(smoke_args(micro_trio, tmp_path / "y", "algo=reinforce_pp_group", "rollout.samples_per_prompt=1"))
    assert p.returncode != 0 and "needs rollout.samples_per_prompt >= 2" in p.stdout + p.stderr
    assert not (tmp_path / "y" / "metrics.jsonl").exists()
    p = run(smoke_args(micro_trio, tmp_path / "z", "algo.flat_reward=skip"))
    assert p.returncode != 0 and "algo.flat_reward must be one of ('normalise', 'unit_scale')" in p.stdout + p.stderr


def test_flat_reward_unit_scale_keeps_the_advantage_scale_at_one_in_batches_without_task_signal(gsm8k_run,
                                                                                                micro_trio, tmp_path):
    """GSM8K rewards are 0/1, so a step's mean of 0 or 1 means every rollout scored the same. After step 1 the
    returns of such a batch vary by the KL penalty alone: the default normalises by that (scale << 1, which
    inflates the lambda term); unit_scale keeps scale 1. Steps with a task signal are normalised by both."""
    default = metrics(gsm8k_run[0])
    p = run(smoke_args(micro_trio, tmp_path / "u", "algo.flat_reward=unit_scale"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    unit = metrics(tmp_path / "u")
    flat_later = [i for i, r in enumerate(default) if r["task_reward"] in (0.0, 1.0) and r["step"] > 1]
    assert flat_later, "the micro trio gave every step a task signal: nothing to compare"
    for i in flat_later:
        assert default[i]["adv_scale"] < 0.1
    for r in unit:
        if r["task_reward"] in (0.0, 1.0):
            assert r["adv_scale"] == 1.0
        else:
            assert r["adv_scale"] != 1.0
