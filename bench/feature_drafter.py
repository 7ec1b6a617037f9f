"""The feature drafter (issue 13) against the draft LM and vanilla CD, measured in one run at batch 1.

Prints (and writes with --out):
  1. per-step costs: t_e of the feature drafter and of the draft LM, t_p of the target, c = t_e / t_p;
  2. L (accepted drafts per round) at γ of sd with the draft LM vs sd with the feature drafter, T = 0 and 1
     (batched per task), and batch-1 tokens/s of ar_target, sd, sd(feature);
  3. dcd(feature) and dcd(draft LM) over vanilla cd at each T and α, with the latency decomposition
     (L+1)/(γ·t_e + t_p + t_q) next to the measured speed (bench/contrastive_speed.py's accounting).
Greedy runs check that sd(feature) returns the target's greedy tokens and dcd(feature) vanilla CD's (a flip where
the top two scores are within rounding is reported apart from a real mismatch: bench/greedy_identity.py).

    python bench/feature_drafter.py --drafter runs/drafter/<run>/drafter                # the embedded tiny trio
    python bench/feature_drafter.py --micro --train-steps 30 --n 1 --new-tokens 24       # a quick check
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.contrastive_speed import Acc, StepLM, Trio, config_paths, task_prompts
from bench.greedy_identity import GreedyComparison
from specdec.generate import generate
from specdec.models import LM
from specdec.proposers import DraftModelProposer, FeatureDrafter
from specdec.targets import ContrastiveRule

SD_METHODS = ("ar_target", "sd", "sd_feature")
CD_METHODS = ("cd", "dcd", "dcd_feature")


class HiddenStepLM(StepLM):
    """StepLM whose prefill returns the hidden states (the feature drafter reads them)."""

    def prefill(self, sequences):
        self._prefilling = True
        try:
            return LM.prefill(self, sequences)
        finally:
            self._prefilling = False


class StepFeatureDrafter(FeatureDrafter):
    """Logs each drafting step (one drafter forward + its head), the prompt's first feed excluded (prefill)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.steps: list[float] = []
        self._first = False

    def start(self, prompts):
        super().start(prompts)
        self._first = True

    def propose(self, gamma, **kw):
        before, first = self.seconds, self._first
        prop = super().propose(gamma, **kw)
        if first:  # the round that feeds the whole prompt's pairs counts as prefill
            self._first = False
            return prop
        calls = max(gamma, 1)  # the pending feed and γ-1 draft feeds, each with its head
        self.steps += [(self.seconds - before) / calls] * calls
        return prop


class FeatureTrio(Trio):
    def __init__(self, root: Path | dict[str, str], drafter: str, device: str, dtype: str):
        super().__init__(root, device, dtype)
        self.lm_e = HiddenStepLM(self.expert, "expert")
        self.feature = StepFeatureDrafter.load(drafter, self.lm_e, self.tok)

    def roles(self, method: str) -> dict[str, object]:
        prop = {"ar_target": None, "sd": self.lm_d, "sd_feature": self.feature, "cd": None, "dcd": self.lm_d,
                "dcd_feature": self.feature}[method]
        return {"proposer": prop, "expert": self.lm_e, "amateur": self.lm_a if method in CD_METHODS else None}

    def run(self, method: str, prompts, *, alpha, beta, gamma, temperature, max_new_tokens, seed):
        g = torch.Generator(device=self.lm_e.device).manual_seed(seed)
        kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=self.tok.eos_token_id,
                  generator=g)
        cd = dict(rule=ContrastiveRule(alpha, beta), amateur=self.lm_a)
        proposer = {"ar_target": None, "cd": None, "sd": DraftModelProposer(self.lm_d),
                    "dcd": DraftModelProposer(self.lm_d), "sd_feature": self.feature,
                    "dcd_feature": self.feature}[method]
        g_ = 0 if proposer is None else gamma
        return generate(self.lm_e, proposer, prompts, gamma=g_, **(cd if method in CD_METHODS else {}), **kw)


def timed(trio: FeatureTrio, method: str, prompts, **kw):
    roles = trio.roles(method)
    logs = {k: v for k, v in roles.items() if v is not None}
    marks = {k: len(v.steps) for k, v in logs.items()}
    w0 = time.perf_counter()
    out = trio.run(method, prompts, **kw)
    wall = time.perf_counter() - w0
    return out, wall, {k: logs[k].steps[m:] for k, m in marks.items()}


