"""A gate head from mined swap harms: w_t = 1 (verify against the target) where the head's inputs predict a costly
swap, w_t = 0 (the rule's own relaxation) elsewhere.

    python train/gate.py <train/autojudge.py run dir> --quantile 0.5 --typical-epsilon 0.03 --out <dir>
    python eval/run.py ... method=diversed head=<dir>

ν is linear in w, so at each token the best w is 0 or 1 (relax when the swap costs less than the acceptance it buys):
the head that matters is a ranking of positions by harm and a cut. A mining (train/autojudge.py; SelfJudge's labels
give a dense harm, the target's own log-likelihood loss over its next tokens, with no task reward) records the head's
whole input at mismatches of the target's greedy path and the harm y of swapping in the draft's token. This fits a
ridge regression of y on that input (layer-normed hidden states + pair features, exactly what EnsembleHead reads;
the ridge strength chosen by k-fold error, folds split by prompt: train/ridge.py, which the fork-gap
diagnostic uses too), and writes it as a
*linear* EnsembleHead with logit = sharpness·(ŷ − θ): θ is the `quantile` of the out-of-fold predictions (the share
of mismatches the head relaxes; in-sample predictions of a 2.4k-wide fit on a few hundred rows are overfit), and a
large sharpness makes w bang-bang. With --typical-epsilon ε > 0 the export verifies against the typical-truncated
target (HeadEnsembleRule): w = 0 is typical acceptance at ε, w = 1 the target restricted to its typical set; with
--typical-end strict, w = 1 is typical acceptance and w = 0 accepts the draft, so the gate relaxes typical acceptance
further at the swaps it predicts cheapest. No training loop, no new rule: the head is an ordinary export, verified by
the one `verify`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heads import EnsembleHead, HeadConfig, export_head
from specdec.registry import head_rule
from specdec.targets import PAIR_FEATURES
from train.ridge import choose_alpha, design, load_mined, out_of_fold, r_squared, ridge_fit, ridge_predict

# what the gate copies from the mining's own judge export: the model pair and tokenizer it was mined on
IDENTITY_KEYS = ("models", "model_fingerprints", "tokenizer_hash")


def gate_head(model: tuple[torch.Tensor, torch.Tensor, torch.Tensor], theta: float, sharpness: float,
              hidden_q: int, hidden_p: int, num_features: int) -> EnsembleHead:
    """The ridge model (on train.ridge.design's columns: hidden blocks, then the features if num_features) as a linear
    head with logit = sharpness·(ŷ − theta)."""
    mu, sd, beta = model
    coef = beta[1:] / sd
    head = EnsembleHead(HeadConfig(hidden_q=hidden_q, hidden_p=hidden_p, num_features=num_features, arch="linear",
                                   use_hidden=True, normalize=True, hidden_scale="unit"))
    if coef.numel() != hidden_q + hidden_p + num_features:
        raise ValueError(f"ridge has {coef.numel()} coefficients; the head reads {hidden_q + hidden_p + num_features}")
    with torch.no_grad():
        head.out.weight.copy_((sharpness * coef).to(head.out.weight.dtype).unsqueeze(0))
        head.out.bias.fill_(float(sharpness * (beta[0] - (mu * coef).sum() - theta)))
    return head


def fit_gate(d: dict, quantile: float, *, inputs: str = "head", folds: int = 5, seed: int = 0) -> dict:
    """Ridge of the mined harm on the head's input ("head": hidden states + pair features; "hidden": the hidden
    states alone): the model, its ridge strength, θ and what it predicts held out."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1] (the share of mismatches relaxed), got {quantile}")
    if inputs not in ("head", "hidden"):
        raise ValueError(f"inputs must be 'head' or 'hidden', got {inputs!r}")
    X, y, groups = design(d, inputs), d["y"], d.get("groups")
    oof, _ = out_of_fold(X, y, folds, seed, groups)
    alpha = choose_alpha(X, y, folds, seed + 1, groups)
    model = ridge_fit(X, y, alpha)
    theta = float(torch.quantile(oof, quantile))
    relaxed = oof <= theta
    return {"model": model, "alpha": alpha, "theta": theta, "quantile": quantile, "inputs": inputs,
            "oof_r2": r_squared(y, oof),
            "n": len(y), "mean_harm": float(y.mean()),
            "mean_harm_relaxed_oof": float(y[relaxed].mean()) if relaxed.any() else None,
            "mean_harm_kept_oof": float(y[~relaxed].mean()) if (~relaxed).any() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mining", type=Path, help="a train/autojudge.py run dir (mined.pt and its judge export head/)")
    ap.add_argument("--quantile", type=float, required=True,
                    help="share of the mined mismatches (by out-of-fold predicted harm) the gate relaxes")
    ap.add_argument("--typical-epsilon", type=float, default=0.0,
                    help="verify against the typical-truncated target (w = 0: typical acceptance at this ε)")
    ap.add_argument("--typical-end", choices=("relaxed", "strict"), default="relaxed",
                    help="relaxed: w = 0 is typical acceptance, w = 1 the truncated target; strict: w = 1 is typical "
                         "acceptance, w = 0 accepts the draft")
    ap.add_argument("--relaxed-epsilon", type=float, default=0.0,
                    help="with --typical-end strict: the w = 0 end is typical acceptance at this looser ε (0: the draft)")
    ap.add_argument("--inputs", choices=("head", "hidden"), default="head",
                    help="hidden: leave the pair features out (they are of (typical's ν, q) at decoding with "
                         "--typical-end strict, of (p, q) in the mining)")
    ap.add_argument("--sharpness", type=float, default=50.0, help="logit per unit of predicted harm")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    mined, judge = args.mining / "mined.pt", args.mining / "head" / "config.json"
    if not mined.exists() or not judge.exists():
        raise SystemExit(f"{args.mining}: needs mined.pt and head/config.json (a finished train/autojudge.py run)")
    d = load_mined(mined)
    label = d.pop("label")
    fit = fit_gate(d, args.quantile, inputs=args.inputs, folds=args.folds, seed=args.seed)
    hq, hp, nf = d["h_q"].shape[-1], d["h_p"].shape[-1], d["feats"].shape[-1]
    if nf != len(PAIR_FEATURES):
        raise SystemExit(f"{mined}: {nf} pair features, this version computes {len(PAIR_FEATURES)}: mine again")
    nf_head = nf if args.inputs == "head" else 0
    head = gate_head(fit["model"], fit["theta"], args.sharpness, hq, hp, nf_head)
    # the export must compute what the fit does: the head's own layer norm and float32 weights, on the mined inputs
    with torch.no_grad():
        logit = head.logits(d["h_q"].float(), d["h_p"].float(), d["feats"][:, :nf_head].float()).double()
    want = args.sharpness * (ridge_predict(fit["model"], design(d, args.inputs)) - fit["theta"])
    err = float((logit - want).abs().max())
    if err > 1e-2 * max(1.0, args.sharpness):
        raise SystemExit(f"exported head disagrees with the ridge fit by {err:.3g} logits: not exported")
    judge_cfg = json.loads(judge.read_text())
    report = {k: v for k, v in fit.items() if k != "model"} | {
        "label": label, "sharpness": args.sharpness, "typical_epsilon": args.typical_epsilon,
        "typical_end": args.typical_end, "relaxed_epsilon": args.relaxed_epsilon, "source": str(mined),
        "relaxed_in_sample": float((want <= 0).double().mean()), "max_logit_error": err}
    meta = {k: judge_cfg[k] for k in IDENTITY_KEYS if k in judge_cfg} | {
        "method": "diversed", "task": judge_cfg.get("task"), "gate": report,
        "target": {"kind": "ensemble", "typical_epsilon": args.typical_epsilon, "typical_end": args.typical_end,
                   "relaxed_epsilon": args.relaxed_epsilon}}
    head_rule(head, meta["target"])  # refuses an impossible target (e.g. relaxed_epsilon without the strict end)
    export_head(head, args.out, meta)
    (args.out.parent / f"{args.out.name}.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
