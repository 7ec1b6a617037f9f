"""Whether a per-token rule has anything to learn: how much of the fork gap the head's inputs predict.

    python diagnostics/fork_gaps.py <run dir of algo.advantage=critic> [--folds 5] [--out DIR]
    python diagnostics/fork_gaps.py <train/autojudge.py run dir, or its mined.pt / mined.partial.pt> [...]

A critic run keeps its most recent forks in every checkpoint (`algo.critic.buffer`): the head's inputs at the fork
position (h_q, h_p, the pair features) and the gap y = G+ - G- of the two continuations, whose expectation given the
context is Delta_t / TV_t (train/forks.py). Fork positions are drawn with probability proportional to TV_t, so a
mean of y over any set of forks is the task value lost per unit of acceptance gained by relaxing those positions.

ν is linear in w, so relaxing position t costs TV_t * E[y_t] of task value and buys TV_t of acceptance. If E[y | the
head's inputs] were the same everywhere, every head would lose the same value per unit of acceptance as a static
weight: all would lie on the static line. A head can beat the line only by the spread of E[y | inputs]. This
measures that spread out of sample: ridge regressions of y on (a) the pair features alone and (b) the head's whole
input (layer-normed hidden states + features, as heads.EnsembleHead sees them), the ridge strength chosen inside
each training fold; then held-out R^2 and the mean gap by quintile of the out-of-fold prediction, with 95% CIs.
Writes fork_gaps.{md,json} to --out (default: the run dir).

AutoJudge / SelfJudge mining (train/autojudge.py) records the same inputs at mismatches of the target's greedy path
(drawn uniformly, mine.per_prompt a prompt), with its own gap: the swap's change of task reward (label=reward), or the
target's own log-likelihood loss over its next tokens (label=selfjudge, nats/token: no reward needed, so it reads
on a real pair in hours). There the folds split by prompt (a prompt's mismatches are alike, and a fold that saw a
prompt's neighbours would flatter the fit), and a mean of y is harm per relaxed mismatch, not per unit of TV.

--cascade T splits the forks by SpecCascade's decision at threshold T (relax, w = 0, where max p - max q <= T) and
reports the mean gap on each side, and --mass M turns a per-fork mean into a per-sequence value: M is the TV mass a
rule relaxes per sequence (its acceptance gain over SD times the drafted positions per sequence). A rule's task gain
is about -M times the mean gap over the forks it relaxes, so an interval of +-h on that mean resolves gains only down
to ~M*h per sequence: the diagnostic's resolution in units of the task score.

--task-gaps RUN (with a SelfJudge mining as the source) reads a reward mining of the same mismatches and reports
how well the self-supervised gap points at the task's harm: their correlation, and the task gap by quintile of the
label and of its out-of-fold prediction from the head's inputs (the dense signal issue "strongest competitors" asks
about: worth training on only if it ranks the task's harm).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec.targets import PAIR_FEATURES, feature_rule_decision  # noqa: E402
from train.checkpoint import read_model_states, resolve_resume  # noqa: E402
from train.ridge import (  # noqa: E402,F401 (re-exported: the diagnostics and its tests use them)
    ALPHAS,
    choose_alpha,
    design,
    folds_of,
    load_mined,
    out_of_fold,
    r_squared,
    ridge_fit,
    ridge_predict,
)


def load_forks(run_dir: Path) -> dict[str, torch.Tensor]:
    """The fork buffer of a critic run's newest checkpoint (verified against its manifest first). With several
    ranks each keeps its own forks; this reads rank 0's."""
    ckpt = resolve_resume(run_dir / "checkpoints", None)
    if ckpt is None:
        raise SystemExit(f"{run_dir}: no checkpoint under checkpoints/")
    state = read_model_states(ckpt)
    if "critic" not in state:
        raise SystemExit(f"{ckpt}: not a critic run (algo.advantage=critic keeps the forks; this one has none)")
    return {k: v.double() for k, v in state["critic"]["data"].items()}


