"""Quality bars of the embedded trio (issue 4), measured with the real engine on held-out synthetic data.

    python diagnostics/trio_quality.py [--dir DIR] [--n-gsm8k 200] [--n-sd 48] [--seed 0] [--gamma 4]

- greedy GSM8K accuracy (rewards.score) of target, draft and amateur on held-out synthetic problems, and the
  draft's as a fraction of the target's;
- standard speculative decoding draft -> target at temperature 1, gamma 4: acceptance rate (accepted / drafted)
  per synthetic task, plus the teacher-forced expected acceptance E[sum_x min(p, q)] along target samples;
- draft FLOPs per token ratio (computed, from the manifest) and the measured per-token latency ratio
  (batch-1 single-token forwards with a KV cache).
Bars (issue 4, revised by issue 10 so that the trio resembles a real pair): target >= 60%; the draft a
competent smaller model, 0.4-0.9 of the target's accuracy (a real 0.5B coder drafting for its 1.5B solves
~0.6-0.8 of what the target solves on code); amateur at most the target; acceptance in [40%, 85%] on every
task; draft/target FLOPs c <= 0.4 (ratio >= 2.5). docs/results/calibration.md sets them side by side with the
real pair.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.build_models import MODEL_NAMES, ensure_embedded  # noqa: E402
from data.synthetic import generate as synth  # noqa: E402
from data.tasks import get_task  # noqa: E402
from eval.run import cut_at_stop  # noqa: E402
from rewards import score  # noqa: E402
from specdec.generate import generate  # noqa: E402
from specdec.models import LM, load_model  # noqa: E402
from specdec.proposers import DraftModelProposer  # noqa: E402

SD_TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")


def task_prompts(task: str, n: int, seed: int, tok) -> tuple[list[list[int]], list, list[dict]]:
    t = get_task(task)
    rows = synth(task, "test", n, seed)
    return [tok(t.format_prompt(ex)).input_ids for ex in rows], [t.reference(ex) for ex in rows], rows


def decode(tok, seqs: list[list[int]], task: str) -> list[str]:
    """Completions as eval/run.py scores them: decoded, then cut at the task's stop strings (a run-on into an
    invented next question must not be scored on that question's answer)."""
    stops = get_task(task).stop
    return [cut_at_stop(tok.decode([x for x in s if x != tok.eos_token_id], skip_special_tokens=True), stops)
            for s in seqs]


def greedy_accuracy(model, tok, task: str, n: int, seed: int, batch: int = 50) -> tuple[float, list[str]]:
    prompts, refs, _ = task_prompts(task, n, seed, tok)
    lm, texts = LM(model, "m"), []
    for i in range(0, n, batch):
        out = generate(lm, None, prompts[i : i + batch], gamma=0, temperature=0.0,
                       max_new_tokens=get_task(task).max_new_tokens, eos_token_id=tok.eos_token_id)
        texts += decode(tok, out.tokens, task)
    return score(task, texts, refs).mean, texts


def sd_acceptance(target, draft, tok, task: str, n: int, seed: int, gamma: int = 4, batch: int = 24) -> dict:
    prompts, _, _ = task_prompts(task, n, seed + 1, tok)
    t_lm, d_lm = LM(target, "target"), LM(draft, "draft")
    g = torch.Generator().manual_seed(seed)
    acc, drafted = [], []  # per prompt
    for i in range(0, n, batch):
        out = generate(t_lm, DraftModelProposer(d_lm), prompts[i : i + batch], gamma=gamma, temperature=1.0,
                       max_new_tokens=get_task(task).max_new_tokens, eos_token_id=tok.eos_token_id, generator=g)
        active = out.rounds["active"]
        acc += (out.rounds["accepted"] * active).sum(0).tolist()
        drafted += (out.rounds["drafted"] * active).sum(0).tolist()
    a, d = np.array(acc, dtype=float), np.array(drafted, dtype=float)
    boot = np.random.default_rng(seed).integers(0, len(a), size=(2000, len(a)))
    ratios = a[boot].sum(1) / np.maximum(d[boot].sum(1), 1)
    return {"acceptance": a.sum() / max(d.sum(), 1), "drafted": int(d.sum()),
            "ci95": [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))]}


@torch.no_grad()
def teacher_forced_alpha(target, draft, tok, task: str, n: int, seed: int) -> float:
    """Mean over positions of sum_x min(p, q) along target samples at T=1 (per-position acceptance prob)."""
    prompts, _, _ = task_prompts(task, n, seed + 2, tok)
    torch.manual_seed(seed)
    vals = []
    for p in prompts:
        ids = torch.tensor([p])
        seq = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                              top_p=1.0, temperature=1.0, max_new_tokens=get_task(task).max_new_tokens,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        pt = torch.softmax(target(input_ids=seq).logits[0, len(p) - 1 : -1].float(), -1)
        qt = torch.softmax(draft(input_ids=seq).logits[0, len(p) - 1 : -1].float(), -1)
        vals.append(torch.minimum(pt, qt).sum(-1))
    return float(torch.cat(vals).mean())


