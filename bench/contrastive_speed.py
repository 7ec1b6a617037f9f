"""Contrastive decoding, accelerated: dcd (draft / n-gram proposer), scd and cos against vanilla cd, measured in
one run, side by side (interleaved per prompt), batch size 1, on the synthetic tasks.

Prints (and writes with --out) three tables:
  1. speed-up over vanilla CD (tokens/s ratio) per method, α and temperature, pooled over tasks, with the latency
     decomposition t_e (proposer step), t_p (expert pass), t_q (amateur pass), L, and the throughput model
     (L+1)/(γ·t_e + t_p + t_q) next to the measured speed (model': the same with the measured tokens per round
     and proposer steps per round in place of L+1 and γ);
  2. the same speed-up per task;
  3. α-robustness: L at α divided by L at α = 0, per method (batched decoding; acceptance only).
Greedy runs also check that every method returns exactly vanilla CD's tokens (a flip where the top two CD scores
are within rounding is reported apart from a real mismatch: bench/greedy_identity.py).

    python bench/contrastive_speed.py                         # the embedded tiny trio (built when missing)
    python bench/contrastive_speed.py --micro --n 1 --new-tokens 24      # a quick check on a micro trio
    python bench/contrastive_speed.py --tables multirun/eval/<dir>        # tables of an eval/run.py sweep
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # `python bench/contrastive_speed.py`: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.greedy_identity import GreedyComparison, compare_greedy, near_tie_tolerance, next_token_logprobs
from specdec.cos import cos_generate
from specdec.generate import generate
from specdec.models import LM, load_model
from specdec.proposers import DraftModelProposer, NgramProposer, Proposer

METHODS = ("cd", "dcd", "dcd_ngram", "scd", "cos")


class TimedProposer(Proposer):
    """Wraps a proposer without an LM (n-gram) so its lookup time counts as proposer time, one call per round."""

    def __init__(self, inner: Proposer):
        self.inner, self._seconds, self._calls = inner, 0.0, 0

    @property
    def seconds(self) -> float:
        return self._seconds

    @property
    def calls(self) -> int:
        return self._calls

    def start(self, prompts):
        self.inner.start(prompts)

    def propose(self, gamma, **kw):
        t = time.perf_counter()
        out = self.inner.propose(gamma, **kw)
        self._seconds += time.perf_counter() - t
        self._calls += 1
        return out

    def commit(self, num_accepted, emitted):
        t = time.perf_counter()
        self.inner.commit(num_accepted, emitted)
        self._seconds += time.perf_counter() - t


class StepLM(LM):
    """An LM that logs the duration of every decoding-step forward (prefill excluded), for t_e / t_p / t_q."""

    def __init__(self, model, name: str):
        super().__init__(model, name)
        self.steps: list[float] = []
        self._prefilling = False

    def prefill(self, sequences):
        self._prefilling = True
        try:
            super().prefill(sequences)
        finally:
            self._prefilling = False

    def feed(self, tokens, valid=None, last_logits_only=False):
        before = self.seconds
        out = super().feed(tokens, valid, last_logits_only)
        if not self._prefilling:
            self.steps.append(self.seconds - before)
        return out


class Trio:
    def __init__(self, root: Path | dict[str, str], device: str, dtype: str):
        """root: a trio directory <root>/{target,draft,amateur}, or {role: path} (a model config's, e.g. the real
        pair: bench.contrastive_speed.config_paths)."""
        paths = root if isinstance(root, dict) else {r: str(Path(root) / r) for r in ("target", "draft", "amateur")}
        self.expert, self.tok = load_model(paths["target"], device=device, dtype=dtype)
        self.draft = load_model(paths["draft"], device=device, dtype=dtype)[0]
        self.amateur = load_model(paths["amateur"], device=device, dtype=dtype)[0]
        self.lm_e, self.lm_d = StepLM(self.expert, "expert"), StepLM(self.draft, "draft")
        # Two wrappers over the amateur's weights: scd's drafting cache and the verification-side cache.
        self.lm_a, self.lm_a_prop = StepLM(self.amateur, "amateur"), StepLM(self.amateur, "amateur_proposer")
        self.ngram: TimedProposer | None = None

    def roles(self, method: str) -> dict[str, object]:
        """Which step log holds the proposer (t_e), expert (t_p) and verification-side amateur (t_q) steps."""
        prop = {"cd": None, "dcd": self.lm_d, "dcd_ngram": "ngram", "scd": self.lm_a_prop, "cos": self.lm_a}[method]
        return {"proposer": prop, "expert": self.lm_e, "amateur": None if method == "cos" else self.lm_a}

    def greedy_scores(self, prompt: list[int], prefix: list[int], alpha: float | None, beta: float) -> torch.Tensor:
        """[V] the scores greedy decoding takes the argmax of after prompt + prefix: the expert's log-probs
        (alpha None: target-only greedy and greedy SD), or CD's combined logits (vanilla CD and its accelerations)."""
        from specdec.targets import contrastive_logits

        ids = prompt + prefix
        lp = next_token_logprobs(self.expert, ids, self.lm_e.vocab_size)
        if alpha is None:
            return lp
        return contrastive_logits(lp, next_token_logprobs(self.amateur, ids, self.lm_a.vocab_size), alpha, beta)

    def greedy_tol(self, alpha: float | None) -> float:
        """Near-tie tolerance of greedy_scores: the dtype's, times 1 + 2α for CD, whose (1+α)·log p_e − α·log p_a
        scales each model's rounding error up by its coefficient."""
        return near_tie_tolerance(self.expert.dtype) * (1.0 + 2.0 * (alpha or 0.0))

    def greedy_comparison(self, ref: list[list[int]], out: list[list[int]], prompts: list[list[int]],
                       alpha: float | None, beta: float) -> GreedyComparison:
        """bench.greedy_identity.compare_greedy of two greedy runs of `prompts` (one row each)."""
        return compare_greedy(ref, out, lambda i, prefix: self.greedy_scores(prompts[i], prefix, alpha, beta),
                              tol=self.greedy_tol(alpha))

    def run(self, method: str, prompts, *, alpha, beta, gamma, temperature, max_new_tokens, seed):
        from specdec.targets import ContrastiveRule

        g = torch.Generator(device=self.lm_e.device).manual_seed(seed)
        kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=self.tok.eos_token_id,
                  generator=g)
        rule = ContrastiveRule(alpha, beta)
        if method == "cd":
            return generate(self.lm_e, None, prompts, rule=rule, gamma=0, amateur=self.lm_a, **kw)
        if method == "dcd":
            return generate(self.lm_e, DraftModelProposer(self.lm_d), prompts, rule=rule, gamma=gamma,
                            amateur=self.lm_a, **kw)
        if method == "dcd_ngram":
            self.ngram = ng = TimedProposer(NgramProposer(self.lm_e.vocab_size, device=self.lm_e.device))
            return generate(self.lm_e, ng, prompts, rule=rule, gamma=gamma, amateur=self.lm_a, **kw)
        if method == "scd":
            return generate(self.lm_e, DraftModelProposer(self.lm_a_prop), prompts, rule=rule, gamma=gamma,
                            amateur=self.lm_a, **kw)
        if method == "cos":
            return cos_generate(self.lm_e, self.lm_a, prompts, alpha=alpha, beta=beta, gamma=gamma, **kw)
        raise ValueError(f"unknown method {method!r}; known: {METHODS}")


