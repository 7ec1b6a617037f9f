"""Resumable checkpoints with a verified manifest: one layout and one code path for head training
(train/checkpoint.py, around DeepSpeed), the feature drafter (train/drafter.py) and the trio build
(data/build_models.py).

Layout under a checkpoint root:
    step000004/        one checkpoint: the files its writer put there (state.pt, DeepSpeed's files, weights, ...)
        MANIFEST.json  sha256 and size of every other file, written last
    latest             the tag of the newest complete checkpoint (replaced atomically)
    abandoned/         checkpoints after the step a run was resumed from (set_aside_later): kept, never pruned

Saving: `begin(root, step)` gives an empty hidden directory `.tmp-stepN` to write into (DeepSpeed writes there
from every rank); `commit(root, step, keep)` writes the manifest, renames the directory into place, replaces
`latest` and prunes to the newest `keep`. A crash mid-save leaves the previous checkpoint and `latest` untouched.
`save_state` does both around one `state.pt` (a dict: model / optimizer state dicts, step, anything else the
caller keeps, and the RNG states); `load_state` verifies the manifest first and reads it back without running
pickled code (weights_only). A corrupt checkpoint raises CheckpointError naming the bad file and the intact
older checkpoints to fall back to; nothing is written.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.io import atomic_write_text
from specdec.provenance import replace_dir, sha256_file

MANIFEST = "MANIFEST.json"
LATEST = "latest"
STATE = "state.pt"
_TAG = re.compile(r"step(\d+)")


class CheckpointError(RuntimeError):
    """A checkpoint is missing or corrupt."""


def tag_for(step: int) -> str:
    return f"step{step:06d}"


def _step_dirs(root: Path) -> list[Path]:
    """Every stepN directory under root (complete or not), by step."""
    if not root.is_dir():
        return []
    dirs = [d for d in root.iterdir() if d.is_dir() and _TAG.fullmatch(d.name)]
    return sorted(dirs, key=lambda d: int(_TAG.fullmatch(d.name).group(1)))


def list_checkpoints(root: str | Path) -> list[str]:
    """Complete checkpoint tags (with a manifest), oldest first."""
    return [d.name for d in _step_dirs(Path(root)) if (d / MANIFEST).exists()]


# ---------------------------------------------------------------- saving
def begin(root: str | Path, step: int) -> Path:
    """An empty directory to write checkpoint `step` into (a leftover of a crashed save is removed first)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{tag_for(step)}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def commit(root: str | Path, step: int, keep: int = 2, meta: dict | None = None) -> Path:
    """Seal what was written into begin(root, step)'s directory: the manifest (sha256 and size of every file, plus
    `meta`), the rename into place (a checkpoint of the same step, re-saved after a resume, is replaced whole),
    `latest`, and pruning to the newest `keep` complete checkpoints (keep <= 0: none pruned)."""
    root = Path(root)
    tag = tag_for(step)
    tmp = root / f".tmp-{tag}"
    files = sorted(p for p in tmp.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {**(meta or {}), "step": step,
                "files": {p.relative_to(tmp).as_posix(): {"sha256": sha256_file(p), "size": p.stat().st_size}
                          for p in files}}
    atomic_write_text(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    final = replace_dir(tmp, root / tag)
    atomic_write_text(root / LATEST, tag)
    complete = list_checkpoints(root)
    if keep > 0 and len(complete) > keep:
        oldest_kept = int(_TAG.fullmatch(complete[-keep]).group(1))
        for d in _step_dirs(root):  # older ones, complete or not (a drafter checkpoint of before manifests)
            if int(_TAG.fullmatch(d.name).group(1)) < oldest_kept and d.name != tag:
                shutil.rmtree(d, ignore_errors=True)
    return final


def save_state(root: str | Path, step: int, state: dict, keep: int = 2, *,
               files: dict[str, Callable[[Path], Any]] | None = None, rng: bool = True) -> Path:
    """Checkpoint `step` as state.pt (`state` plus "step" and, with rng=True, "rng": rng_state()), beside any
    `files` (name -> a writer called with the path to write, e.g. safetensors weights); returns its directory."""
    import torch

    tmp = begin(root, step)
    for name, write in (files or {}).items():
        write(tmp / name)
    torch.save({**state, "step": step, **({"rng": rng_state()} if rng else {})}, tmp / STATE)
    return commit(root, step, keep)


# ---------------------------------------------------------------- loading
def verify(ckpt: str | Path) -> None:
    """Raise CheckpointError if any file of the checkpoint is missing or differs from its manifest."""
    ckpt = Path(ckpt)
    others = [t for t in list_checkpoints(ckpt.parent) if t != ckpt.name]
    hint = (
        f" Intact older checkpoints: {others}; resume from one with resume_from={ckpt.parent / others[-1]}"
        if others else " No other checkpoint exists; start a fresh run (resume=false) in a new directory."
    )
    mf = ckpt / MANIFEST
    if not mf.is_file():
        raise CheckpointError(f"checkpoint {ckpt} is incomplete or corrupt: no {MANIFEST}.{hint}")
    try:
        manifest = json.loads(mf.read_text())
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {ckpt} is corrupt: unreadable {MANIFEST} ({e}).{hint}") from e
    for rel, info in files.items():
        p = ckpt / rel
        if not p.is_file():
            raise CheckpointError(f"checkpoint {ckpt} is corrupt: {rel} is missing.{hint}")
        if p.stat().st_size != info["size"] or sha256_file(p) != info["sha256"]:
            raise CheckpointError(f"checkpoint {ckpt} is corrupt: {rel} does not match its sha256 in {MANIFEST}.{hint}")


def resolve_resume(root: str | Path, resume_from: str | Path | None = None) -> Path | None:
    """The checkpoint directory to resume from: resume_from if given, else the one `latest` names, else None."""
    if resume_from:
        p = Path(resume_from)
        if not p.is_dir():
            raise CheckpointError(f"resume_from={resume_from} is not a checkpoint directory")
        return p
    root = Path(root)
    latest = root / LATEST
    if not latest.is_file():
        return None
    tag = latest.read_text().strip()
    if not (root / tag).is_dir():
        raise CheckpointError(f"{latest} names checkpoint {tag!r}, which does not exist under {root}")
    return root / tag


def load_state(ckpt: str | Path, *, restore_rng: bool = True) -> dict:
    """state.pt of a checkpoint, after verifying the manifest; its RNG states are restored (restore_rng)."""
    import torch

    ckpt = Path(ckpt)
    verify(ckpt)
    state = torch.load(ckpt / STATE, map_location="cpu", weights_only=True)
    if restore_rng and "rng" in state:
        set_rng_state(state["rng"])
    return state


# ---------------------------------------------------------------- RNG
def rng_state() -> dict:
    """Python's, numpy's and torch's global RNG states (CUDA's where initialised), in types a weights_only load
    reads back."""
    import numpy as np
    import torch

    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {**np_state, "state": {k: v.tolist() if hasattr(v, "tolist") else v
                                        for k, v in np_state["state"].items()}},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else [],
    }


def set_rng_state(s: dict) -> None:
    import numpy as np
    import torch

    if "python" in s:
        v = s["python"]
        random.setstate((v[0], tuple(v[1]), v[2]))
    if "numpy" in s:
        n = s["numpy"]
        np.random.set_state({**n, "state": {k: np.asarray(v, dtype=np.uint32) if k == "key" else v
                                            for k, v in n["state"].items()}})
    if "torch" in s:
        torch.set_rng_state(s["torch"])
    if s.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


# ---------------------------------------------------------------- resuming from an earlier step
def set_aside_later(root: str | Path, step: int) -> list[Path]:
    """Move the checkpoints after `step` (a run resumed from an earlier step, or started afresh with step 0,
    replaces their trajectory) into root/abandoned/, where pruning and `latest` never reach them: nothing is
    deleted, and the run's own checkpoints are never mixed with the old trajectory's. Rank 0 only. Returns where
    they went."""
    root = Path(root)
    moved = []
    dirs = _step_dirs(root)  # complete or not (drafter checkpoints of before manifests have none)
    for d in dirs:
        if int(_TAG.fullmatch(d.name).group(1)) > step:
            dest = root / "abandoned" / d.name
            n = 1
            while dest.exists():  # set aside twice (two resumes from earlier steps): keep both
                dest, n = root / "abandoned" / f"{d.name}.{n}", n + 1
            dest.parent.mkdir(exist_ok=True)
            os.replace(d, dest)
            moved.append(dest)
    if moved:
        left = [d.name for d in dirs if int(_TAG.fullmatch(d.name).group(1)) <= step]
        if left:
            atomic_write_text(root / LATEST, left[-1])
        else:
            (root / LATEST).unlink(missing_ok=True)
    return moved
