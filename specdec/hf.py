"""Speculative decoding from `model.generate`: a `custom_generate` callable for transformers 5.

A user who already has a target and a draft loaded decodes with a trained ensemble head, a static weight or any
registry method through the call they know:

    import specdec.hf
    out = target.generate(**inputs, assistant_model=draft, custom_generate=specdec.hf.generate,
                          ensemble_head="runs/.../head", max_new_tokens=128, do_sample=True)
    out = target.generate(**inputs, assistant_model=draft, custom_generate=specdec.hf.generate,
                          method="static", w=0.5, max_new_tokens=128, do_sample=True)

transformers prepares the generation config (max_new_tokens / max_length, do_sample, temperature, eos and pad
ids) and the inputs (input_ids, attention_mask), then calls `generate(model, input_ids, ...)` below, which runs the
project's own loop (`specdec.generate.generate`, with its one `verify`) on the rows' real tokens (left padding is
read from attention_mask) and returns what `generate` returns: a LongTensor of prompt + new tokens (rows that stop
early are padded with pad_token_id), or with `return_dict_in_generate=True` a `SpeculativeGenerateOutput` with
`sequences` and the acceptance statistics.

The method options are those of the registry (specdec/registry.py): method (sd, static, lossy, cascade, diversed,
cd, dcd, scd, ...; default sd, or diversed when ensemble_head is given), gamma, w, lenience, threshold, proposer,
alpha, beta; the amateur of the contrastive methods is `amateur_model=`. `do_sample=False` is greedy; sampling
draws from the method's ν at `temperature` with torch's global random generator (`torch.manual_seed` makes it
repeatable) unless `generator=` is given.

Refused, with the reason: beam search and more than one sequence per prompt; logits processors and stopping
criteria that the speculative rule cannot honour (top_p, repetition penalties, min length, stop strings, ...;
top_k is not applied: transformers' default top_k=50 is accepted and ignored, ν is sampled whole); a draft with
another vocabulary (and, given `target_tokenizer=` and `draft_tokenizer=`, another tokenizer); a head exported
for other weights (the weights fingerprints it records) or, given `target_tokenizer=`, another tokenizer
(`specdec.head.load_head` and its checks, as at every other entry point); right-padded batches.

transformers (5.24) does not pass `assistant_model`, `tokenizer` or `assistant_tokenizer` on to a callable
`custom_generate`: `assistant_model` is read from the calling `generate`'s arguments (`draft=` names the draft
directly where that is not available); the tokenizers go by the names `target_tokenizer=` / `draft_tokenizer=`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput

from specdec.generate import generate as speculative_generate
from specdec.loading import Models
from specdec.models import check_tokenizers_match
from specdec.registry import ALIASES, build_method, method_config

__all__ = ["SpeculativeGenerateOutput", "generate"]


@dataclass
class SpeculativeGenerateOutput(ModelOutput):
    """`return_dict_in_generate=True`: the sequences and the acceptance statistics of the speculative rounds."""

    sequences: torch.LongTensor | None = None
    accepted_per_round: list[list[int]] | None = None  # per row: drafts accepted in each round it decoded
    acceptance_rate: list[float | None] | None = None  # per row: accepted / drafted (None: nothing drafted)
    drafted: list[int] | None = None  # per row
    accepted: list[int] | None = None  # per row
    finish_reason: list[str] | None = None  # per row: "eos" | "length" | "context"
    method: str | None = None  # the registry method's label, e.g. "static(w=0.50)"
    gamma: int | None = None


# Logits processors the loop does honour (temperature) or may ignore (the library's default top-k).
_HONOURED = {"TemperatureLogitsWarper"}
_STOPPING = {"MaxLengthCriteria", "EosTokenCriteria"}
_DEFAULT_TOP_K = 50  # GenerationConfig().top_k


def _assistant_from_caller() -> torch.nn.Module | None:
    """transformers drops `assistant_model` before calling a callable custom_generate: read it from the calling
    GenerationMixin.generate frame's arguments (None when there is no such frame)."""
    frame = inspect.currentframe()
    try:
        f = frame.f_back
        while f is not None:
            if f.f_code.co_name == "generate" and "assistant_model" in f.f_locals and "custom_generate" in f.f_locals:
                return f.f_locals["assistant_model"]
            f = f.f_back
        return None
    finally:
        del frame


def _vocab(model: torch.nn.Module) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _check_pair(target, draft, role: str, tokenizer: Any, draft_tokenizer: Any) -> None:
    if tokenizer is not None and draft_tokenizer is not None:
        check_tokenizers_match({"target": tokenizer, role: draft_tokenizer})
    if _vocab(draft) != _vocab(target):
        raise ValueError(f"the {role} has a vocabulary of {_vocab(draft)} tokens, the target {_vocab(target)}: "
                         f"speculative decoding needs one tokenizer for both (HF's universal assisted decoding "
                         f"across tokenizers is not supported here)")


