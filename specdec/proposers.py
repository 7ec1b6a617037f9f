"""Proposers draft γ tokens per row and report the distribution each draft was sampled from.

One interface: `start(prompts)`, `propose(gamma, ...) -> Proposal`, `commit(num_accepted, emitted)`.
`with_bonus=True` asks for the proposal distribution at position γ+1 as well (rules that mix q into ν need it at
the bonus position); the draft model then also feeds its last draft, which it would have to do next round anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec.models import LM, pad_left
from specdec.targets import softmax_with_temperature
from specdec.verify import sample


@dataclass
class Proposal:
    tokens: torch.Tensor  # [B, γ] long
    probs: torch.Tensor  # [B, γ (+1 with bonus), V] the distribution each token was drawn from
    hidden: torch.Tensor | None = None  # [B, γ (+1), H] hidden state that produced each distribution


class Proposer:
    def start(self, prompts: list[list[int]]) -> None:
        raise NotImplementedError

    def propose(
        self, gamma: int, *, temperature: float = 1.0, generator: torch.Generator | None = None,
        with_bonus: bool = False,
    ) -> Proposal:
        raise NotImplementedError

    def commit(self, num_accepted: list[int], emitted: list[int]) -> None:
        """The round's outcome per row, as host lists (the decoding loop's one device→host copy of the round):
        accepted drafts, and the token emitted after them."""
        raise NotImplementedError

    @property
    def seconds(self) -> float:
        return 0.0

    @property
    def calls(self) -> int:
        return 0


class DraftModelProposer(Proposer):
    """A small LM sampling γ tokens autoregressively (argmax at temperature 0) with its own KV cache.

    Invariant between rounds: the cache holds every committed token except the `pending` ones (1 token, or 2 when
    all γ drafts were accepted and the last draft was never fed).
    """

    def __init__(self, lm: LM):
        self.lm = lm
        self.pending: tuple[torch.Tensor, torch.Tensor | None] | None = None  # the next feed: tokens, valid
        self._fed_drafts = 0
        self._last_drafts: torch.Tensor | None = None

    @property
    def seconds(self) -> float:
        return self.lm.seconds

    @property
    def calls(self) -> int:
        return self.lm.calls

    def start(self, prompts: list[list[int]]) -> None:
        self.lm.prefill([p[:-1] for p in prompts])
        self.pending = (torch.tensor([[p[-1]] for p in prompts], dtype=torch.long), None)

    def propose(self, gamma, *, temperature=1.0, generator=None, with_bonus=False) -> Proposal:
        tokens, valid = self.pending
        logprobs, hidden = self.lm.feed(tokens, valid)
        logprobs, hidden = logprobs[:, -1], hidden[:, -1]
        drafts, probs, hiddens = [], [], []
        steps = gamma + 1 if with_bonus else gamma
        for i in range(steps):
            q = softmax_with_temperature(logprobs, temperature)
            probs.append(q)
            hiddens.append(hidden)
            if i == gamma:  # bonus position: distribution only
                break
            if temperature == 0:
                x = q.argmax(-1)
            else:
                x = sample(q, generator)
            drafts.append(x)
            if i < steps - 1:
                logprobs, hidden = self.lm.feed(x.unsqueeze(1))
                logprobs, hidden = logprobs[:, -1], hidden[:, -1]
        self._fed_drafts = gamma if with_bonus else max(gamma - 1, 0)
        B = tokens.shape[0]
        draft_tokens = torch.stack(drafts, 1) if drafts else torch.zeros(B, 0, dtype=torch.long, device=self.lm.device)
        self._last_drafts = draft_tokens
        return Proposal(draft_tokens, torch.stack(probs, 1), torch.stack(hiddens, 1))

    def commit(self, num_accepted: list[int], emitted: list[int]) -> None:
        fed = self._fed_drafts
        self.lm.rollback([fed - min(k, fed) for k in num_accepted])
        # Pending: the emitted token, after the last draft in rows that accepted it without it having been fed (all
        # γ accepted, no bonus position), left-padded. Built on the device from the drafts and host lists, so
        # nothing is read back; the validity mask stays on the host.
        x = torch.tensor(emitted, dtype=torch.long).view(-1, 1)
        full = [k > fed for k in num_accepted]
        if any(full):
            last = self._last_drafts[:, fed:fed + 1]
            full_h = torch.tensor(full).view(-1, 1)
            first = torch.where(full_h.to(last.device), last, torch.zeros_like(last))
            self.pending = (torch.cat([first, x.to(last.device)], 1), torch.cat([full_h, torch.ones_like(full_h)], 1))
        else:
            self.pending = (x, None)


class NgramProposer(Proposer):
    """Prompt lookup: find the most recent earlier occurrence of the longest suffix (max_ngram down to min_ngram
    tokens) of prompt+output and propose the tokens that followed it. Deterministic, so each proposal is one-hot.

    Without a match it proposes the last token repeated: any deterministic proposal keeps verification exact, and
    a fixed fallback keeps every row at γ drafts so the batch stays rectangular.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 12, min_ngram: int = 1, device: str | torch.device = "cpu"):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram
        self.device = torch.device(device)
        self.history: list[list[int]] = []
        self._last: list[list[int]] = []
        self.matches = 0
        self.lookups = 0

    def start(self, prompts: list[list[int]]) -> None:
        self.history = [list(p) for p in prompts]

    def lookup(self, seq: list[int], k: int) -> list[int] | None:
        """Up to k tokens that followed the most recent earlier occurrence of the longest matching suffix."""
        L = len(seq)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            suffix = seq[L - n:]
            for start in range(L - n - 1, -1, -1):  # most recent occurrence first, excluding the suffix itself
                if seq[start:start + n] == suffix:
                    return seq[start + n:start + n + k]
        return None

    def propose(self, gamma, *, temperature=1.0, generator=None, with_bonus=False) -> Proposal:
        k = gamma + 1 if with_bonus else gamma
        rows = []
        for seq in self.history:
            self.lookups += 1
            cont = self.lookup(seq, k) or []
            self.matches += bool(cont)
            cont = cont + [cont[-1] if cont else seq[-1]] * (k - len(cont))
            rows.append(cont)
        self._last = rows
        ids = torch.tensor(rows, dtype=torch.long, device=self.device).view(len(rows), k)
        probs = torch.nn.functional.one_hot(ids, self.vocab_size).float()
        return Proposal(ids[:, :gamma], probs, None)

    def commit(self, num_accepted: list[int], emitted: list[int]) -> None:
        for seq, row, n, x in zip(self.history, self._last, num_accepted, emitted):
            seq.extend(row[:n] + [x])


