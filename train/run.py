"""Train the ensemble head with REINFORCE++ under DeepSpeed: `python train/run.py task=gsm8k lambda=0.1`.

One process per rank (torchrun / the deepspeed launcher with --no_local_rank; a plain `python` run is one rank).
Each rank loads the frozen models, decodes its shard of the step's prompts with the head in the loop, scores
them, and the head is updated through `deepspeed.initialize` (AdamW, gradient clipping, ZeRO stage from config;
gradients are averaged across ranks). Metrics are all-reduced; only rank 0 logs, checkpoints' manifest and
exports. The data order and every rollout's random stream are pure functions of (seed, step, rank), so a resumed
run continues exactly as an uninterrupted one.

Launch:
    python train/run.py task=gsm8k lambda=0.1                                   # one process (CPU or one GPU)
    torchrun --standalone --nproc_per_node 2 train/run.py task=gsm8k debug=smoke   # 2 ranks (gloo on CPU)
    deepspeed --no_local_rank --num_gpus 8 train/run.py model=llama3_8b_1b task=gsm8k
    deepspeed --no_local_rank --hostfile hostfile --master_addr node0 train/run.py ...   # multi-node
      (hostfile lines: `node0 slots=8`; the run dir must be on a filesystem every node sees)
    python train/run.py -m task=gsm8k lambda=0.0,0.05,0.1,0.5                 # sweep + summary table
    python train/run.py ... hydra.run.dir=<old run dir> resume=true             # continue a killed run
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python train/run.py`: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
import torch
import torch.distributed as dist
from omegaconf import DictConfig


def _is_rank_zero_cli() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _quiet_hydra_for_other_ranks() -> None:
    """Ranks > 0 must not create their own run directories: rank 0's is broadcast to them."""
    if _is_rank_zero_cli():
        return
    extra = ["hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        extra.append("hydra.run.dir=.")
    sys.argv += extra


def init_distributed(device: torch.device) -> tuple[int, int]:
    """Initialise torch.distributed through DeepSpeed (gloo on CPU, nccl on CUDA); works for a plain single process."""
    if "RANK" not in os.environ:  # a single process: DeepSpeed would otherwise look for MPI
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", str(port)))
    # Skip DeepSpeed's CPU shared-memory comm op: a ~40 s JIT build, useless for a head this small.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    import deepspeed

    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from specdec.models import resolve_device
    from train.trainer import Trainer

    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    rank, world = init_distributed(device)
    run_dir = [str(hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)]
    dist.broadcast_object_list(run_dir, src=0)
    trainer = Trainer(cfg, Path(run_dir[0]), device, rank, world)
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    return summary


if __name__ == "__main__":
    _quiet_hydra_for_other_ranks()
    main()
