"""diagnostics/fork_gaps.py: out-of-fold predictability of the fork gap from the head's inputs."""

import math

import torch

from diagnostics.fork_gaps import analyse, out_of_fold, ridge_fit, ridge_predict


def _forks(n: int, seed: int, signal: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d = {"h_q": torch.randn(n, 8, generator=g).double(), "h_p": torch.randn(n, 12, generator=g).double(),
         "feats": torch.rand(n, 5, generator=g).double()}
    noise = torch.randint(-1, 2, (n,), generator=g).double()
    if signal:  # half of the forks follow the sign of the second feature (entropy_p above 0.5), the rest are noise
        follow = torch.rand(n, generator=g) < 0.5
        d["y"] = torch.where(follow, (d["feats"][:, 1] > 0.5).double() * 2 - 1, noise)
    else:
        d["y"] = noise
    return d


def test_ridge_recovers_a_linear_map_with_small_penalty():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(400, 3, generator=g).double()
    y = 0.5 + X @ torch.tensor([1.0, -2.0, 0.0]).double()
    assert torch.allclose(ridge_predict(ridge_fit(X, y, 1e-6), X), y, atol=1e-5)


def test_a_predictable_gap_orders_the_quintiles_and_noise_does_not():
    """Signal: held-out R^2 well above 0 (expected ~0.2 here) and the top quintile's mean gap exceeds the bottom's
    by far more than its CI. Noise: R^2 at most ~0 (ridge shrinks to the mean) and the top-bottom difference
    inside its CI. n = 1500, fixed seeds."""
    sig = analyse(_forks(1500, 0, signal=True))["inputs"]
    for name in ("features", "head"):
        r = sig[name]
        assert r["r2_oof"] > 0.1, (name, r["r2_oof"])
        assert r["top_minus_bottom"] > 0.6 and r["top_minus_bottom"] > 3 * r["top_minus_bottom_ci"]
        means = [q["gap_mean"] for q in r["quintiles"]]
        assert means[0] < means[2] < means[4]
    noise = analyse(_forks(1500, 1, signal=False))["inputs"]
    for name in ("features", "head"):
        r = noise[name]
        assert r["r2_oof"] < 0.01, (name, r["r2_oof"])
        assert abs(r["top_minus_bottom"]) < r["top_minus_bottom_ci"] * 1.5


def test_out_of_fold_predictions_never_see_their_own_fold():
    """A point's prediction comes from a fit without it: duplicating one extreme y elsewhere cannot pull its own
    prediction to itself when X is pure noise."""
    d = _forks(300, 2, signal=False)
    X, y = d["feats"], d["y"].clone()
    y[0] = 50.0
    pred, alphas = out_of_fold(X, y, 5, 0)
    assert abs(float(pred[0])) < 5.0 and len(alphas) == 5


def test_cascade_split_sorts_forks_by_the_rules_decision():
    """Forks where the draft is at least as confident as the target (max p - max q <= t) gain by relaxing (y = -1),
    the rest lose (y = +1), plus zero-mean noise on half of them: the split recovers both signs."""
    from diagnostics.fork_gaps import PAIR_FEATURES, cascade_split

    g = torch.Generator().manual_seed(3)
    n = 2000
    feats = torch.rand(n, 5, generator=g).double()
    relax = feats[:, PAIR_FEATURES.index("max_p")] - feats[:, PAIR_FEATURES.index("max_q")] <= 0.1
    y = torch.where(relax, -1.0, 1.0).double()
    y = torch.where(torch.rand(n, generator=g) < 0.5, torch.randint(-1, 2, (n,), generator=g).double(), y)
    c = cascade_split({"feats": feats, "y": y}, 0.1)
    assert c["relaxed"]["n"] == int(relax.sum()) and c["relaxed"]["n"] + c["deferred"]["n"] == n
    assert c["relaxed"]["gap_mean"] < -0.3 and c["deferred"]["gap_mean"] > 0.3
    assert c["relaxed"]["gap_ci"] < 0.1


def test_mined_mismatches_fold_by_prompt_so_a_prompts_neighbours_cannot_flatter_the_fit():
    """y is a per-prompt effect (plus noise) and the hidden state carries a per-prompt code wide enough to memorise
    it: folds over single mismatches see each prompt's neighbours and report a high R^2 that is pure leakage;
    folds by prompt (what mined data gets) report none. 48 prompts x 8 mismatches, fixed seed."""
    from diagnostics.fork_gaps import folds_of

    g = torch.Generator().manual_seed(4)
    groups = torch.arange(48).repeat_interleave(8)
    code, effect = torch.randn(48, 64, generator=g).double(), torch.randn(48, generator=g).double()
    n = len(groups)
    X = code[groups] + 0.05 * torch.randn(n, 64, generator=g).double()
    y = effect[groups] + 0.3 * torch.randn(n, generator=g).double()

    def r2(pred):
        return 1 - float(((y - pred) ** 2).sum()) / float(((y - y.mean()) ** 2).sum())

    assert r2(out_of_fold(X, y, 5, 0)[0]) > 0.5
    assert r2(out_of_fold(X, y, 5, 0, groups)[0]) < 0.05
    folds = folds_of(n, 5, 0, groups)
    assert sorted(torch.cat(folds).tolist()) == list(range(n))
    for a in range(5):  # no prompt in two folds
        for b in range(a + 1, 5):
            assert not set(groups[folds[a]].tolist()) & set(groups[folds[b]].tolist())


def test_load_mined_reads_a_finished_and_a_partial_mining_alike(tmp_path):
    """train/autojudge.py saves mined.pt (tensors) and, while mining, mined.partial.pt (per-batch lists): both
    load to the same inputs, gaps and prompt groups, with the label source from the signature."""
    from diagnostics.fork_gaps import load_mined

    g = torch.Generator().manual_seed(5)
    batches = [{"h_q": torch.randn(k, 4, generator=g), "h_p": torch.randn(k, 6, generator=g),
                "feats": torch.rand(k, 5, generator=g), "gap": torch.randn(k, generator=g),
                "label": torch.ones(k), "prompt": torch.full((k,), i)} for i, k in enumerate((3, 5))]
    out = {key: [b[key] for b in batches] for key in batches[0]}
    sig = {"mine": {"label": "selfjudge"}}
    torch.save({"out": out, "stats": {}, "next": 16, "signature": sig}, tmp_path / "mined.partial.pt")
    torch.save({k: torch.cat(v) for k, v in out.items()} | {"signature": sig}, tmp_path / "mined.pt")
    a, b = load_mined(tmp_path / "mined.partial.pt"), load_mined(tmp_path / "mined.pt")
    assert a["label"] == b["label"] == "selfjudge"
    for k in ("h_q", "h_p", "feats", "y", "groups"):
        assert torch.equal(a[k], b[k]), k
    assert a["groups"].tolist() == [0] * 3 + [1] * 5 and torch.equal(a["y"], torch.cat([x["gap"] for x in batches]).double())


def test_load_mined_refuses_a_corrupt_or_foreign_file_by_name(tmp_path):
    import pytest

    from diagnostics.fork_gaps import load_mined

    bad = tmp_path / "mined.pt"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(SystemExit, match="mined.pt: cannot be read"):
        load_mined(bad)
    torch.save({"h_q": torch.zeros(2, 3)}, bad)  # a dict without the gaps
    with pytest.raises(SystemExit, match=r"missing \['h_p', 'feats', 'gap'\]"):
        load_mined(bad)


def test_against_ranks_the_task_gap_by_a_self_supervised_gap_only_where_they_agree():
    """Two labels of the same mismatches: where the task gap follows the self-supervised gap (plus noise), the
    task gap rises across the label's quintiles and its head-input prediction's (the label is a linear map of the
    features here); where the task gap is independent noise, neither order separates it beyond its CI. Minings
    of other mismatches are refused. n = 1000, fixed seeds."""
    import pytest

    from diagnostics.fork_gaps import against

    d = _forks(1000, 3, signal=False)
    g = torch.Generator().manual_seed(4)
    d["y"] = d["feats"][:, 2] * 2 + 0.1 * torch.randn(1000, generator=g).double()
    follows = dict(d, y=(d["y"] > 1.0).double() + 0.3 * torch.randn(1000, generator=g).double())
    res = against(d, follows)
    assert res["pearson"] > 0.5
    for name in ("by_gap", "by_head"):
        b = res[name]
        assert b["top_minus_bottom"] > 0.8 and b["top_minus_bottom"] > 3 * b["top_minus_bottom_ci"], (name, b)
    noise = dict(d, y=torch.randn(1000, generator=g).double())
    res = against(d, noise)
    assert abs(res["pearson"]) < 0.1
    for name in ("by_gap", "by_head"):
        assert abs(res[name]["top_minus_bottom"]) < 1.5 * res[name]["top_minus_bottom_ci"], (name, res[name])
    other = dict(noise, feats=noise["feats"] + 1.0)
    with pytest.raises(SystemExit, match="not the same mismatches"):
        against(d, other)


def test_prompt_resampled_interval_widens_when_a_prompts_mismatches_are_copies():
    """40 prompts of 10 identical mismatches each, y = the prompt's own noise: the normal half-width counts 400
    independent mismatches, the prompt bootstrap 40 prompts, so its interval is ~sqrt(10) wider and still holds the
    point estimate; with a real effect (y rises with the ordering) it excludes 0."""
    from diagnostics.fork_gaps import quintiles, top_minus_bottom_by_prompt

    g = torch.Generator().manual_seed(5)
    groups = torch.arange(40).repeat_interleave(10)
    order_by = torch.rand(40, generator=g).double()[groups]
    y = torch.randn(40, generator=g).double()[groups]
    q = quintiles(order_by, y, torch.zeros(400, dtype=torch.float64))
    point = q[-1]["gap_mean"] - q[0]["gap_mean"]
    normal = 1.96 * math.hypot(float(y[torch.argsort(order_by)[:80]].std()) / math.sqrt(80),
                               float(y[torch.argsort(order_by)[-80:]].std()) / math.sqrt(80))
    lo, hi = top_minus_bottom_by_prompt(order_by, y, groups)
    assert lo < point < hi
    assert (hi - lo) / 2 > 2 * normal
    lo, hi = top_minus_bottom_by_prompt(order_by, y + 3 * order_by, groups)
    assert lo > 0


def test_task_gaps_must_come_from_a_reward_mining(tmp_path, monkeypatch):
    """--task-gaps given a SelfJudge mining (likelihood gaps, not the task's) is refused by name."""
    import sys

    import pytest

    from diagnostics import fork_gaps

    n = 20
    g = torch.Generator().manual_seed(6)
    mined = {"h_q": torch.randn(n, 4, generator=g), "h_p": torch.randn(n, 4, generator=g),
             "feats": torch.rand(n, 5, generator=g), "gap": torch.randn(n, generator=g),
             "prompt": torch.arange(n) // 2, "signature": {"mine": {"label": "selfjudge"}}}
    torch.save(mined, tmp_path / "self.pt")
    torch.save(mined, tmp_path / "other.pt")
    monkeypatch.setattr(sys, "argv", ["fork_gaps.py", str(tmp_path / "self.pt"), "--task-gaps",
                                      str(tmp_path / "other.pt"), "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="not a reward mining"):
        fork_gaps.main()
