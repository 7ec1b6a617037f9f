"""Export / load of a trained ensemble head (re-exported): the format and its checks live in the engine,
`specdec.head` (`EnsembleHead.save_pretrained` / `from_pretrained` wrap `export_head` / `load_head`); the
provenance helpers in `specdec.provenance`. Every name this module has always exported keeps working."""

from specdec.head import (
    CONFIG,
    FORMAT_NAME,
    FORMAT_VERSION,
    WEIGHTS,
    HeadFormatError,
    check_head_models,
    check_head_tokenizer,
    export_head,
    load_head,
    read_head_config,
)
from specdec.provenance import git_revision, replace_dir, sha256_file, tokenizer_hash

__all__ = ["CONFIG", "FORMAT_NAME", "FORMAT_VERSION", "WEIGHTS", "HeadFormatError", "check_head_models",
           "check_head_tokenizer", "export_head", "git_revision", "load_head", "read_head_config", "replace_dir",
           "sha256_file", "tokenizer_hash"]
