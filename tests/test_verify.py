"""verify(): losslessness (statistical), greedy semantics, edge cases."""

import pytest
import torch
from scipy.stats import chisquare

from specdec.targets import (
    cascade_weight,
    contrastive_target,
    ensemble_target,
    fuzzy_weight,
    lossy_target,
    truncate,
    typical_set,
    typical_target,
)
from specdec.verify import output_distribution, sample, verify

V, GAMMA, N = 6, 2, 200_000
# Tolerances: chi-square goodness of fit at p > 1e-4 (fixed seeds, so deterministic) and TV(empirical, expected)
# below 0.01; with 200k draws over 6 symbols the expected TV is ~0.003.
P_MIN, TV_MAX = 1e-4, 0.01


def _dists(seed, one_hot=False):
    g = torch.Generator().manual_seed(seed)
    # q overlaps p partly (as a real draft does), so that enough rows accept every draft and each position's
    # check below has samples; a one-hot proposal picks a token p finds likely (as a prompt lookup would).
    p = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((GAMMA + 1,))
    q = 0.5 * p + 0.5 * torch.distributions.Dirichlet(torch.full((V,), 0.7, dtype=torch.float64)).sample((GAMMA + 1,))
    if one_hot:
        q = torch.nn.functional.one_hot(torch.multinomial(p, 1, generator=g).squeeze(-1), V).double()
    return p, q


def _targets(p, q):
    # an amateur that agrees with p in part: π_CD then keeps enough overlap with q to reach the bonus position
    a = 0.5 * p + 0.5 * torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((GAMMA + 1,))
    lossy = lossy_target(p, 0.5)
    lossy[-1] = p[-1]
    return {
        "exact": p,
        "static": ensemble_target(p, q, 0.3),
        "dynamic": ensemble_target(p, q, torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64)),
        "lossy": lossy,
        "cascade": ensemble_target(p, q, cascade_weight(p, q, 0.0)),
        "contrastive": contrastive_target(p.log(), a.log(), alpha=0.5, beta=0.1),
        # Fuzzy SD's ν-form (KL threshold at the median of the three positions': some keep the draft, some not)
        "fsd": ensemble_target(p, q, fuzzy_weight(p, q, _kl_median(p, q))),
        # typical acceptance at the draft positions, the bonus from p (as TypicalRule builds it)
        "typical": torch.cat([typical_target(p[:-1], q[:-1], 0.3, 0.3 ** 0.5), p[-1:]]),
        # a truncating head (HeadEnsembleRule with typical_epsilon 0.3): w·p + (1 − w)·q cut to p's typical set,
        # at every position (its bonus token comes from ν too)
        "truncated_head": truncate(ensemble_target(p, q, torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64)), p,
                                   typical_set(p, 0.3, 0.3 ** 0.5)),
    }


def _kl_median(p, q):
    from specdec.targets import kl_divergence

    return float(kl_divergence(p, q).median())


def _check(samples, expected):
    counts = torch.bincount(samples, minlength=V).double()
    exp = expected * counts.sum()
    keep = exp > 0
    assert counts[~keep].sum() == 0, "a token with zero probability was emitted"
    tv = 0.5 * (counts / counts.sum() - expected).abs().sum()
    if keep.sum() == 1:  # a point mass: every draw must be that token
        assert tv == 0
        return
    stat = chisquare(counts[keep].numpy(), exp[keep].numpy())
    assert stat.pvalue > P_MIN and tv < TV_MAX, (stat.pvalue, float(tv), counts / counts.sum(), expected)


@pytest.mark.parametrize("one_hot", [False, True], ids=["sampled", "one_hot"])
@pytest.mark.parametrize("rule", ["exact", "static", "dynamic", "lossy", "cascade", "contrastive", "fsd", "typical",
                                  "truncated_head"])
