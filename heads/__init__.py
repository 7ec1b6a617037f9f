"""Ensemble head (DIVERSED dynamic ensemble weight) and its export format.

The implementation lives in the engine (`specdec.head`, `specdec.provenance`): the engine serves heads, and a
package that the engine imported back would make an import circle. This package keeps the names training, tools and
tests import."""

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