def task_prompts(tok, tasks: list[str], n: int, seed: int, data_path: str | None = None) -> dict[str, list[list[int]]]:
    """n prompts per task: synthetic test rows, or (data_path, one task) the rows an evaluation of n rows with data
    seed `seed` draws from that file; chat models get their chat template, as in evaluation."""
    from data import synthetic
    from data.loaders import load_examples
    from data.tasks import get_task
    from specdec.models import encode_prompt

    if data_path is not None and len(tasks) != 1:
        raise ValueError(f"--data-path holds one task's rows; got tasks {tasks}")
    out = {}
    for t in tasks:
        task = get_task(t)
        rows = (load_examples(t, path=data_path, n=n, seed=seed).rows if data_path is not None
                else synthetic.generate(t, "test", n=n, seed=seed))
        out[t] = [encode_prompt(tok, task.format_prompt(r, tokenizer=tok)) for r in rows]
    return out


def config_paths(model: str) -> dict[str, str]:
    """{role: path} of conf/model/<model>.yaml (e.g. qwen25coder_15b_05b, after `make real-models`)."""
    from omegaconf import OmegaConf

    import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
    from specdec.loading import Models

    conf = Path(__file__).resolve().parents[1] / "conf" / "model" / f"{model}.yaml"
    if not conf.is_file():
        raise SystemExit(f"no model config {conf}")
    models = Models(OmegaConf.load(conf))
    return {r: models.path(r) for r in ("target", "draft", "amateur")}


