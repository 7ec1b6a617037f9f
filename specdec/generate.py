"""The decoding loop: propose → score (one parallel target pass, plus the amateur's for contrastive rules) → build ν
→ verify → roll caches back. γ = 0 is plain autoregressive decoding through the same loop (the baseline).

Batching: rows keep their own lengths and acceptance counts; caches are shared with per-slot masks (see
`specdec.models`). A finished row keeps riding along until the whole batch is done (its outputs are discarded),
which costs compute but keeps every tensor rectangular and the loop short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from specdec.models import LM
from specdec.proposers import Proposal, Proposer
from specdec.targets import ExactRule, RoundScores, Rule, pair_features, total_variation
from specdec.verify import ZERO_PROB_DRAFT, verify

# Per-output-token records (padded [B, T] or [B, T, ·]); NaN where a quantity does not exist (no proposal). A rule
# whose ν has another end than q at w = 0 (Rule.relaxed) adds relaxed_token and tv_q_relaxed.
TOKEN_KEYS = ("p_token", "q_token", "nu_token", "w", "tv_pq", "tv_nu_p")
HIDDEN_KEYS = ("h_p", "h_q", "feats")


@dataclass
class GenerationOutput:
    tokens: list[list[int]]  # new tokens per row (EOS included when generated)
    finish_reason: list[str]  # "eos" | "length" | "context" | "stop"
    records: dict[str, torch.Tensor]  # per output token, padded to [B, T(, ·)], plus "token_mask"
    rounds: dict[str, torch.Tensor]  # per round [R, B(, γ)]: active, drafted, accepted, accept_prob, expected_accept
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def num_drafted(self) -> int:
        return int(self.rounds["drafted"].sum())

    @property
    def num_accepted(self) -> int:
        return int(self.rounds["accepted"].sum())

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / drafted tokens."""
        return self.num_accepted / max(self.num_drafted, 1)

    @property
    def mean_accepted_length(self) -> float:
        """Accepted drafts per round (bonus excluded), over rounds in which a row was active."""
        active = self.rounds["active"]
        return float(self.rounds["accepted"][active].float().mean()) if active.any() else 0.0


def _check_inputs(prompts: list[list[int]], gamma: int, max_new_tokens: int, models: list[LM]) -> None:
    if gamma < 0:
        raise ValueError(f"gamma (draft length) must be >= 0, got {gamma}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts:
        raise ValueError("no prompts given")
    widths = {m.name: m.vocab_size for m in models}
    if len(set(widths.values())) > 1:
        raise ValueError(f"models disagree on the vocabulary width {widths}: they cannot verify each other's tokens")
    vocab = models[0].vocab_size
    window = min(m.max_positions for m in models)
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: every prompt needs at least one token (e.g. BOS)")
        if len(p) + gamma + 1 > window:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens, which with γ+1={gamma + 1} exceeds the context window of "
                f"{window} positions; truncate the prompt or use a model with a longer context"
            )
        if min(p) < 0 or max(p) >= vocab:
            raise ValueError(f"prompt {i} holds token ids outside [0, {vocab})")


