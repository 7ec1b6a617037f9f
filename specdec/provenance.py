"""Provenance helpers shared by every export (ensemble heads, feature drafters, training checkpoints): file and
tokenizer hashes, the code's git revision, and the atomic replacement of an export directory.

One home for them: `specdec.head` (heads), `specdec.feature_drafter` (drafters) and `train/` all use these.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any


def tokenizer_hash(tokenizer: Any) -> str:
    """A stable hash of a tokenizer's vocabulary and special tokens (what the head's hidden states depend on)."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = {k: getattr(tokenizer, k, None) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    blob = json.dumps({"vocab": vocab, "special": special}, sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def git_revision(repo: str | Path | None = None) -> str:
    """The git commit of the code (with '-dirty' if the tree has changes), or 'unknown' outside a checkout."""
    cwd = str(repo or Path(__file__).resolve().parents[1])
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, timeout=10,
        )
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def replace_dir(tmp: Path, out_dir: Path) -> Path:
    """Move a complete export directory `tmp` to `out_dir`, replacing an older export only once the new one is
    complete (so a crash never leaves a half-written export under the final name)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700: an export is shared like any directory the user makes
    old = out_dir.with_name(out_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)  # left by an export killed mid-replace: it would block os.replace
    if out_dir.exists():
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out_dir)
    return out_dir


def read_export_config(path: Path, config_name: str, format_name: str, version: int, what: str,
                       error: type[Exception]) -> dict:
    """The JSON config of an export directory (a head, a feature drafter), checked for its format name and
    version; raises `error` naming the file and what to do."""
    cfg_file = path / config_name
    try:
        config = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{cfg_file} is corrupt (not valid JSON: {e}); re-export the {what}") from e
    if not isinstance(config, dict) or config.get("format") != format_name:
        found = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise error(f"{cfg_file} is not a {format_name} config (format={found!r})")
    if config.get("format_version") != version:
        raise error(f"{path}: {what} format version {config.get('format_version')} is not supported by this code "
                    f"(version {version}); re-export it with this version")
    return config
