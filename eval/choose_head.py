"""Choose which head of a training run to ship, on validation prompts: the rule it started at (made step-sharp), its
start (the soft rule or init_w it trained from) or any of its checkpoints, by the objective J = score + λ·acceptance.

A head starts at a rule it can express (eval/choose_start.py) and keeps a KL to it, but REINFORCE can still drift
below that start when the task reward is noisy per token. Validation decides, so a shipped head never ends below its
own start by more than the validation noise. Two steps, the evaluation in between done by eval/frontier.py:

    python eval/choose_head.py export RUN_DIR                 # RUN_DIR/candidates/{start,step000050,...}/head
    python eval/frontier.py <the validation settings> 'frontier.baselines=[]' 'frontier.grid=[]' \\
        "heads=[RUN_DIR/candidates/start/head,...]" out_dir=VAL_HEADS_DIR
    python eval/choose_head.py choose VAL_HEADS_DIR --lambda 0.1 --out RUN_DIR/selected.json

`python eval/choose_head.py flipped RUN_DIR` exports a flip head's rule with every decision flipped (RUN_DIR/ends/
flipped/head): the other end of its family, a diagnostic beside the candidates, never one of them.

Shipping the rule itself is a valid outcome: it says training found nothing above it on validation. The choice
(selected.json) names the chosen head's directory; every candidate's score, acceptance and J are kept
beside it, so a reader sees what was rejected.

The largest J of many candidates is biased upwards (the winner's curse): with 8 checkpoints on 200 noisy prompts,
one of them beats the rule on validation by noise alone. So a candidate replaces the first one (the rule, or the
start of a run without one) only if its paired J gain over it is positive at `--confidence` (default 0.95,
one-sided, Bonferroni over the challengers: prompts resampled, J = mean score + λ·pooled acceptance). Among those
that clear it, the highest J ships. `--confidence 0` is the plain arg-max.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from eval.frontier import collect  # noqa: E402
from eval.pool import per_prompt as pool_per_prompt  # noqa: E402


def checkpoints_of(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories (stepNNNNNN), oldest first."""
    ck = run_dir / "checkpoints"
    return sorted(d for d in ck.iterdir() if d.is_dir() and d.name.startswith("step")) if ck.is_dir() else []


# A step for any feature difference the float32 features resolve: at k = 1e4 a max-prob difference 1e-3 from
# the threshold already gives w within 5e-5 of 0 or 1 (only near-exact ties are soft).
RULE_SHARPNESS = 1e4
# config.json fields export_head writes itself: never copied from another head's config.
_FORMAT_KEYS = ("format", "format_version", "arch", "hidden_q", "hidden_p", "num_features", "weights_sha256",
                "verify_rule_version")


def export_candidates(run_dir: Path) -> list[Path]:
    """Export the candidates of a run under run_dir/candidates/<name>/head and return their directories, in tie
    order: for a run started at a rule (head.init_rule), the rule itself ("rule": the start made step-sharp, the
    training-free rule as a head); the run's start ("start", trained from); every checkpoint. Existing exports are
    kept."""
    from omegaconf import OmegaConf

    from heads import export_head, load_head
    from train.export_checkpoint import export_checkpoint

    ckpts = checkpoints_of(run_dir)
    if not ckpts:
        raise SystemExit(f"{run_dir}: no checkpoints/step* to choose from")
    cand = run_dir / "candidates"
    out = []
    for name, ckpt, start in [("start", ckpts[-1], True)] + [(c.name, c, False) for c in ckpts]:
        head = cand / name / "head"
        if not (head / "config.json").exists():
            export_checkpoint(ckpt, head, start=start)
        out.append(head)
    hcfg = OmegaConf.load(run_dir / "train_config.yaml").head
    if hcfg.get("init_rule") and hcfg.init_rule != "static":
        rule_dir = cand / "rule" / "head"
        if not (rule_dir / "config.json").exists():
            head, cfg = load_head(out[0])
            if head.cfg.base_rule is not None:  # a flip head is its rule at flip probability 0
                head.out.weight.data.zero_()
                head.out.bias.data.fill_(-RULE_SHARPNESS)
            else:
                head.init_as_rule(str(hcfg.init_rule), float(hcfg.init_knob), RULE_SHARPNESS)
            meta = {k: v for k, v in cfg.items() if k not in _FORMAT_KEYS}
            meta["checkpoint"] = {"rule": str(hcfg.init_rule), "knob": float(hcfg.init_knob),
                                  "sharpness": RULE_SHARPNESS}
            export_head(head, rule_dir, meta)
        out.insert(0, rule_dir)
    return out


def export_flipped(run_dir: Path) -> Path:
    """The other end of a flip head's family, as a head: its rule with every decision flipped (flip probability 1).
    From a typical-acceptance start (w = 0 everywhere) that is w = 1 everywhere: SD against p cut to its typical
    set. A diagnostic of how far apart the family's ends lie, not a candidate: written to run_dir/ends/flipped."""
    from heads import export_head, load_head

    rule_dir = export_candidates(run_dir)[0]
    head, cfg = load_head(rule_dir)
    if head.cfg.base_rule is None or rule_dir.parent.name != "rule":
        raise ValueError(f"{run_dir}: not a flip head (head.init_mode=flip) started at a rule")
    out = run_dir / "ends" / "flipped" / "head"
    if not (out / "config.json").exists():
        head.out.weight.data.zero_()
        head.out.bias.data.fill_(RULE_SHARPNESS)
        meta = {k: v for k, v in cfg.items() if k not in _FORMAT_KEYS}
        meta["checkpoint"] = {**cfg.get("checkpoint", {}), "flipped": True}
        export_head(head, out, meta)
    return out


