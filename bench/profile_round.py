"""Where the time of a decoding round goes: torch.profiler over a few rounds of one method at one batch size.

    python bench/profile_round.py --target artifacts/models/qwen25coder_15b --draft artifacts/models/qwen25coder_05b \
        --dtype bfloat16 --batch 8

Prints the loop's own split (proposer / target / rule / verify / rest, with the models' device waits on) and the
operators that take the most self time, grouped into: the models' matrix work (linear / matmul / attention), the
float32 work over the vocabulary (log-softmax, softmax, the rule's ν and verify's residuals), and the rest. Writes
JSON with --out. Made for the question "why does bf16 gain less at batch 8 than at batch 1 on a CPU?".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python bench/profile_round.py`: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.profiler import ProfilerActivity, profile

from specdec.generate import generate
from specdec.models import LM, load_model, resolve_device, resolve_dtype
from specdec.proposers import DraftModelProposer
from specdec.targets import ExactRule, StaticEnsembleRule

PROMPTS = [
    "Write a Python function that returns the sum of a list of numbers.",
    "Question: Mia has 12 pens and buys 7 more. How many pens does she have? End with #### <number>.",
    "Write a Python function is_prime(n) that tells whether n is prime.",
    "Summarise in one sentence: the city council met on Monday to discuss the new park.",
]
# aten operators by what they are (self CPU time is summed per group)
MATRIX = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
          "aten::_scaled_dot_product", "aten::scaled_dot_product")
VOCAB = ("aten::_log_softmax", "aten::_softmax", "aten::log_softmax", "aten::softmax", "aten::exp", "aten::sub",
         "aten::clamp", "aten::div", "aten::sum", "aten::minimum", "aten::maximum", "aten::multinomial",
         "aten::gather", "aten::mul", "aten::add", "aten::where", "aten::_to_copy", "aten::copy_", "aten::cumsum")


def group(name: str) -> str:
    if name.startswith(MATRIX):
        return "matrix (linear / matmul / attention)"
    if name.startswith(VOCAB):
        return "elementwise and reductions (mostly over the vocabulary, float32)"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--w", type=float, default=None, help="static ensemble weight (default: standard SD)")
    ap.add_argument("--new-tokens", type=int, default=24, help="profiled tokens per row (after a warm-up)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    target, tok = load_model(args.target, device=device, dtype=dtype)
    draft, _ = load_model(args.draft, device=device, dtype=dtype)
    prompts = [tok(PROMPTS[i % len(PROMPTS)])["input_ids"] for i in range(args.batch)]
    rule = ExactRule() if args.w is None else StaticEnsembleRule(args.w)

    def decode(n: int):
        t, d = LM(target, "target"), LM(draft, "draft")
        t.sync_timing = d.sync_timing = True
        return generate(t, DraftModelProposer(d), prompts, rule=rule, gamma=args.gamma, max_new_tokens=n,
                        temperature=1.0, generator=torch.Generator().manual_seed(0), records=False)

    decode(4)  # warm-up
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])) \
            as prof:
        out = decode(args.new_tokens)
    s = out.stats
    rest = s["seconds"] - s["time_target"] - s["time_proposer"] - s["time_rule"] - s["time_verify"]
    split = {"target": s["time_target"], "proposer": s["time_proposer"], "rule": s["time_rule"],
             "verify": s["time_verify"], "rest": rest}
    events = prof.key_averages()
    ops = sorted(((e.key, e.self_cpu_time_total / 1e6, e.count) for e in events), key=lambda x: -x[1])
    total = sum(t for _, t, _ in ops)
    groups: dict[str, float] = {}
    for name, t, _ in ops:
        groups[group(name)] = groups.get(group(name), 0.0) + t
    print(f"{args.batch} rows x {args.new_tokens} tokens, {dtype}, {s['rounds']} rounds, {s['seconds']:.1f} s "
          f"({s['new_tokens'] / s['seconds']:.2f} tok/s)")
    print("loop split: " + ", ".join(f"{k} {v / s['seconds']:.0%}" for k, v in split.items()))
    print("operator self time by group: " + ", ".join(f"{k} {v / total:.0%}" for k, v in groups.items()))
    print("\n| operator | self s | share | calls |\n|---|---|---|---|")
    for name, t, n in ops[: args.top]:
        print(f"| {name} | {t:.2f} | {t / total:.1%} | {n} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "dtype": str(dtype),
                                        "stats": s, "split": split, "groups": groups,
                                        "ops": [{"op": n, "self_s": t, "calls": c} for n, t, c in ops[:40]]},
                                       indent=2))


if __name__ == "__main__":
    main()
