"""Atomic writes: a file (or a directory) appears under its final name complete or not at all.

Every writer goes to a temporary name in the same directory (same filesystem: the rename is atomic), is flushed
and fsynced, then `os.replace`d over the final name. A crash or an exception mid-write leaves the old file (or
none) and removes the temporary one. Temporary names are unique per writer (`mkstemp`), so two processes writing
the same path never share one.

    atomic_write_text(path, text)            atomic_write_bytes(path, data)
    atomic_torch_save(obj, path)             with atomic_path(path) as tmp: library_writer(tmp)
    with atomic_open(path, "w") as f: ...

A whole directory: specdec.provenance.replace_dir (write it beside its final name, then swap it in).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _fsync_dir(d: Path) -> None:
    """Make a rename in `d` durable (best effort: not every platform opens directories)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that takes a path (torch.save, safetensors' save_file,
    urlretrieve, ...); on a clean exit it is fsynced and renamed to `path`, on an exception it is removed and
    `path` is left as it was. The file gets the mode a plain open() would give it (mkstemp's is 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """open() for writing ("w" or "wb") whose result replaces `path` only when the block ends without error."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole file: mode 'w' or 'wb', not {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
        yield f
        f.flush()


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)
    return Path(path)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    import torch  # the engine needs torch anyway; kept out of this module's import for light users

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
    return Path(path)

