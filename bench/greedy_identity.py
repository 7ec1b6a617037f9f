"""Greedy-identity checks that tell a flip at a near tie from a real mismatch.

Greedy speculative decoding must return the target's greedy tokens. But its (γ+1)-token verification pass and the
baseline's 1-token passes sum in different orders, so where the target's top two tokens are within rounding of
each other the argmax can flip and the two runs diverge from there on, without any bug (common in bfloat16; rare
but possible in float32). Every bench that compares greedy outputs classifies each differing row with
`compare_greedy`: at the first divergent position, it asks the model whose argmax greedy decoding takes for its
scores there, and calls the row a near-tie flip when the two tokens chosen are within a dtype-sized tolerance of
the top score, a real mismatch otherwise. Only real mismatches fail a check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

# Log-prob margin (nats) under which two tokens count as tied, by the dtype the models run in: a few rounding
# steps of log-softmax over logits of that precision (bf16 keeps 8 significant bits, fp16 11, fp32 24).
NEAR_TIE_TOL = {torch.bfloat16: 1e-2, torch.float16: 1e-3, torch.float32: 1e-4, torch.float64: 1e-8}


def near_tie_tolerance(dtype: torch.dtype | str) -> float:
    """The near-tie tolerance (nats) for models run in `dtype` (a torch dtype or its name, e.g. "bfloat16")."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."))
    if dtype not in NEAR_TIE_TOL:
        raise ValueError(f"no near-tie tolerance for {dtype}; known: {sorted(map(str, NEAR_TIE_TOL))}")
    return NEAR_TIE_TOL[dtype]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where a and b differ (the shorter one's length when one is a strict prefix
    of the other), None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def classify_divergence(scores: torch.Tensor, tok_a: int | None, tok_b: int | None, tol: float) -> tuple[str, float]:
    """("near_tie" | "mismatch", margin) for a divergence where one run chose tok_a and the other tok_b (None: that
    run had ended). scores: [V] log-probs (or any log-space scores) whose argmax greedy decoding takes at that
    position. margin: how far below the top score the lower of the two chosen tokens sits (with a token unknown,
    the top-2 margin); a near tie when it is below tol, both chosen tokens being then (near) the top."""
    s = scores.detach().float().reshape(-1)
    top2 = torch.topk(s, min(2, s.numel())).values
    known = [t for t in (tok_a, tok_b) if t is not None]
    if len(known) == 2:
        margin = float(top2[0] - torch.minimum(s[known[0]], s[known[1]]))
    else:
        margin = float(top2[0] - top2[-1]) if top2.numel() == 2 else float("inf")
        if known:  # the one run that went on must have chosen a top token
            margin = max(margin, float(top2[0] - s[known[0]]))
    if margin != margin:  # NaN scores: never excuse
        margin = float("inf")
    return ("near_tie" if margin < tol else "mismatch"), margin


@dataclass
class GreedyComparison:
    """Rows of two greedy runs compared: identical, flipped at a near tie, or really mismatched."""

    tol: float
    identical: list[int] = field(default_factory=list)
    near_ties: list[dict] = field(default_factory=list)  # {row, position, margin}
    mismatches: list[dict] = field(default_factory=list)  # {row, position, margin}

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def merge(self, other: GreedyComparison, **tag: object) -> None:
        """Adds another comparison's rows (tagged, e.g. with the method and prompt, for the report)."""
        self.identical += other.identical
        self.near_ties += [{**tag, **d} for d in other.near_ties]
        self.mismatches += [{**tag, **d} for d in other.mismatches]

    def summary(self) -> str:
        n = len(self.identical) + len(self.near_ties) + len(self.mismatches)
        s = f"{len(self.identical)}/{n} identical, {len(self.near_ties)} flipped at a near tie (margin < {self.tol:g} " \
            f"nats), {len(self.mismatches)} real mismatches"
        if self.mismatches:
            s += f": {self.mismatches}"
        return s

    def to_dict(self) -> dict:
        return {"tol": self.tol, "identical": len(self.identical), "near_ties": self.near_ties,
                "mismatches": self.mismatches, "ok": self.ok}


def compare_greedy(ref: Sequence[Sequence[int]], other: Sequence[Sequence[int]],
                   scores_at: Callable[[int, list[int]], torch.Tensor], tol: float) -> GreedyComparison:
    """Compare two greedy runs row by row. scores_at(row, prefix) -> [V] the log-space scores whose argmax greedy
    decoding takes after the row's prompt + prefix (the generated tokens both runs share); called once per
    differing row. Rows past their first divergence are not compared further: their prefixes differ."""
    if len(ref) != len(other):
        raise ValueError(f"the two runs have {len(ref)} and {len(other)} rows")
    out = GreedyComparison(tol)
    for i, (a, b) in enumerate(zip(ref, other)):
        d = first_divergence(a, b)
        if d is None:
            out.identical.append(i)
            continue
        kind, margin = classify_divergence(scores_at(i, list(a[:d])), a[d] if d < len(a) else None,
                                           b[d] if d < len(b) else None, tol)
        (out.near_ties if kind == "near_tie" else out.mismatches).append(
            {"row": i, "position": d, "margin": round(margin, 6)})
    return out


@torch.no_grad()
def next_token_logprobs(model: torch.nn.Module, ids: Sequence[int], vocab_size: int | None = None) -> torch.Tensor:
    """[V] float32 log-probs of an HF causal LM's next token after `ids`, from one fresh cache-free pass (a third
    summation order: near a tie it sits between the two runs being compared). vocab_size cuts padded rows."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([list(ids)], device=device)).logits[0, -1]
    return torch.log_softmax(logits[:vocab_size].float(), dim=-1)
