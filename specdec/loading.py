"""The model trio of a config (target / draft / amateur + tokenizer), shared by training, evaluation and tools.

`model` config keys: `dir` (a trio directory <dir>/{tokenizer,target,draft,amateur}; built first by
data.build_models.ensure_embedded when `embedded: true`), explicit `target` / `draft` / `amateur` / `tokenizer`
paths or hub ids (each overrides <dir>/<role>), `device`, `dtype`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from specdec.models import LM, check_tokenizers_match, dtype_name, load_model, resolve_dtype, weights_fingerprint

ROLES = ("target", "draft", "amateur")


class Models:
    """The target / draft / amateur trio (each an LM with its own cache) and their tokenizer, loaded lazily from
    the model config: `dir` (a trio directory <dir>/{tokenizer,target,draft,amateur}, built by
    data.build_models.ensure_embedded when `embedded: true`) and/or explicit `target`, `draft`, `amateur` paths;
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
            from data.build_models import ensure_embedded

            return Path(ensure_embedded(d))
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