def generate(
    target: LM,
    proposer: Proposer | None,
    prompts: list[list[int]],
    *,
    rule: Rule | None = None,
    gamma: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    eos_token_id: int | list[int] | None = None,
    amateur: LM | None = None,
    generator: torch.Generator | None = None,
    record_hidden: bool = False,
    progress: bool = False,
    records: bool = True,
    compile: bool | str = False,
    stop: Callable[[list[int]], bool] | None = None,
) -> GenerationOutput:
    """Speculative decoding of a batch of token-id prompts. temperature 0 is greedy.

    records=False is the inference mode: the same rounds (same rule, same `verify`, same random draws, hence the
    same tokens and accept counts), but no per-token records (`records` holds only "token_mask"), per-round
    records limited to active / drafted / accepted, and one device→host read per round (the accepted counts and
    the tokens together; the caches roll back from that host copy). compile=True wraps the target's and the
    proposer's forward in `torch.compile` (once per model, in place; see `compile_lm`; a string names the backend).
    stop(tokens) is asked after each round for every row still running; True ends that row with finish reason
    "stop" (e.g. a closed code block).
    """
    rule = rule or ExactRule()
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if record_hidden and not records:
        raise ValueError("record_hidden=True needs records=True (the hidden states are part of the records)")
    if gamma > 0 and proposer is None:
        raise ValueError("gamma > 0 needs a proposer")
    if rule.needs_bonus_q and proposer is None:
        raise ValueError(f"{type(rule).__name__} mixes the proposal into ν and needs a proposer")
    if rule.needs_amateur and amateur is None:
        raise ValueError(f"{type(rule).__name__} needs the amateur model (amateur=...)")
    models = [target] + ([amateur] if amateur is not None and rule.needs_amateur else [])
    draft_lm = getattr(proposer, "lm", None)
    if (draft_lm is not None and any(draft_lm is m for m in models)) or (len(models) == 2 and models[0] is models[1]):
        # one cache would hold two roles' tokens: the output would be silently wrong
        raise ValueError("target, proposer and amateur must be distinct LM wrappers (each keeps its own cache); "
                         "wrap the same weights twice for two roles, e.g. LM(lm.model)")
    _check_inputs(prompts, gamma, max_new_tokens, models + ([draft_lm] if draft_lm is not None else []))
    use_amateur = rule.needs_amateur
    use_proposer = proposer is not None and (gamma > 0 or rule.needs_bonus_q)
    if compile:  # True: inductor; a string: that torch.compile backend
        for lm in models + ([draft_lm] if draft_lm is not None else []):
            compile_lm(lm, "inductor" if compile is True else compile)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    greedy = temperature == 0
    device = target.device
    B, K = len(prompts), gamma + 1
    window = min(m.max_positions for m in models + ([draft_lm] if draft_lm is not None else []))

    start = time.perf_counter()
    t0 = {"target": target.seconds, "proposer": proposer.seconds if proposer else 0.0,
          "amateur": amateur.seconds if use_amateur else 0.0}
    calls0 = {"target": target.calls, "proposer": proposer.calls if proposer else 0}
    prompt_hidden = target.prefill([p[:-1] for p in prompts])
    if use_amateur:
        amateur.prefill([p[:-1] for p in prompts])
    # A feature-level proposer reads the target's hidden states of committed tokens from the passes made anyway.
    feed_hidden = use_proposer and getattr(proposer, "wants_target_hidden", False)
    if use_proposer:
        proposer.start(prompts)
        if feed_hidden:
            proposer.observe_target_hidden(prompt_hidden)
    if device.type == "cuda":  # once per call: the prefill's time below is then the device's, not the launches'
        torch.cuda.synchronize(device)
    # The prefill's share, so that benchmarks can report decoding alone (what throughput models of rounds predict):
    # on a CPU a prompt's prefill is compute-bound and costs as much as many decoding steps.
    prefill = {"time_prefill": time.perf_counter() - start, "prefill_time_target": target.seconds - t0["target"],
               "prefill_time_proposer": (proposer.seconds - t0["proposer"]) if use_proposer else 0.0,
               "prefill_time_amateur": (amateur.seconds - t0["amateur"]) if use_amateur else 0.0,
               "prefill_target_calls": target.calls - calls0["target"],
               "prefill_proposer_calls": (proposer.calls - calls0["proposer"]) if use_proposer else 0}
    last = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=device)

    out: list[list[int]] = [[] for _ in range(B)]
    finish: list[str | None] = [None] * B
    pieces: list[list[tuple[int, int]]] = [[] for _ in range(B)]  # (round, tokens kept) per row
    round_recs: list[dict[str, torch.Tensor]] = []
    rounds: dict[str, list[torch.Tensor]] = {k: [] for k in
                                            ("active", "drafted", "accepted", "accept_prob", "expected_accept")}
    verify_seconds = rule_seconds = 0.0
    host_rounds: dict[str, list[list]] = {"active": [], "accepted": []}  # records=False: per-round host copies
    bar = tqdm(total=B * max_new_tokens, desc="decode", unit="tok", disable=not progress, leave=False)
    rows = torch.arange(B, device=device)
    num_rounds = 0
    # On CUDA the time split (rule, verify) waits for the device, as the models' own timers do (LM.sync_timing).
    timed = device if device.type == "cuda" and target.sync_timing else None

    while any(f is None for f in finish):
        if records:
            active = torch.tensor([f is None for f in finish], device=device)
        if use_proposer:
            prop = proposer.propose(gamma, temperature=temperature, generator=generator,
                                    with_bonus=rule.needs_bonus_q)
        else:
            prop = Proposal(torch.zeros(B, 0, dtype=torch.long, device=device), torch.zeros(B, 0, 1), None)
        drafts = prop.tokens.to(device)
        q = prop.probs.to(device) if use_proposer else None
        logprobs, h_p = target.feed(torch.cat([last.unsqueeze(1), drafts], 1))
        amateur_lp = amateur.feed(torch.cat([last.unsqueeze(1), drafts], 1))[0] if use_amateur else None
        scores = RoundScores(logprobs, temperature, q, amateur_lp, h_p, prop.hidden, drafts=drafts)
        t = time.perf_counter()
        nu, w = rule(scores)
        _sync(timed)
        rule_seconds += time.perf_counter() - t

        t = time.perf_counter()
        draft_probs = q[:, :gamma] if q is not None else nu.new_zeros(B, 0, nu.shape[-1])
        res = verify(drafts, draft_probs, nu, greedy=greedy, generator=generator, check=False)
        _sync(timed)
        verify_seconds += time.perf_counter() - t
        n = res.num_accepted
        emitted = res.tokens[rows, n]
        # The one device→host read of the round, in both modes: accepted counts, emitted tokens and verify's input
        # check together. Rollback, commit and the bookkeeping work from this host copy (lists), never reading
        # the device again; on a GPU each read would stall the launch queue.
        host = torch.cat([n.unsqueeze(1), res.tokens, res.zero_prob_draft.long().unsqueeze(1)], 1).cpu().tolist()
        if any(row[-1] for row in host):
            raise ValueError(ZERO_PROB_DRAFT)
        n_rows = [row[0] for row in host]
        emitted_rows = [row[1:-1] for row in host]
        back = [gamma - k for k in n_rows]
        target.rollback(back)
        if use_amateur:
            amateur.rollback(back)
        if use_proposer:
            if feed_hidden:
                proposer.observe_target_hidden(h_p)
            proposer.commit(n_rows, [row[k] for row, k in zip(emitted_rows, n_rows)])
        last = emitted

        if not records:
            host_rounds["active"].append([f is None for f in finish])
            host_rounds["accepted"].append([k if f is None else 0 for k, f in zip(n_rows, finish)])
            num_rounds += 1
            added = _extend(out, finish, pieces, emitted_rows, n_rows, num_rounds - 1, eos, max_new_tokens,
                            prompts, window, K, stop)
            bar.update(added)
            continue

        # Per-position records of this round, for the token emitted at each position.
        base = rule.base(scores)
        tok = res.tokens.clamp(min=0).unsqueeze(-1)
        nu_norm = nu / nu.sum(-1, keepdim=True)  # the lenient rule's ν is unnormalised
        nan = torch.full((B, K), float("nan"), device=device)
        rec = {
            "p_token": base.gather(-1, tok).squeeze(-1),
            "nu_token": nu_norm.gather(-1, tok).squeeze(-1),
            "w": w.float() if w is not None else torch.ones(B, K, device=device),
            "tv_nu_p": total_variation(nu_norm, base),
            "q_token": nan.clone(),
            "tv_pq": nan.clone(),
        }
        if q is not None:
            kq = q.shape[1]
            rec["q_token"][:, :kq] = q.gather(-1, tok[:, :kq]).squeeze(-1)
            rec["tv_pq"][:, :kq] = total_variation(base[:, :kq], q)
            relaxed = rule.relaxed(scores)  # ν's w = 0 end where it is not q (a truncating head)
            if relaxed is not None:
                rec["relaxed_token"] = relaxed.gather(-1, tok).squeeze(-1)
                rec["tv_q_relaxed"] = nan.clone()
                rec["tv_q_relaxed"][:, :kq] = total_variation(relaxed[:, :kq], q)
        if record_hidden:
            rec["h_p"] = h_p.float()
            if prop.hidden is not None and q is not None and q.shape[1] == K:
                rec["h_q"] = prop.hidden.float()
                rec["feats"] = pair_features(base, q)
        round_recs.append(rec)

        r = len(round_recs) - 1
        rounds["active"].append(active)
        rounds["drafted"].append(active.long() * gamma)
        rounds["accepted"].append(torch.where(active, n, 0))
        rounds["accept_prob"].append(res.accept_prob.float())
        # P(accept | prefix) = Σ min(d, ν) at T > 0; greedy drafts and acceptance are deterministic: the indicator
        rounds["expected_accept"].append(
            res.accept_prob.float() if greedy or not gamma else torch.minimum(draft_probs, nu[:, :gamma]).sum(-1).float()
        )

        num_rounds += 1
        added = _extend(out, finish, pieces, emitted_rows, n_rows, r, eos, max_new_tokens, prompts,
                        window, K, stop)
        bar.update(added)
    bar.close()

    if records:
        recs = _assemble(round_recs, pieces, B, device)
        round_out = {k: torch.stack(v) if v else torch.zeros(0, B) for k, v in rounds.items()}
    else:
        recs = {"token_mask": _token_mask(pieces, B, device)}
        active_h = torch.tensor(host_rounds["active"], dtype=torch.bool).view(-1, B)
        round_out = {"active": active_h, "drafted": active_h.long() * gamma,
                     "accepted": torch.tensor(host_rounds["accepted"], dtype=torch.long).view(-1, B)}
    stats = {
        "seconds": time.perf_counter() - start,
        "rounds": num_rounds,
        "time_target": target.seconds - t0["target"],
        "time_proposer": (proposer.seconds - t0["proposer"]) if proposer else 0.0,
        "time_amateur": (amateur.seconds - t0["amateur"]) if use_amateur else 0.0,
        "time_verify": verify_seconds,
        "time_rule": rule_seconds,
        "target_calls": target.calls - calls0["target"],
        "proposer_calls": (proposer.calls - calls0["proposer"]) if proposer else 0,
        "new_tokens": sum(len(o) for o in out),
        **prefill,
    }
    return GenerationOutput(
        tokens=out,
        finish_reason=[f or "length" for f in finish],
        records=recs,
        rounds=round_out,
        stats=stats,
    )


