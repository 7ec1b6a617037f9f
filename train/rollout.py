"""Rollouts: relaxed speculative decoding through `specdec.generate` with the head in the loop.

The draft proposes, the target (and, for target=contrastive, the amateur) scores, the head sets w_t, and the
one `verify` accepts or resamples, so the emitted tokens are exactly nu-distributed. We keep, per emitted token,
what the loss needs to recompute log nu_t(x_t) with gradient: p_t(x_t) (nu's base: p, or pi_CD), q_t(x_t),
TV(p_t, q_t), nu's w = 0 end at x_t when it is not q (a truncating head: Rule.relaxed), and the head's inputs
h^q_t, h^p_t, feats_t.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from data.tasks import stop_on_match
from specdec.generate import generate
from specdec.loading import Models
from specdec.proposers import DraftModelProposer
from specdec.registry import head_rule
from specdec.targets import HeadEnsembleRule


def make_rule(head: Callable, target_cfg: Any) -> HeadEnsembleRule:
    """The head over the target (kind=ensemble) or over the contrastive pi_CD (kind=contrastive)."""
    kind = target_cfg["kind"]
    if kind not in ("ensemble", "contrastive"):
        raise ValueError(f"unknown target kind {kind!r}: use target=ensemble or target=contrastive")
    # The registry's rule of a head (method diversed builds the same, and reads the typical keys with their
    # defaults); alpha / beta, which it would default to 0, are required here.
    missing = [k for k in ("alpha", "beta") if kind == "contrastive" and k not in target_cfg]
    if missing:
        raise KeyError(f"target kind contrastive needs target.{' and target.'.join(missing)}")
    return head_rule(head, target_cfg)


@dataclass
class RolloutBatch:
    mask: torch.Tensor  # [N, T] bool, valid emitted tokens (after stop-string truncation)
    p_tok: torch.Tensor  # [N, T] base target prob of the emitted token (p, or pi_CD)
    q_tok: torch.Tensor  # [N, T] proposal prob of the emitted token
    tv: torch.Tensor  # [N, T] TV(p_t, q_t)
    w: torch.Tensor  # [N, T] the w the head gave during decoding
    r_tok: torch.Tensor  # [N, T] prob of the emitted token under nu's w = 0 end: q, or typical's nu (truncating head)
    tv_r: torch.Tensor  # [N, T] TV(q_t, that end): 0 where it is q, 1 - (typical's acceptance) when truncating
    h_q: torch.Tensor  # [N, T, Hq]
    h_p: torch.Tensor  # [N, T, Hp]
    feats: torch.Tensor  # [N, T, F]
    texts: list[str]
    tokens: list[list[int]] = field(default_factory=list)  # the emitted completion ids (forks continue them)
    stats: dict[str, float] = field(default_factory=dict)


def cut_at_stop(tokenizer: Any, tokens: list[int], stops: tuple[str, ...],
                chat_stop: re.Pattern | None = None) -> tuple[str, int]:
    """(completion text, number of tokens to keep): cut before the first stop string, or after the chat stop's
    match (e.g. a closed code block, as eval/run.py ends chat rows), whichever comes first; the tokens kept run up
    to the one that completes the cut."""
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    cuts = [(i, i + len(s)) for s in stops if s and (i := text.find(s)) >= 0]  # (text cut, token end)
    m = chat_stop.search(text) if chat_stop is not None else None
    if m:
        cuts.append((m.end(), m.end()))
    if not cuts:
        return text, len(tokens)
    pos, end = min(cuts)
    for k in range(1, len(tokens) + 1):
        if len(tokenizer.decode(tokens[:k], skip_special_tokens=True)) >= end:
            return text[:pos], k
    return text[:pos], len(tokens)


@torch.no_grad()
def rollout(
    models: Models,
    head: Callable,
    prompts: list[list[int]],
    *,
    target_cfg: Any,
    gamma: int,
    max_new_tokens: int,
    temperature: float,
    stops: tuple[str, ...] = (),
    chat_stop: re.Pattern | None = None,
    generator: torch.Generator | None = None,
) -> RolloutBatch:
    """Decode the prompts (token ids) with the head in the loop; returns the per-token training records.
    chat_stop: a row ends once its text matches this pattern (the task's, for chat models), as in evaluation."""
    if temperature <= 0:
        raise ValueError("training rollouts need sampling (temperature > 0): greedy decoding has no policy gradient")
    rule = make_rule(head, target_cfg)
    tok = models.tokenizer
    start = time.perf_counter()
    out = generate(
        models.target, DraftModelProposer(models.draft), prompts, rule=rule, gamma=gamma,
        max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=models.tokenizer.eos_token_id,
        amateur=models.amateur if target_cfg["kind"] == "contrastive" else None, generator=generator,
        record_hidden=True, stop=stop_on_match(chat_stop, tok),
    )
    seconds = time.perf_counter() - start
    rec = out.records
    mask = rec["token_mask"].clone()
    texts = []
    for i, toks in enumerate(out.tokens):
        text, keep = cut_at_stop(tok, toks, stops, chat_stop)
        mask[i, keep:] = False
        texts.append(text)
    # every emitted token under a head rule has a proposal prob (q at the bonus position too)
    mask &= ~torch.isnan(rec["q_token"])

    def clean(x: torch.Tensor) -> torch.Tensor:
        m = mask if x.dim() == 2 else mask.unsqueeze(-1)
        return torch.where(m, x, torch.zeros_like(x))

    rounds = out.rounds
    active = rounds["active"]
    stats = {
        "rollout_seconds": seconds,
        "new_tokens": float(out.stats["new_tokens"]),
        "drafted": float(rounds["drafted"].sum()),
        "accepted": float(rounds["accepted"].sum()),
        "active_rounds": float(active.sum()),
        "time_target": out.stats["time_target"],
        "time_proposer": out.stats["time_proposer"],
        "time_amateur": out.stats["time_amateur"],
    }
    q_tok = clean(rec["q_token"])
    return RolloutBatch(
        mask=mask, p_tok=clean(rec["p_token"]), q_tok=q_tok, tv=clean(rec["tv_pq"]), w=clean(rec["w"]),
        r_tok=clean(rec["relaxed_token"]) if "relaxed_token" in rec else q_tok,
        tv_r=clean(rec["tv_q_relaxed"]) if "tv_q_relaxed" in rec else torch.zeros_like(q_tok), h_q=clean(rec["h_q"]), h_p=clean(rec["h_p"]), feats=clean(rec["feats"]),
        texts=texts, tokens=out.tokens, stats=stats,
    )
