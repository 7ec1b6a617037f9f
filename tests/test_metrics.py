"""eval/metrics.py on synthetic numbers: expected acceptance length vs simulation, bootstrap, schema."""

import numpy as np
import pytest

from eval.metrics import (
    acceptance_metrics,
    bootstrap_ci,
    expected_length_exact,
    expected_length_iid,
    expected_length_product,
    iid_length,
    markdown_table,
    speed_metrics,
    validate_metrics,
)


def _rand_dist(rng, shape, v):
    # peaked random distributions with some exact zeros, like real LM outputs after top-k
    x = rng.gamma(0.3, size=(*shape, v))
    x[rng.random(x.shape) < 0.2] = 0.0
    x[..., 0] += 1e-3  # never an all-zero row
    return x / x.sum(-1, keepdims=True)


def _simulate_markov(d, nu, rounds, rng):
    """Speculative rounds where d_j and nu_j depend on the previous drafted token (a Markov chain).

    d, nu: [gamma, V(prev), V]; the first position conditions on prev = 0. Returns the recorded a, beta per
    round, the accepted count per round, and the exact E[T] by dynamic programming over the accepted prefix.
    """
    g, v, _ = d.shape
    a_tab = np.minimum(d, nu).sum(-1)  # [g, V(prev)]
    a_rec = np.zeros((rounds, g))
    b_rec = np.zeros((rounds, g))
    acc = np.zeros(rounds, dtype=int)
    cum = np.cumsum(d, -1)
    for r in range(rounds):
        prev, alive, u = 0, True, rng.random(2 * g)
        for j in range(g):
            x = min(int(np.searchsorted(cum[j, prev], u[2 * j], side="right")), v - 1)
            a_rec[r, j] = a_tab[j, prev]
            b_rec[r, j] = min(1.0, nu[j, prev, x] / d[j, prev, x])
            if alive and u[2 * j + 1] < b_rec[r, j]:
                acc[r] += 1
            else:
                alive = False
            prev = x
    # exact: P_i(x) = P(drafts 1..i accepted and x_i = x)
    m = np.minimum(d, nu)
    p_i = m[0, 0]
    exact = p_i.sum()
    for j in range(1, g):
        p_i = p_i @ m[j]
        exact += p_i.sum()
    return a_rec, b_rec, acc, float(exact)


def test_expected_length_matches_monte_carlo_markov():
    rng = np.random.default_rng(0)
    g, v, rounds = 4, 5, 20000
    d = _rand_dist(rng, (g, v), v)
    nu = 0.5 * d + 0.5 * _rand_dist(rng, (g, v), v)  # overlapping, context dependent
    a, b, acc, exact = _simulate_markov(d, nu, rounds, rng)
    se = acc.std() / np.sqrt(rounds)
    # the simulation itself agrees with the dynamic programme (4 standard errors)
    assert abs(acc.mean() - exact) < 4 * se, (acc.mean(), exact, se)
    # the recorded-probability estimator is unbiased: within 4 of its own standard errors of the exact value
    per_round = [expected_length_exact([ai], [bi]) for ai, bi in zip(a, b)]
    se_pred = np.std(per_round) / np.sqrt(rounds)
    pred = expected_length_exact(a, b)
    assert abs(pred - exact) < 4 * se_pred, (pred, exact, se_pred)
    assert se_pred < se  # and, being Rao-Blackwellised, less noisy than counting accepts


def test_product_formula_is_biased_when_acceptance_depends_on_the_prefix():
    # draft 1 uniform over {0, 1}, nu_1 = 0 only; draft 2 agrees with nu_2 after 0 and disagrees after 1.
    d = np.array([[[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0]]])
    nu = np.array([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])
    a, b, acc, exact = _simulate_markov(d, nu, 4000, np.random.default_rng(1))
    assert exact == pytest.approx(1.0)  # P(1 accepted) = .5, P(1, 2 accepted) = .5
    # per round the estimator is 1.5 (x_1 = 0) or 0.5 (x_1 = 1): SE = 0.5 / sqrt(4000) ~ 0.008
    assert expected_length_exact(a, b) == pytest.approx(1.0, abs=0.04)
    assert expected_length_product(a) == pytest.approx(0.75, abs=0.05)  # .5 + .5 * E[a_2] = .5 + .25
    assert acc.mean() == pytest.approx(1.0, abs=0.05)


def test_all_predictions_agree_when_iid():
    rng = np.random.default_rng(2)
    g, v, rounds = 5, 6, 20000
    d1 = _rand_dist(rng, (1,), v)[0]
    nu1 = 0.3 * d1 + 0.7 * _rand_dist(rng, (1,), v)[0]
    d = np.broadcast_to(d1, (g, v, v)).copy()  # same distributions at every position and prefix
    nu = np.broadcast_to(nu1, (g, v, v)).copy()
    a, b, acc, exact = _simulate_markov(d, nu, rounds, rng)
    alpha = np.minimum(d1, nu1).sum()
    assert exact == pytest.approx(iid_length(alpha, g), rel=1e-9)
    assert expected_length_product(a) == pytest.approx(exact, rel=1e-9)
    assert expected_length_iid(a) == pytest.approx(exact, rel=1e-9)
    se = acc.std() / np.sqrt(rounds)
    assert abs(acc.mean() - exact) < 4 * se


def test_iid_length_edges():
    assert iid_length(1.0, 4) == 4.0
    assert iid_length(0.0, 4) == 0.0
    assert iid_length(0.5, 1) == pytest.approx(0.5)
    assert iid_length(0.5, 2) == pytest.approx(0.75)