@torch.no_grad()
def per_token_latency(model, steps: int = 200) -> float:
    """Seconds per single-token forward at batch 1 with a KV cache (after a 32-token prefill)."""
    lm = LM(model, "m")
    lm.prefill([[1] * 32])
    x = torch.ones(1, 1, dtype=torch.long)
    for _ in range(10):
        lm.feed(x)
    t0 = time.perf_counter()
    for _ in range(steps):
        lm.feed(x)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="trio directory (default: the embedded one, built if missing)")
    ap.add_argument("--n-gsm8k", type=int, default=200)
    ap.add_argument("--n-sd", type=int, default=48, help="prompts per task for the SD acceptance")
    ap.add_argument("--n-alpha", type=int, default=16, help="target samples per task for the teacher-forced alpha")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gamma", type=int, default=4, help="draft length for the SD acceptance")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--show", type=int, default=0, help="print this many greedy target completions")
    ap.add_argument("--no-greedy", action="store_true", help="skip the GSM8K accuracies (SD acceptance only)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)

    d = ensure_embedded(args.dir)
    models = {n: load_model(d / n, device="cpu", dtype="float32") for n in MODEL_NAMES}
    tok = models["target"][1]
    res: dict = {"dir": str(d), "data": "synthetic"}

    t0 = time.time()
    for n in MODEL_NAMES:
        if args.no_greedy:
            res[f"gsm8k_greedy_{n}"] = float("nan")
            continue
        res[f"gsm8k_greedy_{n}"], texts = greedy_accuracy(models[n][0], tok, "gsm8k", args.n_gsm8k, args.seed)
        if n == "target":
            for t in texts[: args.show]:
                print("---\n" + t)
    for task in SD_TASKS:
        res[f"sd_{task}"] = sd_acceptance(models["target"][0], models["draft"][0], tok, task, args.n_sd, args.seed,
                                          gamma=args.gamma)
        res[f"alpha_{task}"] = teacher_forced_alpha(models["target"][0], models["draft"][0], tok, task,
                                                    args.n_alpha, args.seed)
    lat = {n: per_token_latency(models[n][0]) for n in ("target", "draft")}
    manifest = json.loads((d / "manifest.json").read_text())
    res["flops_ratio"] = manifest["draft_flops_ratio"]
    res["latency_ratio"] = lat["target"] / lat["draft"]
    res["latency_ms"] = {k: 1000 * v for k, v in lat.items()}
    res["seconds"] = round(time.time() - t0, 1)

    acc = {n: res[f"gsm8k_greedy_{n}"] for n in MODEL_NAMES}
    res["draft_over_target"] = acc["draft"] / acc["target"] if acc["target"] else float("nan")
    ratio = res["draft_over_target"]
    rows = [] if args.no_greedy else [
        ("GSM8K greedy acc, target (>= 0.60)", f"{acc['target']:.3f}", acc["target"] >= 0.6),
        ("GSM8K greedy acc, draft", f"{acc['draft']:.3f}", True),
        ("GSM8K greedy acc, draft / target (0.4-0.9)", f"{ratio:.2f}", 0.4 <= ratio <= 0.9),
        ("GSM8K greedy acc, amateur (<= target)", f"{acc['amateur']:.3f}", acc["amateur"] <= acc["target"]),
    ]
    for task in SD_TASKS:
        a = res[f"sd_{task}"]["acceptance"]
        lo, hi = res[f"sd_{task}"]["ci95"]
        rows.append((f"SD T=1 g={args.gamma} acceptance, {task} (0.40-0.85) [95% CI {lo:.3f}-{hi:.3f}; E alpha "
                     f"{res[f'alpha_{task}']:.3f}]", f"{a:.3f}", 0.40 <= a <= 0.85))
    rows.append(("draft FLOPs/token ratio (>= 2.5, c <= 0.4)", f"{res['flops_ratio']:.1f}x", res["flops_ratio"] >= 2.5))
    rows.append(("measured per-token latency ratio, batch 1 (report)", f"{res['latency_ratio']:.2f}x", True))
    print(f"\ntrio {d}  (synthetic held-out data, seed {args.seed}, {res['seconds']} s)")
    for name, val, ok in rows:
        print(f"  {name:70s} {val:>8s}  {'ok' if ok else 'MISS'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