def _f(x, fmt="{:.2f}"):
    return "-" if x is None or x != x else fmt.format(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="trio directory (default: the embedded tiny trio)")
    ap.add_argument("--micro", action="store_true", help="build and use a micro trio")
    ap.add_argument("--model", default=None, help="a conf/model config instead of a trio dir, e.g. qwen25coder_15b_05b")
    ap.add_argument("--data-path", default=None, help="real rows of the (one) task, e.g. ../shared/data/mbpp/...")
    ap.add_argument("--drafter", default=None, help="exported drafter dir (train/drafter.py); none: train one")
    ap.add_argument("--train-steps", type=int, default=600, help="when no --drafter: steps of the drafter to train")
    ap.add_argument("--tasks", default="gsm8k,cnndm,xsum,mbpp")
    ap.add_argument("--n", type=int, default=3, help="prompts per task for the timed runs (batch 1)")
    ap.add_argument("--n-robust", type=int, default=8, help="prompts per task for the batched L runs")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--alphas", default="0.1,0.5")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        root = config_paths(args.model)
    elif args.micro:
        from data.build_models import build_micro_trio

        root = build_micro_trio(Path(tempfile.mkdtemp()) / "micro")
    else:
        from data.build_models import ensure_embedded

        root = Path(args.models) if args.models else ensure_embedded()
    drafter = args.drafter
    if drafter is None:
        from hydra import compose, initialize_config_dir

        from train.drafter import train_drafter

        run = Path(tempfile.mkdtemp()) / "drafter_run"
        with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
            where = [f"model={args.model}"] if args.model else [f"model.dir={root}", "model.embedded=false"]
            cfg = compose("drafter", overrides=[*where, "logger=disabled",
                                                f"train.steps={args.train_steps}", f"num_threads={args.threads}"])
        drafter = train_drafter(cfg, run)["drafter"]
    trio = FeatureTrio(root, drafter, args.device, args.dtype)
    tasks = args.tasks.split(",")
    alphas = [float(a) for a in args.alphas.split(",")]
    temps = [float(t) for t in args.temperatures.split(",")]
    prompts = task_prompts(trio.tok, tasks, max(args.n, args.n_robust), args.seed, args.data_path)
    kw = dict(beta=args.beta, gamma=args.gamma, max_new_tokens=args.new_tokens)
    print(f"[bench] trio {root}; drafter {drafter}; tasks {tasks}; γ={args.gamma}; {args.new_tokens} new tokens",
          flush=True)
    for m in SD_METHODS + CD_METHODS:  # warm-up
        trio.run(m, prompts[tasks[0]][:1], alpha=0.5, temperature=1.0, seed=0, **{**kw, "max_new_tokens": 8})

    # timed, batch 1, interleaved per prompt
    res: dict[tuple, Acc] = {}
    greedy = GreedyComparison(trio.greedy_tol(0.0))  # tol: the α = 0 value; each row's own in its record
    t0 = time.perf_counter()
    for T in temps:
        for a in [None, *alphas]:
            methods = SD_METHODS if a is None else CD_METHODS
            acc = {m: Acc() for m in methods}
            for t in tasks:
                for i, p in enumerate(prompts[t][: args.n]):
                    ref = None
                    for m in methods:
                        out, wall, steps = timed(trio, m, [p], alpha=a or 0.0, temperature=T,
                                                 seed=args.seed * 7919 + i, **kw)
                        acc[m].add(out, wall, steps)
                        if T == 0:
                            if ref is None:
                                ref = out.tokens
                            else:  # a flip at a near tie (summation order) is reported apart from a mismatch
                                greedy.merge(trio.greedy_comparison(ref, out.tokens, [p], a, args.beta), method=m,
                                             task=t, prompt=i, alpha=a, tol=trio.greedy_tol(a))
            for m in methods:
                res[(T, a, m)] = acc[m]
            print(f"[bench] T={T:g} α={a} done ({time.perf_counter() - t0:.0f}s)", flush=True)

    # batched L of sd with each proposer
    L = {}
    for T in temps:
        for m in ("sd", "sd_feature"):
            acc = Acc()
            for t in tasks:
                out = trio.run(m, prompts[t][: args.n_robust], alpha=0.0, temperature=T, seed=args.seed, **kw)
                acc.add(out, 0.0)
            L[(T, m)] = acc.v["accepted"] / max(acc.v["row_rounds"], 1.0)

    g = args.gamma
    rows = args.data_path or "synthetic test split"
    lines = [f"Trio: {root} | drafter: {drafter} | tasks: {', '.join(tasks)} ({rows}) | γ={g}, "
             f"β={args.beta}, {args.new_tokens} new tokens, {args.n} prompts/task timed at batch 1, "
             f"{args.n_robust}/task batched for L | torch threads {args.threads}",
             "Greedy outputs identical (sd(feature) = target greedy, dcd(feature) = vanilla CD): "
             + (greedy.summary() if greedy.near_ties or greedy.mismatches else "yes"), ""]
    # 1. costs
    sd_pool = {m: Acc() for m in SD_METHODS}
    for (_, a, m), acc in res.items():
        if a is None:
            for k, v in acc.v.items():
                sd_pool[m].v[k] += v
    s_d, s_f = sd_pool["sd"].summary(g), sd_pool["sd_feature"].summary(g)
    lines += ["### Per-step cost (batch 1, sd runs pooled)", "",
              "| proposer | t_e ms | t_p ms | c = t_e/t_p |", "|---|---|---|---|",
              f"| draft LM | {s_d['t_e_ms']:.3f} | {s_d['t_p_ms']:.3f} | {s_d['t_e_ms'] / s_d['t_p_ms']:.3f} |",
              f"| feature drafter | {s_f['t_e_ms']:.3f} | {s_f['t_p_ms']:.3f} | "
              f"{s_f['t_e_ms'] / s_f['t_p_ms']:.3f} |", ""]
    # 2. L and sd speed
    lines += [f"### L at γ={g} (batched) and sd speed (batch 1)", "",
              "| T | L sd(draft LM) | L sd(feature) | tok/s ar_target | tok/s sd | tok/s sd(feature) | "
              "sd(feature) × ar | sd(feature) × sd |", "|---|---|---|---|---|---|---|---|"]
    for T in temps:
        s = {m: res[(T, None, m)].summary(g) for m in SD_METHODS}
        ar = s["ar_target"]["tokens_per_second"]
        lines.append(f"| {T:g} | {L[(T, 'sd')]:.2f} | {L[(T, 'sd_feature')]:.2f} | {ar:.1f} | "
                     f"{s['sd']['tokens_per_second']:.1f} | {s['sd_feature']['tokens_per_second']:.1f} | "
                     f"{s['sd_feature']['tokens_per_second'] / ar:.2f} | "
                     f"{s['sd_feature']['tokens_per_second'] / s['sd']['tokens_per_second']:.2f} |")
    # 3. dcd vs cd
    lines += ["", "### dcd(feature) and dcd(draft LM) over vanilla CD (batch 1, tasks pooled)", "",
              "| T | α | method | L | tok/s | × CD | t_e ms | t_p ms | t_q ms | model (L+1)/(γt_e+t_p+t_q) tok/s "
              "| meas/model |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for T in temps:
        for a in alphas:
            base = res[(T, a, "cd")].summary(g)["tokens_per_second"]
            for m in CD_METHODS:
                s = res[(T, a, m)].summary(g)
                lines.append(f"| {T:g} | {a:g} | {m} | {_f(s['L'])} | {s['tokens_per_second']:.1f} | "
                             f"{s['tokens_per_second'] / base:.2f} | {s['t_e_ms']:.3f} | {s['t_p_ms']:.3f} | "
                             f"{s['t_q_ms']:.3f} | {s['throughput_model_tps']:.1f} | "
                             f"{s['measured_over_model']:.2f} |")
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "feature_drafter.md").write_text(text + "\n")
        raw = {f"T={k[0]:g},alpha={k[1]},method={k[2]}": v.summary(g) for k, v in res.items()}
        raw.update({f"L,T={k[0]:g},method={k[1]}": v for k, v in L.items()})
        (out / "feature_drafter.json").write_text(json.dumps(raw, indent=1))
    if not greedy.ok:
        raise SystemExit("greedy decoding through the feature drafter changed the tokens away from any near tie: "
                         "a losslessness bug")


if __name__ == "__main__":
    main()
