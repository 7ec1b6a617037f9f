"""Append-only jsonl logs that survive a kill: evaluation samples and batches, training metrics.

A kill can land mid-write and leave the last line torn. Readers skip such a line; `repair_jsonl` drops it before
appending resumes, and `truncate_steps` also drops the steps a resumed training run will log again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specdec.io import atomic_write_text


def split_lines(text: str) -> list[str]:
    """A text file's lines, split at "\n" only: str.splitlines also splits at U+2028, \x85, \x0c and others, which
    JSON strings may hold raw (json.dumps(..., ensure_ascii=False) writes them so)."""
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a jsonl file, in order ([] when there is none)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in split_lines(path.read_text(encoding="utf-8")):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a kill mid-write
    return rows


def append_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())  # a finished sample or step is on disk before the run moves on


def rewrite_jsonl(path: Path, rows: list[dict], ensure_ascii: bool = True) -> None:
    """Replace a jsonl file's lines atomically (a temp file renamed over it): a kill mid-rewrite loses nothing."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in rows))


def repair_jsonl(path: Path) -> None:
    """Drop a torn last line so that appended lines start on a line of their own."""
    path = Path(path)
    if path.exists():
        text = path.read_text()
        if text and not text.endswith("\n"):
            rewrite_jsonl(path, read_jsonl(path))


def truncate_steps(path: Path, start_step: int) -> None:
    """On resume, keep only the lines of steps up to the checkpoint's (a kill can land after a log, before a save)."""
    path = Path(path)
    if path.exists():
        rewrite_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= start_step])


def settings_diff(recorded: dict, now: dict, optional: tuple[str, ...] = ()) -> list[str]:
    """What a resumed run would change: "key: recorded there vs now" for each setting that differs. Keys in
    `optional` are compared only when the record holds them (records written before those keys existed)."""
    return [f"{k}: {recorded.get(k)!r} there vs {v!r} now" for k, v in now.items()
            if recorded.get(k) != v and not (k in optional and k not in recorded)]
