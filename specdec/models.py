"""A Hugging Face causal LM plus its own KV cache, fed in ragged batched chunks.

Batching choice: all rows share one `DynamicCache`, and every cache slot has a 0/1 entry in a 2D attention mask.
Rows that accept different numbers of drafts simply turn their rejected slots into *holes* (mask 0), and each row
gets its true `position_ids`, so attention sees exactly that row's tokens at their real positions (measured exact
in float64; see shared NOTES). This keeps one forward per round for the whole batch with no per-row re-feeding.
Trailing slots that are holes in every row are cropped, so batch size 1 never carries a hole; when the holes of a
larger batch pile up (more than `compact_slack` of the cache), the cache is *compacted*: each row's kept slots are
gathered into a left-padded layout, so the cache grows with the accepted tokens, not with γ+1 per round.

Every slot attends to itself: a left-padding slot's query would otherwise see no key at all, and fused attention
kernels (SDPA on CUDA, eager in float64) return NaN for such a row, which then sits in the cache as keys and values
that poison every later query through 0 × NaN.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask

from specdec.provenance import replace_dir

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


class TokenizerMismatchError(ValueError):
    """Draft, target (or amateur) do not share a tokenizer, so their token ids cannot be compared."""


def resolve_device(device: str | torch.device | None) -> torch.device:
    """"auto" → cuda when present, else cpu."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def bf16_supported(device: str | torch.device | None = None) -> bool:
    """Whether bfloat16 matrix work is fast here: a CUDA device that supports it, or a CPU with AVX512-BF16 or AMX
    (elsewhere the CPU emulates bf16 and is slower than float32)."""
    device = resolve_device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    try:
        flags = set(next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device | None = None) -> torch.dtype:
    """A dtype name or torch.dtype; "auto" is bfloat16 where `bf16_supported(device)`, else float32 (logged)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        fast = bf16_supported(device)
        log.info("dtype auto: %s on %s (%s)", "bfloat16" if fast else "float32", resolve_device(device),
                 "bf16 supported" if fast else "no fast bf16 here")
        return torch.bfloat16 if fast else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)} or 'auto'")
    return DTYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16', 'float32', ...: what run files and exports record."""
    return str(dtype).removeprefix("torch.")


def _hub_hint(name: str, err: Exception) -> OSError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    why = "the Hugging Face hub is switched off (HF_HUB_OFFLINE=1)" if offline else "the Hugging Face hub is unreachable"
    return OSError(
        f"could not load {name!r}: it is not a local directory and {why} ({type(err).__name__}: {err}). "
        f"Download the model elsewhere and pass its local directory instead (e.g. model.target=/path/to/model), "
        f"or use the embedded default (model=tiny)."
    )


def find_gguf(path: Path) -> Path | None:
    """The GGUF file a path names: the file itself, or a directory's model.gguf / only *.gguf (None: not GGUF)."""
    if path.is_file():
        return path if path.suffix == ".gguf" else None
    if not path.is_dir():
        return None
    if (path / "model.gguf").is_file():
        return path / "model.gguf"
    found = sorted(p for p in path.glob("*.gguf") if p.is_file())
    if len(found) > 1:
        raise ValueError(f"{path} holds several GGUF files ({', '.join(p.name for p in found)}): pass one of them")
    return found[0] if found else None


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of a prompt string, with the tokenizer's special tokens, unless the text already starts with its
    BOS: a rendered chat template often does (Llama 3's), and BOS twice is a prompt the model never saw."""
    bos = getattr(tokenizer, "bos_token", None)
    ids = tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]
    if not ids:
        raise ValueError(f"prompt encodes to no tokens: {text[:60]!r}")
    return list(ids)


