"""bfloat16 against float32 on the same prompts and seeds: per method, score and acceptance in each dtype, and the
paired difference (bf16 − fp32) with a bootstrap 95% interval over prompts (score: per-prompt differences;
acceptance: the difference of ratios of sums, prompts resampled jointly). Reads the run directories of run.sh.

    python docs/results/bf16/compare.py runs/bf16/mbpp_n32_bfloat16 runs/bf16/mbpp_n32_float32
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from specdec.jsonl import read_jsonl  # noqa: E402

N_BOOT, SEED = 2000, 0


def rows(run: Path, label: str) -> dict[int, dict]:
    return {r["idx"]: r for r in read_jsonl(run / label / "samples.jsonl")}


def paired(a: dict[int, dict], b: dict[int, dict]) -> dict:
    idx = sorted(a.keys() & b.keys())
    s = np.array([[a[i]["score"], b[i]["score"]] for i in idx])
    acc = np.array([[sum(a[i]["accepted"]), sum(a[i]["drafted"]), sum(b[i]["accepted"]), sum(b[i]["drafted"])]
                    for i in idx], dtype=float)
    rng = np.random.default_rng(SEED)
    boot = rng.integers(0, len(idx), size=(N_BOOT, len(idx)))
    d_score = (s[:, 0] - s[:, 1])[boot].mean(1)
    sums = acc[boot].sum(1)
    d_acc = sums[:, 0] / sums[:, 1] - sums[:, 2] / sums[:, 3]
    ci = lambda x: [round(float(v), 4) for v in np.quantile(x, [0.025, 0.975])]  # noqa: E731
    return {"n": len(idx), "score_bf16": round(float(s[:, 0].mean()), 4), "score_fp32": round(float(s[:, 1].mean()), 4),
            "acc_bf16": round(acc[:, 0].sum() / acc[:, 1].sum(), 4), "acc_fp32": round(acc[:, 2].sum() / acc[:, 3].sum(), 4),
            "d_score": round(float(s[:, 0].mean() - s[:, 1].mean()), 4), "d_score_ci": ci(d_score),
            "d_acc": round(acc[:, 0].sum() / acc[:, 1].sum() - acc[:, 2].sum() / acc[:, 3].sum(), 4),
            "d_acc_ci": ci(d_acc), "same_text": sum(a[i]["completion"] == b[i]["completion"] for i in idx)}


def main() -> None:
    bf16, fp32 = Path(sys.argv[1]), Path(sys.argv[2])
    labels = sorted(p.parent.name for p in bf16.glob("*/metrics.json") if (fp32 / p.parent.name / "metrics.json").exists())
    out = {}
    print("| method | N | score bf16 | score fp32 | Δ score [95% CI] | acceptance bf16 | acceptance fp32 | "
          "Δ acceptance [95% CI] | identical completions |\n|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        r = out[label] = paired(rows(bf16, label), rows(fp32, label))
        print(f"| {label} | {r['n']} | {r['score_bf16']:.3f} | {r['score_fp32']:.3f} | {r['d_score']:+.3f} "
              f"[{r['d_score_ci'][0]:+.3f}, {r['d_score_ci'][1]:+.3f}] | {r['acc_bf16']:.3f} | {r['acc_fp32']:.3f} | "
              f"{r['d_acc']:+.3f} [{r['d_acc_ci'][0]:+.3f}, {r['d_acc_ci'][1]:+.3f}] | {r['same_text']} |")
    print()
    for run in (bf16, fp32):
        t = (run / "time.txt").read_text() if (run / "time.txt").exists() else ""
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
        wall = {lab: json.loads((run / lab / "metrics.json").read_text()).get("tokens_per_second") for lab in labels}
        print(f"{run.name}: peak RSS {int(rss.group(1)) / 2**20:.2f} GiB" if rss else f"{run.name}: no time.txt",
              "; tokens/s", wall)


if __name__ == "__main__":
    main()
