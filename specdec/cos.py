"""CoS for contrastive decoding: Fu et al. 2025, "Fast Large Language Model Collaborative Decoding via Speculation"
(ICML 2025; first titled "Speculative Ensemble"), two-model case with the amateur as the small model.

What is implemented (the paper's Naive-CoS plus its Alternate Proposal Framework, for ν = π_CD):
  * The amateur M_a proposes γ tokens x_i ~ d_i = q_i at the sampling temperature. Because the amateur *is* the
    contrastive partner, its drafting pass already gives log q_i, so ν_i = π_CD(p_i, q_i) needs no separate
    amateur verification pass (SCD through `generate` runs one; CoS does not).
  * The expert M_e scores [last committed token, x_1..x_γ] in one pass and the drafts are verified against
    ν_i with the one `verify` (accept with min(1, ν_i/d_i), resample from norm(max(0, ν_i − d_i))).
  * Full acceptance: ν at the bonus position would need q_{γ+1}, which the amateur has not computed (it never fed
    x_γ). Instead the expert draws its own bonus token b ~ p_{γ+1} (at the sampling temperature; argmax when
    greedy) and b becomes *the expert's proposal* (the paper's alternate proposal, proposal length 1 for the
    expert). It is not emitted yet.
  * Next round, the amateur feeds [x_γ, b] in one pass: the first output is q at b's position, so b is verified
    against ν_b = π_CD(p_{γ+1}, q_b) with proposal distribution p_{γ+1} (accept min(1, ν_b/p_b), else emit a token
    from norm(max(0, ν_b − p_b))); the second output is q after b, the amateur's first draft distribution of
    this round when b is accepted — one amateur invocation both verifies the expert's proposal and starts the
    amateur's own (the paper's Figure 2). If b is rejected the amateur drops b and feeds the corrected token.
  * Every emitted token is exactly π_CD-distributed (each is a speculative-sampling step against π_CD with the
    distribution its proposal was drawn from), so greedy CoS reproduces greedy CD token for token.

The paper writes CD as Softmax(l_p − μ·l_q); here ν is the project's π_CD ∝ p^(1+α)·q^(−α) on the β-mask
(`specdec.targets.contrastive_target`), the algorithm is unchanged. A round that accepts all γ drafts emits γ
tokens (the bonus is emitted next round, after the amateur's check), so tokens per round is not L+1 here.

Per-round records follow `specdec.generate` (one round = one expert call): `drafted` = γ plus 1 when an expert
proposal was pending, `accepted` counts accepted amateur drafts plus the accepted expert proposal, and the
per-draft arrays list the expert proposal first. Not implemented: the paper's n-model generalisation and
proposal lengths > 1 for the expert (an expert drafting several tokens would run sequentially at expert cost).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from specdec.generate import GenerationOutput, _check_inputs
from specdec.models import LM
from specdec.targets import contrastive_target, softmax_with_temperature, total_variation
from specdec.verify import ZERO_PROB_DRAFT, sample, verify

ROUND_KEYS = ("active", "drafted", "accepted", "accept_prob", "expected_accept")


def _draw(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    if greedy:
        return probs.argmax(-1)
    return sample(probs, generator)


def _append_round(rounds, active, was_pending, b_accepted, b_acc_prob, b_exp_acc, res, exp_acc, gamma) -> None:
    """Per-round records; per-draft arrays list the expert's proposal (when there was one) first."""
    B, K = active.shape[0], gamma + 1
    device = active.device
    ap = torch.zeros(B, K, device=device)
    ea = torch.zeros(B, K, device=device)
    n_active = torch.zeros(B, dtype=torch.long, device=device)
    if res is not None:
        cols = torch.arange(gamma, device=device).unsqueeze(0) + was_pending.long().unsqueeze(1)
        ap.scatter_(1, cols, res.accept_prob.float())
        ea.scatter_(1, cols, exp_acc)
        n_active = torch.where(active, res.num_accepted, 0)
    ap[:, 0] = torch.where(was_pending, b_acc_prob, ap[:, 0])
    ea[:, 0] = torch.where(was_pending, b_exp_acc, ea[:, 0])
    rounds["active"].append(active | was_pending)
    rounds["drafted"].append(torch.where(active, gamma, 0) + was_pending.long())
    rounds["accepted"].append(n_active + b_accepted.long())
    rounds["accept_prob"].append(ap)
    rounds["expected_accept"].append(ea)


