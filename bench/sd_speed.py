"""Target-only decoding vs standard speculative decoding on a randomly initialised pair, measured side by side.

Prints tokens/s of both, the measured mean accepted length L, the draft/target step-cost ratio c measured in the
same run, the theoretical speed-up (L+1)/(γ·c+1) and the ratio measured/theoretical.

    python bench/sd_speed.py [--gamma 4] [--new-tokens 128] [--target-hidden 1024 --target-layers 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specdec import LM, DraftModelProposer, generate
from specdec.testing import random_llama


def step_cost(lm: LM, prompt: list[int], width: int = 1, steps: int = 30) -> float:
    """Median seconds of one forward over `width` new tokens with a warm cache (rolled back after each)."""
    lm.prefill([prompt])
    times = []
    tok = torch.tensor([prompt[-1:] * width])
    for _ in range(steps):
        t = time.perf_counter()
        lm.feed(tok)
        times.append(time.perf_counter() - t)
        lm.rollback(torch.tensor([width]))
    return statistics.median(times[3:])


def timed(fn, repeats: int):
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t, out))
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--target-hidden", type=int, default=1024)
    ap.add_argument("--target-layers", type=int, default=8)
    ap.add_argument("--draft-hidden", type=int, default=128)
    ap.add_argument("--draft-layers", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    # Small init std → near-uniform next-token distributions for both models, so they agree often at T=1.
    target = LM(random_llama(args.vocab, args.target_hidden, args.target_layers, heads=8, seed=0,
                             init_std=0.02, max_positions=4096, device=args.device), "target")
    draft = LM(random_llama(args.vocab, args.draft_hidden, args.draft_layers, heads=4, seed=1,
                            init_std=0.02, max_positions=4096, device=args.device), "draft")
    n_t = sum(p.numel() for p in target.model.parameters())
    n_d = sum(p.numel() for p in draft.model.parameters())
    prompt = [1, 17, 42, 7, 99, 3, 250, 11]
    c_t, c_d = step_cost(target, prompt), step_cost(draft, prompt)
    c = c_d / c_t
    c_v = step_cost(target, prompt, width=args.gamma + 1) / c_t  # the verification pass is not free on a CPU

    gen = torch.Generator(device=args.device)

    def ar():
        gen.manual_seed(0)
        return generate(target, None, [prompt], gamma=0, max_new_tokens=args.new_tokens,
                        temperature=args.temperature, generator=gen)

    def sd():
        gen.manual_seed(0)
        return generate(target, DraftModelProposer(draft), [prompt], gamma=args.gamma,
                        max_new_tokens=args.new_tokens, temperature=args.temperature, generator=gen)

    t_ar, out_ar = timed(ar, args.repeats)
    t_sd, out_sd = timed(sd, args.repeats)
    tps_ar, tps_sd = out_ar.stats["new_tokens"] / t_ar, out_sd.stats["new_tokens"] / t_sd
    L = out_sd.mean_accepted_length
    theory = (L + 1) / (args.gamma * c + 1)
    measured = tps_sd / tps_ar
    print(f"target {n_t / 1e6:.1f}M params, draft {n_d / 1e6:.2f}M params, vocab {args.vocab}, "
          f"γ={args.gamma}, T={args.temperature}, {args.new_tokens} new tokens, device {args.device}")
    print(f"step cost: target {c_t * 1e3:.2f} ms, draft {c_d * 1e3:.2f} ms, c = draft/target = {c:.3f} "
          f"(target ≈ {1 / c:.1f}× the draft)")
    print(f"{'method':<16}{'tokens/s':>10}{'L':>8}{'accept':>8}")
    print(f"{'target-only':<16}{tps_ar:>10.1f}{'-':>8}{'-':>8}")
    print(f"{'standard SD':<16}{tps_sd:>10.1f}{L:>8.2f}{out_sd.acceptance_rate:>8.2f}")
    print(f"speed-up measured {measured:.2f}×, theoretical (L+1)/(γc+1) = {theory:.2f}×, "
          f"measured/theoretical = {measured / theory:.2f}")
    refined = (L + 1) / (args.gamma * c + c_v)
    print(f"a (γ+1)-token target pass costs {c_v:.2f}× a 1-token step here; with it, (L+1)/(γc+{c_v:.2f}) = "
          f"{refined:.2f}×, measured/refined = {measured / refined:.2f}")


if __name__ == "__main__":
    main()
