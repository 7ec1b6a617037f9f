"""Sampling through `generate` reaches the bonus position and temperatures other than 1, for every rule that builds
ν from models: exact, static ensemble, head ensemble and contrastive.

One tiny target, draft and amateur on a 6-token vocabulary; γ = 2 and 3 new tokens, so a round whose two drafts are
both accepted emits its bonus token (position γ) as the third token. The reference ν is computed from plain full
forwards of every prefix (no cache, no proposer, no rule object: the formulas written out here), at the same
temperature. Checks, at fixed seeds:
- the bonus token, conditioned on the first round accepting both drafts, follows ν(· | prompt, x1, x2);
- the three-token output follows the ν chain ν(x1)·ν(x2 | x1)·ν(x3 | x1, x2);
- each check has power: it rejects the ν of the wrong temperature (or, at T = 1, of the exact rule's p).
Tolerance: chi-square (cells pooled to expected counts ≥ 5 per prefix) p > 1e-4 for the right distribution and
p < 1e-6 for the wrong one; fixed seeds make both deterministic.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from specdec import LM, DraftModelProposer, generate
from specdec.targets import ContrastiveRule, ExactRule, HeadEnsembleRule, StaticEnsembleRule, pair_features
from specdec.testing import noisy_copy, pooled_chisquare_pvalue, random_llama

V, GAMMA, N = 6, 2, 12_000
PROMPT = [1, 4, 2]
W_STATIC, ALPHA, BETA = 0.4, 0.5, 0.05
P_OK, P_POWER = 1e-4, 1e-6


class _Head:
    """A fixed head whose w varies with all three inputs (the rule must hand it the bonus position's inputs)."""

    def __init__(self, hq: int, hp: int, nf: int):
        g = torch.Generator().manual_seed(7)
        self.a, self.b, self.c = (torch.randn(n, generator=g, dtype=torch.float64) for n in (hq, hp, nf))

    def __call__(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        z = 0.5 * h_q.double() @ self.a + 0.5 * h_p.double() @ self.b + 2.0 * feats.double() @ self.c
        return 0.2 + 0.7 * torch.sigmoid(z)  # in [0.2, 0.9]: the target always weighs in


@pytest.fixture(scope="module")
def trio():
    target = random_llama(V, hidden=16, layers=1, heads=2, seed=3, dtype=torch.float64, init_std=0.5)
    draft = noisy_copy(target, noise=0.4, seed=4)
    amateur = noisy_copy(target, noise=0.8, seed=5)
    return target, draft, amateur, _Head(16, 16, 5)


@torch.no_grad()
def _forward(model, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token log-probs and last-layer hidden state after each sequence: plain full forwards, no cache."""
    out = model(torch.tensor(seqs), output_hidden_states=True)
    return torch.log_softmax(out.logits[:, -1].double(), -1), out.hidden_states[-1][:, -1].double()


def _nu(rule: str, trio, seqs: list[list[int]], temperature: float) -> torch.Tensor:
    """ν after each sequence, from the formulas: p = softmax(logits/T), q likewise, ν per rule."""
    target, draft, amateur, head = trio
    lp, hp = _forward(target, seqs)
    lq, hq = _forward(draft, seqs)
    p, q = torch.softmax(lp / temperature, -1), torch.softmax(lq / temperature, -1)
    if rule == "exact":
        return p
    if rule == "draft":  # the proposal alone: what a rule that never verified would emit
        return q
    if rule == "static":
        return W_STATIC * p + (1 - W_STATIC) * q
    if rule == "head":
        w = head(hq, hp, pair_features(p, q)).unsqueeze(-1)
        return w * p + (1 - w) * q
    la, _ = _forward(amateur, seqs)
    logits = (1 + ALPHA) * lp - ALPHA * la
    logits[lp < lp.amax(-1, keepdim=True) + torch.log(torch.tensor(BETA, dtype=lp.dtype))] = float("-inf")
    return torch.softmax(logits / temperature, -1)


def _chain(rule: str, trio, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(joint [V, V, V] of the first three tokens, ν at the bonus position [V·V prefixes, V])."""
    nu0 = _nu(rule, trio, [PROMPT], temperature)[0]
    nu1 = _nu(rule, trio, [PROMPT + [a] for a in range(V)], temperature)
    pairs = list(itertools.product(range(V), repeat=2))
    nu2 = _nu(rule, trio, [PROMPT + [a, b] for a, b in pairs], temperature)
    joint = nu0[:, None, None] * nu1[:, :, None] * nu2.view(V, V, V)
    return joint, nu2


def _rule(rule: str, trio):
    return {"exact": ExactRule(), "static": StaticEnsembleRule(W_STATIC), "head": HeadEnsembleRule(trio[3]),
            "contrastive": ContrastiveRule(ALPHA, BETA)}[rule]


CASES = [(r, t) for r in ("exact", "static", "head") for t in (1.0, 0.7, 1.5)] + [
    ("contrastive", 1.0), ("contrastive", 1.5)]  # (contrastive at 0.7: tests/test_contrastive_lossless.py)


@pytest.mark.parametrize("rule,temperature", CASES)
def test_bonus_token_and_temperature_follow_nu(trio, rule, temperature):
    target, draft, amateur, _ = trio
    out = generate(LM(target), DraftModelProposer(LM(draft)), [PROMPT] * N, rule=_rule(rule, trio), gamma=GAMMA,
                   max_new_tokens=GAMMA + 1, temperature=temperature, amateur=LM(amateur),
                   generator=torch.Generator().manual_seed(11))
    toks = torch.tensor(out.tokens)
    assert toks.shape == (N, GAMMA + 1)
    joint, nu_bonus = _chain(rule, trio, temperature)

    # The bonus token: rows whose first round accepted both drafts. The check must run, so enough rows must get
    # there (a rule or pair that never accepts everything would make it vacuous).
    full = out.rounds["accepted"][0] == GAMMA
    assert int(full.sum()) > N // 5, f"only {int(full.sum())} of {N} rows accepted all {GAMMA} drafts"
    assert 0.1 < out.acceptance_rate < 0.95  # and rejections shape the output too
    prefix = toks[full, 0] * V + toks[full, 1]
    bonus = torch.zeros(V * V, V, dtype=torch.float64)
    bonus.index_put_((prefix, toks[full, 2]), torch.ones(len(prefix), dtype=torch.float64), accumulate=True)
    p_bonus = pooled_chisquare_pvalue(bonus, nu_bonus)
    counts = torch.bincount(toks[:, 0] * V * V + toks[:, 1] * V + toks[:, 2], minlength=V ** 3).double()
    p_joint = pooled_chisquare_pvalue(counts, joint.flatten())
    assert p_bonus > P_OK and p_joint > P_OK, (p_bonus, p_joint)

    # Power: the same statistics reject the distribution a plausible bug would sample (T ignored; or, at T = 1,
    # the proposal never mixed in / the amateur ignored: the exact rule's p; for the exact rule, the draft's q).
    wrong = {"exact": "draft"}.get(rule, "exact") if temperature == 1.0 else rule
    w_joint, w_bonus = _chain(wrong, trio, 1.0)
    assert pooled_chisquare_pvalue(bonus, w_bonus) < P_POWER
    assert pooled_chisquare_pvalue(counts, w_joint.flatten()) < P_POWER
