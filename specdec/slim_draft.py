"""A cheaper draft LM: int8 linears and a frequency-ranked subset of the output vocabulary (FR-Spec).

At batch 1 a draft step costs the bytes of its weights (memory-bound, on a GPU and on this CPU alike). The 0.5B
Qwen draft spends 28% of them on its 151,936-row output head, and bf16 weights cost twice int8's. Both cuts change
q only: q is still a distribution (zero outside the kept vocabulary), so every rule's guarantee is unchanged (SD
stays lossless w.r.t. p) and only acceptance can move. Never slim the target or the amateur: p defines ν, and
p_amateur defines π_CD.

Two int8 modes. "weight": int8 weights, activations in the model's dtype (aten's weight-only kernel). "dynamic":
each token's activations are quantized too, at run time, so the CPU can use its int8 dot-product units (fbgemm,
VNNI): on this CPU it makes a one-token step of the 0.5B ~1.5x cheaper than weight-only (docs/results/real_speed/).
One scale per token, not per call: LLMs put a few huge activations on a few tokens (Sun et al. 2024, "Massive
activations"), and one scale over a whole prompt let them spoil every other token (a first version with one scale
per call moved the 0.5B's q on MBPP answers by a mean TV of 0.18; per token it is 0.075 with the 32k vocabulary,
against 0.064 weight-only: docs/results/real_speed/draft_fidelity.py).

    slim_draft(models.draft, vocab=32768, int8="dynamic")  # or model.draft_vocab / model.draft_int8 in the config
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from specdec.models import LM

_INT8_MM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what aten's CPU int8 matmul takes


class Int8Linear(nn.Module):
    """y = x·Wᵀ + b with W stored as int8 and one scale per output row (symmetric, round to nearest)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        w = weight.detach().float()
        scale = w.abs().amax(1).clamp_min(1e-12) / 127.0
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous())
        self.register_buffer("scale", scale.to(weight.dtype))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        # aten's CPU kernel: float32/bf16/fp16 only, and it crashed (segfault, torch 2.13) on bf16 inputs of several
        # rows when in_features was not a multiple of 16; 32 is kept as the margin (Qwen's 896 and 4864 pass).
        self.fast = weight.dtype in _INT8_MM_DTYPES and self.in_features % 32 == 0

    def dequantized(self) -> torch.Tensor:
        return self.qweight.to(self.scale.dtype) * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self._matmul(x.reshape(-1, self.in_features).contiguous())
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, x2: torch.Tensor) -> torch.Tensor:
        """x2 [N, K] · (q·s)ᵀ, without the bias."""
        if self.fast and x2.device.type == "cpu" and x2.dtype == self.scale.dtype:
            return torch.ops.aten._weight_int8pack_mm(x2, self.qweight, self.scale)  # int8: half of bf16's bytes
        # any other device or dtype: dequantize on the fly (correct everywhere; its speed is not measured)
        return nn.functional.linear(x2, self.qweight.to(x2.dtype)) * self.scale.to(x2.dtype)