def _refuse_unsupported(gc, logits_processor, stopping_criteria, model_kwargs: dict) -> None:
    if gc.num_beams and gc.num_beams > 1:
        raise ValueError(f"specdec.hf.generate does not do beam search (num_beams={gc.num_beams}): speculative "
                         f"decoding verifies one sequence per prompt; use num_beams=1")
    if gc.num_return_sequences and gc.num_return_sequences > 1:
        raise ValueError("specdec.hf.generate returns one sequence per prompt (num_return_sequences=1); repeat the "
                         "prompt in the batch for several samples")
    for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
        if getattr(gc, flag, False):
            raise ValueError(f"{flag}=True is not available from speculative decoding (the loop keeps no per-step "
                             f"scores); drop it")
    bad = []
    for p in logits_processor or []:
        name = type(p).__name__
        if name in _HONOURED:
            continue
        if name == "TopKLogitsWarper" and getattr(p, "top_k", None) == _DEFAULT_TOP_K:
            continue  # the library default, not asked for: ν is sampled whole (pass top_k=0 to HF to compare)
        bad.append(name)
    if bad:
        raise ValueError(f"specdec.hf.generate cannot honour {', '.join(bad)} (from top_k / top_p / min_p / "
                         f"typical_p / repetition_penalty / min_new_tokens / bad_words_ids / ... or a "
                         f"logits_processor): verification samples the method's ν itself; drop them")
    odd = [type(c).__name__ for c in stopping_criteria or [] if type(c).__name__ not in _STOPPING]
    if odd:
        raise ValueError(f"specdec.hf.generate ends rows at eos_token_id or max_new_tokens only; it cannot honour "
                         f"{', '.join(odd)} (stop_strings / max_time / stopping_criteria)")
    for k in ("inputs_embeds", "encoder_outputs", "pixel_values"):
        if model_kwargs.get(k) is not None:
            raise ValueError(f"specdec.hf.generate decodes from input_ids only; {k} is not supported")
    if model_kwargs.get("cache") is not None and model_kwargs["cache"].get_seq_length() > 0:
        raise ValueError("specdec.hf.generate starts from the prompt; a pre-filled cache is not supported")


