"""How far each slim draft's q moves from the full bf16 0.5B's: mean total variation and argmax agreement per
position, teacher-forced on the gold answers of 8 MBPP test problems (the first 8 of the 64 that slim_quality.sh
decodes, data seed 11). Variants: the 32,768 ids of slim_quality.sh's vocabulary (counted on the rows disjoint from
the test and validation draws) alone, with int8 weights, and with int8 weights and per-token activations
("dynamic"). A whole answer is fed in one call, so the dynamic variant runs its many-row path (the same per-token
quantization as the one-row kernel of decoding). Two threads, a few minutes.

    .venv/bin/python docs/results/real_speed/draft_fidelity.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from data.draft_vocab import task_token_counts  # noqa: E402
from data.loaders import load_examples  # noqa: E402
from data.tasks import get_task  # noqa: E402
from specdec.models import LM, load_model  # noqa: E402
from specdec.slim_draft import slim_draft, special_ids  # noqa: E402

DRAFT, DATA = "artifacts/models/qwen25coder_05b", "../shared/data/mbpp/sanitized-mbpp.json"
VARIANTS = {"32k vocabulary, bf16": {"int8": False}, "int8 weights, 32k": {"int8": "weight"},
            "int8 weights + activations (dynamic), 32k": {"int8": "dynamic"}}


def main() -> None:
    torch.set_num_threads(2)
    task = get_task("mbpp")
    rows = load_examples(task, path=DATA, source="file", n=64, seed=11).rows[:8]  # the 64 of the quality runs
    model, tok = load_model(DRAFT, dtype="bfloat16")
    seqs = [torch.tensor([tok(task.format_prompt(r, tok) + task.target_text(r))["input_ids"]]) for r in rows]
    counts, source = task_token_counts("mbpp", DATA, tok, len(tok), [{"n": 64, "seed": 11}, {"n": 64, "seed": 13}])

    def logprobs(lm: LM) -> torch.Tensor:
        out = []
        for s in seqs:
            lm.reset(1)
            out.append(lm.feed(s)[0][0])
        return torch.cat(out)

    ref = logprobs(LM(model, "full"))
    print(f"{sum(s.shape[1] for s in seqs)} positions of 8 MBPP test problems; ids counted over {source}\n")
    print("| draft | mean TV to the full bf16 draft | argmax agreement |\n|---|---|---|")
    for name, kw in VARIANTS.items():
        lm = LM(load_model(DRAFT, dtype="bfloat16")[0], name)
        slim_draft(lm, vocab=32768, counts=counts, always=special_ids(tok), **kw)
        lp = logprobs(lm)
        tv = 0.5 * (lp.exp() - ref.exp()).abs().sum(-1)
        print(f"| {name} | {tv.mean():.4f} | {(lp.argmax(-1) == ref.argmax(-1)).float().mean():.3f} |", flush=True)


if __name__ == "__main__":
    main()
