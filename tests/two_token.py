"""The statistical check of a sampler's two-token continuations against an exact distribution."""

import torch
from scipy.stats import chisquare


def two_token_fit(tokens: list[list[int]], expected: torch.Tensor, vocab: int) -> tuple[float, float]:
    """(chi-square p-value over the outcomes expected more than 5 times, total variation) of sampled 2-token
    continuations against `expected` ([vocab·vocab], index x·vocab + y)."""
    n = len(tokens)
    pairs = torch.tensor([t[0] * vocab + t[1] for t in tokens])
    counts = torch.bincount(pairs, minlength=vocab * vocab).double()
    keep = expected * n > 5
    obs, exp = counts[keep], expected[keep] * n
    stat = chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy())
    return float(stat.pvalue), float(0.5 * (counts / n - expected).abs().sum())
