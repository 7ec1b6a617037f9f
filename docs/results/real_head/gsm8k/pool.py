"""Pool evaluation runs of the same methods over disjoint prompt sets, and compare methods prompt by prompt.

    .venv/bin/python docs/results/real_head/gsm8k/pool.py runs/real/gsm8k_t1_n16_m320 runs/real/gsm8k_t1_n16_m320_d7s1

For every method label present in all the given run directories: the pooled score with its bootstrap 95% CI and the
pooled acceptance (accepted / drafted tokens). Then, for each method against the first head label, the paired
difference (same prompts, so the per-prompt difference is resampled): score and acceptance, with 95% CIs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from eval.metrics import bootstrap_ci  # noqa: E402
from specdec.jsonl import read_jsonl  # noqa: E402


def per_prompt(run_dirs: list[Path], label: str) -> dict[tuple[int, int], tuple[float, int, int]]:
    """(set, idx) -> (score, accepted tokens, drafted tokens)."""
    out = {}
    for k, d in enumerate(run_dirs):
        for s in read_jsonl(d / label / "samples.jsonl"):
            out[(k, s["idx"])] = (float(s["score"]), int(sum(s["accepted"])), int(sum(s["drafted"])))
    return out


def main() -> None:
    dirs = [Path(p) for p in sys.argv[1:]]
    labels = sorted(set.intersection(*[{p.name for p in d.iterdir() if (p / "metrics.json").exists()} for d in dirs]))
    data = {lab: per_prompt(dirs, lab) for lab in labels}
    print(f"Pooled over {len(dirs)} disjoint prompt sets: {', '.join(map(str, dirs))}\n")
    print("| method | n | score | 95% CI | acceptance | drafted |")
    print("|---|---|---|---|---|---|")
    for lab in labels:
        v = data[lab]
        sc = [x[0] for x in v.values()]
        acc, dr = sum(x[1] for x in v.values()), sum(x[2] for x in v.values())
        lo, hi = bootstrap_ci(sc)
        print(f"| {lab} | {len(sc)} | {np.mean(sc):.3f} | [{lo:.3f}, {hi:.3f}] | {acc / max(dr, 1):.3f} | {dr:,} |")
    heads = [lab for lab in labels if lab.startswith("diversed")]
    if not heads:
        return
    h = heads[0]
    print(f"\nPaired differences, {h} minus each method (the same prompts; 2,000 bootstrap resamples of prompts):\n")
    print("| method | score diff | 95% CI | acceptance diff | 95% CI |")
    print("|---|---|---|---|---|")
    for lab in labels:
        if lab == h:
            continue
        keys = sorted(set(data[h]) & set(data[lab]))
        hs = np.array([data[h][k] for k in keys], dtype=np.float64)
        ms = np.array([data[lab][k] for k in keys], dtype=np.float64)
        d = hs[:, 0] - ms[:, 0]
        lo, hi = bootstrap_ci(d)
        # acceptance difference: ratio of sums per method, resampling prompts jointly
        rng = np.random.default_rng(0)
        idx = rng.integers(0, len(keys), size=(2000, len(keys)))
        boot = hs[idx, 1].sum(1) / hs[idx, 2].sum(1) - ms[idx, 1].sum(1) / ms[idx, 2].sum(1)
        a_lo, a_hi = np.quantile(boot, [0.025, 0.975])
        a = hs[:, 1].sum() / hs[:, 2].sum() - ms[:, 1].sum() / ms[:, 2].sum()
        print(f"| {lab} (n={len(keys)}) | {d.mean():+.3f} | [{lo:+.3f}, {hi:+.3f}] | {a:+.3f} | [{a_lo:+.3f}, {a_hi:+.3f}] |")


if __name__ == "__main__":
    main()