def _looks_local(name: str) -> bool:
    """A path rather than a hub id ("org/name"): absolute, relative with ./ ~, or more than one '/'."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith(".gguf")


# The GGUF models `make real-models` fetches (data/fetch_real_models.py's MODELS: the data package fetches them, the
# engine only names them in its hint; tests/test_real_models.py checks that the two lists agree).
REAL_MODEL_NAMES = ("qwen25coder_15b", "qwen25coder_05b", "smollm2_135m")


def _missing_hint(local: Path) -> str:
    key = local.stem if local.suffix == ".gguf" else local.name
    if key not in REAL_MODEL_NAMES and local.parent.name in REAL_MODEL_NAMES:
        key = local.parent.name
    if key in REAL_MODEL_NAMES:
        return f"; fetch it with `make real-models` (or `python -m data.fetch_real_models {key}`)"
    return ""


def load_model(
    name_or_path: str | Path, *, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32"
) -> tuple[PreTrainedModel, object]:
    """Load a causal LM and its tokenizer, in eval mode, with sdpa attention, from a Hugging Face directory, a
    directory holding a GGUF file (or the .gguf file itself; quantized weights are dequantized to dtype), or a hub
    id."""
    name = str(name_or_path)
    local = Path(name).expanduser()
    if not local.exists() and _looks_local(name):
        raise FileNotFoundError(f"model path {local} does not exist{_missing_hint(local)}")
    gguf = find_gguf(local) if local.exists() else None
    if gguf is not None:
        return _load_gguf(gguf, device, dtype)
    if local.exists() and not (local / "config.json").exists():
        raise FileNotFoundError(
            f"{local} holds neither config.json nor a *.gguf file: not a Hugging Face model directory")
    src = str(local) if local.exists() else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
        model = AutoModelForCausalLM.from_pretrained(
            src, dtype=resolve_dtype(dtype), attn_implementation="sdpa"
        )
    except OSError as err:
        if local.exists():
            raise
        raise _hub_hint(name, err) from err
    model.to(resolve_device(device)).eval()
    model.requires_grad_(False)
    return model, tokenizer


def load_config(name_or_path: str | Path):
    """A model's config (hidden width, vocabulary, ...) without its weights: config.json, or a GGUF's metadata."""
    from transformers import AutoConfig

    local = Path(str(name_or_path)).expanduser()
    gguf = find_gguf(local) if local.exists() else None
    if gguf is not None:
        return AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return AutoConfig.from_pretrained(str(local) if local.exists() else str(name_or_path))


def load_tokenizer(name_or_path: str | Path):
    """A model's tokenizer without its weights (the one load_model returns)."""
    local = Path(str(name_or_path)).expanduser()
    gguf = find_gguf(local) if local.exists() else None
    if gguf is not None:
        return _gguf_tokenizer(gguf)
    return AutoTokenizer.from_pretrained(str(local) if local.exists() else str(name_or_path))


def _load_gguf(path: Path, device: str | torch.device, dtype: str | torch.dtype) -> tuple[PreTrainedModel, object]:
    """transformers' GGUF reader (needs the `gguf` and `accelerate` packages); works offline."""
    try:
        tokenizer = _gguf_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=resolve_dtype(dtype), attn_implementation="sdpa",
            **_dense_gguf(),
        )
    except ImportError:
        raise
    except Exception as err:  # the gguf reader raises assorted errors on a torn or foreign file
        raise ValueError(f"could not load the GGUF file {path} ({type(err).__name__}: {err}); a truncated or "
                         f"corrupt file? Fetch it again (data/fetch_real_models.py checks its sha256)") from err
    model.to(resolve_device(device)).eval()
    model.requires_grad_(False)
    return model, tokenizer


