"""Table and calibration figures of the real-pair runs (metrics.json under a run directory), as markdown.

    .venv/bin/python docs/results/real/summarize.py runs/real/mbpp_t1_n40_m256 > docs/results/real/table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def fmt(v, f="{:.3f}"):
    return "-" if v is None else f.format(v)


def main() -> None:
    root = Path(sys.argv[1])
    rows = []
    for f in sorted(root.rglob("metrics.json")):
        m = json.loads(f.read_text())
        m["_dir"] = f.parent.name
        rows.append(m)
    order = {"ar_target": 0, "sd": 1, "static": 2, "lossy": 3, "cascade": 4}
    rows.sort(key=lambda m: (order.get(m["method"], 9), -(m["params"].get("w") or 0)))
    print("| method | accept | drafted tokens | L | pass@1 | 95% CI | trunc | tok/s | new tokens | wall s | N | max_new |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in rows:
        ci = m.get("task_score_ci") or [None, None]
        print(f"| {m['label']} | {fmt(m.get('acceptance_rate'))} | {m.get('drafted', 0):,} | "
              f"{fmt(m.get('mean_accepted_length'), '{:.2f}')} | {fmt(m.get('task_score'))} | "
              f"[{fmt(ci[0])}, {fmt(ci[1])}] | {fmt(m.get('truncation_rate'), '{:.2f}')} | "
              f"{fmt(m.get('tokens_per_second'), '{:.2f}')} | {m.get('new_tokens', 0):,} | "
              f"{fmt(m.get('wall_seconds'), '{:.0f}')} | {m['num_samples']} | {m['max_new_tokens']} |")
    by = {m["label"]: m for m in rows}
    sd = next((m for m in rows if m["method"] == "sd"), None)
    w0 = next((m for m in rows if m["method"] == "static" and m["params"].get("w") == 0.0), None)
    print()
    if sd:
        print(f"- SD acceptance at T=1: {fmt(sd['acceptance_rate'])} over {sd['drafted']:,} drafted tokens; "
              f"SD pass@1 {fmt(sd['task_score'])}")
    if sd and w0 and sd["task_score"]:
        print(f"- draft accuracy as a fraction of the target's (static w=0 / sd): "
              f"{w0['task_score']:.3f} / {sd['task_score']:.3f} = {w0['task_score'] / sd['task_score']:.2f}")
    if sd:
        ok = [m for m in rows if m["method"] == "static" and m["task_score"] is not None
              and m["task_score"] >= sd["task_score"] - 0.02]
        if ok:
            best = max(ok, key=lambda m: m["acceptance_rate"])
            print(f"- best static within 2 points of sd's pass@1: {best['label']} (pass@1 {fmt(best['task_score'])}, "
                  f"acceptance {fmt(best['acceptance_rate'])}): +{best['acceptance_rate'] - sd['acceptance_rate']:.3f} "
                  f"acceptance over sd")
        else:
            print("- no static w within 2 points of sd's pass@1")
    del by


if __name__ == "__main__":
    main()
