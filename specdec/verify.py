"""The one verification rule of the project: speculative sampling against a target distribution ν.

Training rollouts, evaluation and inference all call `verify`; what changes between methods is only ν, which
`specdec.targets` builds. With draft distribution d and target ν, draft x̃_i is accepted with probability
min(1, ν_i(x̃_i)/d_i(x̃_i)); at the first rejection a token is drawn from norm(max(0, ν_i − d_i)); after γ acceptances
a bonus token is drawn from ν_{γ+1}. The emitted tokens are then exactly ν-distributed (Leviathan et al. 2023,
Chen et al. 2023) whenever ν is normalised. An unnormalised ν (Leviathan's lenient "lossy" rule uses p/l) is
allowed: the acceptance and residual formulas are applied as written, which is what that rule prescribes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Bumped whenever `verify` changes what it accepts or samples. Exported heads record the version they were trained
# under, and `heads.load_head` refuses a head recorded under another one (its w were tuned to that rule).
VERIFY_RULE_VERSION = 1


@dataclass
class VerifyResult:
    num_accepted: torch.Tensor  # [B] long: accepted drafts per row (0..γ)
    tokens: torch.Tensor  # [B, γ+1] long: accepted drafts then the emitted token, padded with -1
    accept_prob: torch.Tensor  # [B, γ] min(1, ν/d) at each draft token; greedy: 1[draft = argmax ν]
    zero_prob_draft: torch.Tensor | None = None  # [B] bool: a draft its own distribution gives probability 0


ZERO_PROB_DRAFT = ("a proposer drafted a token to which its own proposal distribution gives probability 0; "
                   "draft_probs must be the distribution the drafts were sampled from")


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One categorical draw per row of [.., V] non-negative weights (normalised or not): the project's one draw
    (drafts, residuals, bonus tokens). Inverse CDF: u uniform on [0, total), the first index whose running sum
    exceeds u. A zero weight's interval is empty, so it is never drawn; the sums are float64, so each weight's share
    is exact to ~V·1e-16. Why not torch.multinomial: on a CPU it took 3.4 ms for one row of Qwen's 152k vocabulary
    (this: ~0.2 ms), and a decoding round draws up to γ + 1 times. Rows must have a positive total: nothing
    checks it here, as a check is a device read (verify's residual falls back to ν where it vanishes)."""
    cdf = probs.double().cumsum(-1)
    total = cdf[..., -1:].contiguous()
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=probs.device) * total
    # u < total in exact arithmetic; if r·total rounds up to total, the last index with weight is the draw.
    last = torch.searchsorted(cdf, total)
    return torch.minimum(torch.searchsorted(cdf, u, right=True), last).squeeze(-1)


def verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    check: bool = True,
) -> VerifyResult:
    """Verify γ drafted tokens per row against ν.

    draft_tokens [B, γ] long; draft_probs [B, γ, V] (one-hot rows for deterministic proposers);
    target_probs [B, γ+1, V]: ν at each draft position plus the bonus position.
    check=False leaves the zero-probability-draft check (a device read) to the caller: `zero_prob_draft` flags the
    rows, to be read with the caller's other values (the inference loop raises ZERO_PROB_DRAFT on it).
    """
    B, gamma = draft_tokens.shape
    if target_probs.dim() != 3 or target_probs.shape[:2] != (B, gamma + 1):
        raise ValueError(f"target_probs must be [B, γ+1, V] = [{B}, {gamma + 1}, V], got {tuple(target_probs.shape)}")
    if draft_probs.shape[:2] != (B, gamma) or (gamma and draft_probs.shape[-1] != target_probs.shape[-1]):
        raise ValueError(
            f"draft_probs must be [B, γ, V] = [{B}, {gamma}, {target_probs.shape[-1]}], got {tuple(draft_probs.shape)}"
        )
    device = target_probs.device
    rows = torch.arange(B, device=device)

    if gamma > 0:
        idx = draft_tokens.unsqueeze(-1)
        d_tok = draft_probs.gather(-1, idx).squeeze(-1)  # [B, γ]
        nu_tok = target_probs[:, :gamma].gather(-1, idx).squeeze(-1)  # [B, γ]
        zero_prob = (d_tok <= 0).any(-1)
        if check and bool(zero_prob.any()):
            raise ValueError(ZERO_PROB_DRAFT)
        accept_prob = torch.clamp(nu_tok / d_tok, max=1.0)
        if greedy:
            accepted = draft_tokens == target_probs[:, :gamma].argmax(-1)
            accept_prob = accepted.to(accept_prob.dtype)  # the greedy rule accepts with probability 0 or 1
        else:
            u = torch.rand(B, gamma, device=device, dtype=accept_prob.dtype, generator=generator)
            accepted = u < accept_prob  # u in [0,1): a zero-probability draft under ν is never accepted
        # Number of leading accepted drafts: cumprod turns the first rejection and everything after it to 0.
        num_accepted = accepted.long().cumprod(-1).sum(-1)
    else:
        accept_prob = target_probs.new_zeros(B, 0)
        num_accepted = torch.zeros(B, dtype=torch.long, device=device)
        zero_prob = torch.zeros(B, dtype=torch.bool, device=device)

    # The distribution the emitted token is drawn from: the residual at the rejected position, ν at the bonus.
    nu_at = target_probs[rows, num_accepted]  # [B, V]
    if greedy:
        emitted = nu_at.argmax(-1)
    else:
        full = num_accepted == gamma
        if gamma > 0:
            d_at = draft_probs[rows, num_accepted.clamp(max=gamma - 1)]
            residual = torch.clamp(nu_at - d_at, min=0.0)
            # A rejection happens with probability > 0 only if ν − d has positive mass somewhere; fall back to ν
            # for rows where the residual vanishes numerically (it is then never sampled in exact arithmetic).
            empty = residual.sum(-1) <= 0
            residual = torch.where(empty.unsqueeze(-1), nu_at, residual)
            weights = torch.where(full.unsqueeze(-1), nu_at, residual)
        else:
            weights = nu_at
        emitted = sample(weights, generator)

    tokens = torch.full((B, gamma + 1), -1, dtype=torch.long, device=device)
    if gamma > 0:
        keep = torch.arange(gamma, device=device).unsqueeze(0) < num_accepted.unsqueeze(1)
        tokens[:, :gamma] = torch.where(keep, draft_tokens, tokens[:, :gamma])
    tokens[rows, num_accepted] = emitted
    return VerifyResult(num_accepted=num_accepted, tokens=tokens, accept_prob=accept_prob, zero_prob_draft=zero_prob)


def output_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the first emitted token of `verify` (sampling mode), for tests and analysis.

    min(ν, d) + (1 − Σ min(ν, d))·norm(max(0, ν − d)). Equals ν whenever ν is normalised; for the lenient
    (unnormalised) rule it is the distribution that rule really samples from.
    """
    nu = target_probs
    overlap = torch.minimum(nu, draft_probs)
    residual = torch.clamp(nu - draft_probs, min=0.0)
    z = residual.sum(-1, keepdim=True)
    reject = 1.0 - overlap.sum(-1, keepdim=True)
    return overlap + torch.where(z > 0, reject * residual / z.clamp_min(1e-300), torch.zeros_like(residual))