def test_emitted_tokens_follow_nu(rule, one_hot):
    torch.manual_seed(0)
    p, q = _dists(1, one_hot)
    nu = _targets(p, q)[rule]
    g = torch.Generator().manual_seed(2)
    drafts = torch.stack([torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(GAMMA)], 1)
    res = verify(drafts, q[:GAMMA].expand(N, -1, -1), nu.expand(N, -1, -1), generator=g)
    # First emitted token ~ ν₀ (for the unnormalised lenient rule: the distribution that rule really samples from).
    _check(res.tokens[:, 0], output_distribution(nu[0], q[0]))
    # Every later position, given all drafts before it were accepted: ν₁ at the second draft position, then the
    # bonus token (all γ drafts accepted), drawn from ν_γ itself (no draft there). Each check must run: a pair
    # that leaves too few samples at a position would make it vacuous, so that fails instead of being skipped.
    for i in range(1, GAMMA + 1):
        reached = res.num_accepted >= i
        assert int(reached.sum()) > 20_000, f"only {int(reached.sum())} of {N} rows reach position {i}"
        expected = output_distribution(nu[i], q[i]) if i < GAMMA else nu[GAMMA] / nu[GAMMA].sum()
        _check(res.tokens[reached, i], expected)
    if rule != "lossy":
        assert torch.allclose(output_distribution(nu[0], q[0]), nu[0] / nu[0].sum(), atol=1e-12)


def test_accept_prob_and_padding():
    p = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [1 / 3] * 3]], dtype=torch.float64)
    q = torch.tensor([[[0.25, 0.25, 0.5], [0.6, 0.2, 0.2]]], dtype=torch.float64)
    res = verify(torch.tensor([[2, 0]]), q, p, generator=torch.Generator().manual_seed(0))
    # ν puts zero mass on draft 2 at position 0: accept_prob 0, always rejected, emitted from the residual {0, 1}.
    assert res.accept_prob[0, 0] == 0 and res.num_accepted.item() == 0
    assert res.tokens[0, 0].item() in (0, 1) and res.tokens[0, 1:].tolist() == [-1, -1]
    assert torch.allclose(res.accept_prob[0, 1], torch.tensor(0.2 / 0.6, dtype=torch.float64))


def test_greedy_accepts_while_argmax_matches():
    nu = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]])
    d = torch.full((1, 2, 2), 0.5)
    res = verify(torch.tensor([[1, 1]]), d, nu, greedy=True)
    assert res.num_accepted.item() == 1 and res.tokens.tolist() == [[1, 0, -1]]
    res = verify(torch.tensor([[1, 0]]), d, nu, greedy=True)
    assert res.num_accepted.item() == 2 and res.tokens.tolist() == [[1, 0, 1]]
    # the greedy rule accepts with probability 0 or 1, not min(1, ν/d): the recorded probability is the indicator
    res = verify(torch.tensor([[1, 1]]), d, nu, greedy=True)
    assert res.accept_prob.tolist() == [[1.0, 0.0]]


def test_zero_probability_draft_is_an_error():
    with pytest.raises(ValueError, match="probability 0"):
        verify(torch.tensor([[1]]), torch.tensor([[[1.0, 0.0]]]), torch.full((1, 2, 2), 0.5))


def test_shape_errors():
    with pytest.raises(ValueError, match="target_probs"):
        verify(torch.tensor([[1]]), torch.full((1, 1, 2), 0.5), torch.full((1, 1, 2), 0.5))


def test_sample_draws_each_row_from_its_weights_and_never_a_zero_weight(monkeypatch):
    """The one categorical draw (inverse CDF): unnormalised rows are drawn in proportion to their weights
    (chi-square at P_MIN, 200k draws per row, fixed seed), zero weights never, and a uniform u that rounds up to
    the row's total still lands on a token with weight."""
    g = torch.Generator().manual_seed(5)
    w = torch.tensor([[3.0, 0.0, 1.0, 0.5, 0.0, 0.25], [0.0, 0.0, 0.0, 2.0, 1e-3, 7.0]], dtype=torch.float32)
    draws = sample(w.repeat_interleave(N, 0), g).view(2, N)
    for row, x in zip(w.double(), draws):
        counts = torch.bincount(x, minlength=V).double()
        assert (counts[row == 0] == 0).all()
        expected = row / row.sum() * N
        assert chisquare(counts[row > 0], expected[row > 0]).pvalue > P_MIN
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    assert sample(torch.tensor([[0.0, 2.0, 1.0, 0.0, 0.0]])).tolist() == [2]
