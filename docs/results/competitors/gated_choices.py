"""Every trio head's validation choice again, with eval/choose_head.py's paired gate (added after the λ sweep: a
candidate replaces the rule only if its paired J gain on validation is positive at 95%, one-sided, Bonferroni over
the challengers), and what each choice scores on the test prompts against the envelope of every training-free rule.

Reads only finished runs (no decoding): runs/competitors/TASK/val_heads/RUN (validation), RUN/train_config.yaml (the
start rule) and runs/competitors/TASK/test (test). A gated choice that is the run's rule is read on test from the
rule's own row, typical(eps=E,nu) for the typical family's runs: the rule decoded through the head path is that
method token for token (checked here wherever a run shipped its rule). Writes gated_choices.md beside this file.

    .venv/bin/python docs/results/competitors/gated_choices.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from eval.choose_head import choose  # noqa: E402
from eval.frontier import collect  # noqa: E402
from eval.pool import above_rule_envelope, method_of, per_prompt  # noqa: E402

TASKS = ("gsm8k", "mbpp", "cnndm")


def rule_label(run: Path) -> str | None:
    """The test label of a run's rule: typical acceptance's ν-form at the start's ε (the typical family's runs)."""
    h = OmegaConf.load(run / "train_config.yaml")
    eps = h.get("target", {}).get("typical_epsilon")
    return None if eps is None else f"typical(eps={float(eps):g},nu)"


def gap(label: str, data: dict, methods: dict) -> str:
    if label not in data:
        return f"{label}: not decoded on test"
    env = above_rule_envelope(data, label, methods)
    if env is None:
        return f"{label}: beyond the envelope"
    lo, hi = env["ci"]
    return f"{env['gap'] * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]"


def main() -> None:
    out = ["| task | run | λ | arg-max ships | test: − envelope | gated ships | its bound on the arg-max's J gain "
           "| test: − envelope |", "|---|---|---|---|---|---|---|---|"]
    same = []
    for task in TASKS:
        R = ROOT / "runs/competitors" / task
        test = R / "test"
        labels = sorted(p.name for p in test.iterdir() if (p / "metrics.json").exists())
        data = {lab: per_prompt([test], lab) for lab in labels}
        methods = {lab: method_of([test], lab) for lab in labels}
        for vh in sorted((R / "val_heads").iterdir()):
            run = R / vh.name
            m = re.search(r"lam([0-9.]+)$", vh.name)
            lam = float(m.group(1)) if m else 0.1
            plain, _ = choose(collect([vh]), lam, 0.0)
            gated, cands = choose(collect([vh]), lam, 0.95)
            name = lambda c: Path(c["head"]).parent.name  # noqa: E731
            bound = next((c.get("J_gain_bound") for c in cands if c["head"] == plain["head"]), None)
            shipped = f"selected({vh.name})"
            g_label = shipped if gated["head"] == plain["head"] else rule_label(run) if name(gated) == "rule" else None
            if name(plain) == "rule" and rule_label(run) in data and shipped in data:
                same.append((task, vh.name, data[shipped] == data[rule_label(run)]))
            out.append(f"| {task} | {vh.name} | {lam:g} | {name(plain)} | {gap(shipped, data, methods)} | "
                       f"{name(gated)} | {'-' if bound is None else f'{bound:+.4f}'} | "
                       f"{gap(g_label, data, methods) if g_label else 'not decoded on test'} |")
    out += ["", "Rule through the head path vs the rule's own row on test (score, accepted, drafted per prompt):", ""]
    out += [f"- {t} {r}: {'identical' if ok else 'DIFFERENT'}" for t, r, ok in same]
    text = "\n".join(out) + "\n"
    (Path(__file__).parent / "gated_choices.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