def _sync(device: torch.device | None) -> None:
    if device is not None:
        torch.cuda.synchronize(device)


def _extend(out: list[list[int]], finish: list[str | None], pieces: list[list[tuple[int, int]]],
            emitted_rows: list[list[int]], n_rows: list[int], r: int, eos: set[int], max_new_tokens: int,
            prompts: list[list[int]], window: int, K: int,
            stop: Callable[[list[int]], bool] | None = None) -> int:
    """Append each active row's tokens of round r (accepted drafts + the emitted token), stopping at EOS, the
    length limit or the context window; returns the number of tokens added."""
    added = 0
    for b in range(len(out)):
        if finish[b] is not None:
            continue
        new = emitted_rows[b][: n_rows[b] + 1]
        for i, x in enumerate(new):
            if x in eos:
                new, finish[b] = new[: i + 1], "eos"
                break
        room = max_new_tokens - len(out[b])
        if len(new) >= room:
            new = new[:room]
            finish[b] = finish[b] or "length"
        out[b].extend(new)
        pieces[b].append((r, len(new)))
        added += len(new)
        if finish[b] is None and len(prompts[b]) + len(out[b]) + K > window:
            finish[b] = "context"
        if finish[b] is None and stop is not None and stop(out[b]):
            finish[b] = "stop"
    return added