def _rows(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's real tokens (left padding removed); right padding is refused."""
    if attention_mask is None:
        return input_ids.tolist()
    mask = attention_mask.bool()
    out = []
    for b in range(input_ids.shape[0]):
        m = mask[b]
        n = int(m.sum())
        if n == 0:
            raise ValueError(f"row {b} of the batch is all padding")
        if not bool(m[-n:].all()):
            raise ValueError("the batch is not left-padded (attention_mask has padding after real tokens): "
                             "tokenize with padding_side='left'")
        out.append(input_ids[b, -n:].tolist())
    return out


# Methods that draft with the draft model (with proposer=draft), and those that need the amateur.
_DRAFTING = ("sd", "static", "lossy", "cascade", "diversed", "autojudge", "dcd", "ar_draft")
_AMATEUR = ("cd", "dcd", "dcd_ngram", "scd", "cos")


def _build(target, draft, amateur, tokenizer, name: str, options: dict):
    """The registry method over these loaded models (built per call: LM wrappers are cheap, and nothing keeps the
    caller's models alive after the call)."""
    p = next(target.parameters())
    models = Models({"device": str(p.device), "dtype": str(p.dtype).removeprefix("torch."), "embedded": False})
    models.attach("target", target, tokenizer=tokenizer)
    if draft is not None:
        models.attach("draft", draft)
    if amateur is not None:
        models.attach("amateur", amateur)
    cfg_opts = {k: v for k, v in options.items() if k not in ("head", "alpha", "beta")}
    spec = build_method(name, models, method_config(name, head=options.get("head"),
                                                    alpha=options.get("alpha", 0.5), beta=options.get("beta", 0.1),
                                                    **cfg_opts))
    if spec.generate_fn is not None:
        raise ValueError(f"method {name!r} decodes with its own loop, which specdec.hf does not serve; use "
                         f"eval/run.py method={name}")
    return models, spec


def generate(
    model: torch.nn.Module,
    input_ids: torch.LongTensor,
    logits_processor=None,
    stopping_criteria=None,
    generation_config=None,
    synced_gpus: bool = False,
    streamer=None,
    ensemble_head: str | None = None,
    method: str | None = None,
    gamma: int | None = None,
    w: float | None = None,
    lenience: float | None = None,
    threshold: float | None = None,
    proposer: str | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    draft: torch.nn.Module | None = None,
    amateur_model: torch.nn.Module | None = None,
    target_tokenizer: Any = None,
    draft_tokenizer: Any = None,
    generator: torch.Generator | None = None,
    **model_kwargs,
):
    """`custom_generate` for `model.generate(...)` (see the module docstring). Every parameter after `streamer` is
    this function's own: transformers passes the caller's keyword arguments of those names here."""
    if generation_config is None:
        raise ValueError("call this through model.generate(..., custom_generate=specdec.hf.generate)")
    if streamer is not None:
        raise ValueError("specdec.hf.generate does not stream; drop streamer=")
    if synced_gpus:
        raise ValueError("specdec.hf.generate does not run under synced_gpus (ZeRO-3 / FSDP across ranks)")
    gc = generation_config
    _refuse_unsupported(gc, logits_processor, stopping_criteria, model_kwargs)
    draft = draft if draft is not None else _assistant_from_caller()
    name = ALIASES.get(method, method) if method else ("diversed" if ensemble_head else "sd")
    if ensemble_head is not None and name != "diversed":
        raise ValueError(f"ensemble_head sets the method to the head (diversed); drop method={method!r}")
    if name == "diversed" and ensemble_head is None:
        raise ValueError("method='diversed' needs ensemble_head=PATH (an exported head)")
    if name in _DRAFTING and (proposer or "draft") == "draft" and draft is None:
        raise ValueError(f"method {name!r} drafts with a draft model: pass assistant_model=DRAFT (or draft=DRAFT)")
    if name in _AMATEUR and amateur_model is None:
        raise ValueError(f"method {name!r} verifies against contrastive decoding: pass amateur_model=AMATEUR")
    if draft is not None:
        _check_pair(model, draft, "draft", target_tokenizer, draft_tokenizer)
    if amateur_model is not None:
        _check_pair(model, amateur_model, "amateur", None, None)
    options = {k: v for k, v in {"gamma": gamma, "w": w, "lenience": lenience, "threshold": threshold,
                                 "proposer": proposer, "alpha": alpha, "beta": beta,
                                 "head": ensemble_head}.items() if v is not None}
    models, spec = _build(model, draft, amateur_model, target_tokenizer, name, options)

    prompts = _rows(input_ids, model_kwargs.get("attention_mask"))
    max_new = int(gc.max_length) - input_ids.shape[1]
    if gc.max_new_tokens is not None:
        max_new = int(gc.max_new_tokens)
    if max_new < 1:
        raise ValueError(f"nothing to generate: max_new_tokens={max_new}")
    eos = gc._eos_token_tensor if getattr(gc, "_eos_token_tensor", None) is not None else gc.eos_token_id
    eos_ids = [] if eos is None else (eos.reshape(-1).tolist() if torch.is_tensor(eos) else
                                      ([eos] if isinstance(eos, int) else list(eos)))
    temperature = float(gc.temperature if gc.temperature is not None else 1.0) if gc.do_sample else 0.0
    if gc.do_sample and temperature <= 0:
        raise ValueError(f"do_sample=True needs temperature > 0, got {temperature}")
    target = spec.target or models.target
    out = speculative_generate(target, spec.proposer, prompts, rule=spec.rule, gamma=spec.gamma,
                               max_new_tokens=max_new, temperature=temperature, eos_token_id=eos_ids or None,
                               amateur=spec.amateur, generator=generator, records=False)

    pad = gc._pad_token_tensor if getattr(gc, "_pad_token_tensor", None) is not None else gc.pad_token_id
    pad = int(pad.reshape(-1)[0]) if torch.is_tensor(pad) else (pad if pad is not None else (eos_ids or [0])[0])
    width = max((len(t) for t in out.tokens), default=0)
    new = torch.full((len(prompts), width), pad, dtype=input_ids.dtype, device=input_ids.device)
    for b, toks in enumerate(out.tokens):
        if toks:
            new[b, : len(toks)] = torch.tensor(toks, dtype=input_ids.dtype, device=input_ids.device)
    sequences = torch.cat([input_ids, new], dim=1)
    if not gc.return_dict_in_generate:
        return sequences
    per_round, drafted, accepted, rates = [], [], [], []
    for b in range(len(prompts)):
        active = out.rounds["active"][:, b]
        acc = out.rounds["accepted"][:, b][active].tolist()
        per_round.append(acc)
        drafted.append(len(acc) * spec.gamma)
        accepted.append(sum(acc))
        rates.append(sum(acc) / (len(acc) * spec.gamma) if spec.gamma and acc else None)
    return SpeculativeGenerateOutput(sequences=sequences, accepted_per_round=per_round, acceptance_rate=rates,
                                     drafted=drafted, accepted=accepted, finish_reason=list(out.finish_reason),
                                     method=spec.label, gamma=spec.gamma)
