"""Where the head's per-token advantages come from, compared at equal decoding compute.

    python diagnostics/advantages.py --task gsm8k --lam 0.1 --budget 600000 --eval-n 300 --eval-seed 1
    python diagnostics/advantages.py ... --variants returns forks_policy forks_greedy critic_greedy

Each variant trains `train/run.py` until it has decoded `--budget` tokens (rollouts and fork continuations
counted alike: train.max_decoded_tokens), then its exported head is evaluated with `eval/run.py method=diversed`
on held-out prompts (the task's test split, disjoint from the train split the head learns on; for a data file,
pass data.holdout through --train-extra and --eval-extra; the eval seed sets the decoding). Both stages resume:
re-running continues unfinished runs.
Prints one markdown table (variant, steps, decoded tokens, train wall time, held-out acceptance, task score with
its 95% CI, mean w) and writes it with the raw figures to <out>/advantages.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.jsonl import read_jsonl  # noqa: E402

VARIANTS = {
    "returns": ["algo.advantage=returns"],
    "forks_policy": ["algo.advantage=forks", "algo.forks.continuation=policy"],
    "forks_greedy": ["algo.advantage=forks", "algo.forks.continuation=greedy_target"],
    "critic_policy": ["algo.advantage=critic", "algo.forks.continuation=policy"],
    "critic_greedy": ["algo.advantage=critic", "algo.forks.continuation=greedy_target"],
    # a features-only head, and so a features-only critic (docs/results/lambda01/: CNN/DM)
    "critic_policy_features": ["algo.advantage=critic", "algo.forks.continuation=policy", "head.use_hidden=false"],
}


def sh(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    subprocess.run(cmd, cwd=ROOT, check=True, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--lam", type=float, default=0.1)
    ap.add_argument("--budget", type=int, default=600_000, help="decoded tokens per variant (rollouts + forks)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--eval-n", type=int, default=300)
    ap.add_argument("--eval-seed", type=int, default=1)
    ap.add_argument("--out", default="runs/advantages")
    ap.add_argument("--train-extra", nargs="*", default=[], help="more train/run.py overrides, e.g. model.dir=...")
    ap.add_argument("--eval-extra", nargs="*", default=[], help="more eval/run.py overrides")
    args = ap.parse_args()
    out = ROOT / args.out / f"{args.task}_lam{args.lam:g}"
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    rows = []
    for v in args.variants:
        run_dir = out / v / "train"
        if not (run_dir / "summary.json").exists():
            resume = ["resume=true"] if (run_dir / "checkpoints" / "latest").exists() else []
            sh([py, "train/run.py", f"task={args.task}", f"lambda={args.lam}", *VARIANTS[v],
                "train.steps=100000", f"train.max_decoded_tokens={args.budget}", f"hydra.run.dir={run_dir}",
                "progress=false", *resume, *args.train_extra])
        eval_dir = out / v / "eval"
        if not (eval_dir / "metrics.json").exists():
            sh([py, "eval/run.py", f"task={args.task}", "method=diversed", f"head={run_dir / 'head'}",
                f"seed={args.eval_seed}", f"eval.num_samples={args.eval_n}", f"out_dir={eval_dir}", "resume=true",
                "eval.progress=false", *args.eval_extra])
        hist = read_jsonl(run_dir / "metrics.jsonl")
        m = json.loads((eval_dir / "metrics.json").read_text())
        rows.append({
            "variant": v, "steps": len(hist), "decoded_tokens": hist[-1]["decoded_tokens"],
            "train_seconds": sum(h["time_step"] for h in hist), "acceptance": m["acceptance_rate"],
            "task_score": m["task_score"], "task_score_ci": m.get("task_score_ci"), "mean_w": m.get("mean_w"),
            "num_samples": m.get("num_samples"), "train_dir": str(run_dir), "eval_dir": str(eval_dir),
        })
    head = "| variant | steps | decoded tokens | train s | accept | score | 95% CI | mean w | n |"
    lines = [f"Task {args.task}, lambda={args.lam:g} (per token), budget {args.budget} decoded tokens per variant, "
             f"held-out eval seed {args.eval_seed}.", "", head, "|" + "---|" * 9]
    for r in rows:
        ci = r["task_score_ci"] or [float("nan")] * 2
        lines.append(f"| {r['variant']} | {r['steps']} | {r['decoded_tokens']} | {r['train_seconds']:.0f} | "
                     f"{r['acceptance']:.3f} | {r['task_score']:.3f} | [{ci[0]:.3f}, {ci[1]:.3f}] | "
                     f"{(r['mean_w'] if r['mean_w'] is not None else float('nan')):.3f} | {r['num_samples']} |")
    table = "\n".join(lines)
    (out / "advantages.md").write_text(table + "\n")
    (out / "advantages.json").write_text(json.dumps(rows, indent=2))
    print("\n" + table)


if __name__ == "__main__":
    main()
