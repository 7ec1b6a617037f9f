"""Ensemble head (DIVERSED dynamic ensemble weight) and its export format."""

from heads.export import (
    HeadFormatError,
    check_head_models,
    check_head_tokenizer,
    export_head,
    git_revision,
    load_head,
    read_head_config,
    tokenizer_hash,
)
from heads.head import EnsembleHead, HeadConfig

__all__ = [
    "EnsembleHead",
    "HeadConfig",
    "HeadFormatError",
    "check_head_models",
    "check_head_tokenizer",
    "export_head",
    "git_revision",
    "load_head",
    "read_head_config",
    "tokenizer_hash",
]
