"""A run's metrics.jsonl: one JSON line per step, appended when the step ends.

One reader and writer for the head trainer, the drafter trainer, checkpoint export, plots and benches. A kill can
land mid-write and leave the last line cut: readers skip such a line, and a resume drops it together with the lines
of the steps it re-runs.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(path: Path) -> list[dict]:
    """The complete lines of a metrics file, in order ([] when there is none)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
    return rows


def append_metrics(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def truncate_metrics(path: Path, start_step: int) -> None:
    """On resume, keep only the steps up to the checkpoint's (a kill can land after a log, before a save)."""
    path = Path(path)
    if path.exists():
        keep = [r for r in read_metrics(path) if r["step"] <= start_step]
        path.write_text("".join(json.dumps(r) + "\n" for r in keep))
