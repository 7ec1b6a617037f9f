"""Export / load of a trained ensemble head: a directory with `head.safetensors` + `config.json`.

config.json holds the format version, the verification-rule version (specdec.verify.VERIFY_RULE_VERSION, checked
at load), the architecture (HeadConfig), the two hidden widths, the model pair's names and weights fingerprints, the
tokenizer hash (both checked at load), the verification target (ensemble or contrastive), the training config, the git revision and the sha256 of the
weights file. No pickle anywhere: weights are safetensors, metadata is JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from heads.head import EnsembleHead, HeadConfig
from specdec.verify import VERIFY_RULE_VERSION

FORMAT_NAME = "specdec-ensemble-head"
FORMAT_VERSION = 1
WEIGHTS = "head.safetensors"
CONFIG = "config.json"


class HeadFormatError(ValueError):
    """An exported head is missing, corrupt, or does not fit the models it is used with."""


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


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def export_head(head: EnsembleHead, out_dir: str | Path, meta: dict | None = None) -> Path:
    """Write head.safetensors + config.json into out_dir (atomically: a temp dir renamed into place).

    meta: free-form JSON-serialisable facts to record, e.g. models={target, draft}, tokenizer_hash,
    target={kind, alpha, beta}, training={...}, metrics={...}. git_revision is added when absent.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(meta or {})
    meta.setdefault("git_revision", git_revision())
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(tmp / WEIGHTS), metadata={"format": FORMAT_NAME, "format_version": str(FORMAT_VERSION)})
    config = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "arch": head.cfg.to_dict(),
        "hidden_q": head.cfg.hidden_q,
        "hidden_p": head.cfg.hidden_p,
        "num_features": head.cfg.num_features,
        "weights_sha256": sha256_file(tmp / WEIGHTS),
        "verify_rule_version": VERIFY_RULE_VERSION,
        **meta,
    }
    (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    return replace_dir(tmp, out_dir)


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


def read_head_config(path: str | Path) -> dict:
    """config.json of an exported head, validated for format and version."""
    path = Path(path)
    cfg_file = path / CONFIG
    if not path.is_dir():
        raise HeadFormatError(f"no exported head at {path}: expected a directory with {WEIGHTS} and {CONFIG}")
    if not cfg_file.is_file() or not (path / WEIGHTS).is_file():
        raise HeadFormatError(f"{path} is not a complete head export: needs {WEIGHTS} and {CONFIG}")
    try:
        config = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HeadFormatError(f"{cfg_file} is corrupt (not valid JSON: {e}); re-export the head") from e
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        found = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise HeadFormatError(f"{cfg_file} is not a {FORMAT_NAME} config (format={found!r})")
    if config.get("format_version") != FORMAT_VERSION:
        raise HeadFormatError(
            f"{path}: head format version {config.get('format_version')} is not supported by this code "
            f"(version {FORMAT_VERSION}); re-export it with this version"
        )
    return config


def check_head_tokenizer(path: str | Path, config: dict, tokenizer: Any) -> None:
    """A head's hidden-state inputs depend on the tokenizer it was trained with: refuse another one (exports that
    record none are not checked)."""
    recorded, here = config.get("tokenizer_hash"), tokenizer_hash(tokenizer)
    if recorded is not None and recorded != here:
        raise HeadFormatError(f"head at {path} was trained with another tokenizer ({recorded}, here {here}); "
                              f"train or pick a head for this model pair")


def check_head_models(path: str | Path, config: dict, fingerprints: dict[str, str]) -> None:
    """A head reads its models' hidden states: refuse models whose weights differ from those it was trained with
    (specdec.models.weights_fingerprint per role; roles an export does not record are not checked)."""
    from specdec.models import fingerprint_changes

    changed = fingerprint_changes(config.get("model_fingerprints") or {}, fingerprints)
    if changed:
        raise HeadFormatError(f"head at {path} was trained with other model weights ({'; '.join(changed)}; models "
                              f"{config.get('models')}): the same path may hold a rebuilt or replaced model. Train "
                              f"or pick a head for these weights")


def load_head(
    path: str | Path,
    device: str | torch.device = "cpu",
    expect: dict | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[EnsembleHead, dict]:
    """Load an exported head; returns (head in eval mode, config dict).

    expect: facts about the models it will be used with, checked against the export, e.g.
    {"hidden_q": 128, "hidden_p": 256, "tokenizer_hash": "...", "num_features": 5}. Any mismatch raises
    HeadFormatError naming the field, both values and what to do.
    """
    path = Path(path)
    config = read_head_config(path)
    weights = path / WEIGHTS
    digest = sha256_file(weights)
    if digest != config.get("weights_sha256"):
        raise HeadFormatError(
            f"{weights} is corrupt: sha256 {digest[:12]}.. does not match the {config.get('weights_sha256', '')[:12]}.. "
            f"recorded in {CONFIG}; re-export the head"
        )
    # Exports from before the version was recorded were trained under version 1.
    version = config.get("verify_rule_version", 1)
    if version != VERIFY_RULE_VERSION:
        raise HeadFormatError(
            f"head at {path} was trained under verification-rule version {version}, but this engine verifies with "
            f"version {VERIFY_RULE_VERSION} (specdec.verify.VERIFY_RULE_VERSION); its weights were tuned to the other "
            f"rule, so retrain the head with this code (or decode with the code revision it was trained with: "
            f"{config.get('git_revision', 'unknown')})"
        )
    try:
        hcfg = HeadConfig.from_dict(config["arch"])
    except (KeyError, TypeError, ValueError) as e:
        raise HeadFormatError(f"{path / CONFIG}: bad 'arch' entry ({e})") from e
    # `expect` reads the top-level widths, the head is built from 'arch': they must agree, or a head for other
    # models would pass the check and fail (or misread its inputs) only when decoding.
    for key in ("hidden_q", "hidden_p", "num_features"):
        if config.get(key) != getattr(hcfg, key):
            raise HeadFormatError(f"{path / CONFIG} contradicts itself: {key} is {config.get(key)!r} at the top level "
                                  f"but {getattr(hcfg, key)!r} in its architecture; re-export the head")
    for key, want in (expect or {}).items():
        have = config.get(key)
        if have != want:
            raise HeadFormatError(
                f"head at {path} does not fit these models: {key} is {have!r} in the export but {want!r} here "
                f"(the head was trained for models {config.get('models')}); train or pick a head for this model pair"
            )
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise HeadFormatError(f"{weights} is not a readable safetensors file ({e}); re-export the head") from e
    head = EnsembleHead(hcfg)
    try:
        head.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise HeadFormatError(f"{weights} does not match its architecture in {CONFIG}: {e}") from e
    return head.to(device=device, dtype=dtype).eval(), config