class Acc:
    """Sums over generate calls: wall time, tokens, per-step model time and steps, accepted drafts and rounds."""

    def __init__(self):
        self.v = defaultdict(float)

    def add(self, out, wall: float, steps: dict[str, list[float]] | None = None) -> None:
        r = out.rounds
        active = r["active"].bool()
        for role, times in (steps or {}).items():
            self.v[f"time_{role}"] += sum(times)
            self.v[f"steps_{role}"] += len(times)
        self.v["wall"] += wall
        self.v["tokens"] += sum(len(t) for t in out.tokens)
        self.v["row_rounds"] += float(active.sum())
        self.v["accepted"] += float(r["accepted"][active].sum())
        self.v["drafted"] += float(r["drafted"][active].sum())

    def summary(self, gamma: int) -> dict:
        """t_e per proposer step, t_p per expert step, t_q per expert step (the verification-side amateur runs
        once per round): milliseconds, prefill excluded."""
        v = self.v
        tps = v["tokens"] / v["wall"] if v["wall"] else float("nan")
        t_e = 1000 * v["time_proposer"] / v["steps_proposer"] if v["steps_proposer"] else 0.0
        t_p = 1000 * v["time_expert"] / v["steps_expert"] if v["steps_expert"] else float("nan")
        t_q = 1000 * v["time_amateur"] / v["steps_expert"] if v["steps_expert"] else 0.0
        L = v["accepted"] / v["row_rounds"] if v["row_rounds"] else 0.0
        g = gamma if v["drafted"] else 0
        model = 1000 * (L + 1) / (g * t_e + t_p + t_q)
        # The same model with the measured tokens per round and proposer steps per round: CoS emits its bonus
        # token a round later (a full acceptance yields L, not L+1, tokens) and adds an amateur step after a
        # rejected expert proposal, which the textbook formula does not see.
        tpr = v["tokens"] / v["row_rounds"] if v["row_rounds"] else float("nan")
        spr = (v["steps_proposer"] / v["steps_expert"]) if v["steps_expert"] else 0.0
        if v["steps_proposer"] and not v["time_proposer"]:
            spr = 0.0
        model2 = 1000 * tpr / (spr * t_e + t_p + t_q)
        return {"tokens_per_second": tps, "L": L, "t_e_ms": t_e, "t_p_ms": t_p, "t_q_ms": t_q,
                "tokens_per_round": v["tokens"] / v["row_rounds"] if v["row_rounds"] else float("nan"),
                "acceptance_rate": v["accepted"] / v["drafted"] if v["drafted"] else None,
                "throughput_model_tps": model, "measured_over_model": tps / model, "tokens": int(v["tokens"]),
                "model_measured_rounds_tps": model2, "measured_over_model_measured_rounds": tps / model2}


