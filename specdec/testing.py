"""Randomly initialised Llama models for engine tests and benchmarks (no tokenizer, no download)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec.models import LM


def random_llama(
    vocab_size: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4, intermediate: int | None = None,
    seed: int = 0, dtype: torch.dtype = torch.float32, max_positions: int = 512, device: str = "cpu",
    init_std: float = 0.02,
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max_positions, attn_implementation="sdpa", tie_word_embeddings=False,
        initializer_range=init_std, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model


def random_pair(vocab_size: int = 64, dtype: torch.dtype = torch.float32, seed: int = 0, init_std: float = 0.02,
                **kw) -> tuple[LM, LM]:
    """(target, draft) LMs of the same vocabulary; the target is the larger one."""
    target = random_llama(vocab_size, hidden=48, layers=2, seed=seed, dtype=dtype, init_std=init_std, **kw)
    draft = random_llama(vocab_size, hidden=16, layers=1, heads=2, seed=seed + 1, dtype=dtype, init_std=init_std, **kw)
    return LM(target, "target"), LM(draft, "draft")


def noisy_copy(model: LlamaForCausalLM, noise: float, seed: int = 0) -> LlamaForCausalLM:
    """A copy of `model` with Gaussian noise on every weight: a draft that agrees with the target only partly."""
    import copy

    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std() * torch.randn(param.shape, generator=g, dtype=param.dtype))
    return draft


def pooled_chisquare_pvalue(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Chi-square goodness-of-fit p-value of observed counts against per-group distributions, for sampling tests.

    counts [G, V] (or [V]): observations in group g (e.g. the prefix a token was drawn after) and cell v;
    probs [G, V] (or [V]): each group's distribution (rows sum to 1). A group's expected counts are its own total
    times its row, so the test is conditional on how often each group occurred. Within a group, cells expected
    below `min_expected` are pooled into one cell (the chi-square approximation needs ~5 per cell); degrees of
    freedom = cells − groups. An observation in a cell of probability 0 gives p = 0 (it cannot happen).
    """
    from scipy.stats import chi2

    counts, probs = counts.double().reshape(-1, counts.shape[-1]), probs.double().reshape(-1, probs.shape[-1])
    if counts.shape != probs.shape:
        raise ValueError(f"counts {tuple(counts.shape)} and probs {tuple(probs.shape)} differ")
    if bool((counts[probs <= 0] > 0).any()):
        return 0.0
    stat, cells, groups = 0.0, 0, 0
    for obs, p in zip(counts, probs):
        n = float(obs.sum())
        if n == 0:
            continue
        exp = n * p / p.sum()
        small = exp < min_expected
        o = torch.cat([obs[~small], obs[small].sum().view(1)]) if small.any() else obs
        e = torch.cat([exp[~small], exp[small].sum().view(1)]) if small.any() else exp
        keep = e > 0
        stat += float(((o[keep] - e[keep]) ** 2 / e[keep]).sum())
        cells += int(keep.sum())
        groups += 1
    if cells - groups < 1:
        raise ValueError("too few cells for a chi-square test: every group has one cell with expected counts")
    return float(chi2.sf(stat, cells - groups))


class HostReads:
    """Counts reads of tensor values into Python while active (`with HostReads() as reads: ...; reads.n`): scalar
    reads (.item(), int(), bool(), float()), data-dependent shapes (nonzero) and whole-tensor copies (.tolist(),
    .numpy()), wherever they are made (engine or transformers). On a GPU each read of a device tensor waits for the
    device. On the CPU every tensor is a host tensor, so this over-counts (a read of a host-built mask counts
    too): an upper bound on the device→host reads a GPU would wait for."""

    NAMES = ("item", "tolist", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__")

    def __init__(self) -> None:
        self.n = 0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> HostReads:
        for name in self.NAMES:
            orig = getattr(torch.Tensor, name)
            self._saved[name] = orig

            def counted(t, *a, _orig=orig, **k):
                if t.numel() and t.device.type != "meta":
                    self.n += 1
                return _orig(t, *a, **k)
            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc) -> None:
        for name, orig in self._saved.items():
            setattr(torch.Tensor, name, orig)
        self._saved.clear()


def exact_two_token_target(model: LlamaForCausalLM, prompt: list[int]) -> torch.Tensor:
    """The target's exact distribution of its next two tokens after `prompt`, flattened to [V·V] (index x·V + y):
    what lossless speculative decoding must sample, for statistical tests on small vocabularies."""
    V = model.config.vocab_size
    ids = torch.tensor([prompt])

    def dist(ids):
        return torch.softmax(model(ids).logits[0, -1].double(), -1)

    first = dist(ids)
    joint = torch.zeros(V, V, dtype=torch.float64)
    for x in range(V):
        joint[x] = first[x] * dist(torch.cat([ids, torch.tensor([[x]])], 1))
    return joint.flatten()