def test_bootstrap_ci_width_and_coverage():
    rng = np.random.default_rng(3)
    x = (rng.random(400) < 0.3).astype(float)
    lo, hi = bootstrap_ci(x, seed=0)
    assert lo < x.mean() < hi
    normal = 2 * 1.96 * np.sqrt(x.mean() * (1 - x.mean()) / x.size)
    assert hi - lo == pytest.approx(normal, rel=0.15)
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)


def test_acceptance_metrics_by_hand():
    s1 = {"accepted": [2, 0], "drafted": [2, 2], "a": [[0.9, 0.8], [0.1, 0.5]],
          "beta": [[1.0, 1.0], [0.0, 1.0]], "tv_bias_sum": 0.3, "tv_bias_n": 4, "tv_pq_sum": 1.0, "tv_pq_n": 3, "w_sum": 2.0, "w_n": 4}
    s2 = {"accepted": [1, 0], "drafted": [2, 0], "a": [[1.0, 0.0], []], "beta": [[1.0, 0.0], []],
          "tv_bias_sum": 0.1, "tv_bias_n": 2, "tv_pq_sum": 0.2, "tv_pq_n": 2, "w_sum": 1.0, "w_n": 2}
    m = acceptance_metrics([s1, s2])
    assert m["rounds"] == 3  # the gamma = 0 step is not a round of drafting
    assert m["acceptance_rate"] == pytest.approx(3 / 6)
    assert m["rejection_rate"] == pytest.approx(2 / 5)  # tested: 2 + 1 + 2 positions, rejected 2
    assert m["mean_accepted_length"] == pytest.approx(1.0)
    assert m["tokens_per_round"] == pytest.approx(2.0)
    assert m["expected_length_exact"] == pytest.approx(((0.9 + 0.8) + (0.1 + 0.0) + (1.0 + 0.0)) / 3)
    assert m["expected_length_product"] == pytest.approx(((0.9 + 0.72) + (0.1 + 0.05) + 1.0) / 3)
    assert m["tv_bias"] == pytest.approx(0.4 / 6)
    assert m["tv_pq"] == pytest.approx(1.2 / 5)
    assert m["mean_w"] == pytest.approx(0.5)
    assert m["tv_pq_tested"] is None  # no tested-position sums given
    empty = acceptance_metrics([{"accepted": [0], "drafted": [0], "a": [[]], "beta": [[]]}])
    assert empty["acceptance_rate"] is None and empty["rounds"] == 0


def test_speed_metrics_median_of_repeats():
    b = [{"new_tokens": 100, "wall_s": 1.0, "time_proposer": 0.2, "time_target": 0.5, "proposer_calls": 10,
          "target_calls": 5},
         {"new_tokens": 100, "wall_s": 4.0}, {"new_tokens": 100, "wall_s": 0.5}]
    m = speed_metrics(b)
    assert m["tokens_per_second"] == pytest.approx(100.0)
    assert m["proposer_ms_per_step"] == pytest.approx(20.0)
    assert m["target_ms_per_step"] == pytest.approx(100.0)


def test_validate_metrics_names_the_problem():
    with pytest.raises(ValueError, match="missing 'task_score'"):
        validate_metrics({"method": "sd"})
    assert "| method |" in markdown_table([{"label": "sd", "task_score": None}])


def test_a_last_round_cut_at_eos_is_not_a_rejection():
    """verify also tests drafts after an EOS inside the accepted prefix; they are not output tokens, so the last
    round counts only the tokens the row kept (new_tokens): here 3 + 1 kept before, 2 in the last round."""
    s = {"accepted": [3, 4], "drafted": [4, 4], "a": [[0.9] * 4, [0.8] * 4], "beta": [[1.0] * 4, [1.0] * 4],
         "new_tokens": 6}
    m = acceptance_metrics([s])
    assert m["tested"] == 6 and m["rejection_rate"] == pytest.approx(1 / 6)  # 3 + 1 rejection, then 2 kept
    assert m["drafted"] == 8 and m["accepted"] == 7  # acceptance keeps every verified draft (the engine's work)
    # a last round that ended by a rejection (and its correction token) is left as it is
    m2 = acceptance_metrics([{**s, "accepted": [3, 1], "new_tokens": 4 + 2}])
    assert m2["tested"] == 6 and m2["rejection_rate"] == pytest.approx(2 / 6)
    # without new_tokens (older samples) nothing is clipped
    m3 = acceptance_metrics([{k: v for k, v in s.items() if k != "new_tokens"}])
    assert m3["tested"] == 8 and m3["rejection_rate"] == pytest.approx(1 / 8)


def test_tested_positions_match_the_per_token_records():
    """A real decode: the rounds' tested positions equal the per-token records' tested positions in every row
    (before the clip they differed in every row that ended by EOS inside an accepted draft)."""
    import torch

    from eval.run import row_record
    from specdec import LM, StaticEnsembleRule, generate
    from specdec.proposers import DraftModelProposer
    from specdec.testing import random_llama

    target = random_llama(vocab_size=12, hidden=16, layers=1, seed=0, init_std=0.3)
    draft = random_llama(vocab_size=12, hidden=16, layers=1, seed=1, init_std=0.3)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]] * 4
    out = generate(LM(target), DraftModelProposer(LM(draft)), prompts, rule=StaticEnsembleRule(0.5), gamma=4,
                   max_new_tokens=30, temperature=1.0, eos_token_id=0, generator=torch.Generator().manual_seed(3))
    assert sum(f == "eos" for f in out.finish_reason) >= 3
    cut = 0
    for b in range(len(prompts)):
        s = row_record(out, b, 4)
        raw = sum(k + (k < d) for k, d in zip(s["accepted"], s["drafted"]) if d > 0)
        cut += raw != s["tv_pq_tested_n"]
        assert acceptance_metrics([s])["tested"] == s["tv_pq_tested_n"], b
    assert cut > 0  # the decode did end rows inside accepted drafts, so the clip was exercised
