"""Atomic DeepSpeed checkpoints with a verified manifest.

Layout under <run_dir>/checkpoints/:
    step000004/        one DeepSpeed checkpoint (model + optimizer states of every rank, client state)
        MANIFEST.json  sha256 and size of every file, written last
    latest             the tag of the newest complete checkpoint (replaced atomically)
    abandoned/         checkpoints after the step a run was resumed from (resume_from=an earlier step): the
                       trajectory the resumed run replaces, kept aside, never pruned

A save goes to a hidden `.tmp-stepN` tag first; only when every rank has written its files does rank 0 write the
manifest, rename the directory into place and replace `latest`. A crash mid-save leaves the previous checkpoint
and `latest` untouched. Loading verifies the manifest first: a corrupt checkpoint raises CheckpointError naming
the bad file (and the older intact checkpoints to fall back to); nothing is written.
Ranks share the run directory (one node, or a shared filesystem across nodes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from heads.export import sha256_file

MANIFEST = "MANIFEST.json"
LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint is missing or corrupt."""


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def tag_for(step: int) -> str:
    return f"step{step:06d}"


def list_checkpoints(root: str | Path) -> list[str]:
    """Complete checkpoint tags (with a manifest), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and d.name.startswith("step") and (d / MANIFEST).exists())


def save_checkpoint(engine: Any, root: str | Path, step: int, client_state: dict, keep: int = 2) -> Path:
    """Save engine + client_state as checkpoint `step` (all ranks call this); keep the newest `keep`."""
    root = Path(root)
    tag = tag_for(step)
    tmp_tag = f".tmp-{tag}"
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(root / tmp_tag, ignore_errors=True)  # leftover of a crashed save
    _barrier()
    engine.save_checkpoint(str(root), tag=tmp_tag, client_state=client_state, save_latest=False)
    _barrier()
    final = root / tag
    if _rank() == 0:
        tmp = root / tmp_tag
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {
            "step": step,
            "files": {str(p.relative_to(tmp)): {"sha256": sha256_file(p), "size": p.stat().st_size} for p in files},
        }
        _write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        if final.exists():  # re-saving a step after a resume: the new copy replaces the old one atomically
            old = root / f".old-{tag}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _write_atomic(root / LATEST, tag)
        for old_tag in list_checkpoints(root)[:-keep] if keep > 0 else []:
            if old_tag != tag:
                shutil.rmtree(root / old_tag, ignore_errors=True)
    _barrier()
    return final


def set_aside_later(root: str | Path, step: int) -> list[Path]:
    """Move the checkpoints after `step` (a run resumed from an earlier step, or started afresh with step 0,
    replaces their trajectory) into root/abandoned/, where pruning and `latest` never reach them: nothing is
    deleted, and the run's own checkpoints are never mixed with the old trajectory's. Rank 0 only. Returns where
    they went. Shared with train/drafter.py's checkpoints."""
    root = Path(root)
    moved = []
    tags = sorted(d.name for d in root.iterdir() if d.is_dir() and re.fullmatch(r"step\d+", d.name)) \
        if root.is_dir() else []
    for tag in tags:  # complete or not (train/drafter.py's checkpoints have no manifest)
        if int(tag.removeprefix("step")) > step:
            dest = root / "abandoned" / tag
            n = 1
            while dest.exists():  # set aside twice (two resumes from earlier steps): keep both
                dest, n = root / "abandoned" / f"{tag}.{n}", n + 1
            dest.parent.mkdir(exist_ok=True)
            os.replace(root / tag, dest)
            moved.append(dest)
    if moved:
        left = [t for t in tags if int(t.removeprefix("step")) <= step]
        if left:
            _write_atomic(root / LATEST, left[-1])
        else:
            (root / LATEST).unlink(missing_ok=True)
    return moved


def verify_checkpoint(ckpt: str | Path) -> None:
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


def read_model_states(ckpt: str | Path) -> dict:
    """Rank 0's model states of a checkpoint, read without a DeepSpeed engine, after verifying the manifest: the
    head's weights ("module") and the client state the trainer saved beside them (step, critic buffer, ...)."""
    ckpt = Path(ckpt)
    verify_checkpoint(ckpt)
    states = sorted(ckpt.glob("mp_rank_*_model_states.pt"))
    if not states:
        raise FileNotFoundError(f"no DeepSpeed model states in {ckpt}")
    # our own checkpoint, verified against its manifest above; DeepSpeed stores it with torch.save
    return torch.load(states[0], map_location="cpu", weights_only=False)


def resolve_resume(root: str | Path, resume_from: str | None) -> Path | None:
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


def load_checkpoint(engine: Any, ckpt: str | Path) -> dict:
    """Verify then load a checkpoint into the engine (model + optimizer); returns its client state."""
    ckpt = Path(ckpt)
    verify_checkpoint(ckpt)  # every rank checks (cheap), so a bad checkpoint never leaves a rank waiting
    load_path, client_state = engine.load_checkpoint(
        str(ckpt.parent), tag=ckpt.name, load_optimizer_states=True, load_lr_scheduler_states=True
    )
    if load_path is None:
        raise CheckpointError(f"DeepSpeed could not load checkpoint {ckpt}")
    return client_state
