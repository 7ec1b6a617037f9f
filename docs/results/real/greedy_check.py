"""Greedy SD == greedy target-only decoding on the real pair: token-identical outputs on a few MBPP prompts.
A row that diverges where the target's top two tokens are within rounding (bench.greedy_identity: a different
summation order, common in bfloat16) is reported as a near-tie flip; only real mismatches fail.

    HF_HUB_OFFLINE=1 .venv/bin/python docs/results/real/greedy_check.py [N] [MAX_NEW]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from bench.greedy_identity import compare_greedy, near_tie_tolerance, next_token_logprobs  # noqa: E402
from data.loaders import load_examples  # noqa: E402
from data.tasks import get_task  # noqa: E402
from specdec.generate import generate  # noqa: E402
from specdec.loading import Models  # noqa: E402
from specdec.proposers import DraftModelProposer  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    max_new = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    torch.set_num_threads(1)
    cfg = OmegaConf.load(Path(__file__).resolve().parents[3] / "conf" / "model" / "qwen25coder_15b_05b.yaml")
    models = Models(cfg)
    task = get_task("mbpp")
    rows = load_examples(task, path="../shared/data/mbpp/sanitized-mbpp.json", n=n, seed=0).rows
    tok = models.tokenizer
    prompts = [tok(task.format_prompt(r, tok))["input_ids"] for r in rows]
    res = {}
    for name, gamma in (("ar_target", 0), ("sd", 4)):
        t0 = time.perf_counter()
        out = generate(models.target, DraftModelProposer(models.draft) if gamma else None, prompts, gamma=gamma,
                       max_new_tokens=max_new, temperature=0.0, eos_token_id=tok.eos_token_id)
        res[name] = {"tokens": out.tokens, "seconds": round(time.perf_counter() - t0, 1),
                     "finish": out.finish_reason}
    target = models.target
    cmp = compare_greedy(res["ar_target"]["tokens"], res["sd"]["tokens"],
                         lambda i, prefix: next_token_logprobs(target.model, prompts[i] + prefix, target.vocab_size),
                         tol=near_tie_tolerance(target.model.dtype))
    same = [a == b for a, b in zip(res["ar_target"]["tokens"], res["sd"]["tokens"])]
    report = {"n": n, "max_new_tokens": max_new, "dtype": str(target.model.dtype).removeprefix("torch."),
              "identical": same, "near_tie_flips": cmp.near_ties, "mismatches": cmp.mismatches,
              "lengths": [len(t) for t in res["sd"]["tokens"]],
              "seconds": {k: v["seconds"] for k, v in res.items()}, "finish": res["sd"]["finish"]}
    print(json.dumps(report))
    print(f"greedy sd vs ar_target: {cmp.summary()}", file=sys.stderr)
    if not cmp.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