def mean_ci(x: torch.Tensor) -> tuple[float, float]:
    """Mean and the half-width of its normal 95% interval."""
    return float(x.mean()), 1.96 * float(x.std()) / math.sqrt(max(len(x), 1))


def quintiles(pred: torch.Tensor, y: torch.Tensor, tv: torch.Tensor) -> list[dict]:
    order = torch.argsort(pred)
    rows = []
    for i, idx in enumerate(torch.tensor_split(order, 5)):
        m, h = mean_ci(y[idx])
        rows.append({"quintile": i + 1, "n": len(idx), "pred_mean": float(pred[idx].mean()), "gap_mean": m,
                     "gap_ci": h, "tv_mean": float(tv[idx].mean())})
    return rows


def spread(order_by: torch.Tensor, y: torch.Tensor, tv: torch.Tensor, groups: torch.Tensor | None,
           seed: int = 0) -> dict:
    """Mean y by quintile of order_by, and the top quintile's mean minus the bottom's: its normal 95% half-width
    (independent samples: the half-widths add in quadrature) and, with groups, its prompt-resampled interval."""
    q = quintiles(order_by, y, tv)
    out = {"quintiles": q, "top_minus_bottom": q[-1]["gap_mean"] - q[0]["gap_mean"],
           "top_minus_bottom_ci": math.hypot(q[-1]["gap_ci"], q[0]["gap_ci"])}
    if groups is not None:
        out["top_minus_bottom_prompt_ci"] = top_minus_bottom_by_prompt(order_by, y, groups, seed=seed)
    return out


def analyse(d: dict[str, torch.Tensor], folds: int = 5, seed: int = 0) -> dict:
    y = d["y"]
    tv = d["feats"][:, PAIR_FEATURES.index("tv_pq")]
    m, h = mean_ci(y)
    out = {"n": len(y), "groups": None if d.get("groups") is None else int(torch.unique(d["groups"]).numel()),
           "gap_mean": m, "gap_ci": h, "gap_sd": float(y.std()),
           "share_nonzero": float((y != 0).double().mean()), "inputs": {}}
    for inputs in ("features", "head"):
        X = design(d, inputs)
        pred, alphas = out_of_fold(X, y, folds, seed, d.get("groups"))
        out["inputs"][inputs] = {"width": X.shape[1], "r2_oof": r_squared(y, pred), "alphas": alphas} | spread(
            pred, y, tv, d.get("groups"), seed)
    return out


def cascade_split(d: dict[str, torch.Tensor], threshold: float) -> dict:
    """Mean gap over the forks SpecCascade at `threshold` relaxes (w = 0: max p - max q <= threshold) and over those
    it defers to the target, with 95% half-widths: a negative mean on the relaxed side is task value *gained* per
    unit of acceptance there."""
    f = d["feats"]
    relax = ~feature_rule_decision(f, "cascade", threshold)
    out = {"threshold": threshold}
    for name, m in (("relaxed", relax), ("deferred", ~relax)):
        mean, h = mean_ci(d["y"][m]) if m.any() else (float("nan"), float("nan"))
        out[name] = {"n": int(m.sum()), "gap_mean": mean, "gap_ci": h,
                     "tv_mass": float(f[m, PAIR_FEATURES.index("tv_pq")].sum())}
    return out


