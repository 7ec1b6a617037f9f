"""Verification targets: the distribution ν that drafts are verified against.

Pure functions build ν from distributions (`exact_target`, `ensemble_target`, `lossy_target`, `cascade_weight`,
`contrastive_target`); *rules* wrap them for the decoding loop, which calls `rule(scores)` once per round with the
model outputs at the γ+1 positions and gets back (ν [B, γ+1, V], w [B, γ+1] or None). Every method of the project
is a rule plus a proposer; `specdec.verify.verify` is the same for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdec.verify import output_distribution

# ----------------------------------------------------------------------------------------------- pure functions


def softmax_with_temperature(logprobs: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities at a sampling temperature; temperature 0 (greedy) uses the untempered distribution, whose
    argmax is the greedy choice and which relaxed targets mix."""
    if temperature and temperature != 1.0:
        return torch.softmax(logprobs / temperature, dim=-1)
    return logprobs.exp()


def exact_target(p: torch.Tensor) -> torch.Tensor:
    """ν = p: standard (lossless) speculative decoding."""
    return p


def ensemble_target(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor | float) -> torch.Tensor:
    """ν = w·p + (1−w)·q, with w a scalar (static ensemble) or a tensor broadcast over the vocabulary ([..] → [.., 1])."""
    if isinstance(w, torch.Tensor):
        w = w.to(p.dtype).unsqueeze(-1)
    return w * p + (1.0 - w) * q


def lossy_target(p: torch.Tensor, lenience: float) -> torch.Tensor:
    """Leviathan et al. (2023, §A.5) lenience: accept x̃ with min(1, p/(l·q)) and on rejection sample norm(max(0, p − l·q)).

    Written as ν = p/l (unnormalised, for l ∈ (0, 1]): `verify` applies min(1, ν/q) and norm(max(0, ν − q)), which is
    exactly that rule. l = 1 is standard SD. The output is *not* p-distributed; `verify.output_distribution` gives it.
    """
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    return p / lenience


def cascade_weight(p: torch.Tensor, q: torch.Tensor, threshold: float) -> torch.Tensor:
    """SpecCascade's token-level deferral (Narasimhan et al. 2024, the "Diff" rule): defer to the target iff
    max p − max q > threshold. Returns w ∈ {0, 1} per position, so ν = ensemble_target(p, q, w) is q where the draft is
    confident enough and p where it defers. threshold = −1 always defers (standard SD), threshold ≥ 1 never does."""
    return (p.amax(-1) - q.amax(-1) > threshold).to(p.dtype)


# The amateur's log-prob is floored before it enters π_CD: where the amateur gives a token probability 0,
# p_amateur^(−α) would be infinite and π_CD undefined. −100 nats is far below anything a softmax produces in float32.
AMATEUR_LOGPROB_FLOOR = -100.0


def contrastive_logits(
    expert_logprobs: torch.Tensor, amateur_logprobs: torch.Tensor, alpha: float, beta: float = 0.0
) -> torch.Tensor:
    """Combined CD logits (1+α)·log p_e − α·log p_a, −inf outside the plausibility mask {x: p_e(x) ≥ β·max p_e}
    and wherever the expert gives probability 0."""
    amateur = amateur_logprobs.clamp(min=AMATEUR_LOGPROB_FLOOR)
    combined = (1.0 + alpha) * expert_logprobs - alpha * amateur
    neg_inf = torch.full_like(combined, float("-inf"))
    combined = torch.where(torch.isneginf(expert_logprobs), neg_inf, combined)
    if beta > 0.0:
        # In log space: log p_e(x) ≥ log β + max log p_e.
        cutoff = expert_logprobs.amax(-1, keepdim=True) + torch.log(torch.tensor(beta, dtype=expert_logprobs.dtype))
        combined = torch.where(expert_logprobs >= cutoff, combined, neg_inf)
    return combined


def contrastive_target(
    expert_logprobs: torch.Tensor,
    amateur_logprobs: torch.Tensor,
    alpha: float,
    beta: float = 0.0,
    temperature: float = 1.0,
) -> torch.Tensor:
    """π_CD ∝ p_e^(1+α)·p_a^(−α), restricted to the β-plausible set and renormalised, computed in log space.

    The temperature divides the *combined* logits (so T = 1 is π_CD itself and α = 0 is the expert at temperature T);
    temperature 0 returns the T = 1 distribution, whose argmax over the mask is greedy CD.
    """
    logits = contrastive_logits(expert_logprobs, amateur_logprobs, alpha, beta)
    if temperature and temperature != 1.0:
        logits = logits / temperature
    return torch.softmax(logits, dim=-1)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a - b).abs().sum(-1)


def entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.log(p.clamp_min(1e-12))).sum(-1)


def typical_set(p: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """Medusa's typical set S = {x: p(x) > τ}, τ = min(ε, δ·exp(−H(p))), bool [.., V]. Never empty: max p ≥ exp(−H)
    ≥ τ, and the mode always counts (ties, τ = max). ε = 0 keeps every token p gives mass (nothing is truncated)."""
    tau = torch.minimum(torch.full_like(p[..., 0], float(epsilon)), delta * torch.exp(-entropy(p)))
    return (p > tau.unsqueeze(-1)) | (p == p.amax(-1, keepdim=True))


def truncate(nu: torch.Tensor, p: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """ν restricted to the set `keep`, its mass outside moved onto p restricted to `keep`:
    ν·1_S + (1 − ν(S))·p_S with p_S = p·1_S / p(S). Linear in ν, so truncating w·p + (1 − w)·q is the mixture
    w·p_S + (1 − w)·truncate(q, p, S) of the two truncated ends; truncate(p, p, S) is p_S."""
    nu_s = (nu * keep).sum(-1, keepdim=True)
    p_s = (p * keep).sum(-1, keepdim=True)
    return torch.where(keep, nu + (1.0 - nu_s).clamp_min(0.0) / p_s * p, torch.zeros_like(p))


PAIR_FEATURES = ("tv_pq", "entropy_p", "entropy_q", "max_p", "max_q")


def pair_features(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Cheap per-position features for the ensemble head, [.., len(PAIR_FEATURES)]."""
    return torch.stack([total_variation(p, q), entropy(p), entropy(q), p.amax(-1), q.amax(-1)], dim=-1)


def feature_rule_decision(feats: torch.Tensor, rule: str, knob: float) -> torch.Tensor:
    """A training-free rule's decision (True: verify against p) from the pair features, bool [..]:
    cascade is `cascade_weight` (max p − max q > knob), fsd_tv is Fuzzy SD with the TV divergence (TV > knob)."""
    at = PAIR_FEATURES.index
    if rule == "cascade":
        return feats[..., at("max_p")] - feats[..., at("max_q")] > knob
    if rule == "fsd_tv":
        return feats[..., at("tv_pq")] > knob
    raise ValueError(f"unknown feature rule {rule!r}; known: cascade, fsd_tv")


# ---------------------------------------------------------------------------------------------------- rules


@dataclass
class RoundScores:
    """Model outputs at the γ+1 positions of one round (position γ is the bonus position)."""

    target_logprobs: torch.Tensor  # [B, γ+1, V] log-softmax of the target (temperature 1)
    temperature: float
    q: torch.Tensor | None = None  # [B, γ or γ+1, V] proposal probabilities (γ+1 when the rule asked for the bonus)
    amateur_logprobs: torch.Tensor | None = None  # [B, γ+1, V]
    h_p: torch.Tensor | None = None  # [B, γ+1, Hp] target last-layer hidden states
    h_q: torch.Tensor | None = None  # [B, γ or γ+1, Hq] proposer hidden states
    drafts: torch.Tensor | None = None  # [B, γ] the drafted tokens (rules that look ahead along the draft: FLy)

    _p: torch.Tensor | None = None

    @property
    def p(self) -> torch.Tensor:
        """Target probabilities at the sampling temperature."""
        if self._p is None:
            self._p = softmax_with_temperature(self.target_logprobs, self.temperature)
        return self._p


class Rule:
    """Builds ν for a round. `needs_bonus_q`: the proposer must also return q at the bonus position (ν mixes q
    there). `needs_amateur`: the loop must run the amateur's parallel pass."""

    needs_bonus_q: bool = False
    needs_amateur: bool = False

    def base(self, scores: RoundScores) -> torch.Tensor:
        """The distribution the rule relaxes towards the proposal (p, or π_CD for contrastive rules)."""
        return scores.p

    def relaxed(self, scores: RoundScores) -> torch.Tensor | None:
        """ν's other end, at w = 0, where it is not the proposal q itself (None: it is q). A rule whose ν is
        w·base + (1 − w)·relaxed says so here, so that rollouts record both ends and training recomputes log ν."""
        return None

    def __call__(self, scores: RoundScores) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError


def _q_full(scores: RoundScores) -> torch.Tensor:
    if scores.q is None or scores.q.shape[1] != scores.target_logprobs.shape[1]:
        raise ValueError("this rule mixes the proposal into ν, so it needs q at all γ+1 positions (with_bonus=True)")
    return scores.q


class ExactRule(Rule):
    def __call__(self, scores: RoundScores):
        return exact_target(scores.p), None


class StaticEnsembleRule(Rule):
    def __init__(self, w: float):
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"static ensemble weight must be in [0, 1], got {w}")
        self.w = float(w)
        self.needs_bonus_q = self.w < 1.0

    def __call__(self, scores: RoundScores):
        p = scores.p
        if self.w == 1.0:
            return p, torch.ones(p.shape[:2], dtype=p.dtype, device=p.device)
        w = torch.full(p.shape[:2], self.w, dtype=p.dtype, device=p.device)
        return ensemble_target(p, _q_full(scores), w), w


class LossyRule(Rule):
    """Leviathan's lenient rule, returned as the normalised distribution it really samples from.

    Verifying against ν_eff = output_distribution(p/l, q) is the same procedure as verifying against p/l: where
    p/l ≤ q, ν_eff = p/l (same acceptance probability); where p/l > q, ν_eff ≥ q (accepted either way); and the
    residual max(0, ν_eff − q) is proportional to max(0, p/l − q). Returning ν_eff keeps ν normalised, so the
    loop's records (ν(x_t), TV(ν, p): the rule's real bias) describe what is sampled. The bonus token comes from p.
    """

    def __init__(self, lenience: float):
        lossy_target(torch.ones(1), lenience)  # validates
        self.lenience = float(lenience)

    def __call__(self, scores: RoundScores):
        p = scores.p
        if scores.q is None or not scores.temperature:  # γ = 0, or greedy (argmax of p/l is p's): plain p
            return p, None
        g = min(scores.q.shape[1], p.shape[1] - 1)
        eff = output_distribution(lossy_target(p[:, :g], self.lenience), scores.q[:, :g].to(p.dtype))
        return torch.cat([eff, p[:, g:]], dim=1), None


def _bonus_form(bonus: str, p_form: str) -> str:
    """A rule's `bonus` setting, checked: "p" (the bonus token from p; `p_form` says whose form that is) or "nu"."""
    if bonus not in ("p", "nu"):
        raise ValueError(f"bonus must be 'p' ({p_form}) or 'nu' (the ν-form), got {bonus!r}")
    return bonus


def _decided_positions(p: torch.Tensor, q: torch.Tensor, bonus: str) -> int:
    """How many leading positions a rule with a bonus form decides: every position q covers in the ν-form, the
    draft positions only with bonus="p" (the bonus token then comes from p, even where a proposer hands over q
    there too)."""
    return q.shape[1] if bonus == "nu" else min(q.shape[1], p.shape[1] - 1)


def _mix_where_decided(scores: RoundScores, weight: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                       bonus: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ν = ensemble_target(p, q, w) with w = weight(p, q) at the positions the rule decides (`_decided_positions`),
    and p after them (w = 1); p everywhere when nothing was drafted (γ = 0)."""
    p, q = scores.p, scores.q
    if q is None:
        return p, torch.ones(p.shape[:2], dtype=p.dtype, device=p.device)
    g = _decided_positions(p, q, bonus)
    q = q[:, :g].to(p.dtype)
    w = torch.cat([weight(p[:, :g], q), torch.ones(p.shape[0], p.shape[1] - g, dtype=p.dtype, device=p.device)], 1)
    return torch.cat([ensemble_target(p[:, :g], q, w[:, :g]), p[:, g:]], 1), w


class CascadeRule(Rule):
    """SpecCascade (`cascade_weight`) at each draft position: ν_t = q_t where the draft is confident enough, p_t
    where it defers.

    The bonus position (all γ drafts accepted) has two forms, as Fuzzy SD's: the ν-form (`bonus="nu"`, the
    default) applies the rule there too, so every emitted token follows its ν; that needs q at the bonus position,
    one more draft call per round (the draft feeds its last draft now rather than next round, where it would share
    a call with the bonus token). `bonus="p"` draws the bonus token from p, as SD does, and saves that call. The
    bonus is never rejected, so the two forms accept the same drafts; "p" moves only the bonus token towards the
    target."""

    def __init__(self, threshold: float, bonus: str = "nu"):
        self.threshold, self.bonus = float(threshold), _bonus_form(bonus, "the bonus token from p")
        self.needs_bonus_q = bonus == "nu"

    def __call__(self, scores: RoundScores):
        if self.bonus == "nu":
            _q_full(scores)  # the ν-form decides the bonus position too: it needs q there
        return _mix_where_decided(scores, lambda p, q: cascade_weight(p, q, self.threshold), self.bonus)


class ContrastiveRule(Rule):
    """ν = π_CD(expert = target, amateur): the loop runs the amateur over the same γ+1 positions."""

    needs_amateur = True

    def __init__(self, alpha: float, beta: float = 0.0):
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}")
        self.alpha, self.beta = float(alpha), float(beta)

    def base(self, scores: RoundScores) -> torch.Tensor:
        if scores.amateur_logprobs is None:
            raise ValueError("ContrastiveRule needs the amateur's log-probs (pass amateur=... to generate)")
        return contrastive_target(
            scores.target_logprobs, scores.amateur_logprobs, self.alpha, self.beta, scores.temperature
        )

    def __call__(self, scores: RoundScores):
        return self.base(scores), None


class HeadEnsembleRule(Rule):
    """Dynamic ensemble (DIVERSED): ν_t = w_t·b_t + (1−w_t)·q_t with w_t = head(h^q_t, h^p_t, features(b_t, q_t)),
    where b is p (default) or another rule's base distribution (e.g. ContrastiveRule: the head over π_CD).

    typical_epsilon > 0 truncates ν to b's typical set S (`typical_set`, δ = sqrt(ε) as Medusa): ν_t =
    truncate(w_t·b_t + (1−w_t)·q_t, b_t, S_t) = w_t·b_S + (1−w_t)·typical_target(b, q). No w-mixture of b and q can
    leave out a token both give mass (it is ≥ min(b, q)), so without it a head cannot reach typical acceptance, the
    strongest rule on several tasks; with it w = 0 *is* typical acceptance (its ν-form: the bonus token too comes
    from ν) and w = 1 is SD against the truncated target b_S. ν stays linear in w, so `base` returns b_S, `relaxed`
    the w = 0 end, and the head's pair features are those of (b_S, q).

    typical_end="strict" puts typical acceptance at the other end: ν_t = w_t·typical_target(b, q) + (1−w_t)·q_t,
    so w = 1 *is* typical acceptance and w = 0 accepts the draft outright: a head that relaxes typical acceptance
    further where it judges a swap cheap (train/gate.py). `base` is then typical's ν (the w = 1 end) and the pair
    features are those of (typical's ν, q). With relaxed_epsilon ε₀ ∈ (0, ε) the w = 0 end is typical acceptance at
    the looser ε₀ instead of q: a per-token choice between two of typical's knobs."""

    needs_bonus_q = True

    def __init__(self, head: Callable[..., torch.Tensor], base: Rule | None = None, typical_epsilon: float = 0.0,
                 typical_end: str = "relaxed", relaxed_epsilon: float = 0.0):
        if not 0.0 <= typical_epsilon <= 1.0:
            raise ValueError(f"typical_epsilon must be in [0, 1] (0: no truncation), got {typical_epsilon}")
        if typical_end not in ("relaxed", "strict"):
            raise ValueError(f"typical_end must be 'relaxed' (w = 0 is typical acceptance) or 'strict' (w = 1 is), "
                             f"got {typical_end!r}")
        if typical_end == "strict" and not typical_epsilon:
            raise ValueError("typical_end='strict' needs typical_epsilon > 0 (the typical acceptance at w = 1)")
        if relaxed_epsilon and not (typical_end == "strict" and 0.0 < relaxed_epsilon < typical_epsilon):
            raise ValueError(f"relaxed_epsilon (the w = 0 end's ε) needs typical_end='strict' and 0 < it < "
                             f"typical_epsilon={typical_epsilon}, got {relaxed_epsilon}")
        self.head = head
        self.base_rule = base
        self.needs_amateur = bool(base is not None and base.needs_amateur)
        self.typical_epsilon = float(typical_epsilon)
        self.typical_end = typical_end
        self.relaxed_epsilon = float(relaxed_epsilon)

    def _ends(self, scores: RoundScores) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ν's ends (w = 1, w = 0): (b, None) without truncation (the w = 0 end is q), else (b_S, typical's ν),
        or (typical's ν, None / typical's ν at relaxed_epsilon) with typical_end="strict"; the base and the typical
        set computed once."""
        b = scores.p if self.base_rule is None else self.base_rule.base(scores)
        if not self.typical_epsilon:
            return b, None
        keep = typical_set(b, self.typical_epsilon, self.typical_epsilon ** 0.5)
        q = _q_full(scores).to(b.dtype)
        typical = truncate(q, b, keep)
        if self.typical_end == "relaxed":
            return truncate(b, b, keep), typical
        e0 = self.relaxed_epsilon
        return typical, (truncate(q, b, typical_set(b, e0, e0 ** 0.5)) if e0 else None)

    def base(self, scores: RoundScores) -> torch.Tensor:
        return self._ends(scores)[0]

    def relaxed(self, scores: RoundScores) -> torch.Tensor | None:
        return self._ends(scores)[1]

    def __call__(self, scores: RoundScores):
        (b, a), q = self._ends(scores), _q_full(scores)
        if scores.h_q is None or scores.h_p is None:
            raise ValueError("the ensemble head needs hidden states from both the proposer and the target; "
                             "the n-gram proposer has none")
        with torch.no_grad():
            w = self.head(scores.h_q, scores.h_p, pair_features(b, q)).to(b.dtype)
        return ensemble_target(b, q if a is None else a, w), w


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) in nats; terms where p = 0 contribute 0, q is floored so that p > 0 = q gives a large finite value."""
    return (p * (torch.log(p.clamp_min(1e-30)) - torch.log(q.clamp_min(1e-30)))).sum(-1)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in nats (symmetric, ≤ log 2)."""
    m = 0.5 * (p + q)
    return 0.5 * kl_divergence(p, m) + 0.5 * kl_divergence(q, m)


DIVERGENCES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "kl": kl_divergence, "js": js_divergence, "tv": total_variation}


def fuzzy_weight(p: torch.Tensor, q: torch.Tensor, threshold: float, divergence: str = "kl") -> torch.Tensor:
    """Fuzzy SD's decision as a weight: w = 1[D(p, q) > threshold] (the target decides where the two disagree more
    than the threshold; the draft is kept where they agree), w ∈ {0, 1} per position."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"unknown divergence {divergence!r}; known: {sorted(DIVERGENCES)}")
    return (DIVERGENCES[divergence](p, q) > threshold).to(p.dtype)


class FuzzyRule(Rule):
    """Fuzzy Speculative Decoding (Holsman et al., ACL Findings 2025): at each draft position, a divergence
    D(p_t, q_t) at or below the threshold accepts the draft outright; above it, standard SD decides (min(1, p/q),
    residual norm(max(0, p − q))). That is exactly verification against ν_t = w_t·p_t + (1 − w_t)·q_t with
    w_t = 1[D_t > threshold] (`fuzzy_weight`): where w_t = 0, ν_t = q_t accepts every draft.

    The two forms differ only at the bonus position (all γ drafts accepted): the paper draws the bonus token from
    p (`bonus="p"`, the default); the ν-form (`bonus="nu"`) applies the same rule there, drawing from q where the
    two agree, so every emitted token follows its ν (and the rule needs q at the bonus position)."""

    def __init__(self, threshold: float, divergence: str = "kl", bonus: str = "p"):
        fuzzy_weight(torch.ones(1), torch.ones(1), 0.0, divergence)  # validates the divergence's name
        self.threshold, self.divergence = float(threshold), divergence
        self.bonus = _bonus_form(bonus, "the paper")
        self.needs_bonus_q = bonus == "nu"

    def __call__(self, scores: RoundScores):
        return _mix_where_decided(
            scores, lambda p, q: fuzzy_weight(p, q, self.threshold, self.divergence), self.bonus)


def typical_target(p: torch.Tensor, q: torch.Tensor, epsilon: float, delta: float) -> torch.Tensor:
    """Typical acceptance (Medusa, Cai et al. 2024) as a verification target. Medusa accepts x̃ iff x̃ is in the
    typical set S (`typical_set`) and otherwise takes a token from the target. ν = truncate(q, p, S) =
    q·1_S + c·p·1_S, c = (1 − q(S)) / p(S), gives exactly that through `verify`: ν(x̃) ≥ q(x̃) on S (always
    accepted), ν = 0 off S (always rejected), and the residual max(0, ν − q) ∝ p·1_S, so a rejection draws from p
    restricted to the typical set (Medusa's sampled variant; its greedy one takes argmax p)."""
    return truncate(q, p, typical_set(p, epsilon, delta))


class TypicalRule(Rule):
    """Typical acceptance (`typical_target`) at each draft position. Greedy decoding (T = 0) is greedy SD: Medusa's
    criterion is for sampling.

    The bonus position (all γ drafts accepted) has two forms, as Fuzzy SD's: Medusa draws the bonus token from p
    (`bonus="p"`, the default); the ν-form (`bonus="nu"`) draws it from typical_target(p, q) there too, so every
    emitted token follows its ν (it needs q at the bonus position). The ν-form is a truncating head at w = 0
    (HeadEnsembleRule with typical_epsilon): the rule a head trained from typical acceptance starts at."""

    def __init__(self, epsilon: float = 0.3, delta: float | None = None, bonus: str = "p"):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)
        self.delta = float(epsilon ** 0.5 if delta is None else delta)  # Medusa's default: δ = sqrt(ε)
        self.bonus = _bonus_form(bonus, "Medusa")
        self.needs_bonus_q = bonus == "nu"

    def __call__(self, scores: RoundScores):
        p, q = scores.p, scores.q
        if q is None or not scores.temperature:
            return p, None
        g = _decided_positions(p, q, self.bonus)
        nu = typical_target(p[:, :g], q[:, :g].to(p.dtype), self.epsilon, self.delta)
        return torch.cat([nu, p[:, g:]], 1), None


