"""The one W&B helper of the jobs (training, the drafter, evaluation, the frontier).

    run = start_run(cfg, name="...", run_dir=run_dir, job_type="train")   # None when the logger group says no
    log_step(run, rec, step)                                              # per-step metrics (numbers only)
    finish(run, summary={"final/task_reward": ...})                      # final metrics into run.summary

The `logger` config group decides (conf/logger/): kind `wandb` with mode offline | online | auto (online when
WANDB_API_KEY is set, else offline) | disabled; the WANDB_MODE environment variable wins over the group. A new run
finishes any run still open in the process (`reinit="finish_previous"`, wandb 0.31's replacement for the
deprecated `reinit=True`). Offline runs land in `<run_dir>/wandb/offline-run-*` (`wandb sync` uploads them).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def wandb_mode(cfg: DictConfig | Mapping) -> str | None:
    """The W&B mode the config asks for, or None when W&B is off (logger kind other than wandb, or disabled)."""
    lg = cfg.get("logger") if cfg is not None else None
    if not lg or lg.get("kind") != "wandb":
        return None
    mode = os.environ.get("WANDB_MODE") or lg.get("mode") or "offline"
    if mode == "auto":
        mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    return None if mode == "disabled" else mode


def start_run(cfg: DictConfig, *, name: str | None = None, run_dir: str | Path | None = None,
              job_type: str = "train", tags: list[str] | None = None):
    """A W&B run for this job, or None when the logger group (or WANDB_MODE) disables it."""
    mode = wandb_mode(cfg)
    if mode is None:
        return None
    import wandb

    lg = cfg.logger
    if run_dir is not None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    return wandb.init(project=lg.get("project") or "specdec-heads", entity=lg.get("entity"), name=name,
                      dir=None if run_dir is None else str(run_dir), mode=mode, job_type=job_type, tags=tags,
                      config=OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg),
                      reinit="finish_previous", settings=wandb.Settings(silent=True))


def numbers(rec: Mapping[str, Any], prefix: str = "") -> dict[str, float | int]:
    """The finite numeric entries of rec (nested dicts flattened as a/b), the rest (lists, strings, NaN) dropped."""
    out: dict[str, float | int] = {}
    for k, v in rec.items():
        if isinstance(v, Mapping):
            out.update(numbers(v, f"{prefix}{k}/"))
        elif isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[f"{prefix}{k}"] = v
    return out


def log_step(run, rec: Mapping[str, Any], step: int | None = None) -> None:
    """One step's numeric metrics (no-op without a run)."""
    if run is not None:
        run.log(numbers(rec), step=step)


def finish(run, summary: Mapping[str, Any] | None = None) -> None:
    """Write the final metrics into the run summary (what W&B tables and sweeps compare), then close the run."""
    if run is None:
        return
    if summary:
        run.summary.update(numbers(summary))
    run.finish()


def log_results(cfg: DictConfig, results: list[dict], images: Mapping[str, Path] | None = None, *,
                run_dir: str | Path | None = None, job_type: str = "eval") -> None:
    """Evaluation results to W&B: each method's metrics as `<label>/<metric>` in the run summary (and logged once,
    so they also show as charts), pictures as images. No-op when the logger group says no."""
    run = start_run(cfg, run_dir=run_dir, job_type=job_type, tags=[str(cfg.task.name)] if cfg.get("task") else None)
    if run is None:
        return
    import wandb

    flat: dict[str, Any] = {}
    for m in results:
        flat.update(numbers(m, f"{m['label']}/"))
    run.log(flat)
    for name, path in (images or {}).items():
        run.log({name: wandb.Image(str(path))})
    finish(run, flat)