def against(d: dict[str, torch.Tensor], task: dict[str, torch.Tensor], folds: int = 5, seed: int = 0) -> dict:
    """Whether d's gap (SelfJudge's: the target's own likelihood loss) points at the mismatches whose swap costs
    the task, measured as `task` (a reward mining of the *same* mismatches) at each of them. Reports their Pearson
    correlation, the mean task gap by quintile of d's gap itself (an oracle: the best any head trained on d's
    label could do) and by quintile of its out-of-fold prediction from the head's whole input (what a head trained
    on it can select). Both minings walk the target's greedy path with the same settings, so their inputs must be
    equal; anything else is refused."""
    for k in ("h_q", "h_p", "feats"):
        if d[k].shape != task[k].shape or not torch.equal(d[k], task[k]):
            raise SystemExit(f"--task-gaps: not the same mismatches ({k} differs): mine both with one setting")
    y, t = d["y"], task["y"]
    tv = d["feats"][:, PAIR_FEATURES.index("tv_pq")]
    r = float(torch.corrcoef(torch.stack([y, t]))[0, 1]) if y.std() > 0 and t.std() > 0 else float("nan")
    pred, _ = out_of_fold(design(d, "head"), y, folds, seed, d.get("groups"))
    return {"n": len(y), "pearson": r, "by_gap": spread(y, t, tv, d.get("groups"), seed),
            "by_head": spread(pred, t, tv, d.get("groups"), seed)}