class FlyRule(Rule):
    """FLy, training-free loosely SD (Li et al., ICLR 2026): a draft that differs from the target's choice is
    accepted when (i) the entropy gate opens, H(p_t) ≥ entropy_threshold (several tokens plausible), and (ii) the
    deferred window agrees: the next `window` drafts are each the target's argmax at their positions, i.e. the
    target, having read the draft's variant, continues as the draft did. The window is read from the same
    verification pass; a mismatch whose window does not fit inside this round's γ drafts is rejected (the paper
    defers that decision to the next round; here it is decided conservatively, which only lowers acceptance).

    Written through `verify` as ν_t = δ(x̃_t) where the mismatch is accepted (recorded as w_t = 0) and p_t elsewhere
    (w_t = 1): at T = 0 (the paper's setting) this is the rule exactly, and entropy_threshold = +∞ is greedy SD token
    for token. At T > 0 (our extension: "the target's choice" is its argmax, drafts are sampled) ν_t depends on the
    draft itself and the drafts after it, so the output is not ν-distributed: FLy is the one rule here whose
    decision cannot be a ν fixed before the draft is drawn (it looks ahead along the draft).
    """

    def __init__(self, entropy_threshold: float = 0.3, window: int = 2):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.entropy_threshold, self.window = float(entropy_threshold), int(window)

    def __call__(self, scores: RoundScores):
        p, q, drafts = scores.p, scores.q, scores.drafts
        ones = torch.ones(p.shape[:2], dtype=p.dtype, device=p.device)
        if q is None or drafts is None or drafts.shape[1] == 0:
            return p, ones
        g = drafts.shape[1]
        match = drafts == p[:, :g].argmax(-1)  # [B, γ]
        window_ok = torch.ones_like(match)
        for k in range(1, self.window + 1):  # the k-th draft after t matches (False past the round's last draft)
            window_ok &= torch.cat([match[:, k:], torch.zeros_like(match[:, :k])], 1)
        keep = (entropy(p[:, :g]) >= self.entropy_threshold) & window_ok & ~match
        w = ones.clone()
        w[:, :g] = 1.0 - keep.to(p.dtype)
        draft_point = torch.nn.functional.one_hot(drafts, p.shape[-1]).to(p.dtype)
        return torch.cat([torch.where(keep.unsqueeze(-1), draft_point, p[:, :g]), p[:, g:]], 1), w


def make_rule(name: str, **kw) -> Rule:
    """Rule by name, for configs: exact | static(w) | lossy(lenience) | cascade(threshold) | contrastive(alpha, beta)
    | fsd(threshold, divergence, bonus) | typical(epsilon, delta) | fly(entropy_threshold, window)."""
    rules: dict[str, Callable[..., Rule]] = {
        "exact": ExactRule,
        "static": StaticEnsembleRule,
        "lossy": LossyRule,
        "cascade": CascadeRule,
        "contrastive": ContrastiveRule,
        "head": HeadEnsembleRule,
        "fsd": FuzzyRule,
        "typical": TypicalRule,
        "fly": FlyRule,
    }
    if name not in rules:
        raise ValueError(f"unknown target rule {name!r}; known: {sorted(rules)}")
    return rules[name](**kw)