N_BOOT = 2000


def per_prompt(run_dir: str | Path) -> dict:
    """prompt -> (score, accepted tokens, drafted tokens) of one evaluated candidate (eval/pool.py's reading)."""
    d = Path(run_dir)
    if not (d / "samples.jsonl").exists():
        raise ValueError(f"{d}: no samples.jsonl, so no paired comparison (pass --confidence 0 for the arg-max)")
    return pool_per_prompt([d.parent], d.name)


def paired_j_gain(cand: dict, base: dict, lam: float, quantile: float, seed: int = 0) -> tuple[float, float]:
    """J(cand) − J(base) on the same prompts and its bootstrap `quantile` (prompts resampled jointly), where J =
    mean score + λ·(accepted / drafted over the prompts)."""
    if set(cand) != set(base):
        raise ValueError("the candidates were evaluated on different prompts: a paired comparison needs the same ones")
    keys = sorted(cand)
    c = np.array([cand[k] for k in keys], dtype=np.float64)
    b = np.array([base[k] for k in keys], dtype=np.float64)

    def j(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return x[..., 0].mean(-1) + lam * np.nan_to_num(x[..., 1].sum(-1) / x[..., 2].sum(-1))

    idx = np.random.default_rng(seed).integers(0, len(keys), size=(N_BOOT, len(keys)))
    return float(j(c) - j(b)), float(np.quantile(j(c[idx]) - j(b[idx]), quantile))


def choose(rows: list[dict], lam: float, confidence: float = 0.0) -> tuple[dict, list[dict]]:
    """Among the evaluated heads (method diversed), the one with the highest J = score + λ·acceptance (ties: the
    earlier candidate: the rule, then the start, then the checkpoints by step). With confidence > 0 only the first
    candidate and those whose paired J gain over it clears the one-sided bound (Bonferroni over the challengers) can
    ship; each candidate records its gain and bound."""
    cands = []
    for m in rows:
        if m.get("method") != "diversed" or m.get("task_score") is None or m.get("acceptance_rate") is None:
            continue
        run = json.loads((Path(m["_dir"]) / "run.json").read_text()) if (Path(m["_dir"]) / "run.json").exists() else {}
        head = run.get("head") or m.get("head")
        head = head.get("path") if isinstance(head, dict) else head
        if head is None:
            raise ValueError(f"{m['_dir']}: the run does not name its head")
        cands.append({"head": str(head), "label": m["label"], "score": m["task_score"],
                      "acceptance": m["acceptance_rate"], "J": m["task_score"] + lam * m["acceptance_rate"],
                      "_dir": m["_dir"]})
    if not cands:
        raise ValueError("no evaluated head (method diversed) here: evaluate the candidates first (see the docstring)")

    def order(c: dict) -> tuple:
        name = Path(c["head"]).parent.name  # rule < start < step000050 < ... (a head elsewhere sorts last)
        return {"rule": (0, ""), "start": (1, "")}.get(name, (2, name))

    cands.sort(key=order)
    eligible = cands
    if confidence > 0 and len(cands) > 1:
        base = per_prompt(cands[0]["_dir"])
        q = (1 - confidence) / (len(cands) - 1)
        for c in cands[1:]:
            c["J_gain"], c["J_gain_bound"] = paired_j_gain(per_prompt(c["_dir"]), base, lam, q)
            c["clears"] = c["J_gain_bound"] > 0
        eligible = [cands[0]] + [c for c in cands[1:] if c["clears"]]
    for c in cands:
        c.pop("_dir")
    best = max(eligible, key=lambda c: c["J"])  # max keeps the first of equal J: the earliest candidate
    return best, cands


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export the start and every checkpoint of a training run")
    e.add_argument("run_dir", type=Path)
    f = sub.add_parser("flipped", help="export a flip head's rule with every decision flipped (the family's other end)")
    f.add_argument("run_dir", type=Path)
    c = sub.add_parser("choose", help="choose among the evaluated candidates by J on validation")
    c.add_argument("val_dirs", type=Path, nargs="+",
                   help="eval/frontier.py output(s) of the candidates on validation prompts (several: the candidates "
                        "split over parallel runs on the same prompts)")
    c.add_argument("--lambda", dest="lam", type=float, required=True)
    c.add_argument("--out", type=Path, required=True, help="where to write the choice (JSON)")
    c.add_argument("--confidence", type=float, default=0.95,
                   help="a candidate replaces the first (the rule, else the start) only if its paired J gain is "
                        "positive at this one-sided level, Bonferroni over the challengers; 0: the plain arg-max")
    args = ap.parse_args()
    if args.cmd == "export":
        print(",".join(str(h) for h in export_candidates(args.run_dir)))
        return
    if args.cmd == "flipped":
        print(export_flipped(args.run_dir))
        return
    best, cands = choose(collect(args.val_dirs), args.lam, args.confidence)
    print(f"| head | score | acceptance | J = score + {args.lam:g}·acceptance | paired J gain over the first "
          f"[one-sided bound] |\n|---|---|---|---|---|")
    for x in cands:
        gain = f"{x['J_gain']:+.4f} [{x['J_gain_bound']:+.4f}]" if "J_gain" in x else "-"
        print(f"| {x['head']} | {x['score']:.3f} | {x['acceptance']:.3f} | {x['J']:.4f} | {gain} |"
              f"{' ← chosen' if x is best else ''}")
    args.out.write_text(json.dumps({"lambda": args.lam, "confidence": args.confidence, "best": best,
                                    "candidates": cands}, indent=2))


if __name__ == "__main__":
    main()
