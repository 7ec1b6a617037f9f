"""Proposers draft γ tokens per row and report the distribution each draft was sampled from.

One interface: `start(prompts)`, `propose(gamma, ...) -> Proposal`, `commit(num_accepted, emitted)`.
`with_bonus=True` asks for the proposal distribution at position γ+1 as well (rules that mix q into ν need it at
the bonus position); the draft model then also feeds its last draft, which it would have to do next round anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.models import LM, pad_left
from specdec.targets import softmax_with_temperature


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

    def commit(self, num_accepted: torch.Tensor, emitted: torch.Tensor) -> None:
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
        self.pending: list[list[int]] = []
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
        self.pending = [[p[-1]] for p in prompts]

    def propose(self, gamma, *, temperature=1.0, generator=None, with_bonus=False) -> Proposal:
        tokens, valid = pad_left(self.pending)  # host tensors: feed moves them and reads their last columns free
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
                x = torch.multinomial(q, 1, generator=generator).squeeze(-1)
            drafts.append(x)
            if i < steps - 1:
                logprobs, hidden = self.lm.feed(x.unsqueeze(1))
                logprobs, hidden = logprobs[:, -1], hidden[:, -1]
        self._fed_drafts = gamma if with_bonus else max(gamma - 1, 0)
        B = tokens.shape[0]
        draft_tokens = torch.stack(drafts, 1) if drafts else torch.zeros(B, 0, dtype=torch.long, device=self.lm.device)
        self._last_drafts = draft_tokens
        return Proposal(draft_tokens, torch.stack(probs, 1), torch.stack(hiddens, 1))

    def commit(self, num_accepted: torch.Tensor, emitted: torch.Tensor) -> None:
        fed = self._fed_drafts
        kept = num_accepted.clamp(max=fed)
        self.lm.rollback(fed - kept)
        n_rows, x_rows = num_accepted.tolist(), emitted.tolist()
        # Accepted drafts beyond what was fed (only the last one, after a full acceptance) are still pending;
        # the drafts are read back from the device only in rounds where that happens.
        drafts = self._last_drafts.tolist() if max(n_rows, default=0) > fed else None
        self.pending = [(drafts[b][fed:n] if drafts else []) + [x] for b, (n, x) in enumerate(zip(n_rows, x_rows))]


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

    def commit(self, num_accepted: torch.Tensor, emitted: torch.Tensor) -> None:
        for seq, row, n, x in zip(self.history, self._last, num_accepted.tolist(), emitted.tolist()):
            seq.extend(row[:n] + [x])
