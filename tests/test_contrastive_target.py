"""contrastive_target against a direct float64 computation of π_CD ∝ p^(1+α)·q^(−α) on the β-plausible set,
and the β mask seen through `verify`: a draft outside the mask is never accepted."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from specdec.targets import contrastive_target
from specdec.verify import verify


def direct_cd(p: np.ndarray, q: np.ndarray, alpha: float, beta: float, temperature: float) -> np.ndarray:
    """π_CD by the textbook formula, one row at a time, in float64 probability space (no logs)."""
    out = np.zeros_like(p)
    for r in range(p.shape[0]):
        mask = (p[r] > 0) & (p[r] >= beta * p[r].max())
        w = np.where(mask, p[r] ** (1 + alpha) * np.where(mask, q[r], 1.0) ** (-alpha), 0.0)
        t = temperature if temperature else 1.0
        w = np.where(mask, w ** (1.0 / t), 0.0)
        out[r] = w / w.sum()
    return out


def random_dists(rows: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, 0.7), size=rows)
    q = rng.dirichlet(np.full(vocab, 0.7), size=rows)
    return p, q


def cd(p: np.ndarray, q: np.ndarray, alpha, beta=0.0, temperature=1.0, dtype=torch.float64) -> np.ndarray:
    lp = torch.log(torch.as_tensor(p, dtype=dtype))
    lq = torch.log(torch.as_tensor(q, dtype=dtype))
    return contrastive_target(lp, lq, alpha, beta=beta, temperature=temperature).double().numpy()


@pytest.mark.parametrize(
    "alpha,beta,temperature",
    list(itertools.product([0.0, 0.1, 0.5, 1.0, 2.0], [0.0, 0.1, 0.5], [1.0, 0.7, 1.5])),
)
def test_matches_direct_float64(alpha, beta, temperature):
    p, q = random_dists(rows=64, vocab=9, seed=1)
    got = cd(p, q, alpha, beta, temperature)
    want = direct_cd(p, q, alpha, beta, temperature)
    np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-10)


def test_float32_close_to_float64():
    p, q = random_dists(rows=64, vocab=50, seed=2)
    got = cd(p, q, 0.5, 0.1, 1.0, dtype=torch.float32)
    np.testing.assert_allclose(got, direct_cd(p, q, 0.5, 0.1, 1.0), atol=2e-5)


def test_beta_mask_zeroes_implausible_tokens_and_keeps_the_expert_argmax():
    p, q = random_dists(rows=200, vocab=12, seed=3)
    for beta in (0.05, 0.3, 0.9, 1.0):
        nu = cd(p, q, alpha=1.0, beta=beta)
        outside = p < beta * p.max(-1, keepdims=True)
        assert (nu[outside] == 0.0).all()
        assert (nu[np.arange(len(p)), p.argmax(-1)] > 0).all()
        np.testing.assert_allclose(nu.sum(-1), 1.0, atol=1e-12)
    # β = 1 keeps only the expert's argmax: CD then cannot move away from the expert's top token.
    nu = cd(p, q, alpha=3.0, beta=1.0)
    np.testing.assert_allclose(nu[np.arange(len(p)), p.argmax(-1)], 1.0)


def test_expert_neg_inf_logits_get_zero_mass():
    p, q = random_dists(rows=32, vocab=10, seed=4)
    p[:, :3] = 0.0  # e.g. tokens the expert's vocabulary masks out
    p /= p.sum(-1, keepdims=True)
    q[:5, :3] = 0.0  # the amateur may rule them out too: −inf − (−inf) must not become NaN
    q /= q.sum(-1, keepdims=True)
    for alpha, beta, t in [(0.5, 0.0, 1.0), (1.0, 0.1, 0.8), (0.0, 0.0, 1.0)]:
        nu = cd(p, q, alpha, beta, t)
        assert np.isfinite(nu).all()
        assert (nu[:, :3] == 0.0).all()
        np.testing.assert_allclose(nu, direct_cd(p, q, alpha, beta, t), atol=1e-12)


def test_alpha_zero_is_the_expert_even_with_amateur_zeros():
    p, q = random_dists(rows=32, vocab=10, seed=5)
    q[:, ::2] = 0.0
    q /= q.sum(-1, keepdims=True)
    for t in (1.0, 0.5, 2.0):
        nu = cd(p, q, alpha=0.0, temperature=t)
        want = p ** (1 / t) / (p ** (1 / t)).sum(-1, keepdims=True)
        np.testing.assert_allclose(nu, want, atol=1e-12)


def test_amateur_zero_where_expert_plausible_is_finite_and_dominant():
    """p_a(x) = 0 makes p_a^(−α) infinite: the limit puts the mass on x, and nothing may become NaN."""
    p, q = random_dists(rows=16, vocab=8, seed=6)
    x = p.argmax(-1)
    q[np.arange(16), x] = 0.0
    q /= q.sum(-1, keepdims=True)
    nu = cd(p, q, alpha=0.5, beta=0.1)
    assert np.isfinite(nu).all()
    np.testing.assert_allclose(nu.sum(-1), 1.0, atol=1e-12)
    assert (nu[np.arange(16), x] > 0.99).all()


def test_greedy_is_argmax_of_combined_logits_over_mask():
    p, q = random_dists(rows=300, vocab=20, seed=7)
    alpha, beta = 0.5, 0.1
    nu0 = cd(p, q, alpha, beta, temperature=0.0)  # temperature 0: the T = 1 distribution
    logits = (1 + alpha) * np.log(p) - alpha * np.log(q)
    logits[p < beta * p.max(-1, keepdims=True)] = -np.inf
    assert (nu0.argmax(-1) == logits.argmax(-1)).all()
    # and CD's greedy choice really differs from the expert's somewhere on these rows (the test can fail)
    assert (logits.argmax(-1) != p.argmax(-1)).any()


@pytest.mark.parametrize("greedy", [False, True])
def test_draft_outside_beta_mask_is_always_rejected(greedy):
    """Drafts chosen outside {x: p(x) ≥ β·max p} with high proposal probability: never accepted, and the
    emitted token is always inside the mask."""
    B, gamma, V, beta = 4000, 3, 16, 0.3
    g = torch.Generator().manual_seed(0)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.5)).sample((B, gamma + 1)).double()
    a = torch.distributions.Dirichlet(torch.full((V,), 0.5)).sample((B, gamma + 1)).double()
    nu = contrastive_target(p.log(), a.log(), alpha=1.0, beta=beta)
    inside = p >= beta * p.amax(-1, keepdim=True)
    # Draft the least plausible expert token at every position (outside the mask unless V is tiny) and give it
    # most of the proposal mass, so a rule that ignored the mask would accept it often.
    drafts = p[:, :gamma].argmin(-1)
    assert not inside[:, :gamma].gather(-1, drafts.unsqueeze(-1)).any()
    d = torch.full((B, gamma, V), 0.2 / (V - 1), dtype=torch.float64)
    d.scatter_(-1, drafts.unsqueeze(-1), 0.8)
    res = verify(drafts, d, nu, greedy=greedy, generator=g)
    assert (res.num_accepted == 0).all()
    assert (res.accept_prob[:, 0] == 0).all()
    emitted = res.tokens[:, 0]
    assert inside[torch.arange(B), 0, emitted].all()
