"""The AutoJudge baseline: mining through the fork machinery, the judge's fit and threshold, the eval rule."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from data.tasks import get_task
from heads import EnsembleHead, HeadConfig, export_head
from specdec.loading import Models
from specdec.registry import ThresholdHead, build_method
from train.autojudge import fit, mine

ROOT = Path(__file__).resolve().parents[1]


def test_fit_recovers_a_separable_judge_and_its_threshold_keeps_the_recall():
    g = torch.Generator().manual_seed(0)
    n, F = 400, 5
    feats = torch.randn(n, F, generator=g)
    label = (feats[:, 0] + 0.5 * feats[:, 1] > 0.8).float()  # a minority class, linearly separable
    data = {"h_q": torch.zeros(n, 3), "h_p": torch.zeros(n, 4), "feats": feats, "label": label}
    head = EnsembleHead(HeadConfig(hidden_q=3, hidden_p=4, num_features=F, use_hidden=False, init_w=0.5))
    data["prompt"] = torch.arange(n) // 4  # four mismatches per prompt: split by prompt, never across
    rep = fit(head, data, steps=300, lr=0.05, holdout=0.25, recall=0.9, seed=0)
    assert rep["calibration_recall"] >= 0.9  # by construction of tau
    assert rep["heldout_recall"] >= 0.8 and rep["heldout_accuracy"] > 0.85  # measured on other prompts
    assert 0.0 < rep["threshold"] < 1.0
    assert rep["prompts"] == {"train": 75, "calibration": 13, "heldout": 12}
    assert (rep["train"], rep["calibration"], rep["heldout"]) == (300, 52, 48)
    w = ThresholdHead(head, rep["threshold"])(data["h_q"], data["h_p"], feats)
    assert set(w.unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="only 3 mismatches"):
        fit(head, {k: v[:3] for k, v in data.items()}, steps=1, lr=0.1, holdout=0.2, recall=0.9, seed=0)
    # no important mismatch at all (a real pair whose swaps never flip the outcome): tau = 1 flags nothing,
    # and the recall is None (strict JSON), not NaN
    calm = {**data, "label": torch.zeros(n)}
    rep = fit(head, calm, steps=5, lr=0.05, holdout=0.25, recall=0.9, seed=0)
    assert rep["threshold"] == 1.0 and rep["heldout_recall"] is None and rep["heldout_flagged"] == 0.0
    json.dumps(rep, allow_nan=False)


def _mining_inputs(micro_trio):
    """The micro trio and six synthetic GSM8K training prompts with their references."""
    from data.loaders import load_examples

    models = Models({"dir": str(micro_trio), "embedded": False, "device": "cpu", "dtype": "float32"})
    tok = models.tokenizer
    task = get_task("gsm8k")
    ex = load_examples("gsm8k", source="synthetic", split="train", n=6, seed=0)
    prompts = [tok(task.format_prompt(r, tokenizer=tok))["input_ids"] for r in ex.rows]
    return models, task, prompts, [task.reference(r) for r in ex.rows]


def test_mining_labels_are_reward_changes_of_greedy_swaps(micro_trio):
    models, task, prompts, refs = _mining_inputs(micro_trio)
    data = mine(models, prompts, refs, task=task, reward_opts={}, per_prompt=2, gamma=3, max_new_tokens=20,
                temperature=1.0, batch_size=4, seed=0, progress=False)
    n = len(data["label"])
    assert 0 < n <= 12 and data["stats"]["forks"] == n <= data["stats"]["mismatches"]
    assert torch.equal(data["label"], (data["gap"] != 0).float())
    assert data["h_q"].shape == (n, models.draft.hidden_size) and data["h_p"].shape == (n, models.target.hidden_size)
    assert (data["tv"] > 0).all()  # a mismatch of greedy tokens means p != q there


def test_mining_ends_chat_rows_at_the_chat_stop(micro_trio, monkeypatch):
    """A chat model's rows end at the task's chat stop, as evaluation ends them: no mismatch is mined after it."""
    import re

    import data.tasks

    models, task, prompts, refs = _mining_inputs(micro_trio)
    kw = dict(task=task, reward_opts={}, per_prompt=8, gamma=3, max_new_tokens=20, temperature=1.0, batch_size=6,
              seed=0, progress=False)
    plain = mine(models, prompts, refs, **kw)
    monkeypatch.setattr(data.tasks, "chat_stop_for", lambda task, tok: re.compile(r".{6}", re.S))
    chat = mine(models, prompts, refs, **kw)
    assert len(chat["label"]) > 0 and chat["position"].max() < 6  # per-character tokenizer: 6 tokens end a row
    # the greedy paths end at the stop (at most one round of gamma + 1 tokens past it), not at 20 tokens
    assert plain["stats"]["greedy_tokens"] == 6 * 20
    assert chat["stats"]["greedy_tokens"] <= 6 * (6 + 3 + 1)


def test_autojudge_method_refuses_an_ensemble_head_and_applies_the_threshold(micro_trio, tmp_path):
    models = Models({"dir": str(micro_trio), "embedded": False, "device": "cpu", "dtype": "float32"})
    head = EnsembleHead(HeadConfig(hidden_q=models.draft.hidden_size, hidden_p=models.target.hidden_size,
                                   num_features=5))
    export_head(head, tmp_path / "ens", {"task": "gsm8k"})
    export_head(head, tmp_path / "judge", {"method": "autojudge", "threshold": 0.4})
    cfg = OmegaConf.create({"method": {"name": "autojudge", "gamma": 3, "threshold": None},
                            "head_path": str(tmp_path / "ens")})
    with pytest.raises(ValueError, match="not an AutoJudge export"):
        build_method("autojudge", models, cfg)
    cfg.head_path = str(tmp_path / "judge")
    spec = build_method("autojudge", models, cfg)
    assert spec.params["threshold"] == 0.4 and spec.label == "autojudge(t=0.4)"
    cfg.method.threshold = 0.99  # init_w 0.5 < 0.99: every position verifies against q
    assert build_method("autojudge", models, cfg).rule.head.threshold == 0.99


def test_autojudge_cli_mines_fits_and_exports(micro_trio, tmp_path):
    run_dir = tmp_path / "aj"
    p = subprocess.run([sys.executable, "train/autojudge.py", "task=gsm8k", f"model.dir={micro_trio}",
                        "mine.prompts=16", "mine.max_new_tokens=20", "fit.steps=20", f"hydra.run.dir={run_dir}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "exported head" in p.stdout
    from heads import load_head

    _, meta = load_head(run_dir / "head")
    assert meta["method"] == "autojudge" and 0.0 <= meta["threshold"] <= 1.0
    assert meta["autojudge"]["mining"]["forks"] > 0
    mining = json.loads((run_dir / "mining.json").read_text())
    assert mining["mined"] == mining["forks"] == meta["autojudge"]["mining"]["forks"]
    assert mining["gap_plus"] + mining["gap_minus"] == round(mining["important_share"] * mining["mined"])
    assert not (run_dir / "mined.partial.pt").exists()  # the per-batch checkpoint goes once mined.pt is saved
    # the mined mismatches are kept before fitting: a rerun (e.g. after a failed fit) reuses them, mines nothing
    p2 = subprocess.run(p.args, cwd=ROOT, capture_output=True, text=True, timeout=300,
                        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"})
    assert p2.returncode == 0 and "reusing" in p2.stdout, p2.stdout[-2000:] + p2.stderr[-2000:]
    assert json.loads((run_dir / "mining.json").read_text())["mined"] == mining["mined"]
    # ... but never mismatches mined with other settings: a clear error, and the file is left as it was
    before = (run_dir / "mined.pt").read_bytes()
    p3 = subprocess.run([*p.args[:-1], "mine.per_prompt=2", p.args[-1]], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"})
    assert p3.returncode != 0 and "was mined with other settings (mine differ" in p3.stderr, p3.stderr[-2000:]
    assert (run_dir / "mined.pt").read_bytes() == before


def test_selfjudge_labels_come_from_the_targets_own_likelihood_without_rewards(micro_trio, monkeypatch):
    """label=selfjudge: no fork is decoded and no reward computed; the gap is the drop of the target's mean
    log-likelihood of its own next tokens after the draft's token, and the label thresholds it."""
    import rewards
    from train.autojudge import selfjudge_harm, teacher_forced

    def no_reward(*a, **k):
        raise AssertionError("selfjudge labels need no task reward")

    monkeypatch.setattr(rewards, "score", no_reward)
    models, task, prompts, refs = _mining_inputs(micro_trio)
    data = mine(models, prompts, refs, task=task, reward_opts={}, per_prompt=2, gamma=3, max_new_tokens=20,
                temperature=1.0, batch_size=4, seed=0, progress=False, label="selfjudge",
                selfjudge={"window": 5, "threshold": 0.2})
    n = len(data["label"])
    assert n > 0 and torch.equal(data["label"], (data["gap"] > 0.2).float())
    assert data["stats"]["decoded_tokens"] == data["stats"]["greedy_tokens"]  # no fork was decoded
    assert data["gap"].abs().sum() > 0
    # The harm of a "swap" to the target's own token is exactly 0; by hand for one real swap.
    p0, c0 = prompts[0], [5, 6, 7, 8, 9, 10, 11]
    assert selfjudge_harm(models.target, [p0], [c0], [(0, 2)], [7], window=3, batch_size=4).item() == 0.0
    h = selfjudge_harm(models.target, [p0], [c0], [(0, 2)], [30], window=3, batch_size=4).item()
    probs, _ = teacher_forced(models.target, [p0 + c0[:2]] * 2, [[7, 8, 9, 10], [30, 8, 9, 10]], 1.0)
    ll = [float(probs[i, 1:4].gather(-1, torch.tensor([[8], [9], [10]])).log().mean()) for i in range(2)]
    assert abs(h - (ll[0] - ll[1])) < 1e-5
    with pytest.raises(ValueError, match="mine.label"):
        mine(models, prompts, refs, task=task, reward_opts={}, per_prompt=1, gamma=3, max_new_tokens=8,
             temperature=1.0, batch_size=4, seed=0, progress=False, label="vibes")