def cos_generate(
    expert: LM,
    amateur: LM,
    prompts: list[list[int]],
    *,
    alpha: float,
    beta: float = 0.0,
    gamma: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    eos_token_id: int | list[int] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
    stop: Callable[[list[int]], bool] | None = None,
) -> GenerationOutput:
    """Contrastive decoding (expert, amateur, α, β) accelerated with CoS. temperature 0 is greedy. stop(tokens):
    asked for each running row after the tokens a step commits; True ends the row with finish reason "stop"."""
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
    if gamma < 1:
        raise ValueError(f"CoS needs the amateur to draft at least one token per round (gamma >= 1), got {gamma}")
    if alpha < 0 or not 0.0 <= beta <= 1.0:
        raise ValueError(f"need alpha >= 0 and beta in [0, 1], got alpha={alpha}, beta={beta}")
    if expert is amateur:
        raise ValueError("expert and amateur must be two LM wrappers (each keeps its own cache)")
    _check_inputs(prompts, gamma + 1, max_new_tokens, [expert, amateur])
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    greedy = temperature == 0
    device, V = expert.device, expert.vocab_size
    B, K = len(prompts), gamma + 1
    window = min(expert.max_positions, amateur.max_positions)
    rows = torch.arange(B, device=device)

    start = time.perf_counter()
    t0 = (expert.seconds, amateur.seconds, expert.calls, amateur.calls)
    expert.prefill([p[:-1] for p in prompts])
    amateur.prefill([p[:-1] for p in prompts])
    # Invariant at the start of a round: both caches hold every committed token but the last one (`last`), and the
    # amateur does not hold the pending expert proposal either.
    last = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=device)
    pending = torch.zeros(B, dtype=torch.bool, device=device)
    b_tok = torch.zeros(B, dtype=torch.long, device=device)
    b_prob = torch.zeros(B, V, device=device)  # distribution b was drawn from (expert at the temperature)
    b_lp = torch.zeros(B, V, device=device)  # expert log-probs at b's position (temperature 1), for π_CD

    out: list[list[int]] = [[] for _ in range(B)]
    finish: list[str | None] = [None] * B
    tok_rec: list[dict[str, list[float]]] = [
        {k: [] for k in ("p_token", "q_token", "nu_token", "tv_pq")} for _ in range(B)
    ]
    rounds: dict[str, list[torch.Tensor]] = {k: [] for k in ROUND_KEYS}
    verify_seconds = 0.0
    n_proposals = n_proposals_accepted = 0  # the expert's proposals (bonus tokens) and how many were accepted
    bar = tqdm(total=B * max_new_tokens, desc="cos", unit="tok", disable=not progress, leave=False)

    def emit(b: int, tokens: list[int], recs: list[tuple[float, float, float]]) -> int:
        """Append committed tokens to row b (stopping at EOS / max_new_tokens); returns how many were kept."""
        kept = 0
        for x, (nu_x, d_x, tv) in zip(tokens, recs):
            if finish[b] is not None:
                break
            out[b].append(x)
            for key, v in zip(("p_token", "q_token", "nu_token", "tv_pq"), (nu_x, d_x, nu_x, tv)):
                tok_rec[b][key].append(v)
            kept += 1
            if x in eos:
                finish[b] = "eos"
            elif len(out[b]) >= max_new_tokens:
                finish[b] = "length"
        if kept and finish[b] is None and stop is not None and stop(out[b]):
            finish[b] = "stop"
        return kept

    pending_h = [False] * B  # host mirror of `pending`: the loop reads the device only once per step
    while any(f is None for f in finish):
        active_l = [f is None for f in finish]
        was_l = [p and a for p, a in zip(pending_h, active_l)]
        active_h, was_h = torch.tensor(active_l), torch.tensor(was_l)  # host validity: the caches track lengths
        active, was_pending = active_h.to(device), was_h.to(device)
        added = 0

        # ---- amateur: verify the expert's pending proposal b and get the first draft distribution, one pass.
        if any(was_l):
            lp_a, _ = amateur.feed(torch.stack([last, b_tok], 1), torch.stack([active_h, was_h], 1))
            q_first = torch.where(was_pending.unsqueeze(-1), lp_a[:, 1], lp_a[:, 0])
        else:
            q_first = amateur.feed(last[:, None], active_h[:, None])[0][:, 0]
        b_acc_prob = torch.zeros(B, device=device)
        b_exp_acc = torch.zeros(B, device=device)
        b_accepted = torch.zeros(B, dtype=torch.bool, device=device)
        if any(was_l):
            idx_l = [b for b in range(B) if was_l[b]]
            idx = torch.tensor(idx_l, device=device)
            nu_b = contrastive_target(b_lp[idx], lp_a[idx, 0], alpha, beta, temperature)
            t = time.perf_counter()
            res_b = verify(b_tok[idx, None], b_prob[idx, None], torch.stack([nu_b, nu_b], 1),
                           greedy=greedy, generator=generator, check=False)
            verify_seconds += time.perf_counter() - t
            committed = res_b.tokens[:, 0]  # b itself, or the token drawn from the residual
            b_accepted[idx] = res_b.num_accepted == 1
            b_acc_prob[idx] = res_b.accept_prob[:, 0].float()
            b_exp_acc[idx] = (res_b.accept_prob[:, 0].float() if greedy  # deterministic: the indicator
                              else torch.minimum(b_prob[idx], nu_b).sum(-1).float())
            tv_b = total_variation(nu_b, b_prob[idx])
            nu_tok = nu_b.gather(-1, committed[:, None]).squeeze(-1)
            d_tok = b_prob[idx].gather(-1, committed[:, None]).squeeze(-1)
            # One device→host read for the step: committed token, acceptance and records of every pending row.
            host = torch.stack([committed.double(), (res_b.num_accepted == 1).double(), nu_tok.double(),
                                d_tok.double(), tv_b.double(), res_b.zero_prob_draft.double()], 1).cpu().tolist()
            if any(h[-1] for h in host):
                raise ValueError(ZERO_PROB_DRAFT)
            n_proposals += len(idx_l)
            n_proposals_accepted += sum(int(h[1]) for h in host)
            for b, (x, _, nu_x_b, d_x_b, tv_x_b, _) in zip(idx_l, host):
                added += emit(b, [int(x)], [(nu_x_b, d_x_b, tv_x_b)])
            last[idx] = committed
            rejected_l = [False] * B
            for b, h in zip(idx_l, host):
                rejected_l[b] = not h[1]
            if any(rejected_l):
                # Drop b from the amateur's cache and feed the corrected token instead (an extra amateur step).
                rejected_h = torch.tensor(rejected_l)
                amateur.rollback([int(r) for r in rejected_l])
                lp_c, _ = amateur.feed(last[:, None], rejected_h[:, None])
                q_first = torch.where(rejected_h.to(device).unsqueeze(-1), lp_c[:, 0], q_first)
        pending = torch.zeros_like(pending)
        pending_h = [False] * B
        active_l = [f is None for f in finish]
        active_h = torch.tensor(active_l)
        active = active_h.to(device)
        if not any(active_l):  # the last rows finished on the expert's proposal: record it and stop
            _append_round(rounds, active, was_pending, b_accepted, b_acc_prob, b_exp_acc, None, None, gamma)
            bar.update(added)
            break

        # ---- amateur drafts γ tokens; its log-probs are the contrastive partner's at the same positions.
        drafts, d_probs, a_lps = [], [], []
        lp = q_first
        for i in range(gamma):
            d = softmax_with_temperature(lp, temperature)
            x = _draw(d, greedy, generator)
            drafts.append(x)
            d_probs.append(d)
            a_lps.append(lp)
            if i < gamma - 1:
                lp = amateur.feed(x[:, None], active_h[:, None])[0][:, 0]
        drafts_t = torch.stack(drafts, 1)
        d_t = torch.stack(d_probs, 1)

        # ---- expert: one parallel pass over [last, x_1..x_γ]; verify against π_CD, bonus from the expert itself.
        lp_e, _ = expert.feed(torch.cat([last[:, None], drafts_t], 1), active_h[:, None].expand(B, K))
        nu = contrastive_target(lp_e[:, :gamma], torch.stack(a_lps, 1), alpha, beta, temperature)
        bonus = softmax_with_temperature(lp_e[:, gamma], temperature)
        t = time.perf_counter()
        res = verify(drafts_t, d_t, torch.cat([nu, bonus[:, None]], 1), greedy=greedy, generator=generator,
                     check=False)
        verify_seconds += time.perf_counter() - t
        n = torch.where(active, res.num_accepted, gamma)
        emitted = res.tokens[rows, n]
        corr = emitted.clamp(min=0)
        nu_x = nu.gather(-1, drafts_t[..., None]).squeeze(-1)
        d_x = d_t.gather(-1, drafts_t[..., None]).squeeze(-1)
        tv_x = total_variation(nu, d_t)
        nu_c = nu[rows, n.clamp(max=gamma - 1)].gather(-1, corr[:, None]).squeeze(-1)
        d_c = d_t[rows, n.clamp(max=gamma - 1)].gather(-1, corr[:, None]).squeeze(-1)
        # One device→host read for the round: counts, tokens and every record the rows keep (ids are exact in
        # float64); the rollbacks and the bookkeeping below read only this copy.
        host = torch.cat([n[:, None].double(), emitted[:, None].double(), drafts_t.double(), nu_x.double(),
                          d_x.double(), tv_x.double(), nu_c[:, None].double(), d_c[:, None].double(),
                          (res.zero_prob_draft & active)[:, None].double()], 1).cpu().tolist()
        if any(h[-1] for h in host):
            raise ValueError(ZERO_PROB_DRAFT)
        n_l = [int(h[0]) for h in host]
        expert.rollback([gamma - k if a else 0 for k, a in zip(n_l, active_l)])
        amateur.rollback([(gamma - 1) - min(k, gamma - 1) if a else 0 for k, a in zip(n_l, active_l)])
        full = active & (n == gamma)
        pending = full
        pending_h = [a and k == gamma for k, a in zip(n_l, active_l)]
        b_tok = torch.where(full, emitted, 0)
        b_prob = torch.where(full.unsqueeze(-1), bonus, b_prob)
        b_lp = torch.where(full.unsqueeze(-1), lp_e[:, gamma], b_lp)
        # Full acceptance: the last committed token is x_γ (b stays pending); otherwise the corrected token.
        last = torch.where(full, drafts_t[:, -1], emitted)

        exp_acc = res.accept_prob.float() if greedy else torch.minimum(d_t, nu).sum(-1).float()
        for b in range(B):
            if not active_l[b]:
                continue
            h, nb = host[b], n_l[b]
            g = gamma
            toks = [int(x) for x in h[2:2 + nb]]
            recs = [(h[2 + g + i], h[2 + 2 * g + i], h[2 + 3 * g + i]) for i in range(nb)]
            if nb < gamma:
                toks.append(int(h[1]))
                recs.append((h[2 + 4 * g], h[3 + 4 * g], h[2 + 3 * g + nb]))
            added += emit(b, toks, recs)
            if finish[b] is None and len(prompts[b]) + len(out[b]) + K + 1 > window:
                finish[b] = "context"

        _append_round(rounds, active, was_pending, b_accepted, b_acc_prob, b_exp_acc, res, exp_acc, gamma)
        bar.update(added)
    bar.close()

    T = max((len(o) for o in out), default=0)
    records: dict[str, torch.Tensor] = {"token_mask": torch.zeros(B, T, dtype=torch.bool, device=device)}
    for key in ("p_token", "q_token", "nu_token", "tv_pq"):
        buf = torch.full((B, T), float("nan"), device=device)
        for b in range(B):
            if tok_rec[b][key]:
                buf[b, : len(tok_rec[b][key])] = torch.tensor(tok_rec[b][key], device=device)
        records[key] = buf
    for b in range(B):
        records["token_mask"][b, : len(out[b])] = True
    records["w"] = torch.where(records["token_mask"], 1.0, float("nan"))
    records["tv_nu_p"] = torch.where(records["token_mask"], 0.0, float("nan"))  # ν is π_CD itself: no bias
    stats = {
        "seconds": time.perf_counter() - start,
        "rounds": len(rounds["active"]),
        "time_target": expert.seconds - t0[0],
        "time_proposer": amateur.seconds - t0[1],
        "time_amateur": 0.0,  # the proposer is the amateur: no separate amateur pass
        "time_verify": verify_seconds,
        "target_calls": expert.calls - t0[2],
        "proposer_calls": amateur.calls - t0[3],
        "amateur_calls": 0,
        "expert_proposals": n_proposals,
        "expert_proposals_accepted": n_proposals_accepted,
        "new_tokens": sum(len(o) for o in out),
    }
    return GenerationOutput(
        tokens=out,
        finish_reason=[f or "length" for f in finish],
        records=records,
        rounds={k: torch.stack(v) if v else torch.zeros(0, B) for k, v in rounds.items()},
        stats=stats,
    )