def _token_mask(pieces: list[list[tuple[int, int]]], B: int, device) -> torch.Tensor:
    lengths = [sum(m for _, m in p) for p in pieces]
    T = max(lengths, default=0)
    return torch.arange(T, device=device).unsqueeze(0) < torch.tensor(lengths, device=device).view(B, 1)


def compile_lm(lm: LM, backend: str = "inductor") -> None:
    """Wrap the model's forward in `torch.compile` in place (once per model; dynamic shapes, since the cache
    grows every round). Later `feed` calls through any LM over this model use the compiled forward."""
    if getattr(lm.model, "_specdec_compiled", None):
        return
    lm.model.forward = torch.compile(lm.model.forward, dynamic=True, backend=backend)
    lm.model._specdec_compiled = backend


def _assemble(round_recs: list[dict], pieces: list[list[tuple[int, int]]], B: int, device) -> dict[str, torch.Tensor]:
    """Concatenate each row's kept positions over rounds and pad to [B, T(, ·)]."""
    T = max((sum(m for _, m in p) for p in pieces), default=0)
    records: dict[str, torch.Tensor] = {"token_mask": torch.zeros(B, T, dtype=torch.bool, device=device)}
    if not round_recs:
        return records
    keys = [k for k in round_recs[0] if all(k in rr for rr in round_recs)]
    for k in keys:
        tail = round_recs[0][k].shape[2:]
        buf = torch.full((B, T, *tail), float("nan"), device=device)
        for b in range(B):
            chunks = [round_recs[r][k][b, :m] for r, m in pieces[b] if m]
            if chunks:
                row = torch.cat(chunks)
                buf[b, : row.shape[0]] = row
        records[k] = buf
    for b in range(B):
        records["token_mask"][b, : sum(m for _, m in pieces[b])] = True
    return records
