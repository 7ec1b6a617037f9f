"""Engine bookkeeping at batch 16: cache slots per held token and device→host reads per round, with and without
compaction of the holes (speculative decoding leaves rejected drafts' slots in the shared cache).

    python bench/cache_slots.py                       # the embedded trio, held-out synthetic GSM8K prompts
    python bench/cache_slots.py --random              # a random Llama pair (no trio needed; seconds)

For each of sd and static w = 0.5 (T = 1, γ = 4, records on: the training/evaluation mode) it decodes the same
prompts twice, `compact_slack` = ∞ (the old cache: holes only cropped when all rows share them) and the default,
and reports: the target cache's slots at the end and averaged over rounds, per slot a row actually holds (1.0 is
no waste), the number of compactions, tokens identical between the two, and reads per round (HostReads, an upper
bound on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from specdec.generate import generate
from specdec.models import LM
from specdec.proposers import DraftModelProposer
from specdec.targets import ExactRule, StaticEnsembleRule
from specdec.testing import HostReads, noisy_copy, random_llama


class TracedLM(LM):
    """An LM that records, after each rollback, its cache width and the longest row it holds."""

    def reset(self, batch_size: int) -> None:
        super().reset(batch_size)
        self.trace: list[tuple[int, int]] = []

    def rollback(self, n) -> None:
        super().rollback(n)
        if self.lengths is not None:
            self.trace.append((self.seq_len, max(self.lengths)))


def load(args):
    if args.random:
        target = random_llama(256, hidden=64, layers=2, seed=0, init_std=0.3)
        draft = noisy_copy(target, noise=0.15, seed=1)
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 256, (int(torch.randint(8, 40, (1,), generator=g)),), generator=g).tolist()
                   for _ in range(args.batch)]
        return target, draft, prompts, "random Llama pair (vocab 256)"
    import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
    from data.synthetic import generate as synth
    from data.tasks import get_task
    from specdec.loading import Models
    from specdec.models import encode_prompt

    models = Models({"embedded": True, "dtype": "float32"})
    task = get_task("gsm8k")
    rows = synth("gsm8k", "test", args.batch, seed=args.seed)
    prompts = [encode_prompt(models.tokenizer, task.format_prompt(r, models.tokenizer)) for r in rows]
    return models.target.model, models.draft.model, prompts, "embedded trio, synthetic GSM8K (held-out split)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    target, draft, prompts, what = load(args)
    rows = []
    for label, rule in (("sd", ExactRule()), ("static w=0.5", StaticEnsembleRule(0.5))):
        outs = {}
        for mode, slack in (("no compaction", float("inf")), ("compaction", None)):
            tl = TracedLM(target, "target")
            if slack is not None:
                tl.compact_slack = slack
            with HostReads() as reads:
                out = generate(tl, DraftModelProposer(LM(draft, "draft")), prompts, rule=rule, gamma=4,
                               max_new_tokens=args.new_tokens, temperature=1.0, record_hidden=True,
                               generator=torch.Generator().manual_seed(args.seed))
            width = sum(s for s, _ in tl.trace) / max(sum(h for _, h in tl.trace), 1)
            end = tl.trace[-1][0] / tl.trace[-1][1]
            outs[mode] = out.tokens
            rows.append({"method": label, "cache": mode, "slots_per_held_token_end": round(end, 3),
                         "slots_per_held_token_mean": round(width, 3), "compactions": tl.compactions,
                         "rounds": out.stats["rounds"], "reads_per_round": round(reads.n / out.stats["rounds"], 2),
                         "acceptance": round(out.acceptance_rate, 3)})
        rows[-1]["tokens_identical"] = outs["compaction"] == outs["no compaction"]
    print(f"{what}; batch {args.batch}, {args.new_tokens} new tokens, T = 1, γ = 4, records on\n")
    cols = list(rows[0]) + ["tokens_identical"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    if args.out:
        args.out.write_text(json.dumps({"setup": what, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