class DynamicInt8Linear(Int8Linear):
    """Int8Linear whose input is quantized too, per token (row): uint8 with its own scale and zero point, from the
    row's min and max (0 included), as fbgemm's dynamic linear does. On the CPU, up to KERNEL_ROWS rows (batch-1
    decoding): fbgemm's kernel, one call per row; more rows (prefills, batches): the same integer arithmetic in
    torch's int8 x int8 matmul. Other devices: the same quantization in float ops, then Int8Linear. So a row's
    output never depends on the other rows of its call, and a prefill computes what decoding would."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__(weight, bias)
        self.packed = None  # fbgemm's packed weight: built on the first CPU call (not a buffer: never saved)
        self.row_sums = None  # Σ_k W_nk in int32, for the zero-point term of the int8 matmul (likewise)

    def _kernel(self):
        if self.packed is None:
            with warnings.catch_warnings():  # torch marks quantized tensors deprecated; the kernel is torch 2.13's
                warnings.simplefilter("ignore", UserWarning)
                q = torch._make_per_channel_quantized_tensor(
                    self.qweight, self.scale.double(), torch.zeros(self.out_features, dtype=torch.long), 0)
                self.packed = torch.ops.quantized.linear_prepack(q, None)
        return self.packed

    def _matmul(self, x2: torch.Tensor) -> torch.Tensor:
        if x2.device.type == "cpu":
            if x2.shape[0] <= KERNEL_ROWS and _DYNAMIC_KERNEL:
                # fbgemm quantizes a whole call with one scale, so one call per row (batch-1 decoding feeds 1 row
                # a step, and 2 after a fully accepted round).
                kernel = self._kernel()
                rows = [torch.ops.quantized.linear_dynamic(r, kernel, False) for r in x2.float().split(1)]
                return (rows[0] if len(rows) == 1 else torch.cat(rows)).to(x2.dtype)
            if _INT_MM:
                return self._int_matmul(x2)
        return super()._matmul(quantize_rows(x2).to(x2.dtype))

    def _int_matmul(self, x2: torch.Tensor) -> torch.Tensor:
        """Σ_k (u_k − z)·W_nk for uint8 u, exact in int32 (|sum| < 2^27 for K < 8,300), then the two scales.
        torch's int8 matmul takes signed inputs, so u = a + 128 with int8 a: Σ(u − z)W = a·Wᵀ + (128 − z)·ΣW.
        Why: aten's weight-only kernel (the path before) widens each weight to float and made a 160-token prefill
        of the 0.5B cost 3.3x this (1.8 vs 0.55 s, one bf16 thread)."""
        if self.row_sums is None:
            self.row_sums = self.qweight.sum(1, dtype=torch.int32)
        u, scale, zero = row_grid(x2)
        acc = torch._int_mm((u - 128).to(torch.int8), self.qweight.t())
        acc = acc + (128 - zero).to(torch.int32) * self.row_sums
        return (acc.float() * (scale * self.scale.float())).to(x2.dtype)


def row_grid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row of x [N, K] on its uint8 grid, as fbgemm's dynamic quantization (float32 arithmetic): the integers
    u in [0, 255] (as floats), the row's scale (max − min)/255 with 0 included, and its zero point round(−min/scale);
    the row is ≈ (u − zero)·scale."""
    x = x.float()
    lo, hi = x.amin(1, keepdim=True).clamp(max=0), x.amax(1, keepdim=True).clamp(min=0)
    scale = ((hi - lo) / 255).clamp_min(torch.finfo(torch.float32).tiny)
    zero = torch.round(-lo / scale).clamp(0, 255)
    return (torch.round(x / scale) + zero).clamp(0, 255), scale, zero


def quantize_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row of x [N, K] rounded to its uint8 grid (row_grid) and back."""
    u, scale, zero = row_grid(x)
    return (u - zero) * scale


def has_dynamic_kernel() -> bool:
    try:
        return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm")) and hasattr(
            torch.ops.quantized, "linear_dynamic")
    except (AttributeError, RuntimeError):
        return False


def has_int_mm() -> bool:
    """torch's int8 x int8 → int32 matmul on the CPU (oneDNN), exact on a small case."""
    try:
        a, w = torch.arange(-8, 8, dtype=torch.int8).view(2, 8), torch.arange(24, dtype=torch.int8).view(3, 8)
        return torch.equal(torch._int_mm(a, w.t()).long(), a.long() @ w.long().t())
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


_DYNAMIC_KERNEL = has_dynamic_kernel()
_INT_MM = has_int_mm()
# Rows up to which one kernel call per row beats torch's int8 matmul over the whole call (0.5B, one bf16 thread,
# step of w rows with a warm cache: w = 1 49-54 vs 73-98 ms, 4: 92-95 vs 105-120, 6: 119-123 vs 111-115, 8: 137-161
# vs 119-121; the int8 matmul's quantization costs ~9 torch ops per linear, the kernel's none).
KERNEL_ROWS = 4


def int8_mode(int8: bool | str | None) -> str | None:
    """None (no int8), "weight" (True) or "dynamic"; anything else is an error naming the choices."""
    if int8 is None or int8 is False or (isinstance(int8, str) and int8.lower() in ("false", "none", "")):
        return None
    if int8 is True or (isinstance(int8, str) and int8.lower() in ("true", "weight")):
        return "weight"
    if isinstance(int8, str) and int8.lower() == "dynamic":
        return "dynamic"
    raise ValueError(f"draft int8 mode must be false, true / weight, or dynamic; got {int8!r}")


class SubsetHead(nn.Module):
    """The output head over the kept token ids only; logits of every other id are −inf, so q gives them no mass and
    the rest of the engine sees a [.., vocab_size] distribution as before."""

    def __init__(self, head: nn.Module, ids: torch.Tensor, vocab_size: int):
        super().__init__()
        self.head = head
        self.register_buffer("ids", ids)
        self.vocab_size = vocab_size

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        sub = self.head(h.contiguous())
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        return out.index_copy_(-1, self.ids, sub)