class FeatureDrafter(Proposer):
    """EAGLE-style feature-level drafter (specdec/feature_drafter.py): one decoder layer over the target's last
    hidden state and the next token's embedding, drafting on its own features, scored by the target's LM head.

    It reads the target's hidden states of committed tokens from the passes the loop makes anyway (`generate`
    hands them over through `observe_target_hidden`: the prefill's, then each round's γ+1). Its own KV cache holds
    one slot per committed token j, built from the pair (h_{j-1}, x_j) with the target's h: draft slots (built on
    the drafter's own features) are dropped at commit and the accepted tokens re-fed with the target's features
    next round, as EAGLE does. `hidden` of a proposal is the drafter's feature f (h_q for the ensemble head).
    """

    wants_target_hidden = True

    def __init__(self, net, target: LM, meta: dict | None = None):
        from specdec.feature_drafter import head_weights

        self.net, self.target, self.meta = net.to(device=target.device, dtype=target.dtype), target, meta or {}
        self.device = target.device
        self.embed = target.model.get_input_embeddings()
        self.head_w, self.head_b = head_weights(net, target.model)
        self.d2t = net.draft_to_target if net.draft_to_target.numel() else None
        self.hidden_size = net.cfg.hidden
        self.vocab_size = target.vocab_size
        self._seconds, self._calls = 0.0, 0
        self.sync_timing = False  # as LM.sync_timing: True waits for the device so the timer is compute time
        self._prompts: list[list[int]] = []
        self._round_hidden: torch.Tensor | None = None
        self._prefilled = False
        self.pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.reset(1)

    @classmethod
    def load(cls, path, target: LM, tokenizer=None) -> FeatureDrafter:
        """An exported drafter (train/drafter.py) for this target; raises DrafterMismatchError for another."""
        from specdec.feature_drafter import load_drafter

        net, meta = load_drafter(path, target.model, tokenizer)
        return cls(net, target, meta)

    @property
    def seconds(self) -> float:
        return self._seconds

    @property
    def calls(self) -> int:
        return self._calls

    # ---- the drafter's own cache: keys/values [B, heads, S, d], a 0/1 slot mask, each row's next position
    def reset(self, batch_size: int) -> None:
        nh, d = self.net.cfg.heads, self.net.head_dim
        dtype = next(self.net.parameters()).dtype
        self.k = torch.zeros(batch_size, nh, 0, d, device=self.device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.mask = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.next_pos = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._fed_drafts = 0
        self._holes = False  # host flag: any hole fed so far (padding or ragged acceptance)

    @torch.no_grad()
    def _feed(self, feats: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Append slots (feats [B, k, H], tokens [B, k]; valid=False slots are holes, None: no holes); returns the
        features f [B, k, H]."""
        t = time.perf_counter()
        B, k = tokens.shape
        dense = valid is None
        if dense:
            valid = torch.ones(B, k, dtype=torch.bool, device=self.device)
            positions = self.next_pos.unsqueeze(1) + torch.arange(k, device=self.device)
        else:
            positions = (self.next_pos.unsqueeze(1) + valid.long().cumsum(1) - 1).clamp(min=0)
            self._holes = True  # a hole stays in the cache: masks from now on
        attend = None  # one query and no holes: it sees every cached slot
        if k > 1 or self._holes:
            causal = torch.ones(k, k, dtype=torch.bool, device=self.device).tril()
            new = (causal.unsqueeze(0) & valid.unsqueeze(1)) | torch.eye(k, dtype=torch.bool, device=self.device)
            attend = torch.cat([self.mask.unsqueeze(1).expand(B, k, -1), new], 2)
        dtype = self.k.dtype
        f, kk, vv = self.net(feats.to(dtype), self.embed(tokens.clamp(min=0)).to(dtype), positions, attend,
                             self.k, self.v)
        self.k, self.v = torch.cat([self.k, kk], 2), torch.cat([self.v, vv], 2)
        self.mask = torch.cat([self.mask, valid], 1)
        self.next_pos = self.next_pos + (k if dense else valid.long().sum(1))
        self._sync()
        self._seconds += time.perf_counter() - t
        self._calls += 1
        return f

    def _sync(self) -> None:
        if self.sync_timing and self.device.type == "cuda":  # else the drafter's kernels bill the target's timer
            torch.cuda.synchronize(self.device)

    def _crop(self, n: int) -> None:
        """Drop the last n slots (the draft slots: valid in every row)."""
        if n > 0:
            self.k, self.v, self.mask = self.k[:, :, :-n], self.v[:, :, :-n], self.mask[:, :-n]
            self.next_pos = self.next_pos - n

    def _logprobs(self, f: torch.Tensor) -> torch.Tensor:
        t = time.perf_counter()
        lp = torch.log_softmax(torch.nn.functional.linear(f, self.head_w, self.head_b).float(), -1)
        self._sync()
        self._seconds += time.perf_counter() - t
        return lp

    # ---- the proposer interface
    def start(self, prompts: list[list[int]]) -> None:
        self.reset(len(prompts))
        self._prompts = [list(p) for p in prompts]
        self.pending, self._round_hidden, self._prefilled = None, None, False

    def observe_target_hidden(self, hidden: torch.Tensor | None) -> None:
        """The target's last hidden states of the tokens it was just fed: after `start`, the prefill's (prompts
        without their last token, left-padded); in a round, the γ+1 fed positions (used at `commit`)."""
        if not self._prefilled:
            self._prefill_pairs(hidden)
            self._prefilled = True
        else:
            self._round_hidden = hidden

    def _prefill_pairs(self, hidden: torch.Tensor | None) -> None:
        """Pairs (h_{j-1}, x_j) of every prompt token, h_{-1} = 0, left-padded."""
        tokens, valid = pad_left(self._prompts, self.device)
        B, W = tokens.shape
        H = self.hidden_size
        if (hidden is None or hidden.shape[1] < W - 1) and W > 1:
            raise RuntimeError("FeatureDrafter: the target's prefill returned no hidden states for the prompts "
                               "(an LM subclass whose prefill drops LM.prefill's return value?)")
        feats = torch.zeros(B, W, H, device=self.device, dtype=self.k.dtype)
        if hidden is not None and hidden.shape[1]:
            feats[:, W - hidden.shape[1]:] = hidden.to(feats.dtype)
        for b, p in enumerate(self._prompts):
            feats[b, : W - len(p) + 1] = 0  # padding and the first token's (absent) predecessor
        ragged = len({len(p) for p in self._prompts}) > 1
        self.pending = (feats, tokens, valid if ragged else None)

    def propose(self, gamma, *, temperature=1.0, generator=None, with_bonus=False) -> Proposal:
        if self.pending is None:
            raise RuntimeError("FeatureDrafter needs the target's hidden states of the prompt: decode through "
                               "specdec.generate (which hands them over) and an LM whose prefill returns them")
        feats, tokens, valid = self.pending
        f = self._feed(feats, tokens, valid)[:, -1]
        B = tokens.shape[0]
        drafts, probs, hiddens = [], [], []
        steps = gamma + 1 if with_bonus else gamma
        for i in range(steps):
            lp = self._logprobs(f)
            q = softmax_with_temperature(lp, temperature)
            if self.d2t is not None:  # reduced draft vocabulary: zero mass outside it
                q = q.new_zeros(B, self.vocab_size).scatter_(1, self.d2t.expand(B, -1), q)
            probs.append(q)
            hiddens.append(f)
            if i == gamma:  # bonus position: distribution only
                break
            x = q.argmax(-1) if temperature == 0 else sample(q, generator)
            drafts.append(x)
            if i < steps - 1:
                f = self._feed(f.unsqueeze(1), x.unsqueeze(1))[:, -1]
        self._fed_drafts = steps - 1
        self._drafts = torch.stack(drafts, 1) if drafts else torch.zeros(B, 0, dtype=torch.long, device=self.device)
        self._round_hidden = None
        return Proposal(self._drafts, torch.stack(probs, 1), torch.stack(hiddens, 1))

    def commit(self, num_accepted: list[int], emitted: list[int]) -> None:
        if self._round_hidden is None:
            raise RuntimeError("FeatureDrafter.commit before the target's hidden states of the round were observed")
        self._crop(self._fed_drafts)  # draft slots ran on the drafter's own features: rebuilt from the target's
        self._fed_drafts = 0
        h = self._round_hidden
        B = h.shape[0]
        n = torch.tensor(num_accepted, dtype=torch.long, device=self.device)
        emitted = torch.tensor(emitted, dtype=torch.long, device=self.device)
        # The round's committed tokens: accepted drafts, then the emitted one; each pairs with the target's
        # hidden state at the fed position before it (h[:, 0] is that of the previous round's emitted token).
        toks = torch.cat([self._drafts, torch.zeros(B, 1, dtype=torch.long, device=self.device)], 1)
        toks = toks.scatter(1, n.unsqueeze(1), emitted.unsqueeze(1))
        W = max(num_accepted) + 1
        ragged = min(num_accepted) + 1 < W
        j = torch.arange(W, device=self.device).unsqueeze(0)
        src = j - (W - 1 - n.unsqueeze(1))  # left-padded: row b's n_b+1 pairs end at column W-1
        valid = src >= 0
        src = src.clamp(min=0)
        feats = h.gather(1, src.unsqueeze(-1).expand(B, W, h.shape[-1]))
        self.pending = (feats, toks.gather(1, src), valid if ragged else None)
        self._round_hidden = None


def drafter_sha256(proposer: object) -> str | None:
    """The weights sha256 of a feature drafter's export (None for other proposers): what run files record, since
    train/drafter.py re-exports to the same <run dir>/drafter."""
    meta = getattr(proposer, "meta", None)
    return meta.get("weights_sha256") if isinstance(meta, dict) else None
