"""The ensemble head: w_t = head(h^q_t, h^p_t, feats_t) in [0, 1], the weight on the target in
nu_t = w_t * p_t + (1 - w_t) * q_t (DIVERSED's dynamic ensemble).

`linear` is one layer on the concatenation (as in the paper's released code); `mlp` adds one hidden layer.
The last layer starts at zero weight and bias logit(init_w), so a fresh head outputs exactly init_w everywhere
(init_w close to 1 = standard speculative decoding; training starts at 0.5, where the sigmoid's slope is largest) and
is independent of the seed until trained.

Export format (`EnsembleHead.save_pretrained` / `export_head`, read back by `EnsembleHead.from_pretrained` /
`load_head`): a directory with `head.safetensors` + `config.json`. config.json holds the format version, the verification-rule version (specdec.verify.VERIFY_RULE_VERSION, checked
at load), the architecture (HeadConfig), the two hidden widths, the model pair's names and weights fingerprints, the
tokenizer hash (both checked at load), the verification target (ensemble or contrastive), the training config, the git revision and the sha256 of the
weights file. No pickle anywhere: weights are safetensors, metadata is JSON.

The head and its format live in the engine (the engine serves heads: the API, `specdec.hf` and the registry load
them); `heads` re-exports them under the names training and tools have always used.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from specdec.models import fingerprint_changes
from specdec.provenance import git_revision, read_export_config, replace_dir, sha256_file, tokenizer_hash
from specdec.verify import VERIFY_RULE_VERSION

__all__ = ["CONFIG", "FORMAT_NAME", "FORMAT_VERSION", "WEIGHTS", "EnsembleHead", "HeadConfig", "HeadFormatError",
           "check_head_models", "check_head_tokenizer", "export_head", "load_head", "read_head_config",
           "tokenizer_hash"]

@dataclass
class HeadConfig:
    hidden_q: int  # draft (proposer) last-layer width
    hidden_p: int  # target last-layer width
    num_features: int = 0  # width of specdec.targets.pair_features (0 = hidden states only)
    arch: str = "linear"  # "linear" | "mlp"
    mlp_hidden: int = 64
    use_hidden: bool = True  # False: a features-only head (cheap, model-agnostic)
    normalize: bool = True  # parameter-free layer norm on each hidden block: widths and scales differ
    # "unit": each hidden coordinate at unit scale (after the layer norm). "fan_in": each block then divided by its
    # width. Adam moves every weight by ~lr in its first step, in the direction of its input's sign, so the logit moves
    # by ~lr·Σ|x|: ~0.8·lr·(d_q + d_p) at unit scale (54 measured at lr 0.03 on the real pair's 896 + 1,536: w saturates
    # after one step: docs/results/competitors, "A real head"); "fan_in" makes it ~0.8·lr per block at any width
    # (muP's 1/fan_in Adam step for an input layer), like one more feature.
    hidden_scale: str = "unit"
    init_w: float = 0.5  # w at initialisation (1.0 is clamped to 1 - 1e-4: sigmoid never reaches 1); with a
    # base_rule, the probability of flipping the rule's decision at initialisation
    # A training-free rule the head corrects (None: w = σ(logit)). With one, w = r + (1 − 2r)·σ(logit), r ∈ {0, 1}
    # the rule's decision on the pair features: σ(logit) is a learned probability of flipping the rule. At a small
    # flip probability the head *is* the rule up to that mass, yet its gradient is alive everywhere, where a sharp
    # sigmoid of the rule's feature difference is flat (and a soft one scores below the rule).
    base_rule: str | None = None  # cascade (max p − max q > knob) | fsd_tv (TV(p, q) > knob)
    base_knob: float = 0.0

    def __post_init__(self) -> None:
        if self.hidden_scale not in ("unit", "fan_in"):
            raise ValueError(f"head hidden_scale must be 'unit' or 'fan_in', got {self.hidden_scale!r}")
        if self.arch not in ("linear", "mlp"):
            raise ValueError(f"head arch must be 'linear' or 'mlp', got {self.arch!r}")
        if self.base_rule not in (None, "cascade", "fsd_tv"):
            raise ValueError(f"head base_rule must be null, 'cascade' or 'fsd_tv', got {self.base_rule!r}")
        if self.base_rule is not None and self.num_features == 0:
            raise ValueError(f"base_rule {self.base_rule!r} reads the pair features: the head needs num_features")
        if not 0.0 <= self.init_w <= 1.0:
            raise ValueError(f"head init_w must be in [0, 1], got {self.init_w}")
        if not self.use_hidden and self.num_features == 0:
            raise ValueError("a head with use_hidden=false needs features (num_features > 0)")
        if self.hidden_q <= 0 or self.hidden_p <= 0:
            raise ValueError(f"hidden widths must be positive, got q={self.hidden_q} p={self.hidden_p}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> HeadConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown head config keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


class EnsembleHead(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.cfg = cfg
        d_in = cfg.num_features + (cfg.hidden_q + cfg.hidden_p if cfg.use_hidden else 0)
        if cfg.arch == "linear":
            self.body = nn.Identity()
            self.out = nn.Linear(d_in, 1)
        else:
            self.body = nn.Sequential(nn.Linear(d_in, cfg.mlp_hidden), nn.GELU())
            self.out = nn.Linear(cfg.mlp_hidden, 1)
        w0 = min(max(cfg.init_w, 1e-4), 1 - 1e-4)
        nn.init.zeros_(self.out.weight)
        nn.init.constant_(self.out.bias, math.log(w0 / (1 - w0)))

    def logits(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor | None) -> torch.Tensor:
        cfg = self.cfg
        # Inputs are upcast before any math, whatever dtype the caller hands in: decoding passes the models' bf16
        # hidden states, the update their float32 copies. bf16 -> float32 is exact, so the layer norm (in at least
        # float32) and all after it see the same numbers in both: w at rollout and at update agree up to the
        # GEMM's batch-shape-dependent summation order (~1e-7), where a bf16 layer norm differed by ~1e-3. The
        # layers then run in the head's own parameter dtype.
        dtype = torch.promote_types(self.out.weight.dtype, torch.float32)
        parts = []
        if cfg.use_hidden:
            if h_q.shape[-1] != cfg.hidden_q or h_p.shape[-1] != cfg.hidden_p:
                raise ValueError(
                    f"head expects hidden widths q={cfg.hidden_q}, p={cfg.hidden_p}; got "
                    f"q={h_q.shape[-1]}, p={h_p.shape[-1]} (was it trained for another model pair?)"
                )
            h_q, h_p = h_q.to(dtype), h_p.to(dtype)
            if cfg.normalize:
                h_q = F.layer_norm(h_q, h_q.shape[-1:])
                h_p = F.layer_norm(h_p, h_p.shape[-1:])
            if cfg.hidden_scale == "fan_in":
                h_q, h_p = h_q / cfg.hidden_q, h_p / cfg.hidden_p
            parts += [h_q, h_p]
        if cfg.num_features:
            if feats is None or feats.shape[-1] != cfg.num_features:
                got = None if feats is None else feats.shape[-1]
                raise ValueError(f"head expects {cfg.num_features} pair features, got {got}")
            parts.append(feats)
        x = torch.cat([t.to(dtype) for t in parts], dim=-1).to(self.out.weight.dtype)
        return self.out(self.body(x)).squeeze(-1)

    def forward(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor | None = None) -> torch.Tensor:
        """w in [0, 1] with the leading shape of the inputs."""
        z = self.logits(h_q, h_p, feats)
        if self.cfg.base_rule is None:
            return torch.sigmoid(z)
        r = self.rule_decision(feats).to(z.dtype)
        return r + (1 - 2 * r) * torch.sigmoid(z)  # flip the rule's w ∈ {0, 1} with probability σ(z)

    def rule_decision(self, feats: torch.Tensor) -> torch.Tensor:
        """The base rule's decision (w = 1: verify against p) per position, bool, from the pair features."""
        from specdec.targets import feature_rule_decision

        return feature_rule_decision(feats, self.cfg.base_rule, self.cfg.base_knob)

    @torch.no_grad()
    def init_as_rule(self, rule: str, knob: float, sharpness: float = 50.0) -> None:
        """Start a linear head at a training-free rule it can express, so that training (whose KL reference is
        the start) begins on that rule's curve instead of below it. ν is linear in w and the per-token optimum is
        bang-bang, so these rules are sigmoids of one feature difference, as sharp as `sharpness`:
          cascade  w = σ(k·(max p − max q − t))   SpecCascade's deferral (t = knob)
          fsd_tv   w = σ(k·(TV(p, q) − T))       Fuzzy SD with the TV divergence (T = knob)
          static   w = knob everywhere
        A very sharp start (k ≳ 400) is the rule itself but leaves the sigmoid flat almost everywhere, where the
        policy gradient cannot move it; k ≈ 50 keeps it trainable."""
        from specdec.targets import PAIR_FEATURES

        if self.cfg.arch != "linear":
            raise ValueError(f"init_as_rule sets a linear head; this head is {self.cfg.arch!r}")
        self.out.weight.zero_()
        if rule == "static":
            if not 0.0 < knob < 1.0:
                raise ValueError(f"a static start needs a weight in (0, 1), got {knob}")
            self.out.bias.fill_(math.log(knob / (1 - knob)))
            return
        if self.cfg.num_features != len(PAIR_FEATURES):
            raise ValueError(f"rule {rule!r} reads the pair features {PAIR_FEATURES}: the head has none")
        at = {f: i + (self.cfg.hidden_q + self.cfg.hidden_p if self.cfg.use_hidden else 0)
              for i, f in enumerate(PAIR_FEATURES)}
        k = float(sharpness)
        if rule == "cascade":
            self.out.weight[0, at["max_p"]], self.out.weight[0, at["max_q"]] = k, -k
        elif rule == "fsd_tv":
            self.out.weight[0, at["tv_pq"]] = k
        else:
            raise ValueError(f"unknown start rule {rule!r}; known: cascade, fsd_tv, static")
        self.out.bias.fill_(-k * float(knob))

    # ------------------------------------------------------------ Hugging Face style
    def save_pretrained(self, save_directory: str | Path, meta: dict | None = None) -> Path:
        """Write head.safetensors + config.json into save_directory (atomically): `export_head(self, dir, meta)`,
        the format `from_pretrained` / `load_head` read and check (sha256, verification-rule version, widths)."""
        return export_head(self, save_directory, meta)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        expect: dict | None = None,
        tokenizer: Any = None,
        fingerprints: dict[str, str] | None = None,
    ) -> EnsembleHead:
        """Load a head saved by `save_pretrained` (or `export_head`) with `load_head`'s checks (weights sha256,
        verification-rule version, architecture vs the widths in `expect`), plus, when given, the tokenizer
        (`check_head_tokenizer`) and the models' weights fingerprints (`check_head_models`, role -> fingerprint,
        e.g. `Models.fingerprints()`). Returns the head in eval mode; its config.json is `head.meta`."""
        head, meta = load_head(path, device=device, expect=expect, dtype=dtype)
        if tokenizer is not None:
            check_head_tokenizer(path, meta, tokenizer)
        if fingerprints:
            check_head_models(path, meta, fingerprints)
        head.meta = meta
        return head


# ---------------------------------------------------------------- export format
FORMAT_NAME = "specdec-ensemble-head"
FORMAT_VERSION = 1
WEIGHTS = "head.safetensors"
CONFIG = "config.json"


class HeadFormatError(ValueError):
    """An exported head is missing, corrupt, or does not fit the models it is used with."""


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


def read_head_config(path: str | Path) -> dict:
    """config.json of an exported head, validated for format and version."""
    path = Path(path)
    cfg_file = path / CONFIG
    if not path.is_dir():
        raise HeadFormatError(f"no exported head at {path}: expected a directory with {WEIGHTS} and {CONFIG}")
    if not cfg_file.is_file() or not (path / WEIGHTS).is_file():
        raise HeadFormatError(f"{path} is not a complete head export: needs {WEIGHTS} and {CONFIG}")
    return read_export_config(path, CONFIG, FORMAT_NAME, FORMAT_VERSION, "head", HeadFormatError)


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