def timed_run(trio: Trio, method: str, prompts, **kw):
    """One generate call with its wall time and the step times of each role."""
    roles = trio.roles(method)
    marks = {k: len(lm.steps) for k, lm in roles.items() if isinstance(lm, StepLM)}
    w0 = time.perf_counter()
    out = trio.run(method, prompts, **kw)
    wall = time.perf_counter() - w0
    steps = {k: roles[k].steps[m:] for k, m in marks.items()}
    if roles["proposer"] == "ngram":  # one lookup per round yields γ drafts: t_e = lookup time / γ
        n = trio.ngram.calls * kw["gamma"]
        steps["proposer"] = [trio.ngram.seconds / max(n, 1)] * n
    return out, wall, steps


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def speed_tables(res: dict, tasks: list[str], alphas: list[float], temps: list[float], gamma: int) -> str:
    lines = ["### Speed-up over vanilla CD (batch 1, all tasks pooled)", "",
             "| T | α | method | L | tok/round | tok/s | × CD | t_e ms | t_p ms | t_q ms | model tok/s | meas/model "
             "| meas/model' |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for T in temps:
        for a in alphas:
            pooled = {m: Acc() for m in METHODS}
            for t in tasks:
                for m in METHODS:
                    for k, v in res[(T, a, t, m)].v.items():
                        pooled[m].v[k] += v
            base = pooled["cd"].summary(gamma)["tokens_per_second"]
            for m in METHODS:
                s = pooled[m].summary(gamma)
                lines.append(f"| {T:g} | {a:g} | {m} | {_f(s['L'])} | {_f(s['tokens_per_round'])} | "
                             f"{s['tokens_per_second']:.1f} | {s['tokens_per_second'] / base:.2f} | "
                             f"{s['t_e_ms']:.2f} | {s['t_p_ms']:.2f} | {s['t_q_ms']:.2f} | "
                             f"{s['throughput_model_tps']:.1f} | {s['measured_over_model']:.2f} | "
                             f"{s['measured_over_model_measured_rounds']:.2f} |")
    lines += ["", "### Speed-up over vanilla CD per task (tokens/s ratio)", "",
              "| T | α | method | " + " | ".join(tasks) + " |", "|---|---|---|" + "---|" * len(tasks)]
    for T in temps:
        for a in alphas:
            for m in METHODS[1:]:
                cells = []
                for t in tasks:
                    s, b = res[(T, a, t, m)].summary(gamma), res[(T, a, t, "cd")].summary(gamma)
                    cells.append(f"{s['tokens_per_second'] / b['tokens_per_second']:.2f}")
                lines.append(f"| {T:g} | {a:g} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def robustness_table(L: dict, alphas: list[float], temps: list[float]) -> str:
    lines = ["### α-robustness: L(α) / L(α=0) (batched, all tasks pooled)", "",
             "| T | method | L(α=0) | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
             "|---|---|---|" + "---|" * len(alphas)]
    for T in temps:
        for m in METHODS[1:]:
            l0 = L[(T, 0.0, m)]
            cells = [f"{L[(T, a, m)] / l0:.2f}" if l0 else "-" for a in alphas]
            lines.append(f"| {T:g} | {m} | {l0:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables_from_dir(root: str) -> None:
    from eval.contrastive_tables import alpha_robustness, load_metrics, speed_table

    rows = load_metrics(root)
    if not rows:
        raise SystemExit(f"no contrastive metrics.json under {root} (run eval/run.py method=cd|dcd|... first)")
    print(speed_table(rows))
    print()
    print(alpha_robustness(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="trio directory (default: the embedded tiny trio)")
    ap.add_argument("--micro", action="store_true", help="build and use a micro trio (a quick check)")
    ap.add_argument("--tasks", default="gsm8k,cnndm,xsum,mbpp")
    ap.add_argument("--n", type=int, default=3, help="prompts per task for the timed runs")
    ap.add_argument("--n-robust", type=int, default=8, help="prompts per task for the α-robustness runs")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--alphas", default="0.1,0.5", help="α of the speed tables")
    ap.add_argument("--robust-alphas", default="0,0.1,0.3,0.5,1.0", help="'' skips the α-robustness runs")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings on a shared CPU)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the tables (markdown) and raw numbers (json) here")
    ap.add_argument("--tables", default=None, help="print the tables of an eval/run.py (multi)run dir and exit")
    args = ap.parse_args()
    if args.tables:
        tables_from_dir(args.tables)
        return
    torch.set_num_threads(args.threads)
    if args.micro:
        from data.build_models import build_micro_trio

        root = build_micro_trio(Path(tempfile.mkdtemp()) / "micro")
    else:
        from data.build_models import ensure_embedded

        root = Path(args.models) if args.models else ensure_embedded()
    trio = Trio(Path(root), args.device, args.dtype)
    tasks = args.tasks.split(",")
    alphas = [float(a) for a in args.alphas.split(",")]
    r_alphas = [float(a) for a in args.robust_alphas.split(",") if a]
    if r_alphas and 0.0 not in r_alphas:
        r_alphas = [0.0, *r_alphas]
    temps = [float(t) for t in args.temperatures.split(",")]
    prompts = task_prompts(trio.tok, tasks, max(args.n, args.n_robust), args.seed)
    kw = dict(beta=args.beta, gamma=args.gamma, max_new_tokens=args.new_tokens)
    print(f"[bench] trio {root}; tasks {tasks}; γ={args.gamma} β={args.beta}; {args.new_tokens} new tokens; "
          f"threads {args.threads}", flush=True)

    for m in METHODS:  # warm-up: allocations and kernel selection are never timed
        trio.run(m, prompts[tasks[0]][:1], alpha=0.5, temperature=1.0, seed=0, **{**kw, "max_new_tokens": 8})

    # 1-2. timed, batch 1, interleaved per prompt so that machine load drifts hit every method alike
    res = {}
    greedy = GreedyComparison(trio.greedy_tol(0.0))  # tol: the α = 0 value; each row's own in its record
    t_start = time.perf_counter()
    for T in temps:
        for a in alphas:
            for t in tasks:
                acc = {m: Acc() for m in METHODS}
                for i, p in enumerate(prompts[t][: args.n]):
                    ref = None
                    for m in METHODS:
                        out, wall, steps = timed_run(trio, m, [p], alpha=a, temperature=T,
                                                     seed=args.seed * 7919 + i, **kw)
                        acc[m].add(out, wall, steps)
                        if T == 0:
                            if m == "cd":
                                ref = out.tokens
                            else:  # a flip at a near tie (summation order) is reported apart from a mismatch
                                greedy.merge(trio.greedy_comparison(ref, out.tokens, [p], a, args.beta), method=m,
                                             task=t, prompt=i, alpha=a, tol=trio.greedy_tol(a))
                for m in METHODS:
                    res[(T, a, t, m)] = acc[m]
            print(f"[bench] timed T={T:g} α={a:g} done ({time.perf_counter() - t_start:.0f}s)", flush=True)
    speed = speed_tables(res, tasks, alphas, temps, args.gamma)

    # 3. α-robustness: acceptance only, so decode each task's prompts as one batch
    L = {}
    for T in temps if r_alphas else []:
        for a in r_alphas:
            for m in METHODS[1:]:
                acc = Acc()
                for t in tasks:
                    out = trio.run(m, prompts[t][: args.n_robust], alpha=a, temperature=T, seed=args.seed, **kw)
                    acc.add(out, 0.0)
                L[(T, a, m)] = acc.v["accepted"] / max(acc.v["row_rounds"], 1.0)
        print(f"[bench] α-robustness T={T:g} done ({time.perf_counter() - t_start:.0f}s)", flush=True)
    robust = robustness_table(L, r_alphas, temps) if r_alphas else ""

    head = (f"Trio: {root} | tasks: {', '.join(tasks)} (synthetic, test split) | γ={args.gamma}, β={args.beta}, "
            f"{args.new_tokens} new tokens, {args.n} prompts/task timed at batch 1, {args.n_robust}/task batched "
            f"for L | torch threads {args.threads}\nGreedy outputs identical to vanilla CD: "
            f"{greedy.summary() if greedy.near_ties or greedy.mismatches else 'yes'}")
    text = "\n\n".join([head, speed, robust])
    print("\n" + text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "contrastive_speed.md").write_text(text + "\n")
        raw = {f"T={k[0]:g},alpha={k[1]:g},task={k[2]},method={k[3]}": v.summary(args.gamma) for k, v in res.items()}
        raw.update({f"L,T={k[0]:g},alpha={k[1]:g},method={k[2]}": v for k, v in L.items()})
        (out / "contrastive_speed.json").write_text(json.dumps(raw, indent=1))
    if not greedy.ok:
        raise SystemExit("greedy accelerated CD differed from vanilla CD away from any near tie: a losslessness bug")


if __name__ == "__main__":
    main()
