"""Choose the training start of a head on validation prompts: among the training-free rules the head can express
(SpecCascade, Fuzzy SD with the TV divergence, static weights, typical acceptance through a truncating head), the
run that maximises the training objective J = task score + λ · acceptance rate, read from an eval/frontier.py
directory run on a validation set (prompts disjoint from training and from every test set). Prints every
candidate's J and the Hydra overrides that start training there (EnsembleHead.init_as_rule); writes choice.json
beside the runs.

    python eval/frontier.py task=gsm8k data.split=validation frontier.baselines=[sd] \\
        'frontier.sweep_methods=[cascade]' frontier.grid=[0.5,0.85] out_dir=runs/val/gsm8k
    python eval/choose_start.py runs/val/gsm8k --lambda 0.1

For an operating point instead of a training objective ("the most acceptance at SD's score"):
`--keep-score-of sd --margin 0.02` chooses the candidate with the highest acceptance whose score is at least the
reference run's minus the margin (point estimates on validation; the test set then says whether it held).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.frontier import collect  # noqa: E402


def start_of(m: dict) -> tuple[str, float, float] | None:
    """(init_rule, init_knob, typical_epsilon) of a run the head can start at, or None. The ends of the static line
    are cascades whose decision never changes (max p − max q lies in (−1, 1)): w = 0, the draft alone, is the
    cascade that never defers (t = 1); w = 1, i.e. SD, the one that always does (t = −1). Typical acceptance is the
    truncating head (target.typical_epsilon = ε) at w = 0, the cascade that never defers, when its δ is Medusa's
    default sqrt(ε) (the head's truncation uses that δ)."""
    params = m.get("params") or {}
    if m["method"] == "cascade":
        return "cascade", float(params["threshold"]), 0.0
    if m["method"] == "fsd" and params.get("divergence") == "tv":
        return "fsd_tv", float(params["threshold"]), 0.0
    if m["method"] == "static":
        w = float(params["w"])
        return ("cascade", 1.0, 0.0) if w <= 0.0 else ("cascade", -1.0, 0.0) if w >= 1.0 else ("static", w, 0.0)
    if m["method"] == "sd":
        return "cascade", -1.0, 0.0
    if m["method"] == "typical":
        eps = float(params["epsilon"])
        if 0.0 < eps <= 1.0 and abs(float(params.get("delta", eps ** 0.5)) - eps ** 0.5) < 1e-9:
            return "cascade", 1.0, eps
    return None


def overrides_of(c: dict) -> str:
    """The Hydra overrides that start training at candidate c."""
    out = f"head.init_rule={c['rule']} head.init_knob={c['knob']:g}"
    return out + (f" target.typical_epsilon={c['typical_epsilon']:g}" if c.get("typical_epsilon") else "")


def candidates(rows: list[dict], lam: float) -> list[dict]:
    """The runs a head can start at, each with its start, score, acceptance and J = score + λ·acceptance."""
    cands = []
    for m in rows:
        start = start_of(m)
        if start is None or m.get("task_score") is None or m.get("acceptance_rate") is None:
            continue
        cands.append({"label": m["label"], "rule": start[0], "knob": start[1], "typical_epsilon": start[2],
                      "score": m["task_score"], "acceptance": m["acceptance_rate"],
                      "J": m["task_score"] + lam * m["acceptance_rate"]})
    if not cands:
        raise ValueError("no run of sd, cascade, fsd (divergence=tv), static or typical with a task score here: run "
                         "the validation sweep first (see this file's docstring)")
    return cands


def choose(rows: list[dict], lam: float) -> tuple[dict, list[dict]]:
    """The candidate with the highest J = score + λ·acceptance (ties: higher acceptance), and all candidates."""
    cands = sorted(candidates(rows, lam), key=lambda c: (c["J"], c["acceptance"]), reverse=True)
    return cands[0], cands


def choose_keeping_score(rows: list[dict], lam: float, ref: str, margin: float) -> tuple[dict, list[dict]]:
    """The candidate with the highest acceptance (ties: higher score) whose score is ≥ the run `ref`'s score −
    margin, and all candidates in that order. `ref` need not be a candidate itself (any run with a score)."""
    scores = {m["label"]: m.get("task_score") for m in rows}
    if scores.get(ref) is None:
        raise ValueError(f"no run labelled {ref!r} with a task score among: {sorted(scores)}")
    floor = scores[ref] - margin - 1e-12  # a score exactly at the margin is in, whatever the float rounding

    def keeps(c: dict) -> bool:
        return c["score"] >= floor

    cands = sorted(candidates(rows, lam), key=lambda c: (keeps(c), c["acceptance"], c["score"]), reverse=True)
    if not keeps(cands[0]):
        raise ValueError(f"no candidate scores within {margin:g} of {ref} ({scores[ref]:.3f})")
    return cands[0], cands


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="eval/frontier.py output directories (validation prompts)")
    ap.add_argument("--lambda", dest="lam", type=float, required=True, help="the λ the head will be trained with")
    ap.add_argument("--out", type=Path, default=None, help="where to write the choice (default: DIRS[0]/choice.json)")
    ap.add_argument("--keep-score-of", default=None, metavar="LABEL",
                    help="choose the most acceptance whose score is within --margin of this run's instead of max J")
    ap.add_argument("--margin", type=float, default=0.02, help="with --keep-score-of: score points allowed below it")
    args = ap.parse_args()
    rows = collect(args.dirs)
    if args.keep_score_of is None:
        best, cands = choose(rows, args.lam)
        criterion = "max J"
    else:
        best, cands = choose_keeping_score(rows, args.lam, args.keep_score_of, args.margin)
        criterion = f"max acceptance at score >= {args.keep_score_of} - {args.margin:g}"
        print(f"order: the most acceptance at score >= {args.keep_score_of}'s - {args.margin:g}, then the rest")
    print(f"| run | score | acceptance | J = score + {args.lam:g}·acceptance |\n|---|---|---|---|")
    for c in cands:
        print(f"| {c['label']} | {c['score']:.3f} | {c['acceptance']:.3f} | {c['J']:.4f} |")
    overrides = overrides_of(best)
    print(f"\nstart: {best['label']} -> python train/run.py ... lambda={args.lam:g} {overrides}")
    out = args.out or Path(args.dirs[0]) / "choice.json"
    out.write_text(json.dumps({"lambda": args.lam, "criterion": criterion, "best": best, "candidates": cands,
                               "overrides": overrides}, indent=2))


if __name__ == "__main__":
    main()
