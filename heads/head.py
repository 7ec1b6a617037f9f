"""The ensemble head: w_t = head(h^q_t, h^p_t, feats_t) in [0, 1], the weight on the target in
nu_t = w_t * p_t + (1 - w_t) * q_t (DIVERSED's dynamic ensemble).

`linear` is one layer on the concatenation (as in the paper's released code); `mlp` adds one hidden layer.
The last layer starts at zero weight and bias logit(init_w), so a fresh head outputs exactly init_w everywhere
(init_w close to 1 = standard speculative decoding; training starts at 0.5, where the sigmoid's slope is largest) and
is independent of the seed until trained.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class HeadConfig:
    hidden_q: int  # draft (proposer) last-layer width
    hidden_p: int  # target last-layer width
    num_features: int = 0  # width of specdec.targets.pair_features (0 = hidden states only)
    arch: str = "linear"  # "linear" | "mlp"
    mlp_hidden: int = 64
    use_hidden: bool = True  # False: a features-only head (cheap, model-agnostic)
    normalize: bool = True  # parameter-free layer norm on each hidden block: widths and scales differ
    init_w: float = 0.5  # w at initialisation (1.0 is clamped to 1 - 1e-4: sigmoid never reaches 1)

    def __post_init__(self) -> None:
        if self.arch not in ("linear", "mlp"):
            raise ValueError(f"head arch must be 'linear' or 'mlp', got {self.arch!r}")
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
        return torch.sigmoid(self.logits(h_q, h_p, feats))
