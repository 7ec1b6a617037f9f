"""EAGLE-style feature-level drafter: one decoder layer over the target's own last hidden state.

At token position j the drafter reads the pair (h_{j-1}, x_j): the target's last-layer hidden state after token
j-1 (zeros at j = 0) and the embedding of token j, fuses them with a linear layer on their concatenation (EAGLE),
runs one decoder layer (RMSNorm, RoPE attention, SwiGLU MLP) and a final RMSNorm, and outputs f_j, its guess of
h_j. The target's own LM head (frozen, shared, never copied) turns f_j into the draft distribution of x_{j+1}.
Drafting γ tokens feeds (f_j, x̂_{j+1}) back in, so after the first draft the drafter runs on its own features.

Optionally (EAGLE3) the head covers a reduced draft vocabulary: `draft_to_target` holds the target ids of the
draft vocabulary (the most frequent tokens of the training samples); draft distributions are scattered back to
the full vocabulary with zeros elsewhere, so verification stays exact.

This module holds the network, the training forward with training-time test (`unrolled_loss`) and the export
format (drafter.safetensors + config.json recording the target's identity, checked at load). The proposer that
plugs into `specdec.generate` is `specdec.proposers.FeatureDrafter`.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from specdec.models import weights_fingerprint
from specdec.provenance import git_revision, read_export_config, replace_dir, sha256_file, tokenizer_hash

FORMAT_NAME = "specdec-feature-drafter"
FORMAT_VERSION = 1
WEIGHTS = "drafter.safetensors"
CONFIG = "config.json"


class DrafterMismatchError(ValueError):
    """A drafter export is missing, corrupt, or was trained for a different target."""


@dataclass
class DrafterConfig:
    hidden: int  # the target's hidden size (the drafter reads and writes the target's feature space)
    heads: int
    mlp: int
    vocab: int  # the target's vocabulary width
    draft_vocab: int | None = None  # None: the full vocabulary; k: a reduced head over k target ids
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"drafter hidden size {self.hidden} is not divisible by its {self.heads} heads")
        if self.draft_vocab is not None and not 0 < self.draft_vocab <= self.vocab:
            raise ValueError(f"draft_vocab must be in (0, {self.vocab}], got {self.draft_vocab}")

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [B, heads, L, d] (Llama's rotate-half convention); cos, sin [B, 1, L, d]."""
    d = x.shape[-1]
    return x * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1) * sin


class DrafterNet(nn.Module):
    """fc([h; emb]) → one decoder layer → RMSNorm. The embeddings and LM head are the target's, passed in."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        H, nh = cfg.hidden, cfg.heads
        self.head_dim = H // nh
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.norm_attn = RMSNorm(H, cfg.norm_eps)
        self.qkv = nn.Linear(H, 3 * H, bias=False)  # fused: fewer calls per step (CPU overhead dominates here)
        self.o = nn.Linear(H, H, bias=False)
        self.norm_mlp = RMSNorm(H, cfg.norm_eps)
        self.gate_up = nn.Linear(H, 2 * cfg.mlp, bias=False)
        self.down = nn.Linear(cfg.mlp, H, bias=False)
        self.norm_out = RMSNorm(H, cfg.norm_eps)
        # Target ids of the draft vocabulary (EAGLE3's d2t); empty for the full vocabulary.
        ids = torch.arange(cfg.draft_vocab) if cfg.draft_vocab else torch.zeros(0, dtype=torch.long)
        self.register_buffer("draft_to_target", ids, persistent=True)
        for m in (self.fc, self.qkv, self.o, self.gate_up, self.down):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, feats: torch.Tensor, embs: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                past_k: torch.Tensor | None = None, past_v: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """feats, embs [B, L, H]; positions [B, L]; attend [B, L, S+L] bool over (past keys, new keys), or None:
        every query sees every key (one query with no holes in the cache).

        Returns (f [B, L, H], k, v [B, heads, L, d]): the features and the new keys/values for the caller's cache.
        """
        B, L, H = feats.shape
        x = self.fc(torch.cat([feats, embs], -1))
        q, k, v = self.qkv(self.norm_attn(x)).view(B, L, 3, self.cfg.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # Angles in float32 whatever the net's dtype (not a buffer, which .to(bf16) would round): in bf16,
        # positions 1000..1003 are one number.
        inv = 1.0 / self.cfg.rope_theta ** (
            torch.arange(0, self.head_dim, 2, device=x.device, dtype=torch.float32) / self.head_dim)
        ang = positions.float().unsqueeze(-1) * inv
        ang = torch.cat([ang, ang], -1).unsqueeze(1)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys = k if past_k is None else torch.cat([past_k, k], 2)
        values = v if past_v is None else torch.cat([past_v, v], 2)
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=None if attend is None else attend.unsqueeze(1))
        x = x + self.o(att.transpose(1, 2).reshape(B, L, H))
        gate, up = self.gate_up(self.norm_mlp(x)).chunk(2, -1)
        x = x + self.down(F.silu(gate) * up)
        return self.norm_out(x), k, v

    def save_pretrained(self, save_directory: str | Path, meta: dict | None = None, *, target: nn.Module | dict,
                        tokenizer: Any = None, target_name: str | None = None) -> Path:
        """Write drafter.safetensors + config.json into save_directory (atomically): `export_drafter`, with the
        identity of the target it drafts for (`target`: the target's HF model, or a `target_identity` dict already
        made; the tokenizer adds its hash). `from_pretrained` / `load_drafter` read and check it."""
        if isinstance(target, nn.Module):
            name = target_name or str(getattr(target.config, "name_or_path", "") or "target")
            target = target_identity(target, name, tokenizer)
        return export_drafter(self, save_directory, dict(target), meta)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, target: nn.Module, tokenizer: Any = None) -> DrafterNet:
        """Load a drafter saved by `save_pretrained` (or `export_drafter`) for `target` (the target's HF model) with
        `load_drafter`'s checks (format version, weights sha256, the target's widths, weights fingerprint and, when
        given, tokenizer). Returns the net in eval mode on the target's device and dtype; its config.json is
        `net.meta`."""
        net, config = load_drafter(path, target, tokenizer)
        net.meta = config
        return net


# ---------------------------------------------------------------- the target's frozen pieces
def target_head(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The target's LM head (weight [V, H], bias or None)."""
    head = model.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


