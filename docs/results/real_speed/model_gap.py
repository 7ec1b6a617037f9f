"""Where the throughput model (L+1)/(γc+1) and a bench run part ways, row by row: from the model with the probe's c,
step by step to what the run measured (decoding alone, prefill apart). Each step swaps one assumption of the simple
model for what the run itself measured:
  1. c from the run (its draft calls' mean cost / ar_target's mean step in the same run) instead of the probe's;
  2. the draft calls the rule really makes a round (the ν-form rules also draft q at the bonus position);
  3. the (γ+1)-token verification pass at its measured cost instead of one step;
  4. what is left: the loop itself (rule, verify, sampling, cache bookkeeping).
A row timed with --paired-baseline is read against the ar_target runs just before and after it: its step is
their decoding time per token, and "measured" their paired ratio.

    .venv/bin/python docs/results/real_speed/model_gap.py docs/results/real_speed/gamma/run2.json
"""
import json
import sys


def main(path: str) -> None:
    d = json.loads(open(path).read())
    rows = d["rows"]
    ar = next(r for r in rows if r["method"] == "ar_target" and r["batch"] == 1)
    step = ar["run_target_call_s"]
    print(f"{path}: ar_target's in-run step {1e3 * step:.0f} ms\n")
    print("| row | model, probe c | 1. in-run c | 2. + draft calls made | 3. + pass cost | measured (decode) "
          "| measured / model |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["gamma"] or r["batch"] != 1:
            continue
        L, g = r["L"], r["gamma"]
        pb = r.get("paired_base")
        step_r = pb["decode_seconds"] / pb["new_tokens"] if pb else step
        measured = r["vs_base_decode_paired"] if pb else r["vs_ar_target_decode"]
        c = r["run_proposer_call_s"] / step_r
        calls = r["proposer_calls_per_round"]
        pass_cost = r["run_target_call_s"] / step_r
        m1 = (L + 1) / (g * c + 1)
        m2 = (L + 1) / (calls * c + 1)
        m3 = (L + 1) / (calls * c + pass_cost)
        name = r["method"] + (" slim" if r.get("slim") else "") + f" γ={g}" + (" (paired)" if pb else "")
        print(f"| {name} | {r['model_speedup']:.2f} (c {r['c']:.3f}) | {m1:.2f} (c {c:.3f}) | {m2:.2f} ({calls:.2f} "
              f"calls) | {m3:.2f} (pass {pass_cost:.2f} steps) | {measured:.2f} "
              f"| {measured / r['model_speedup']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