def test_selfjudge_reads_the_own_token_branch_from_the_completions_probs(micro_trio):
    """Mining passes the target's teacher-forced probs along the completions: the own-token branch is read from them
    (only the swapped branch is decoded), and the harm is the one both branches decoded give."""
    from train.autojudge import selfjudge_harm, teacher_forced

    models, _, prompts, _ = _mining_inputs(micro_trio)
    comps = [[5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 23, 24], [30, 31, 32, 33, 34, 35]]
    positions = [(0, 2), (0, 5), (1, 1), (1, 4), (2, 0), (2, 5)]  # (1, 4) and (2, 5): no token follows
    swaps = [40, 41, 42, 43, 44, 45]
    both = selfjudge_harm(models.target, prompts[:3], comps, positions, swaps, window=3, batch_size=4)
    own, _ = teacher_forced(models.target, prompts[:3], comps, 1.0)
    fast = selfjudge_harm(models.target, prompts[:3], comps, positions, swaps, window=3, batch_size=4,
                          own_probs=own)
    assert both.abs().sum() > 0 and both[3] == 0 and both[5] == 0
    torch.testing.assert_close(fast, both, atol=1e-5, rtol=0)


def test_mining_continues_after_a_kill_to_the_uninterrupted_result(micro_trio, tmp_path, monkeypatch):
    """With a checkpoint, a run killed after its first batch continues from it and ends with what one uninterrupted
    run mines (positions are drawn from a saved random state); a checkpoint of other settings is refused."""
    import importlib

    gen_module = importlib.import_module("specdec.generate")  # the package's `generate` attribute is the function
    models, task, prompts, refs = _mining_inputs(micro_trio)
    kw = dict(task=task, reward_opts={}, per_prompt=2, gamma=3, max_new_tokens=20, temperature=1.0, batch_size=2,
              seed=0, progress=False, label="selfjudge", selfjudge={"window": 5, "threshold": 0.2})
    whole = mine(models, prompts, refs, **kw)
    ckpt, sig = tmp_path / "mined.partial.pt", {"run": 1}
    real, calls = gen_module.generate, []

    def killed_at_the_second_batch(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(gen_module, "generate", killed_at_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        mine(models, prompts, refs, checkpoint=ckpt, signature=sig, **kw)
    assert torch.load(ckpt, weights_only=False)["next"] == 2
    with pytest.raises(ValueError, match="other settings"):
        mine(models, prompts, refs, checkpoint=ckpt, signature={"run": 2}, **kw)
    resumed_calls = []
    monkeypatch.setattr(gen_module, "generate", lambda *a, **k: resumed_calls.append(1) or real(*a, **k))
    resumed = mine(models, prompts, refs, checkpoint=ckpt, signature=sig, **kw)
    assert len(resumed_calls) == 2  # only the 2 batches of 3 the killed run had not finished were decoded
    for k in ("label", "prompt", "position", "gap", "tv", "h_p"):
        torch.testing.assert_close(resumed[k], whole[k], atol=1e-5, rtol=0)
    assert {k: v for k, v in resumed["stats"].items() if k != "seconds"} == \
        {k: v for k, v in whole["stats"].items() if k != "seconds"}


def test_a_shard_mines_its_prompts_under_their_global_ids_and_shard_zero_is_the_unsharded_draw(micro_trio):
    from train.autojudge import merge_mined

    models, task, prompts, refs = _mining_inputs(micro_trio)
    # batches of 3: the unsharded run's first batch is exactly shard 0's prompts
    kw = dict(task=task, reward_opts={}, per_prompt=2, gamma=3, max_new_tokens=20, temperature=1.0, batch_size=3,
              seed=0, progress=False)
    whole = mine(models, prompts, refs, **kw)
    shard0 = mine(models, prompts[:3], refs[:3], **kw, first_index=0)
    shard1 = mine(models, prompts[3:], refs[3:], **kw, first_index=3)
    in_first = whole["prompt"] < 3
    assert in_first.any()
    for k in ("label", "prompt", "position", "gap"):
        assert torch.equal(shard0[k], whole[k][in_first])
    assert len(shard1["prompt"]) > 0 and set(shard1["prompt"].tolist()) <= {3, 4, 5}
    merged = merge_mined([shard0, shard1])
    assert torch.equal(merged["prompt"], torch.cat([shard0["prompt"], shard1["prompt"]]))
    assert merged["h_p"].shape == (len(merged["label"]), models.target.hidden_size)
    assert merged["stats"]["forks"] == shard0["stats"]["forks"] + shard1["stats"]["forks"] == len(merged["label"])


def test_autojudge_cli_mines_shards_in_separate_processes_then_merges_and_fits(micro_trio, tmp_path):
    run_dir = tmp_path / "aj"
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    args = [sys.executable, "train/autojudge.py", "task=gsm8k", f"model.dir={micro_trio}", "mine.prompts=16",
            "mine.max_new_tokens=20", "mine.batch_size=4", "fit.steps=20", "mine.shards=2",
            f"hydra.run.dir={run_dir}"]

    def run(*extra):
        return subprocess.run([*args, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)

    p = run("mine.shard=1")  # a shard mines its part, saves it and stops: no fit, no export
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    part1 = torch.load(run_dir / "mined.shard1of2.pt", weights_only=False)
    assert part1["signature"]["shard"] == [1, 2] and set(part1["prompt"].tolist()) <= set(range(8, 16))
    assert not (run_dir / "head").exists() and not (run_dir / "mined.pt").exists()
    p = run("mine.shard=2")
    assert p.returncode != 0 and "not one of the 2 shards" in p.stderr
    p = run()  # the merging run mines the missing shard 0 itself, reuses shard 1, then fits and exports
    assert p.returncode == 0 and "shard 1 of 2: reusing" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    mining = json.loads((run_dir / "mining.json").read_text())
    part0 = torch.load(run_dir / "mined.shard0of2.pt", weights_only=False)
    assert mining["mined"] == mining["forks"] == len(part0["label"]) + len(part1["label"])
    merged = torch.load(run_dir / "mined.pt", weights_only=False)
    assert torch.equal(merged["prompt"], torch.cat([part0["prompt"], part1["prompt"]]))
    assert (run_dir / "head" / "config.json").exists()
    # a shard file of other settings is refused, and left as it was
    (run_dir / "mined.pt").unlink()
    before = (run_dir / "mined.shard1of2.pt").read_bytes()
    p = run("mine.per_prompt=2")
    assert p.returncode != 0 and "mined.shard0of2.pt was mined with other settings" in p.stderr, p.stderr[-2000:]
    assert (run_dir / "mined.shard1of2.pt").read_bytes() == before