def head_weights(net: DrafterNet, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head rows the drafter scores: all of them, or those of its draft vocabulary."""
    w, b = target_head(model)
    w, b = w[: net.cfg.vocab], (b[: net.cfg.vocab] if b is not None else None)
    d2t = net.draft_to_target
    if d2t.numel():
        w, b = w[d2t], (b[d2t] if b is not None else None)
    return w, b


def target_identity(model: nn.Module, name: str, tokenizer: Any = None) -> dict:
    """What a drafter is trained for, recorded in its export and checked at load."""
    cfg = model.config
    return {
        "name": name,
        "hidden_size": int(cfg.hidden_size),
        "vocab_size": int(target_head(model)[0].shape[0]),
        "num_layers": int(getattr(cfg, "num_hidden_layers", 0) or 0),
        "model_type": str(getattr(cfg, "model_type", "")),
        "fingerprint": weights_fingerprint(model),  # every layer: the drafter reads its hidden states
        "tokenizer_hash": tokenizer_hash(tokenizer) if tokenizer is not None else None,
    }


# ---------------------------------------------------------------- training forward (training-time test)
def ttt_mask(L: int, step: int, device: torch.device | str) -> torch.Tensor:
    """[L, step·L] bool: what the query at position j of unroll step `step` (1-based) attends to, over the keys of
    steps 1..step. Step 1 runs on the target's features (causal). Step s ≥ 2 stands for the (s-1)-th draft after
    the last committed token: exact keys up to j-s+1, then the step-r key at j-(s-r) for r = 2..s (EAGLE3)."""
    j = torch.arange(L, device=device).unsqueeze(1)
    i = torch.arange(L, device=device).unsqueeze(0)
    blocks = [i <= j - step + 1]
    for r in range(2, step + 1):
        blocks.append(i == j - (step - r))
    return torch.cat(blocks, 1)


def unrolled_features(net: DrafterNet, embs: torch.Tensor, hidden: torch.Tensor, unroll: int) -> list[torch.Tensor]:
    """The drafter's features at drafting depths 1..unroll over whole sequences (training-time test).

    embs [B, L, H] the tokens' embeddings, hidden [B, L, H] the target's last hidden states on them. Depth 1 reads
    the target's features (f at j from (h_{j-1}, x_j)); depth s reads depth s-1's own feature one position back
    and attends as the (s-1)-th draft after position j-s+1 would (see `ttt_mask`), so the features at depth s equal
    what cached drafting computes for the (s-1)-th draft (tests/test_feature_drafter.py checks it).
    """
    B, L, H = hidden.shape
    pos = torch.arange(L, device=hidden.device).unsqueeze(0).expand(B, L)
    feats = torch.cat([hidden.new_zeros(B, 1, H), hidden[:, :-1]], 1)
    ks, vs, out = [], [], []
    for s in range(1, unroll + 1):
        attend = ttt_mask(L, s, hidden.device).unsqueeze(0).expand(B, L, s * L)
        f, k, v = net(feats, embs, pos, attend, torch.cat(ks, 2) if ks else None, torch.cat(vs, 2) if vs else None)
        ks.append(k)
        vs.append(v)
        out.append(f)
        feats = torch.cat([f.new_zeros(B, 1, H), f[:, :-1]], 1)
    return out


def unrolled_loss(net: DrafterNet, embed: nn.Module, head_w: torch.Tensor, head_b: torch.Tensor | None,
                  tokens: torch.Tensor, hidden: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor,
                  unroll: int) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """Distillation loss: KL(p_j || q_j) at every valid position j, averaged over drafting depths 1..unroll.

    tokens [B, L] (right-padded target samples), hidden [B, L, H] and logp [B, L, V] the target's last hidden
    states and next-token log-probs on them (teacher forcing; over the full vocabulary, or over the draft vocabulary
    already restricted and renormalised), mask [B, L] valid positions. Returns (loss, per-depth
    {"kl": [...], "top1": [...]}: mean KL and argmax agreement with p).
    """
    d2t = net.draft_to_target
    if d2t.numel() and logp.shape[-1] != d2t.numel():  # the target restricted to the draft vocabulary (EAGLE3),
        logp = torch.log_softmax(logp[..., d2t], -1)     # renormalised (a teacher cache holds it restricted already)
    feats = unrolled_features(net, embed(tokens).to(hidden.dtype), hidden, unroll)
    total, stats = 0.0, {"kl": [], "top1": []}
    for s, f in enumerate(feats, start=1):
        logq = torch.log_softmax(F.linear(f, head_w, head_b).float(), -1)
        kl = (logp.exp() * (logp - logq)).sum(-1)
        m = mask.clone()
        m[:, : s - 1] = False  # depth s needs s-1 earlier positions
        denom = m.sum().clamp_min(1)
        kl = (kl * m).sum() / denom
        total = total + kl
        stats["kl"].append(float(kl.detach()))
        stats["top1"].append(float(((logq.argmax(-1) == logp.argmax(-1)) & m).sum() / denom))
    return total / unroll, stats


# ---------------------------------------------------------------- export / load
def _sha256(path: Path) -> str:
    return sha256_file(path)


def export_drafter(net: DrafterNet, out_dir: str | Path, target: dict, meta: dict | None = None) -> Path:
    """Write drafter.safetensors + config.json (format, architecture, the target's identity, meta) atomically."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    state = {k: v.detach().cpu().contiguous() if k == "draft_to_target" else v.detach().to("cpu", torch.float32)
             .contiguous() for k, v in net.state_dict().items()}
    save_file(state, str(tmp / WEIGHTS), metadata={"format": FORMAT_NAME, "format_version": str(FORMAT_VERSION)})
    config = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "arch": net.cfg.to_dict(), "target": target,
              "weights_sha256": _sha256(tmp / WEIGHTS), "git_revision": git_revision(), **(meta or {})}
    (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    return replace_dir(tmp, out_dir)


def read_drafter_config(path: str | Path) -> dict:
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise DrafterMismatchError(f"no feature drafter at {path}: expected a directory with {WEIGHTS} and {CONFIG} "
                                   f"(train one with `python train/drafter.py model=... task=...`)")
    return read_export_config(path, CONFIG, FORMAT_NAME, FORMAT_VERSION, "drafter", DrafterMismatchError)


def check_target(config: dict, model: nn.Module, tokenizer: Any = None, where: str = "") -> None:
    """Raise DrafterMismatchError listing every way the target differs from the one the drafter was trained for."""
    want = config.get("target") or {}
    have = target_identity(model, name="", tokenizer=tokenizer)
    problems = [f"{k}: trained for {want[k]!r}, this target has {have[k]!r}"
                for k in ("hidden_size", "vocab_size", "fingerprint", "tokenizer_hash")
                if want.get(k) is not None and have.get(k) is not None and want[k] != have[k]]
    if problems:
        raise DrafterMismatchError(
            f"the feature drafter {where} was trained for another target ({want.get('name')!r}): "
            + "; ".join(problems) + ". A feature drafter reads its target's hidden states and LM head, so it works "
            "only with that target: train one for this target with `python train/drafter.py model=... task=...`.")


def load_drafter(path: str | Path, model: nn.Module, tokenizer: Any = None) -> tuple[DrafterNet, dict]:
    """Load an exported drafter for `model` (the target's HF model), checking the target's identity and the
    weights' sha256. Returns (net in eval mode on the target's device and dtype, config dict)."""
    path = Path(path)
    config = read_drafter_config(path)
    digest = _sha256(path / WEIGHTS)
    if digest != config.get("weights_sha256"):
        raise DrafterMismatchError(f"{path / WEIGHTS} is corrupt: its sha256 does not match {CONFIG}")
    check_target(config, model, tokenizer, where=str(path))
    net = DrafterNet(DrafterConfig(**config["arch"]))
    net.load_state_dict(load_file(str(path / WEIGHTS)))
    p = next(model.parameters())
    net.to(device=p.device, dtype=p.dtype).eval().requires_grad_(False)
    return net, config


def new_drafter(model: nn.Module, heads: int | None = None, mlp: int | None = None,
                draft_ids: torch.Tensor | None = None) -> DrafterNet:
    """A freshly initialised drafter for a target (heads and MLP width default to the target's own)."""
    c = model.config
    cfg = DrafterConfig(hidden=int(c.hidden_size), heads=int(heads or c.num_attention_heads),
                        mlp=int(mlp or c.intermediate_size), vocab=int(target_head(model)[0].shape[0]),
                        draft_vocab=int(draft_ids.numel()) if draft_ids is not None else None,
                        rope_theta=float(getattr(c, "rope_theta", None) or 10000.0))
    net = DrafterNet(cfg)
    if draft_ids is not None:
        net.draft_to_target.copy_(draft_ids.long())
    return net
