"""The model trio of a config (target / draft / amateur + tokenizer), shared by training, evaluation and tools.

`model` config keys: `dir` (a trio directory <dir>/{tokenizer,target,draft,amateur}; with `embedded: true` the
embedded trio, default artifacts/models/tiny or $SPECDEC_MODELS_DIR), explicit `target` / `draft` / `amateur` /
`tokenizer` paths or hub ids (each overrides <dir>/<role>), `device`, `dtype`; `draft_int8` and `draft_vocab` make the
draft cheaper (specdec.slim_draft: int8 linears, true / weight or dynamic; a kept output vocabulary, that many ids in
merge order or a file of data/draft_vocab.py).

Building the embedded trio is the data package's job (data.build_models.ensure_embedded, which also brings the
default directory up to the current recipe): the engine never imports it. `data.build_models` registers its
builder here when imported (`set_embedded_builder`), so every job that trains, evaluates or benchmarks builds the
trio on first use; without a builder (the engine alone: the API, the CLI, specdec.hf) a built trio is used as it is
and a missing one is an error saying how to build it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from specdec.models import LM, check_tokenizers_match, dtype_name, load_model, resolve_dtype, weights_fingerprint

ROLES = ("target", "draft", "amateur")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_ENV_VAR = "SPECDEC_MODELS_DIR"
DEFAULT_EMBEDDED_DIR = PROJECT_ROOT / "artifacts" / "models" / "tiny"

_embedded_builder: Callable[[str | None], str | Path] | None = None


def set_embedded_builder(fn: Callable[[str | None], str | Path] | None) -> None:
    """Register the function that builds (or updates) the embedded trio on first use: fn(dir or None) -> dir.
    data.build_models registers ensure_embedded when imported; None unregisters."""
    global _embedded_builder
    _embedded_builder = fn


def resolve_embedded_dir(d: str | Path | None = None, default: str | Path = DEFAULT_EMBEDDED_DIR) -> Path:
    """The embedded trio's directory: d, else $SPECDEC_MODELS_DIR, else artifacts/models/tiny; relative paths are
    taken from the project root."""
    p = Path(d or os.environ.get(EMBEDDED_ENV_VAR) or default).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


def trio_is_built(d: str | Path) -> bool:
    """Whether a directory holds a complete trio build (manifest.json and every model's DONE marker)."""
    d = Path(d)
    return (d / "manifest.json").exists() and all((d / n / "DONE").exists() for n in ROLES)


def embedded_dir(d: str | Path | None = None) -> Path:
    """The embedded trio, built first by the registered builder (data.build_models) when one is registered;
    else the directory as it is, which must hold a built trio."""
    if _embedded_builder is not None:
        return Path(_embedded_builder(d))
    out = resolve_embedded_dir(d)
    if not trio_is_built(out):
        raise FileNotFoundError(
            f"the embedded model trio is not built in {out}: build it with `make models` (python -m "
            f"data.build_models, ~12 min on 2 CPU cores; evaluation and training build it on first use), or give "
            f"model paths")
    return out


class Models:
    """The target / draft / amateur trio (each an LM with its own cache) and their tokenizer, loaded lazily from
    the model config: `dir` (a trio directory <dir>/{tokenizer,target,draft,amateur}; with `embedded: true` the
    embedded trio, see `embedded_dir`) and/or explicit `target`, `draft`, `amateur` paths;
    `device` and `dtype`."""

    def __init__(self, model_cfg: DictConfig | dict):
        self.cfg = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) \
            else dict(model_cfg)
        self.device = self.cfg.get("device", "cpu") or "cpu"
        # Resolved once ("auto": bfloat16 where the device runs it fast), so run files record the dtype used.
        self.dtype = dtype_name(resolve_dtype(self.cfg.get("dtype", "float32") or "float32", self.device))
        self._lms: dict[str, LM] = {}
        self._tok = None
        self._fingerprints: dict[str, str] = {}

    @functools.cached_property
    def root(self) -> Path | None:
        d = self.cfg.get("dir")
        if self.cfg.get("embedded", False):  # built first when missing; dir None = the default location
            return embedded_dir(d)
        return None if d is None else Path(d)

    def path(self, role: str) -> str:
        p = self.cfg.get(role)
        if p:
            return str(p)
        if self.root is not None:
            return str(self.root / role)
        raise ValueError(f"model config gives no {role!r} model: set model.{role}=PATH or model.dir=TRIO_DIR")

    def names(self) -> dict[str, str]:
        out = {}
        for role in ("target", "draft", "amateur"):
            try:
                out[role] = self.path(role)
            except ValueError:
                pass
        return out

    def lm(self, role: str) -> LM:
        if role not in self._lms:
            model, tok = load_model(self.path(role), device=self.device, dtype=self.dtype)
            if self._tok is None:
                self._tok = self._load_tokenizer(tok)
            else:
                check_tokenizers_match({"target": self._tok, role: tok})
            self._lms[role] = LM(model, name=role)
            if role == "draft":
                self._slim_draft()
        return self._lms[role]

    def _slim_draft(self) -> None:
        """model.draft_int8 / model.draft_vocab (a number of ids kept in merge order, or a vocabulary file of
        data/draft_vocab.py): specdec.slim_draft on the draft, its fingerprint naming the cut."""
        from specdec.slim_draft import int8_mode, read_vocab, slim_draft, special_ids

        int8, vocab = int8_mode(self.cfg.get("draft_int8", False)), self.cfg.get("draft_vocab")
        if not int8 and vocab is None:
            return

        lm = self._lms["draft"]
        base = weights_fingerprint(lm.model)  # of the weights as loaded; the cut is named beside it
        if isinstance(vocab, str) and not vocab.isdigit():
            ids = read_vocab(vocab)
            missing = sorted(set(special_ids(self._tok)) - set(ids.tolist()))
            if missing:
                raise ValueError(f"model.draft_vocab={vocab} leaves out special tokens {missing[:8]}: a draft that "
                                 "cannot propose them cannot end an answer (was it made with another tokenizer?)")
            done = slim_draft(lm, int8=int8, ids=ids)
            name = f"{done['vocab']}:{hashlib.sha256(str(ids.tolist()).encode()).hexdigest()[:8]}"
        else:
            done = slim_draft(lm, vocab=None if vocab is None else int(vocab), int8=int8,
                              always=special_ids(self._tok))
            name = str(done["vocab"])
        # "1" for weight-only: the name fingerprints had before the dynamic mode existed
        mode = {False: "0", "weight": "1"}.get(done["int8"], done["int8"])
        self._fingerprints["draft"] = f"{base}+slim(int8={mode},vocab={name})"

    def attach(self, role: str, model, tokenizer=None) -> LM:
        """Use an already-loaded Hugging Face causal LM for `role` instead of loading one from a path (its name
        in `names()` becomes the model's name_or_path). A tokenizer given with it is the trio's (checked against
        one already known)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        if tokenizer is not None:
            if self._tok is None:
                self._tok = tokenizer
            else:
                check_tokenizers_match({"target": self._tok, role: tokenizer})
        self.cfg[role] = self.cfg.get(role) or getattr(model, "name_or_path", None) or f"<loaded {role}>"
        self._lms[role] = LM(model, name=role)
        self._fingerprints.pop(role, None)
        return self._lms[role]

    def fingerprints(self, roles: tuple[str, ...] | None = None) -> dict[str, str]:
        """specdec.models.weights_fingerprint of each role (default: the roles loaded so far; others are loaded
        first): the identity exports and run files record, since a path alone does not tell a rebuilt or replaced
        model from the old one."""
        roles = tuple(r for r in ROLES if r in self._lms) if roles is None else roles
        for role in roles:
            if role not in self._fingerprints:
                self._fingerprints[role] = weights_fingerprint(self.lm(role).model)
        return {role: self._fingerprints[role] for role in roles}

    def _load_tokenizer(self, fallback):
        tdir = self.cfg.get("tokenizer") or (self.root / "tokenizer" if self.root is not None else None)
        if tdir is not None and Path(tdir).exists():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(tdir))
        return fallback

    def tokenizer_only(self):
        """The tokenizer `tokenizer` gives, without loading any weights (for metadata, e.g. an export's hash)."""
        if self._tok is None:
            from specdec.models import load_tokenizer

            tok = self._load_tokenizer(None)
            return tok if tok is not None else load_tokenizer(self.path("target"))
        return self._tok

    @property
    def target(self) -> LM:
        return self.lm("target")

    @property
    def draft(self) -> LM:
        return self.lm("draft")

    @property
    def amateur(self) -> LM:
        return self.lm("amateur")

    @property
    def tokenizer(self):
        if self._tok is None:
            self.target  # noqa: B018 (loads the tokenizer with the target)
        return self._tok


# ---------------------------------------------------------------- registry
