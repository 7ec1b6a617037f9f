"""Summary table of a training sweep (`python train/run.py -m ...`): one row per run, from its summary.json.

Runs as a Hydra callback at the end of a multirun; also usable by hand:
    python train/sweep_summary.py runs/train-multirun/<date>/<time>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

COLUMNS = (("task", "task"), ("lambda", "lambda"), ("target", "target"), ("steps", "steps"),
           ("reward", "final.task_reward"), ("accept", "final.acceptance_rate"),
           ("L", "final.mean_accepted_length"), ("w_mean", "final.w_mean"), ("head", "head"))


def _get(d: dict, dotted: str) -> Any:
    for k in dotted.split("."):
        d = d.get(k, {}) if isinstance(d, dict) else {}
    return d if d != {} else None


def summary_table(sweep_dir: str | Path) -> str:
    rows = []
    for f in sorted(Path(sweep_dir).rglob("summary.json")):
        s = json.loads(f.read_text())
        rows.append([_fmt(_get(s, key)) for _, key in COLUMNS])
    if not rows:
        return f"(no finished runs under {sweep_dir})"
    header = [name for name, _ in COLUMNS]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else str(v)


class SweepSummary(Callback):
    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = config.hydra.sweep.dir
        print(f"\n[sweep] {sweep_dir}\n" + summary_table(sweep_dir))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python train/sweep_summary.py <sweep dir>")
    print(summary_table(sys.argv[1]))
