"""Export the head of any training checkpoint (e.g. an earlier step of a run) in the standard head format.

    python train/export_checkpoint.py <run dir>/checkpoints/step000050 <out dir>
    python train/export_checkpoint.py <run dir>/checkpoints/step000050 <out dir> --start   # the run's start head

--start exports the head the run started from (the KL reference every checkpoint keeps: a rule start such as
head.init_rule=cascade, or init_w), so that validation can compare a trained head with where it began.

Reads the run's train_config.yaml (two levels up) for the architecture, the model pair and the training
config; the checkpoint is verified against its manifest first.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf

import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
from data.loaders import load_examples
from heads import EnsembleHead, export_head
from specdec.jsonl import read_jsonl
from specdec.loading import Models
from specdec.models import load_config
from train.checkpoint import read_model_states
from train.trainer import export_meta, head_config


def export_checkpoint(ckpt: str | Path, out: str | Path, run_config: str | Path | None = None,
                      start: bool = False) -> Path:
    """Export the checkpoint's head (start=True: the head the run started from, its KL reference)."""
    ckpt = Path(ckpt)
    state = read_model_states(ckpt)
    if start and "ref_head" not in state:
        raise ValueError(f"{ckpt}: no start head (ref_head) in this checkpoint")
    cfg_path = Path(run_config) if run_config else ckpt.parent.parent / "train_config.yaml"
    cfg = OmegaConf.load(cfg_path)
    models = Models(cfg.model)  # nothing is loaded but configs and the tokenizer (GGUF pairs included)
    hq = load_config(models.path("draft")).hidden_size
    hp = load_config(models.path("target")).hidden_size
    hcfg = head_config(cfg.head, hq, hp)
    head = EnsembleHead(hcfg)
    head.load_state_dict(state["ref_head" if start else "module"])
    if start:
        step = 0
    else:
        step = int(state.get("step", -1)) if "step" in state else int(ckpt.name.removeprefix("step"))
    window = [r for r in read_jsonl(cfg_path.parent / "metrics.jsonl") if step - 10 < r["step"] <= step]
    keys = ("task_reward", "acceptance_rate", "mean_accepted_length", "w_mean", "lam_term_per_token", "kl")
    metrics = {k: sum(r[k] for r in window) / len(window) for k in keys} if window else {}
    try:  # the label the trainer recorded (file, holdout, synthetic); the data's own source if it cannot load now
        data = load_examples(cfg.task.name, path=cfg.data.path, source=cfg.data.source, split=cfg.data.split,
                             n=cfg.data.n_train, seed=cfg.seed, holdout=cfg.data.get("holdout")).label
    except Exception:  # noqa: BLE001 - any loading failure only costs the label's detail
        data = str(cfg.data.source)
    meta = export_meta(cfg, models, data, metrics, fingerprints=state.get("model_fingerprints") or {},
                       checkpoint={"path": str(ckpt), "step": step, **({"start": True} if start else {})})
    return export_head(head, out, meta)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--start"]
    if len(args) not in (2, 3):
        sys.exit("usage: python train/export_checkpoint.py <checkpoint dir> <out dir> [train_config.yaml] [--start]")
    print(f"exported head: {export_checkpoint(*args, start='--start' in sys.argv[1:])}")