def frequent_ids(k: int, vocab_size: int, counts: torch.Tensor | None = None, always: Iterable[int] = ()) -> torch.Tensor:
    """The k ids to keep, sorted: `always` (special tokens: a draft must be able to end an answer), then the ids by
    `counts` (descending; e.g. token counts of text disjoint from evaluation), ties and uncounted ids by id. Without
    counts the order is the id order, which in a byte-level BPE vocabulary is merge order: the earliest merges are
    the most frequent pairs of the tokenizer's training corpus."""
    if not 0 < k <= vocab_size:
        raise ValueError(f"draft vocabulary must be in (0, {vocab_size}], got {k}")
    always = sorted({int(i) for i in always if 0 <= int(i) < vocab_size})
    if len(always) > k:
        raise ValueError(f"draft vocabulary {k} is smaller than the {len(always)} special tokens it must keep")
    key = torch.zeros(vocab_size, dtype=torch.float64) if counts is None else counts[:vocab_size].double().clone()
    if key.numel() < vocab_size:
        raise ValueError(f"counts cover {key.numel()} ids, the vocabulary has {vocab_size}")
    key[always] = float("inf")
    # Stable sort on −count keeps id order among equal counts.
    order = torch.sort(-key, stable=True).indices
    return torch.sort(order[:k]).values


def special_ids(tokenizer) -> list[int]:
    """The ids a draft must always be able to propose: the tokenizer's special and added tokens (end of answer,
    chat markers)."""
    return sorted(set(getattr(tokenizer, "all_special_ids", None) or [])
                  | set(getattr(tokenizer, "added_tokens_decoder", None) or {}))


def read_vocab(path: str | Path) -> torch.Tensor:
    """The kept ids a vocabulary file (data/draft_vocab.py) lists."""
    try:
        ids = json.loads(Path(path).read_text())["ids"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a draft vocabulary file (data/draft_vocab.py writes them): {e}") from e
    return torch.tensor(sorted(set(int(i) for i in ids)), dtype=torch.long)


def token_counts(sequences: Iterable[list[int]], vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for seq in sequences:
        ids = torch.tensor([t for t in seq if 0 <= t < vocab_size], dtype=torch.long)
        counts += torch.bincount(ids, minlength=vocab_size)
    return counts


def slim_draft(lm: LM, *, vocab: int | None = None, int8: bool | str = False, counts: torch.Tensor | None = None,
               always: Iterable[int] = (), ids: torch.Tensor | None = None) -> dict:
    """Make a draft LM cheaper in place (see the module doc): int8 linears (int8=True / "weight", or "dynamic");
    and an output vocabulary of `ids`, or of the `vocab` most frequent ids (frequent_ids of `counts` and `always`).
    Returns what was done: the int8 mode, the kept vocabulary, and the bytes of the weights one step reads before
    and after (the embedding table is looked up, not read whole)."""
    if ids is not None and vocab is not None:
        raise ValueError("give the kept ids or their number, not both")
    mode = int8_mode(int8)
    model = lm.model
    head = model.get_output_embeddings()
    before = _step_bytes(model)

    int8_linear = DynamicInt8Linear if mode == "dynamic" else Int8Linear
    if mode:
        for module in list(model.modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, nn.Linear) and child is not head:
                    setattr(module, child_name, int8_linear(child.weight, child.bias))
    if ids is not None:
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= lm.vocab_size:
            raise ValueError(f"kept ids must lie in [0, {lm.vocab_size}) and be at least one")
        ids = torch.unique(ids).to(head.weight.device)  # sorted, each once
    elif vocab is not None and vocab < lm.vocab_size:
        ids = frequent_ids(vocab, lm.vocab_size, counts, always).to(head.weight.device)
    if ids is not None or mode:
        weight, bias = head.weight.detach(), getattr(head, "bias", None)
        if ids is not None:
            weight, bias = weight[ids], None if bias is None else bias[ids]
        if mode:
            new = int8_linear(weight, bias)
        else:
            new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device,
                            dtype=weight.dtype).requires_grad_(False)
            new.weight.copy_(weight)
            if bias is not None:
                new.bias.copy_(bias)
        # Untie from the input embedding (tied in Qwen2.5's small models): the table itself stays for lookups.
        model.set_output_embeddings(SubsetHead(new, ids, lm.vocab_size) if ids is not None else new)
        model.config.tie_word_embeddings = False
    kept = lm.vocab_size if ids is None else int(ids.numel())
    lm.slim = {"int8": mode or False, "vocab": kept, "bytes_before": before, "bytes_after": _step_bytes(model)}
    return lm.slim


def _step_bytes(model: nn.Module) -> int:
    """Bytes of weights one decoding step reads: every parameter and buffer except the input embedding table."""
    emb = model.get_input_embeddings().weight
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t is emb or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    if model.get_output_embeddings() is not None and getattr(model.get_output_embeddings(), "weight", None) is emb:
        total += emb.numel() * emb.element_size()  # a tied head reads the table whole
    return total
