"""Shared test set-up: offline hub, no W&B, and the micro trio (built in seconds by the project's own code)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The test models are tiny and overhead-bound: one intra-op thread per process is faster, and it keeps parallel
# test subprocesses (sandbox, two-rank training) from oversubscribing the two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# ../shared beside the project root (developers' and CI's machines); tests that read it skip where it is absent.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} (real dataset samples) is absent on this machine")
    return SHARED


@pytest.fixture(scope="session")
def micro_trio(tmp_path_factory) -> Path:
    """A micro target/draft/amateur trio + tokenizer, built once per test session by data.build_models."""
    from data.build_models import build_micro_trio

    out = tmp_path_factory.mktemp("micro_trio")
    build_micro_trio(out, seed=0)
    return out
