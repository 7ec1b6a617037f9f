"""Evaluation metrics: acceptance statistics, expected acceptance length, bootstrap intervals, metrics.json.

Everything here is pure numpy over per-round records, so it is tested on synthetic numbers.

Notation for one round that drafted n tokens (n = gamma except near max_new_tokens):
  a_j    = sum_x min(d_j(x), nu_j(x)) = 1 - TV(d_j, nu_j): probability that draft j is accepted given the
           drafts before it were (the engine's `expected_accept`), evaluated along the drafted path;
  beta_j = min(1, nu_j(x_j) / d_j(x_j)): the acceptance probability of the token actually drafted
           (the engine's `accept_prob`).

Expected number of accepted drafts per round, E[T_N] = sum_{i=1..N} P(drafts 1..i all accepted):
  * `expected_length_exact`   = mean over rounds of sum_i (prod_{j<i} beta_j) * a_i. Unbiased for E[T_N] with
    no independence assumption: given the drafted prefix, P(1..i-1 accepted) = prod_{j<i} beta_j and then
    P(i accepted | prefix, 1..i-1 accepted) = a_i. (The drafts x_1..x_{i-1} are sampled from d, so
    weighting by beta turns their law into the law of an accepted prefix, min(d, nu).)
  * `expected_length_product` = mean over rounds of sum_i prod_{j<=i} a_j (the issue's formula). Exact when
    a_j does not depend on which drafts came before (e.g. p, q fixed per position); biased when it does: an
    accepted prefix is not distributed like a drafted one (tests/test_metrics.py: a two-token example where it
    predicts 0.75 for a true 1.0).
  * `expected_length_iid`     = (1 - a^(N+1)) / (1 - a) - 1 with a = mean a_j (Leviathan et al.'s formula).
The measured L (accepted drafts per round, bonus excluded) sits next to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


# ---------------------------------------------------------------- expected acceptance length
def _rows(rounds: Sequence[Sequence[float]]) -> list[np.ndarray]:
    return [np.asarray(r, dtype=np.float64) for r in rounds]


def expected_length_exact(a: Sequence[Sequence[float]], beta: Sequence[Sequence[float]]) -> float:
    """Mean over rounds of sum_i prod_{j<i} beta_j * a_i (unbiased E[T_N], no i.i.d. assumption)."""
    a_r, b_r = _rows(a), _rows(beta)
    if not a_r:
        return float("nan")
    tot = 0.0
    for ai, bi in zip(a_r, b_r):
        if ai.shape != bi.shape:
            raise ValueError(f"a and beta must have the same length per round, got {ai.shape} vs {bi.shape}")
        prefix = np.concatenate([[1.0], np.cumprod(bi)[:-1]]) if len(bi) else bi
        tot += float(np.sum(prefix * ai))
    return tot / len(a_r)


def expected_length_product(a: Sequence[Sequence[float]]) -> float:
    """Mean over rounds of sum_i prod_{j<=i} a_j (exact when a_j does not depend on the earlier drafts)."""
    a_r = _rows(a)
    if not a_r:
        return float("nan")
    return float(np.mean([np.sum(np.cumprod(ai)) for ai in a_r]))


def iid_length(alpha: float, n: int) -> float:
    """Leviathan et al.: expected accepted drafts out of n when each is accepted i.i.d. with prob alpha."""
    if n <= 0:
        return 0.0
    if alpha >= 1.0:
        return float(n)
    return (1.0 - alpha ** (n + 1)) / (1.0 - alpha) - 1.0


def expected_length_iid(a: Sequence[Sequence[float]]) -> float:
    """The i.i.d. prediction with alpha = mean a_j over all drafted positions, averaged over round lengths."""
    a_r = _rows(a)
    flat = np.concatenate(a_r) if a_r else np.zeros(0)
    if flat.size == 0:
        return float("nan")
    alpha = float(flat.mean())
    return float(np.mean([iid_length(alpha, len(ai)) for ai in a_r]))


# ---------------------------------------------------------------- bootstrap
def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (resampling samples with replacement)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


# ---------------------------------------------------------------- aggregation over samples
def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# per-token quantities summed per sample: TV(nu, p) (the bias), TV(p, q), the ensemble weight w
TOKEN_SUMS = ("tv_bias", "tv_pq", "w", "tv_bias_tested", "tv_pq_tested")


def _tested_in_output(s: dict) -> tuple[int, int]:
    """(tested positions, rejections) of a sample, counting only positions that are in its output.

    In a row's last round `verify` also tests the drafts after an EOS (or past max_new_tokens) inside the accepted
    prefix; those positions are not output tokens, so the per-token sums (TV, bias, w) do not cover them. When the
    last round kept k <= accepted tokens (k from `new_tokens`), it counts k tested positions and no rejection, so
    that the identity rejection + bias = TV is checked on one set of positions. (Acceptance and L keep every
    verified draft: that is the work the engine did.)
    """
    acc, dr = [int(x) for x in s["accepted"]], [int(x) for x in s["drafted"]]
    n = s.get("new_tokens")
    if n is not None and acc and dr[-1] > 0:
        before = sum(k + 1 if d > 0 else 1 for k, d in zip(acc[:-1], dr[:-1]))
        kept = int(n) - before
        if 0 < kept <= acc[-1]:
            acc[-1], dr[-1] = kept, kept
    rejections = sum(k < d for k, d in zip(acc, dr) if d > 0)
    return sum(k for k, d in zip(acc, dr) if d > 0) + rejections, rejections


def acceptance_metrics(samples: Iterable[dict]) -> dict[str, Any]:
    """Acceptance statistics pooled over the rounds of all samples.

    Each sample dict carries per-round lists `accepted`, `drafted`, `a`, `beta` (see the module docstring) and,
    for each key k of TOKEN_SUMS, `k_sum` and `k_n`: a sum over output tokens and how many tokens it covers.
    `*_tested` sums cover only tested positions (accepted drafts and first rejections, not bonus tokens): there
    a static ensemble has E[rejection] + bias = TV(p, q) exactly, position by position.
    """
    accepted: list[int] = []
    drafted: list[int] = []
    a: list[list[float]] = []
    beta: list[list[float]] = []
    sums = {k: [0.0, 0] for k in TOKEN_SUMS}
    tested_rej = [0, 0]
    for s in samples:
        t, rj = _tested_in_output(s)
        tested_rej[0] += t
        tested_rej[1] += rj
        for acc, dr, ai, bi in zip(s["accepted"], s["drafted"], s["a"], s["beta"]):
            if dr <= 0:  # an autoregressive step (gamma = 0): no drafts to score
                continue
            accepted.append(int(acc))
            drafted.append(int(dr))
            a.append(list(ai)[:dr])
            beta.append(list(bi)[:dr])
        for k in TOKEN_SUMS:
            sums[k][0] += s.get(f"{k}_sum", 0.0)
            sums[k][1] += s.get(f"{k}_n", 0)
    acc_a, dr_a = np.asarray(accepted, dtype=np.float64), np.asarray(drafted, dtype=np.float64)
    rounds = len(accepted)
    trials, rejections = float(tested_rej[0]), float(tested_rej[1])  # tested positions that are in the outputs
    mean_l = float(acc_a.mean()) if rounds else float("nan")
    flat_a = np.concatenate([np.asarray(x) for x in a]) if a else np.zeros(0)
    out = {
        "rounds": rounds,
        "drafted": int(dr_a.sum()),
        "accepted": int(acc_a.sum()),
        "tested": int(trials),
        "acceptance_rate": float(acc_a.sum() / dr_a.sum()) if rounds else float("nan"),
        # per tested position: the quantity with rejection + bias = E[TV(p, q)] for a static ensemble
        "rejection_rate": rejections / trials if trials else float("nan"),
        "mean_accepted_length": mean_l,
        "tokens_per_round": mean_l + 1.0,
        "expected_length_exact": expected_length_exact(a, beta),
        "expected_length_product": expected_length_product(a),
        "expected_length_iid": expected_length_iid(a),
        "mean_a": float(flat_a.mean()) if flat_a.size else float("nan"),
    }
    for k in TOKEN_SUMS:
        tot, cnt = sums[k]
        out["mean_w" if k == "w" else k] = tot / cnt if cnt else float("nan")
    return {k: _nan_to_none(v) for k, v in out.items()}


def speed_metrics(batches: Iterable[dict]) -> dict[str, Any]:
    """Throughput and per-step latencies from per-batch timing records (warm-up is never recorded).

    tokens_per_second is the median over batches of (new tokens / wall seconds): the median of repeats.
    """
    b = list(batches)
    tps = [x["new_tokens"] / x["wall_s"] for x in b if x["wall_s"] > 0]
    tp = sum(x.get("time_proposer", 0.0) for x in b)
    tt = sum(x.get("time_target", 0.0) for x in b)
    npc = sum(x.get("proposer_calls", 0) for x in b)
    ntc = sum(x.get("target_calls", 0) for x in b)
    out = {
        "tokens_per_second": float(np.median(tps)) if tps else float("nan"),
        "tokens_per_second_repeats": [round(float(t), 3) for t in tps],
        "proposer_ms_per_step": 1000.0 * tp / npc if npc else float("nan"),
        "target_ms_per_step": 1000.0 * tt / ntc if ntc else float("nan"),
        "wall_seconds": float(sum(x["wall_s"] for x in b)),
    }
    return {k: _nan_to_none(v) for k, v in out.items()}


# ---------------------------------------------------------------- metrics.json schema
# key -> allowed types (None where a metric does not apply: acceptance for gamma = 0, score for specbench)
SCHEMA: dict[str, tuple[type, ...]] = {
    "method": (str,),
    "task": (str,),
    "data_label": (str,),
    "data_source": (str,),
    "num_samples": (int,),
    "seed": (int,),
    "temperature": (float, int),
    "gamma": (int,),
    "batch_size": (int,),
    "max_new_tokens": (int,),
    "model": (dict,),
    "params": (dict,),
    "head": (str, type(None)),
    "head_task": (str, type(None)),
    "cross_task": (bool,),
    "task_score": (float, type(None)),
    "task_score_ci": (list, type(None)),
    "truncation_rate": (float, type(None)),  # share of outputs cut at max_new_tokens: next to every score
    "rounds": (int,),
    "drafted": (int,),
    "accepted": (int,),
    "acceptance_rate": (float, type(None)),
    "rejection_rate": (float, type(None)),
    "mean_accepted_length": (float, type(None)),
    "tokens_per_round": (float, type(None)),
    "expected_length_exact": (float, type(None)),
    "expected_length_product": (float, type(None)),
    "expected_length_iid": (float, type(None)),
    "mean_a": (float, type(None)),
    "tv_bias": (float, type(None)),
    "tv_pq": (float, type(None)),
    "mean_w": (float, type(None)),
    "tv_bias_tested": (float, type(None)),
    "tv_pq_tested": (float, type(None)),
    "label": (str,),
    "new_tokens": (int,),
    "tokens_per_second": (float, type(None)),
    "tokens_per_second_repeats": (list,),
    "proposer_ms_per_step": (float, type(None)),
    "target_ms_per_step": (float, type(None)),
    "wall_seconds": (float,),
    "per_category": (dict, type(None)),
}


def validate_metrics(m: dict) -> None:
    """Raise ValueError naming every missing or mistyped key of a metrics.json dict."""
    problems = []
    for k, types in SCHEMA.items():
        if k not in m:
            problems.append(f"missing {k!r}")
        elif not isinstance(m[k], types) or (isinstance(m[k], bool) and bool not in types):
            want = "/".join(t.__name__ for t in types)
            problems.append(f"{k!r} has type {type(m[k]).__name__}, expected {want}")
    ci = m.get("task_score_ci")
    if isinstance(ci, list) and (len(ci) != 2 or not ci[0] <= ci[1]):
        problems.append(f"'task_score_ci' must be [lo, hi] with lo <= hi, got {ci}")
    for k in ("acceptance_rate", "rejection_rate", "truncation_rate", "tv_bias", "tv_pq", "mean_w", "mean_a", "tv_bias_tested",
              "tv_pq_tested"):
        v = m.get(k)
        if isinstance(v, float) and not 0.0 <= v <= 1.0 + 1e-4:  # float32 sums over a 151k vocabulary: ~1e-5
            problems.append(f"{k!r} must lie in [0, 1], got {v}")
    if problems:
        raise ValueError("invalid metrics.json: " + "; ".join(problems))


# ---------------------------------------------------------------- table
TABLE_COLUMNS = [
    ("label", "method", "{}"),
    ("task_score", "score", "{:.3f}"),
    ("task_score_ci", "95% CI", "[{:.3f}, {:.3f}]"),
    ("truncation_rate", "trunc", "{:.2f}"),
    ("acceptance_rate", "accept", "{:.3f}"),
    ("mean_accepted_length", "L", "{:.2f}"),
    ("expected_length_exact", "E[T] exact", "{:.2f}"),
    ("expected_length_product", "E[T] prod", "{:.2f}"),
    ("expected_length_iid", "E[T] iid", "{:.2f}"),
    ("tokens_per_round", "tok/round", "{:.2f}"),
    ("tokens_per_second", "tok/s", "{:.1f}"),
    ("proposer_ms_per_step", "t_prop ms", "{:.2f}"),
    ("target_ms_per_step", "t_tgt ms", "{:.2f}"),
    ("tv_bias", "TV bias", "{:.3f}"),
    ("mean_w", "mean w", "{:.3f}"),
    ("num_samples", "n", "{}"),
]


def _fmt(v: Any, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return fmt.format(*v) if None not in v else "-"
    return fmt.format(v)


def markdown_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]] = TABLE_COLUMNS) -> str:
    """A GitHub markdown table of metrics dicts (one row each); '-' where a metric does not apply."""
    head = "| " + " | ".join(c[1] for c in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_fmt(r.get(k), f) for k, _, f in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])
