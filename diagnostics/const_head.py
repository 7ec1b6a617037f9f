"""Export a constant-w head for a model pair: the measuring stick for diagnostics/head_report.py.

    python diagnostics/const_head.py TARGET DRAFT OUT [--w 0.999]
    python diagnostics/head_report.py task=gsm8k head=OUT --n 60 seed=1        # TV(p, q) by token class along SD

An untrained EnsembleHead outputs its init_w everywhere, so with w = 0.999 the pair decodes (nearly) standard-SD
trajectories, and diagnostics/head_report.py's mean TV(p, q) by the class of the drafted token says where the pair's
draft disagrees with its target, whatever head is trained later (docs/results/calibration.md compares the trios
with the real pair this way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heads import EnsembleHead, HeadConfig, export_head, tokenizer_hash  # noqa: E402
from specdec.models import load_config, load_tokenizer  # noqa: E402
from specdec.targets import PAIR_FEATURES  # noqa: E402


def constant_head(target: str, draft: str, out: str | Path, w: float = 0.999) -> Path:
    """Export a head that outputs `w` at every position for the (target, draft) pair (no weights are loaded)."""
    if not 0.0 < w < 1.0:
        raise ValueError(f"w must lie strictly between 0 and 1 (a sigmoid's output), got {w}")
    head = EnsembleHead(HeadConfig(hidden_q=load_config(draft).hidden_size, hidden_p=load_config(target).hidden_size,
                                   num_features=len(PAIR_FEATURES), init_w=w))
    return export_head(head, out, {"models": {"target": str(target), "draft": str(draft)}, "lambda": 0.0,
                                   "tokenizer_hash": tokenizer_hash(load_tokenizer(target)),
                                   "training": {"note": f"constant w = {w}: an untrained head, for measurement"}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("draft")
    ap.add_argument("out")
    ap.add_argument("--w", type=float, default=0.999)
    args = ap.parse_args()
    print(constant_head(args.target, args.draft, args.out, args.w))


if __name__ == "__main__":
    main()