def top_minus_bottom_by_prompt(order_by: torch.Tensor, y: torch.Tensor, groups: torch.Tensor,
                               resamples: int = 2000, seed: int = 0) -> list[float]:
    """95% percentile interval of (mean y in the top quintile of order_by) - (bottom quintile's), resampling whole
    prompts: a prompt's mismatches are alike, so the normal half-width over mismatches is too narrow. The quintile
    membership is the full sample's."""
    parts = torch.tensor_split(torch.argsort(order_by), 5)  # quintiles()' partition
    bottom = torch.zeros(len(y), dtype=torch.bool)
    top = torch.zeros(len(y), dtype=torch.bool)
    bottom[parts[0]], top[parts[-1]] = True, True
    ids, inv = torch.unique(groups, return_inverse=True)
    g = torch.Generator().manual_seed(seed)
    diffs = []
    for _ in range(resamples):
        weight = torch.bincount(torch.randint(len(ids), (len(ids),), generator=g), minlength=len(ids))[inv].double()
        wt, wb = weight * top, weight * bottom
        if wt.sum() > 0 and wb.sum() > 0:
            diffs.append(float((wt * y).sum() / wt.sum() - (wb * y).sum() / wb.sum()))
    diffs_t = torch.tensor(diffs, dtype=torch.float64)
    return diffs_t.quantile(torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()


WHAT = {
    "critic": "forks (drawn ∝ TV), gap y = G+ − G− (a mean of y is the task value lost per unit of acceptance "
              "gained there)",
    "reward": "greedy-path mismatches (AutoJudge mining), y = the swap's loss of task reward (own − swapped)",
    "selfjudge": "greedy-path mismatches (SelfJudge mining), y = the target's mean log-likelihood loss over its next "
                 "tokens after the draft's token (nats/token; > 0: the swap derails the target)",
}


def report(res: dict, label: str, kind: str = "critic") -> str:
    folds = f", folds by prompt ({res['groups']} prompts)" if res.get("groups") else ""
    lines = [f"Fork gaps of {label}: {res['n']} {WHAT[kind]}{folds}. Mean {res['gap_mean']:+.4f} ± "
             f"{res['gap_ci']:.4f}, sd {res['gap_sd']:.3f}, nonzero {res['share_nonzero']:.2f}.", ""]
    lines += ["| inputs | width | held-out R² | top − bottom quintile | q1 | q2 | q3 | q4 | q5 |", "|" + "---|" * 9]
    for name, r in res["inputs"].items():
        qs = " | ".join(f"{q['gap_mean']:+.3f} ± {q['gap_ci']:.3f}" for q in r["quintiles"])
        pc = r.get("top_minus_bottom_prompt_ci")
        pcs = f" (prompts resampled: [{pc[0]:+.3f}, {pc[1]:+.3f}])" if pc else ""
        lines.append(f"| {name} | {r['width']} | {r['r2_oof']:+.3f} | {r['top_minus_bottom']:+.3f} ± "
                     f"{r['top_minus_bottom_ci']:.3f}{pcs} | {qs} |")
    lines += ["", "(quintiles of the out-of-fold ridge prediction, lowest first: mean gap ± 95% half-width)"]
    c = res.get("cascade")
    if c:
        lines += ["", f"SpecCascade's split at t = {c['threshold']:g} (relaxed: max p − max q ≤ t):", "",
                  "| side | forks | mean gap ± 95% |", "|---|---|---|"]
        lines += [f"| {k} | {c[k]['n']} | {c[k]['gap_mean']:+.4f} ± {c[k]['gap_ci']:.4f} |" for k in ("relaxed", "deferred")]
    a = res.get("against")
    if a:
        lines += ["", f"Against the task's own gaps at the same {a['n']} mismatches ({a['source']}): Pearson r = "
                  f"{a['pearson']:+.3f}. Mean task gap by quintile of this gap (an oracle of this label) and of its "
                  "out-of-fold prediction from the head's whole input (what a head trained on it can select):", "",
                  "| ordered by | top − bottom quintile | 95%, prompts resampled | q1 | q2 | q3 | q4 | q5 |",
                  "|" + "---|" * 8]
        for name, what in (("by_gap", "this gap itself"), ("by_head", "its prediction from the head's input")):
            b = a[name]
            qs = " | ".join(f"{q['gap_mean']:+.3f} ± {q['gap_ci']:.3f}" for q in b["quintiles"])
            pc = b.get("top_minus_bottom_prompt_ci")
            pcs = f"[{pc[0]:+.3f}, {pc[1]:+.3f}]" if pc else "-"
            lines.append(f"| {what} | {b['top_minus_bottom']:+.3f} ± {b['top_minus_bottom_ci']:.3f} | {pcs} | {qs} |")
    if res.get("mass"):
        m = res["mass"]
        lines += ["", f"Resolution at a relaxed TV mass of {m:g} per sequence: the mean gap's ±{res['gap_ci']:.4f} "
                  f"resolves task gains down to ±{m * res['gap_ci']:.4f} per sequence; a gain g per sequence needs a "
                  f"mean gap of −g/{m:g} over the relaxed forks."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a critic run dir, an autojudge run dir, or its mined(.partial).pt")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cascade", type=float, default=None, help="split the forks by SpecCascade's decision at this t")
    ap.add_argument("--mass", type=float, default=None, help="relaxed TV mass per sequence (for the resolution line)")
    ap.add_argument("--task-gaps", type=Path, default=None,
                    help="a reward mining (autojudge run dir or mined.pt) of the same mismatches: how well this "
                         "source's gap points at the task's harm")
    args = ap.parse_args()
    src = args.source
    mined = src if src.is_file() else next((src / f for f in ("mined.pt", "mined.partial.pt")
                                            if (src / f).exists()), None)
    if mined is not None:
        forks = load_mined(mined)
        kind = forks.pop("label")
    else:
        forks, kind = load_forks(src), "critic"
    res = analyse(forks, args.folds, args.seed)
    if args.cascade is not None:
        res["cascade"] = cascade_split(forks, args.cascade)
    if args.mass is not None:
        res["mass"] = args.mass
    if args.task_gaps is not None:
        tsrc = args.task_gaps
        task = load_mined(tsrc if tsrc.is_file() else tsrc / "mined.pt")
        if task.pop("label") != "reward":
            raise SystemExit(f"--task-gaps {tsrc}: not a reward mining (mine.label=reward); its gaps are not the task's")
        res["against"] = against(forks, task, args.folds, args.seed) | {"source": str(tsrc)}
    out = args.out or (src.parent if src.is_file() else src)
    out.mkdir(parents=True, exist_ok=True)
    text = report(res, str(mined or src), kind)
    (out / "fork_gaps.md").write_text(text + "\n")
    (out / "fork_gaps.json").write_text(json.dumps(res, indent=2))
    print(text)


if __name__ == "__main__":
    main()