def _dense_gguf() -> dict:
    """Ask for dense weights: transformers >= 5.25 can keep GGUF weights packed in their quantized blocks and
    compute every matmul in float32 through a hub kernel. That would change the numerics and cost of the real pair
    (measured dense), make bf16 pointless, and depend on a download; dense weights are what the project measures."""
    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers: always dense
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _gguf_tokenizer(path: Path):
    """The GGUF's tokenizer, converted once and saved next to it (<stem>.tokenizer/): converting a 151k-token
    vocabulary takes minutes on a small CPU. The saved copy is used only while the GGUF's size and mtime match."""
    cache = path.with_name(path.stem + ".tokenizer")
    stamp = {"gguf": path.name, "bytes": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
    try:
        if json.loads((cache / "gguf_source.json").read_text()) == stamp:
            return AutoTokenizer.from_pretrained(str(cache))
    except (OSError, ValueError):
        pass
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    try:  # best effort: a read-only model directory just converts every time
        tokenizer.save_pretrained(str(tmp))
        (tmp / "gguf_source.json").write_text(json.dumps(stamp))
        replace_dir(tmp, cache)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def _special_ids(tok) -> dict:
    return {k: getattr(tok, f"{k}_token_id", None) for k in ("eos", "bos", "pad")}


def check_tokenizers_match(tokenizers: dict[str, object]) -> None:
    """Raise TokenizerMismatchError naming what differs (size, ids of tokens, special tokens) between tokenizers."""
    names = list(tokenizers)
    ref_name, ref = names[0], tokenizers[names[0]]
    ref_vocab = ref.get_vocab()
    for name in names[1:]:
        tok = tokenizers[name]
        problems = []
        if len(tok) != len(ref):
            problems.append(f"vocabulary size {len(ref)} ({ref_name}) vs {len(tok)} ({name})")
        vocab = tok.get_vocab()
        if vocab != ref_vocab:
            diff = [t for t in ref_vocab if vocab.get(t) != ref_vocab[t]][:3]
            shown = ", ".join(f"{t!r}: {ref_vocab[t]} vs {vocab.get(t)}" for t in diff)
            problems.append(f"token ids differ ({shown}{', ...' if diff else ''})")
        if _special_ids(tok) != _special_ids(ref):
            problems.append(f"special token ids {_special_ids(ref)} ({ref_name}) vs {_special_ids(tok)} ({name})")
        if problems:
            raise TokenizerMismatchError(
                f"{ref_name} and {name} do not share a tokenizer: " + "; ".join(problems)
                + ". Speculative decoding compares token ids, so both models must use the same tokenizer."
            )


class LM:
    """One causal LM with its own cache: `reset`, `feed` ragged chunks, `rollback` rejected tokens."""

    def __init__(self, model: PreTrainedModel, name: str = "model"):
        self.model = model
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        _contiguous_lm_head_input(model)
        text = model.config.get_text_config()  # multimodal checkpoints (Gemma 3) keep these in a text config
        local = sorted({t for t in getattr(text, "layer_types", None) or [] if t != "full_attention"})
        if local:
            # transformers' sliding-window cache layers cannot be cropped once the window is full, and every
            # rejected draft is a crop: refuse here rather than crash mid-run.
            raise ValueError(f"{name}: {type(model).__name__} has {', '.join(local)} layers, whose KV cache cannot "
                             "roll back rejected drafts; only models with full attention in every layer are supported")
        self.hidden_size = text.hidden_size
        self.max_positions = getattr(text, "max_position_embeddings", None) or 1 << 30
        self.calls = 0
        self.seconds = 0.0
        # Wait for the device after each call so `seconds` is compute time rather than launch time. Off by default:
        # on a GPU each wait stalls the launch queue; benchmarks that report a time split switch it on.
        self.sync_timing = False
        self.compact_slack = 0.125  # compact when hole columns exceed this share of the cache (and 8 slots)
        self.compactions = 0
        self.reset(1)

    def reset(self, batch_size: int) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.mask = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)
        self.next_pos = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self.real_tail = 0  # trailing slots real in every row (host-side count; 0 = unknown)
        self.lengths: list[int] | None = [0] * batch_size  # real slots per row, known on the host (None: unknown)

    @property
    def seq_len(self) -> int:
        return self.mask.shape[1]

    @torch.no_grad()  # not inference_mode: hidden states are re-used as inputs to the trainable head
    def feed(
        self, tokens: torch.Tensor, valid: torch.Tensor | None = None, last_logits_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append tokens [B, k] (entries with valid=False are holes: padding or ignored slots).

        Returns next-token log-probs [B, k, V] (float32) and last-layer hidden states [B, k, H] at every fed slot.
        last_logits_only: log-probs of the last slot only ([B, 1, V]); a prompt's [B, L, V] log-probs are never read
        and cost B*L*V floats twice (8 x 900-token prompts x a 152k vocabulary: ~9 GB).
        """
        # Trailing columns real in every row, known on the host without a device read (0: unknown); rollback uses it.
        k = tokens.shape[1]
        rows = None if valid is None or valid.device.type != "cpu" else valid.tolist()  # host: no device wait
        if valid is None:
            tail = k
        elif rows is not None:
            tail = next((i for i in range(k) if not all(r[k - 1 - i] for r in rows)), k)
        else:
            tail = 0
        real_tail = self.real_tail + k if tail == k else tail
        if self.lengths is not None and (valid is None or rows is not None):
            added = [k] * tokens.shape[0] if valid is None else [sum(r) for r in rows]
            lengths = [a + b for a, b in zip(self.lengths, added)]
        else:
            lengths = None
        tokens = tokens.to(self.device)
        valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid.to(self.device)
        vlong = valid.long()
        mask = torch.cat([self.mask, vlong], dim=1)
        # Each row's true positions; holes get the position of the previous real token (they are never attended).
        positions = (self.next_pos.unsqueeze(1) + vlong.cumsum(1) - 1).clamp(min=0)
        start = time.perf_counter()
        out = self.model(
            input_ids=tokens.clamp(min=0),
            # A mask without holes is left out (same attention); one with holes is built here in 4D (see
            # `attention_mask`), which transformers takes as it is: no read of its values, and no query without a key.
            attention_mask=None if real_tail == mask.shape[1] else self.attention_mask(mask, k),
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=True,
            **({"logits_to_keep": 1} if last_logits_only else {}),
        )
        logprobs = torch.log_softmax(out.logits[..., : self.vocab_size].float(), dim=-1)
        if self.sync_timing and self.device.type == "cuda":  # off: no per-call wait, but `seconds` is launch time
            torch.cuda.synchronize(self.device)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.mask = mask
        self.next_pos = self.next_pos + vlong.sum(1)
        self.real_tail = real_tail
        self.lengths = lengths
        return logprobs, out.hidden_states[-1]

    def attention_mask(self, mask: torch.Tensor, k: int) -> torch.Tensor:
        """The mask of the k newest slots over all S slots of `mask` [B, S]: [B, 1, k, S], causal, holes hidden, and
        every slot sees itself (so no query row is empty: no NaN from fused kernels). Boolean for kernels that take
        SDPA's mask, additive for eager attention (which adds it to the scores), by the mask function transformers
        registers for the model's attention; other kernels (flash attention's varlen path drops padding queries
        itself, flex attention takes a block mask) get the 2D mask as before."""
        kind = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(
            getattr(self.model.config, "_attn_implementation", None) or "sdpa")
        if kind not in (sdpa_mask, eager_mask):
            return mask
        S = mask.shape[1]
        key = torch.arange(S, device=mask.device)
        query = torch.arange(S - k, S, device=mask.device).unsqueeze(1)
        allowed = ((key <= query) & mask.bool().unsqueeze(1)) | (key == query)
        allowed = allowed.unsqueeze(1)
        if kind is sdpa_mask:
            return allowed
        return torch.zeros(allowed.shape, dtype=self.dtype, device=mask.device).masked_fill(
            ~allowed, torch.finfo(self.dtype).min)

    def rollback(self, n: torch.Tensor | list[int]) -> None:
        """Turn the last n[b] fed slots of row b into holes (rejected drafts), then crop all-hole tail columns and,
        when the holes pile up, compact the cache. Host counts (a list or a CPU tensor: what the decoding loop
        passes) cost no device read."""
        host = isinstance(n, list) or n.device.type == "cpu"
        n_host = n if isinstance(n, list) else n.tolist() if host else None
        n = torch.tensor(n, dtype=torch.long) if isinstance(n, list) else n
        n_max = max(n_host) if host else int(n.max())
        if n_max == 0:
            return
        n_min = min(n_host) if host else int(n.min())
        n = n.to(self.device)
        if host and self.lengths is not None:
            self.lengths = [a - b for a, b in zip(self.lengths, n_host)]
        else:
            self.lengths = None
        S = self.seq_len
        slot = torch.arange(S, device=self.device).unsqueeze(0)
        self.mask = self.mask.masked_fill(slot >= (S - n).unsqueeze(1), 0)
        self.next_pos = self.next_pos - n
        if host and n_min < self.real_tail:
            # The slot before the shortest rollback is real in every row: exactly n_min all-hole columns at the end.
            keep = S - n_min
            self.real_tail = self.real_tail - n_min if n_max == n_min else 0
        else:  # read the mask (a device read on GPUs)
            alive = self.mask.any(0).nonzero()
            keep = int(alive.max()) + 1 if alive.numel() else 0
            self.real_tail = 0
        if keep < S:
            self.cache.crop(keep - S)  # negative: remove S-keep slots (transformers 5 semantics)
            self.mask = self.mask[:, :keep]
        if self.lengths is not None and self.seq_len - max(self.lengths, default=0) > max(
                8, self.compact_slack * self.seq_len):
            self.compact()

    def compact(self) -> None:
        """Gather each row's real slots into a left-padded layout at the length of the longest row (needs the
        host-side lengths; no device read). Keys keep their rotary positions, and `next_pos` the true positions,
        so attention is unchanged (exact: the same keys and values in the same order per row)."""
        if self.lengths is None:
            raise RuntimeError("compact() needs the rows' lengths on the host")
        S, width = self.seq_len, max(self.lengths, default=0)
        if width >= S:
            return
        # A stable sort puts each row's holes first and its real slots after them, in their original order.
        order = torch.sort(self.mask, dim=1, stable=True).indices[:, S - width:]
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            idx = order.view(order.shape[0], 1, width, 1).expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys = layer.keys.gather(2, idx)
            layer.values = layer.values.gather(2, idx.expand(-1, -1, -1, layer.values.shape[-1]))
        self.mask = self.mask.gather(1, order)
        self.real_tail = min(self.lengths, default=0)
        self.compactions += 1

    def prefill(self, sequences: list[list[int]]) -> torch.Tensor | None:
        """Reset and feed left-padded sequences (may be empty lists); returns their last hidden states [B, L, H]
        (None when nothing was fed)."""
        self.reset(len(sequences))
        tokens, valid = pad_left(sequences)  # host tensors: feed moves them and reads their validity free
        if tokens.shape[1]:
            return self.feed(tokens, valid, last_logits_only=True)[1]
        return None


def _contiguous_lm_head_input(model: PreTrainedModel) -> None:
    """Make the output head's input contiguous (once per model). With `logits_to_keep=1` (every prefill) the head
    gets hidden[:, -1:], a strided view of a batch of rows; torch's matmul cannot fold a strided 3D input into one
    GEMM and instead expands the [V, H] weight to every row and copies it: 8 rows of Qwen2.5's 151,936 x 896 head
    copied 2.2 GB in bf16, ~10 s a prefill on a 2-core CPU (measured: 81% of an sd run at batch 8)."""
    head = model.get_output_embeddings()
    if getattr(head, "_specdec_contiguous", False):
        return
    head.register_forward_pre_hook(lambda _module, args: (_dense(args[0]), *args[1:]))
    head._specdec_contiguous = True


def _dense(x: torch.Tensor) -> torch.Tensor:
    """x with the standard strides. `.contiguous()` is not enough: at batch 1, hidden[:, -1:] has shape [1, 1, H]
    and counts as contiguous (size-1 dims' strides are ignored), yet keeps the stride L·H, and matmul then expands
    the head's weight as above (measured: a 14-token prefill of the 1.5B took 3.0 s instead of 0.5 s, bf16, CPU)."""
    if x.stride() == torch.empty(x.shape, device="meta").stride():
        return x
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A cheap identity of a model's weights: sha256 of a strided sample (up to 256 rows x 256 columns, or 256
    elements) of each parameter in named order, rounded to bfloat16 so that float32 and bfloat16 loads of the same
    weights agree. Recorded by exports and run files and checked at load and resume (fingerprint_changes), so
    that a model rebuilt or replaced at the same path is not taken for the old one."""
    h = hashlib.sha256()
    for _, w in model.named_parameters():
        w = w.detach()
        if w.dim() == 2:
            rows = torch.linspace(0, w.shape[0] - 1, min(w.shape[0], 256)).long().to(w.device)
            sample = w[rows][:, :256]
        else:
            flat = w.reshape(-1)
            sample = flat[torch.linspace(0, flat.numel() - 1, min(flat.numel(), 256)).long().to(w.device)]
        h.update(sample.to(torch.bfloat16).float().cpu().numpy().tobytes())
    return "sha256:" + h.hexdigest()[:16]


def fingerprint_changes(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """'role: there, here' for each role whose weights fingerprint differs; roles either side lacks (records from
    before fingerprints, or models not loaded) are not compared."""
    return [f"{role}: {recorded[role]} there, {fp} here" for role, fp in now.items()
            if recorded.get(role) is not None and recorded[role] != fp]


def pad_left(sequences: list[list[int]], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad ragged token lists to [B, L] with a validity mask."""
    width = max((len(s) for s in sequences), default=0)
    tokens = torch.zeros(len(sequences), width, dtype=torch.long)
    valid = torch.zeros(len(sequences), width, dtype=torch.bool)
    for i, s in enumerate(sequences):
        if s:
            tokens[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            valid[i, width - len(s):] = True
    return tokens.to(device), valid.to(device)
