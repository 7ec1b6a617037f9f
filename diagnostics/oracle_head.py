"""Token-class oracle: an upper-bound diagnostic for a verification head, next to standard SD and static ensembles.

    python diagnostics/oracle_head.py [OVERRIDES...] [--critical digits|digits+ops|REGEX] [--threshold 0.05]
                                [--w0 0.8,0.5,0.0] [--static 0.95,0.9,0.8,0.7,0.5,0.0] [--out DIR]
    python diagnostics/oracle_head.py task=gsm8k eval.num_samples=200 seed=1            # the embedded trio
    python diagnostics/oracle_head.py model=qwen25coder_15b_05b task=mbpp eval.num_samples=24 eval.max_new_tokens=384

The oracle knows which tokens matter: w = 1 (verify against the target) wherever the target p or the proposal
q puts more than `--threshold` of its mass on a *critical* token class, a fixed w0 elsewhere, and
ν = w·p + (1 − w)·q as for every ensemble rule (specdec.targets.ensemble_target; the one verify). A learned
head can at best match it if the critical class is the right one; if the oracle loses quality at a w0 where
it gains acceptance, the disagreements outside the class are harmful too and the class is not enough.

Critical classes are matched on each token's decoded string: `digits` (any digit), `digits+ops` (digits and
+ - * / = $ %), or any Python regular expression. OVERRIDES are eval's Hydra overrides (conf/eval.yaml: model=,
task=, eval.num_samples=, eval.batch_size=, eval.max_new_tokens=, seed=, temperature=, data.path=, resume=true,
...). Every run goes through eval/run.py's run_method (resumable run directories under --out); the table
gives accuracy with its 95% bootstrap CI, the truncation rate and the acceptance of sd, the static grid and
the oracle grid, side by side, and the acceptance each family gains over sd within 2 points of sd's accuracy.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.metrics import markdown_table  # noqa: E402
from eval.run import load_task_examples, method_cfg, run_method  # noqa: E402
from specdec.proposers import DraftModelProposer  # noqa: E402
from specdec.registry import MethodSpec, Models, build_method, w_str  # noqa: E402
from specdec.targets import RoundScores, Rule, ensemble_target  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"
CRITICAL = {"digits": r"\d", "digits+ops": r"[\d+\-*/=$%]"}
COLUMNS = [
    ("label", "method", "{}"),
    ("task_score", "accuracy", "{:.3f}"),
    ("task_score_ci", "95% CI", "[{:.3f}, {:.3f}]"),
    ("truncation_rate", "trunc", "{:.2f}"),
    ("acceptance_rate", "acceptance", "{:.3f}"),
    ("mean_accepted_length", "L", "{:.2f}"),
    ("mean_w", "mean w", "{:.3f}"),
    ("tv_bias", "TV(ν,p)", "{:.3f}"),
    ("num_samples", "n", "{}"),
]


def critical_mask(tokenizer, vocab_size: int, critical: str) -> torch.Tensor:
    """Bool [vocab_size]: tokens whose decoded string matches the critical class (ids past the tokenizer: no)."""
    pattern = re.compile(CRITICAL.get(critical, critical))
    n = min(len(tokenizer), vocab_size)
    texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=True)
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[:n] = torch.tensor([bool(pattern.search(t)) for t in texts])
    if not mask.any():
        raise ValueError(f"no token of the vocabulary matches the critical class {critical!r}")
    return mask


class TokenClassOracleRule(Rule):
    """ν = w·p + (1 − w)·q with w = 1 where p or q puts more than `threshold` mass on the critical tokens, else w0."""

    needs_bonus_q = True

    def __init__(self, critical: torch.Tensor, w0: float, threshold: float = 0.05):
        if not 0.0 <= w0 <= 1.0:
            raise ValueError(f"w0 must be in [0, 1], got {w0}")
        self.critical, self.w0, self.threshold = critical, float(w0), float(threshold)

    def __call__(self, scores: RoundScores):
        p, q = scores.p, scores.q
        if q is None or q.shape[1] != p.shape[1]:
            raise ValueError("the oracle mixes q into ν: it needs q at all γ+1 positions (with_bonus=True)")
        m = self.critical.to(device=p.device, dtype=p.dtype)
        crit = ((p * m).sum(-1) > self.threshold) | ((q.to(p.dtype) * m).sum(-1) > self.threshold)
        w = torch.where(crit, torch.ones_like(crit, dtype=p.dtype), torch.full_like(crit, self.w0, dtype=p.dtype))
        return ensemble_target(p, q.to(p.dtype), w), w


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return hydra_compose(config_name="eval", overrides=overrides)


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()] if s else []


def gain_within(rows: list[dict], sd: dict, family: str, max_loss: float = 0.02) -> dict | None:
    """The row of `family` with the highest acceptance whose accuracy is at most `max_loss` below sd's."""
    ok = [r for r in rows if r["family"] == family and r["task_score"] is not None
          and r["task_score"] >= sd["task_score"] - max_loss]
    return max(ok, key=lambda r: r["acceptance_rate"]) if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="eval overrides, e.g. model=tiny task=gsm8k eval.num_samples=200")
    ap.add_argument("--critical", default="digits", help="digits | digits+ops | a regex over decoded tokens")
    ap.add_argument("--threshold", type=float, default=0.05, help="mass on the class that makes a position critical")
    ap.add_argument("--w0", default="0.8,0.5,0.0", help="oracle weights off the critical class (comma list)")
    ap.add_argument("--static", default="0.95,0.9,0.8,0.7,0.5,0.0", help="static ensemble weights (comma list)")
    ap.add_argument("--no-sd", action="store_true", help="skip standard SD (then no gains are computed)")
    ap.add_argument("--out", default=None, help="run directory (default runs/oracle/<task>_<time>); resumable "
                                                "with the override resume=true")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args()

    cfg = compose(list(args.overrides))
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg.num_threads))
    torch.manual_seed(int(cfg.seed))
    from data.tasks import get_task

    task = get_task(cfg.task.name)
    out = Path(args.out or f"runs/oracle/{task.name}_{time.strftime('%Y%m%d-%H%M%S')}")
    examples = load_task_examples(cfg, task)
    if not examples.rows:
        raise ValueError(f"no examples for task {task.name!r}")
    models = Models(cfg.model)
    mask = critical_mask(models.tokenizer, models.target.vocab_size, args.critical)
    print(f"[oracle] {task.name} ({examples.label}, {len(examples)} examples), model {models.names()}; critical "
          f"class {args.critical!r}: {int(mask.sum())} of {mask.numel()} tokens; threshold {args.threshold}; "
          f"runs in {out}", flush=True)

    runs: list[tuple[str, object, MethodSpec]] = []
    if not args.no_sd:
        c = method_cfg(cfg, name="sd")
        runs.append(("sd", c, build_method("sd", models, c)))
    for w in floats(args.static):
        c = method_cfg(cfg, name="static", w=w)
        runs.append(("static", c, build_method("static", models, c)))
    gamma = int(cfg.method.get("gamma", 4))
    for w0 in floats(args.w0):
        c = method_cfg(cfg, name="oracle", w0=w0, threshold=args.threshold, critical=args.critical, gamma=gamma)
        rule = TokenClassOracleRule(mask, w0, args.threshold)
        spec = MethodSpec(DraftModelProposer(models.draft), rule, gamma, label=f"oracle(w0={w_str(w0)})",
                          params={"proposer": "draft", "w0": w0, "threshold": args.threshold,
                                  "critical": args.critical})
        runs.append(("oracle", c, spec))

    rows = []
    for family, c, spec in runs:
        name = spec.label.replace("(", "_").replace(")", "").replace("=", "")
        m = run_method(c, spec, models, task, examples, out / name)
        rows.append({**m, "family": family})
        print(f"[oracle] {spec.label}: accuracy {m['task_score']}, acceptance {m['acceptance_rate']:.3f}", flush=True)

    table = markdown_table(rows, COLUMNS)
    lines = [table]
    sd = next((r for r in rows if r["family"] == "sd"), None)
    if sd is not None and sd["task_score"] is not None:
        lines.append("")
        for fam in ("static", "oracle"):
            best = gain_within(rows, sd, fam)
            if best is not None:
                lines.append(f"- {fam}: {best['acceptance_rate'] - sd['acceptance_rate']:+.3f} acceptance over sd "
                             f"within 2 points of sd's accuracy ({best['label']}: {best['task_score']:.3f} vs "
                             f"{sd['task_score']:.3f})")
            else:
                lines.append(f"- {fam}: no setting within 2 points of sd's accuracy")
    text = "\n".join(lines)
    (out / "table.md").write_text(text + "\n")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
