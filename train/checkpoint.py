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
Ranks share the run directory (one node, or a shared filesystem across nodes). The layout, manifest, pruning,
verification and set-aside are specdec.checkpoint's, shared with the feature drafter and the trio build; this module
adds DeepSpeed (every rank writes its files into the temporary directory) and reading a checkpoint without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from specdec import checkpoint as _ck
from specdec.checkpoint import (  # noqa: F401  (re-exported: the training side's names)
    LATEST,
    MANIFEST,
    CheckpointError,
    list_checkpoints,
    resolve_resume,
    set_aside_later,
    tag_for,
)
from specdec.checkpoint import verify as verify_checkpoint


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def save_checkpoint(engine: Any, root: str | Path, step: int, client_state: dict, keep: int = 2) -> Path:
    """Save engine + client_state as checkpoint `step` (all ranks call this); keep the newest `keep`."""
    root = Path(root)
    if _rank() == 0:
        _ck.begin(root, step)
    _barrier()
    engine.save_checkpoint(str(root), tag=f".tmp-{tag_for(step)}", client_state=client_state, save_latest=False)
    _barrier()
    if _rank() == 0:
        _ck.commit(root, step, keep)
    _barrier()
    return root / tag_for(step)


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
