"""One command for the speed figures of every method on one model pair (made for a GPU; runs on a CPU too).

Measures, side by side in one run, at batch 1 and 16 (--batch-sizes): tokens/s and latency per token of
ar_target, sd, static, head (the given head, else a random one), the training-free rules (lossy, cascade, fsd,
typical, fly; one knob value each), cd and dcd, and sd / dcd with a feature drafter (--drafter), each built by the
registry evaluation uses and decoded through `specdec.generate` with records=False (the inference mode); the ratio
to ar_target (dcd also to cd, its baseline); the measured L (accepted drafts per round); the share of a round
spent in the proposer, the target, the amateur, the rule (the head lives there), verify and the rest
(bookkeeping); and the measured speed-up against the throughput model (L+1)/(γ·c+1), c = draft step / target
step measured here, and against the refined model that charges the (γ+1)-token passes and the proposer steps their
measured cost. The models describe decoding rounds; the end-to-end runs also prefill each prompt, so every ratio is
given end to end and for decoding alone (wall time minus the prefills; on a CPU a prefill costs seconds). Prints a
markdown table last; writes JSON.

    python bench/gpu.py                                        # the embedded trio (built when missing)
    python bench/gpu.py --random-pair llama8b-1b --dtype bfloat16   # Llama-3.1-8B / 3.2-1B shapes, random weights
    python bench/gpu.py --target DIR --draft DIR --amateur DIR --head HEAD_DIR --dtype bfloat16
    python bench/gpu.py --device cpu --smoke                   # a tiny random pair in seconds (the test)
    python bench/gpu.py --device cpu --random-pair sdspeed --batch-sizes 1 --with-records   # the CPU bar
    python bench/gpu.py --target DIR --draft DIR --amateur DIR --drafter DRAFTER_DIR --methods ar_target sd \
        sd_feature cd dcd dcd_feature                         # the feature drafter (train/drafter.py) beside the draft LM
    python bench/gpu.py ... --slim-methods sd fsd --draft-int8 --draft-vocab 32768   # a cheaper draft beside it

Random pairs need no download (weights drawn from the configs; near-uniform distributions at init std 0.02, so
acceptance is high and says nothing about real models: use them for costs). On a CPU, llama8b-1b is replaced by
the `sdspeed` shapes of bench/sd_speed.py. The end-to-end runs do not wait for the device after each model call
(LM.sync_timing off); a second, shorter run with the waits on gives the time split. --with-records adds, for sd
and the head, the same decoding with the training records on (records=True, hidden states for the head), to show
what inference mode saves. --slim-methods adds those methods again with a slimmed copy of the draft
(specdec.slim_draft: --draft-int8 [weight|dynamic] linears, --draft-vocab kept output ids, ranked by their counts
in the --task rows disjoint from the bench's prompts), with its own probed step cost in the models. Budget: about 4 minutes for
llama8b-1b on one H100/H200 at the defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

if __package__ in (None, ""):  # `python bench/gpu.py`: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from specdec.generate import GenerationOutput, generate
from specdec.models import LM, resolve_device, resolve_dtype
from specdec.proposers import DraftModelProposer, FeatureDrafter
from specdec.registry import build_method, head_rule, method_config
from specdec.targets import PAIR_FEATURES

# bench name -> (registry method, its options from the command line)
REGISTRY = {
    "ar_target": ("ar_target", lambda a: {}),
    "sd": ("sd", lambda a: {}),
    "static": ("static", lambda a: {"w": a.w}),
    "lossy": ("lossy", lambda a: {"lenience": a.lenience}),
    "cascade": ("cascade", lambda a: {"threshold": a.cascade_threshold}),
    # the same rule with the bonus token from p: no draft call at the bonus position
    "cascade_pbonus": ("cascade", lambda a: {"threshold": a.cascade_threshold, "bonus": "p"}),
    "fsd": ("fsd", lambda a: {"threshold": a.fsd_threshold}),
    "typical": ("typical", lambda a: {"epsilon": a.epsilon}),
    "fly": ("fly", lambda a: {"entropy_threshold": a.fly_entropy}),
    "cd": ("cd", lambda a: {}),
    "dcd": ("dcd", lambda a: {}),
    "sd_feature": ("sd", lambda a: {"proposer": "feature", "drafter": a.drafter}),
    "dcd_feature": ("dcd", lambda a: {"proposer": "feature", "drafter": a.drafter}),
}
METHODS = ("ar_target", "sd", "static", "head", "lossy", "cascade", "cascade_pbonus", "fsd", "typical", "fly", "cd",
           "dcd", "sd_feature", "dcd_feature")
AMATEUR = ("cd", "dcd", "dcd_feature")
FEATURE = ("sd_feature", "dcd_feature")

# Random pairs: (vocab, hidden, layers, heads, kv heads, intermediate, tied) per role.
LLAMA_31_8B = (128256, 4096, 32, 32, 8, 14336, False)
LLAMA_32_1B = (128256, 2048, 16, 32, 8, 8192, True)
SHAPES = {
    "llama8b-1b": {"target": LLAMA_31_8B, "draft": LLAMA_32_1B, "amateur": LLAMA_32_1B},
    # bench/sd_speed.py's pair: the target costs ~40x the draft per step on a CPU
    "sdspeed": {"target": (512, 1024, 8, 8, 8, 2048, False), "draft": (512, 128, 1, 4, 4, 256, False),
                "amateur": (512, 128, 1, 4, 4, 256, False)},
    "tiny": {"target": (64, 48, 2, 4, 4, 96, False), "draft": (64, 16, 1, 2, 2, 32, False),
             "amateur": (64, 16, 1, 2, 2, 32, False)},
}
TEXT_PROMPTS = [
    "Question: Mia has 12 pens and buys 7 more. How many pens does she have?\nAnswer (end with #### <number>):\n",
    "Summarise the article in one sentence.\nArticle: The city council met on Monday to discuss the new park.\n",
    "Write a Python function that returns the sum of a list of numbers.\n",
    "Question: A train travels 60 km in 1.5 hours. What is its average speed?\nAnswer:",
]


def random_lm(shape: tuple, seed: int, device: torch.device, dtype: torch.dtype, name: str) -> LM:
    """A randomly initialised Llama of the given shape, built directly on the device (an 8B in seconds)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab, hidden, layers, heads, kv, inter, tied = shape
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=8192,
                      tie_word_embeddings=tied, initializer_range=0.02, rope_theta=500000.0,
                      attn_implementation="sdpa", bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    model.eval().requires_grad_(False)
    return LM(model, name)


@dataclass
class Pair:
    target: LM
    draft: LM
    amateur: LM | None
    prompts: list[list[int]]  # a pool of token-id prompts, cycled to fill a batch
    label: str
    head: torch.nn.Module | None = None
    head_target: dict | None = None  # the exported head's `target` (what it verifies against: specdec head_rule)
    info: dict = field(default_factory=dict)
    tokenizer: object = None  # real models: a feature drafter checks it was trained with this tokenizer
    slim: LM | None = None  # --slim-methods: a slimmed copy of the draft


def load_pair(args, device: torch.device, dtype: torch.dtype) -> Pair:
    if args.random_pair:
        name = args.random_pair
        if name == "llama8b-1b" and device.type == "cpu":
            print("[bench] llama8b-1b on a CPU: using the sdspeed shapes instead", flush=True)
            name = "sdspeed"
        shapes = SHAPES[name]
        lms = {role: random_lm(shapes[role], seed, device, dtype, role)
               for seed, role in enumerate(("target", "draft", "amateur"))}
        g = torch.Generator().manual_seed(0)
        vocab = shapes["target"][0]
        prompts = [torch.randint(3, vocab, (args.prompt_len,), generator=g).tolist() for _ in range(16)]
        return Pair(lms["target"], lms["draft"], lms["amateur"], prompts, f"random {name}",
                    info={"shapes": {r: dict(zip(("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate",
                                                 "tied"), s)) for r, s in shapes.items()}})
    import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
    from specdec.loading import Models

    cfg = {"device": str(device), "dtype": str(dtype).removeprefix("torch."), "target": args.target,
           "draft": args.draft, "amateur": args.amateur, "dir": args.models_dir,
           "embedded": not args.target and not args.models_dir}
    models = Models(cfg)
    amateur = models.amateur if (args.amateur or models.root is not None) else None
    prompts = task_prompts(args, models.tokenizer, models.target.max_positions) if args.task else \
        [models.tokenizer(p, add_special_tokens=True)["input_ids"] for p in TEXT_PROMPTS]
    return Pair(models.target, models.draft, amateur, prompts, "embedded trio" if cfg["embedded"] else
                f"{models.path('target')} / {models.path('draft')}",
                info={"models": models.names(), "prompts": f"{args.task}: {len(prompts)} rows, data seed "
                      f"{args.data_seed}, {args.data_path or 'synthetic'}" if args.task else "the bench's text prompts"},
                tokenizer=models.tokenizer)


def task_prompts(args, tokenizer, window: int) -> list[list[int]]:
    """--task: the task's prompts as eval/run.py encodes them (formatted, chat template on a chat model, an over-long
    prompt cut to the window left after the new tokens), from --data-path (a seeded draw of --n-prompts rows, data
    seed --data-seed: eval/run.py's task.data.seed)."""
    from data.loaders import load_examples
    from data.tasks import get_task
    from eval.run import encode_prompts

    task = get_task(args.task)
    rows = load_examples(task.name, path=args.data_path, source="file" if args.data_path else "synthetic",
                         n=args.n_prompts, seed=args.data_seed).rows
    return encode_prompts(task, rows, tokenizer, window, args.new_tokens + max(all_gammas(args)) + 1)[0]


def make_head(pair: Pair, path: str | None) -> tuple[torch.nn.Module, str, dict | None]:
    """(head, label, its exported target): a trained head verifies against what it was trained under."""
    from heads import EnsembleHead, HeadConfig, load_head

    t, d = pair.target, pair.draft
    if path:
        head, meta = load_head(path, device=t.device, expect={"hidden_q": d.hidden_size, "hidden_p": t.hidden_size},
                               dtype=torch.float32)
        return head, path, meta.get("target") if isinstance(meta.get("target"), dict) else None
    torch.manual_seed(0)  # a random MLP head: the cost of a head, not its quality
    head = EnsembleHead(HeadConfig(hidden_q=d.hidden_size, hidden_p=t.hidden_size, num_features=len(PAIR_FEATURES),
                                   arch="mlp", init_w=0.9))
    torch.nn.init.normal_(head.out.weight, std=0.05)
    return head.to(t.device).eval(), "random mlp head", None


def make_slim_draft(args, device: torch.device, dtype: torch.dtype, pair: Pair) -> LM:
    """A second copy of the draft, slimmed (specdec.slim_draft). With --task, the kept ids are ranked by their counts
    in that task's prompts and gold completions, over the rows disjoint from the bench's own draw."""
    from specdec.slim_draft import slim_draft, special_ids

    if args.random_pair:
        shapes = SHAPES["sdspeed" if args.random_pair == "llama8b-1b" and device.type == "cpu" else args.random_pair]
        lm = random_lm(shapes["draft"], 1, device, dtype, "draft")
    else:
        from specdec.models import load_model

        lm = LM(load_model(args.draft, device=device, dtype=dtype)[0], name="draft")
    counts, tok, source = None, pair.tokenizer, "id (merge order)"
    always = special_ids(tok) if tok is not None else []
    if args.task and args.data_path and tok is not None and args.draft_vocab:
        from data.draft_vocab import task_token_counts

        counts, rows = task_token_counts(args.task, args.data_path, tok, lm.vocab_size,
                                         holdout={"n": args.n_prompts, "seed": args.data_seed})
        source = f"counts over {rows}"
    done = slim_draft(lm, vocab=args.draft_vocab, int8=args.draft_int8, counts=counts, always=always)
    done["vocab_ranked_by"] = source
    print(f"[bench] slim draft: {done}", flush=True)
    return lm


def all_gammas(args) -> list[int]:
    """--gamma, then --extra-gammas (each once)."""
    return list(dict.fromkeys([args.gamma] + list(getattr(args, "extra_gammas", None) or [])))


def method_spec(name: str, pair: Pair, args, gamma: int | None = None) -> tuple:
    """(proposer, rule, gamma, amateur) of a method: built by the registry evaluation and training use (a loaded
    head by its head_rule), so the benchmark times exactly the rule that is evaluated. gamma: default --gamma."""
    gamma = args.gamma if gamma is None else gamma
    if name == "head":
        rule = head_rule(pair.head, pair.head_target)  # the rule evaluation and training build for this head
        if rule.needs_amateur and pair.amateur is None:
            raise ValueError("this head was trained against the contrastive π_CD: pass --amateur")
        return DraftModelProposer(pair.draft), rule, gamma, pair.amateur if rule.needs_amateur else None
    method, opts = REGISTRY[name]
    opts = opts(args)
    random_drafter = name in FEATURE and opts["drafter"] == "random"
    if random_drafter:  # a freshly initialised drafter: its cost, not its drafts (as the random head)
        opts = {}
    models = SimpleNamespace(target=pair.target, draft=pair.draft, amateur=pair.amateur, tokenizer=pair.tokenizer)
    spec = build_method(method, models, method_config(method, gamma=gamma, alpha=args.alpha, beta=args.beta,
                                                      **opts))
    proposer = spec.proposer
    if random_drafter:
        from specdec.feature_drafter import new_drafter

        torch.manual_seed(0)
        proposer = FeatureDrafter(new_drafter(pair.target.model).eval().requires_grad_(False), pair.target)
    return proposer, spec.rule, spec.gamma, spec.amateur


def base_of(method: str) -> str:
    """The baseline a method's speed-up is against: cd for the contrastive drafting methods, else ar_target."""
    return "cd" if method in ("dcd", "dcd_feature") else "ar_target"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_costs(calls: dict[str, tuple[LM, int]], prompts: list[list[int]], steps: int) -> dict[str, float]:
    """Median seconds of one forward per named (LM, width: new tokens per row), each with a warm cache (rolled back
    after each). The calls take turns, one forward each per step, so that a drift in the machine's speed during the
    probe moves every cost alike and cancels from their ratios (c, a pass's cost in target steps)."""
    lms = list({id(lm): lm for lm, _ in calls.values()}.values())
    for lm in lms:
        lm.prefill(prompts)
    B = len(prompts)
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(steps + 2):
        for k, (lm, width) in calls.items():
            tok = torch.tensor([p[-1:] * width for p in prompts])
            sync(lm.device)
            t = time.perf_counter()
            lm.feed(tok)
            sync(lm.device)
            times[k].append(time.perf_counter() - t)
            lm.rollback(torch.full((B,), width))
    return {k: statistics.median(v[2:]) for k, v in times.items()}


def pooled_output(outs: list[GenerationOutput]) -> GenerationOutput:
    """Several decodes at one batch size (a cell's batches in turn) read as one: rounds stacked, numeric stats
    summed, so L, acceptance and the time split are over all of them."""
    if len(outs) == 1:
        return outs[0]
    keys = set.intersection(*(set(o.rounds) for o in outs))
    stats = {k: sum(o.stats[k] for o in outs) for k in outs[0].stats
             if all(isinstance(o.stats.get(k), (int, float)) for o in outs)}
    return GenerationOutput(tokens=[t for o in outs for t in o.tokens],
                            finish_reason=[f for o in outs for f in o.finish_reason], records={},
                            rounds={k: torch.cat([o.rounds[k] for o in outs]) for k in keys}, stats=stats)


class Cell:
    """One method at one batch size (records on or off): its decoding set-up and its timed runs."""

    def __init__(self, name: str, pair: Pair, batch: int, args, records: bool = False, slim: bool = False,
                 gamma: int | None = None):
        if slim:  # the same method with the slimmed draft in the draft's place
            pair = replace(pair, draft=pair.slim)
        self.name, self.pair, self.batch, self.args, self.records, self.slim = name, pair, batch, args, records, slim
        self.proposer, self.rule, self.gamma, self.amateur = method_spec(name, pair, args, gamma)
        # --rotate N: each run decodes N batches in turn, consecutive slices of the prompt pool (cycled), read as one
        pool = pair.prompts
        self.batches = [[pool[(j * batch + i) % len(pool)] for i in range(batch)] for j in range(args.rotate)]
        self.runs: list[tuple[float, object]] = []
        # --paired-baseline: the baseline cell, and per timed run the indices of its runs just before and after
        self.base_cell: Cell | None = None
        self.pairs: list[tuple[int, int]] = []

    def decode(self, new_tokens: int, timing: bool, batches: list | None = None):
        pair = self.pair
        for lm in (pair.target, pair.draft, pair.amateur, self.proposer):
            if lm is not None and hasattr(lm, "sync_timing"):  # LMs and the feature drafter
                lm.sync_timing = timing
        wall, outs = 0.0, []
        for prompts in batches or self.batches:
            gen = torch.Generator(device=pair.target.device).manual_seed(self.args.seed)
            sync(pair.target.device)
            t = time.perf_counter()
            outs.append(generate(pair.target, self.proposer, prompts, rule=self.rule, gamma=self.gamma,
                                 max_new_tokens=new_tokens, temperature=self.args.temperature, eos_token_id=None,
                                 amateur=self.amateur, generator=gen, records=self.records,
                                 record_hidden=self.records and self.name == "head", compile=self.args.compile))
            sync(pair.target.device)
            wall += time.perf_counter() - t
        return wall, pooled_output(outs)

    def warm_up(self) -> None:
        self.decode(min(self.args.new_tokens, 8), timing=False, batches=self.batches[:1])  # (and compilation)

    def timed_run(self) -> None:
        self.runs.append(self.decode(self.args.new_tokens, timing=False))

    def paired_base(self, k: int) -> dict | None:
        """The baseline's two runs around this cell's run k, as one: the mean wall time, end to end and decoding."""
        if not self.pairs:
            return None
        runs = [self.base_cell.runs[i] for i in self.pairs[k]]
        return {"runs": list(self.pairs[k]), "new_tokens": runs[0][1].stats["new_tokens"],
                "seconds": statistics.mean(w for w, _ in runs),
                "decode_seconds": statistics.mean(w - o.stats["time_prefill"] for w, o in runs)}

    def row(self) -> dict:
        order = sorted(range(len(self.runs)), key=lambda i: self.runs[i][0])
        k = order[0] if self.args.pick == "min" else order[len(order) // 2]
        wall, out = self.runs[k]
        # The time split: on a CPU the end-to-end run is already exact; on CUDA rerun with a device wait per call.
        split = self.decode(max(self.args.new_tokens // 2, 8), timing=True)[1] \
            if self.pair.target.device.type == "cuda" else out
        s = split.stats
        parts = {"proposer": s["time_proposer"], "target": s["time_target"], "amateur": s["time_amateur"],
                 "rule": s["time_rule"], "verify": s["time_verify"]}
        parts["other"] = max(s["seconds"] - sum(parts.values()), 0.0)
        total = sum(parts.values()) or 1.0
        new, gamma = out.stats["new_tokens"], self.gamma
        prefill = out.stats["time_prefill"]  # the prompts' prefills (target, draft, amateur), inside `wall`
        target_calls = s["target_calls"] - s["prefill_target_calls"]  # decoding calls: rounds (or steps)
        proposer_calls = s["proposer_calls"] - s["prefill_proposer_calls"]
        return {
            "method": self.name, "batch": self.batch, "records": self.records, "slim": self.slim, "gamma": gamma,
            "new_tokens": new,
            "seconds": wall, "seconds_all_runs": [r[0] for r in self.runs], "tokens_per_s": new / wall,
            "ms_per_token": 1000 * wall / (new / self.batch),  # latency per token of a row
            # decoding alone (wall minus the prefills): what the throughput models below describe
            "prefill_s": prefill, "decode_tokens_per_s": new / max(wall - prefill, 1e-9),
            "rounds": out.stats["rounds"], "L": out.mean_accepted_length if gamma else 0.0,
            "acceptance": out.acceptance_rate if gamma else None,
            "tokens_per_round": new / max(int(out.rounds["active"].sum()), 1),
            "proposer_calls_per_round": proposer_calls / max(s["rounds"], 1),
            # per-call costs of decoding inside this run (prefill calls left out; for the in-run throughput model)
            "run_target_call_s": (s["time_target"] - s["prefill_time_target"]) / max(target_calls, 1),
            "run_proposer_call_s": (s["time_proposer"] - s["prefill_time_proposer"]) / max(proposer_calls, 1),
            "run_amateur_call_s": (s["time_amateur"] - s["prefill_time_amateur"]) / max(target_calls, 1),
            "share": {k: v / total for k, v in parts.items()},
            "overhead_ms_per_round": 1000 * (parts["rule"] + parts["verify"] + parts["other"]) / max(s["rounds"], 1),
            "paired_base": self.paired_base(k),
        }


def measure(cells: list[Cell], repeats: int, log, paired: bool = False) -> list[dict]:
    """Warm every cell up, then time them interleaved (cell by cell, repeat by repeat), so that a change in the
    machine's load hits every method alike; the median (or fastest, --pick min) run of each cell is kept.

    paired: the cells that draft nothing (the baselines) open each repeat, and each drafting cell's run is followed
    by another run of its baseline, so that every drafting run has a baseline run just before and just after it
    (`Cell.paired_base`): a drift in the machine's speed over a long run then cancels from its ratio."""
    for c in cells:
        c.warm_up()
    bases = {c.name: c for c in cells if not c.gamma and not c.records}
    for _ in range(repeats):
        if not paired:
            for c in cells:
                c.timed_run()
                log(c)
            continue
        for c in cells:
            if not c.gamma:
                c.timed_run()
                log(c)
        for c in cells:
            if not c.gamma:
                continue
            base = bases.get(base_of(c.name))
            c.timed_run()
            log(c)
            if base is not None:
                base.timed_run()
                log(base)
                c.base_cell = base
                c.pairs.append((len(base.runs) - 2, len(base.runs) - 1))
    return [c.row() for c in cells]


def add_models(rows: list[dict], costs: dict, args) -> None:
    """Ratios to the baseline and the throughput models, per batch size."""
    by = {(r["method"], r["batch"], r["records"]): r for r in rows if not r.get("slim")}
    for r in rows:
        b = r["batch"]
        base_name = base_of(r["method"])
        ar, base = by.get(("ar_target", b, False)), by.get((base_name, b, False))
        r["vs_ar_target"] = r["tokens_per_s"] / ar["tokens_per_s"] if ar else None
        r["vs_base"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
        r["vs_ar_target_decode"] = r["decode_tokens_per_s"] / ar["decode_tokens_per_s"] if ar else None
        r["vs_base_decode"] = r["decode_tokens_per_s"] / base["decode_tokens_per_s"] if base else None
        r["base"] = base_name
        c = costs[b]
        if not r["gamma"] or r["vs_base"] is None:
            for k in ("c", "model_speedup", "refined_speedup", "measured_over_model", "measured_over_refined",
                      "measured_over_model_decode", "refined_inrun_speedup", "measured_over_refined_inrun"):
                r[k] = None
            continue
        L, g = r["L"], r["gamma"]
        # a draft step's cost: the draft LM's probed step, or a feature drafter's step as measured in its run
        draft_1 = r["run_proposer_call_s"] if r["method"] in FEATURE else c["draft_slim_1"] if r.get("slim") \
            else c["draft_1"]
        if r["method"] in AMATEUR:  # per-token cost of cd: expert + amateur steps; a round: drafts + both passes
            step = c["target_1"] + c["amateur_1"]
            simple = (L + 1) / (g * draft_1 / step + 1)
            refined = (L + 1) * step / (r["proposer_calls_per_round"] * draft_1 + c["target_v_by_gamma"][g]
                                        + c["amateur_v_by_gamma"][g])
        else:
            simple = (L + 1) / (g * draft_1 / c["target_1"] + 1)
            refined = (L + 1) * c["target_1"] / (r["proposer_calls_per_round"] * draft_1 + c["target_v_by_gamma"][g])
        r["c"] = draft_1 / c["target_1"]
        r["model_speedup"], r["refined_speedup"] = simple, refined
        r["measured_over_model"] = r["vs_base"] / simple
        r["measured_over_refined"] = r["vs_base"] / refined
        # The models describe rounds of decoding; end to end the run also prefills each prompt (on a CPU
        # compute-bound: seconds), which costs a fast method a larger share of its wall time.
        r["measured_over_model_decode"] = r["vs_base_decode"] / simple
        # The same refined model from the per-call costs measured inside the runs themselves (this run's passes and
        # draft steps, the baseline run's steps, prefills left out), against decoding alone: insensitive to load
        # changes between the cost probe and the run.
        step = base["run_target_call_s"] + base["run_amateur_call_s"]
        rnd = r["proposer_calls_per_round"] * r["run_proposer_call_s"] + r["run_target_call_s"] \
            + r["run_amateur_call_s"]
        r["refined_inrun_speedup"] = (L + 1) * step / rnd
        r["measured_over_refined_inrun"] = r["vs_base_decode"] / r["refined_inrun_speedup"]
        pb = r.get("paired_base")
        if pb:  # against the baseline's runs just before and after this one (--paired-baseline)
            r["vs_base_paired"] = r["tokens_per_s"] / (pb["new_tokens"] / pb["seconds"])
            r["vs_base_decode_paired"] = r["decode_tokens_per_s"] / (pb["new_tokens"] / pb["decode_seconds"])
            r["measured_over_model_paired"] = r["vs_base_paired"] / simple
            r["measured_over_model_decode_paired"] = r["vs_base_decode_paired"] / simple


def fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def row_name(r: dict, gamma: int | None = None) -> str:
    """A row's name in the tables; a row drafted at a γ other than `gamma` (the run's --gamma) is named with its γ."""
    return r["method"] + (" +records" if r["records"] else "") + (" +slim draft" if r.get("slim") else "") \
        + (f" γ={r['gamma']}" if gamma is not None and r["gamma"] and r["gamma"] != gamma else "") \
        + (" (vs cd)" if r["base"] == "cd" else "")


def table(rows: list[dict], gamma: int | None = None) -> str:
    """The rows as markdown; a row drafted at a γ other than `gamma` (the run's --gamma) is named with its γ."""
    head = ("| method | batch | tok/s | ms/token | × ar_target | × base | prefill | × ar_target (decode) | L | accept "
            "| c | proposer | target | amateur | rule/head | verify | other | model | refined | meas/model "
            "| meas/refined | meas/model (decode) | meas/refined(in-run, decode) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        sh = r["share"]
        lines.append(
            f"| {row_name(r, gamma)} | {r['batch']} | {r['tokens_per_s']:.1f} | {r['ms_per_token']:.2f} | {fmt(r['vs_ar_target'])} "
            f"| {fmt(r['vs_base'])} | {100 * r['prefill_s'] / r['seconds']:.1f}% | {fmt(r['vs_ar_target_decode'])} "
            f"| {fmt(r['L']) if r['gamma'] else '-'} | {fmt(r['acceptance'])} | "
            f"{fmt(r['c'], '.3f')} | "
            + " | ".join(f"{100 * sh[k]:.1f}%" for k in ("proposer", "target", "amateur", "rule", "verify", "other"))
            + f" | {fmt(r['model_speedup'])} | {fmt(r['refined_speedup'])} | {fmt(r['measured_over_model'])} "
            f"| {fmt(r['measured_over_refined'])} | {fmt(r['measured_over_model_decode'])} "
            f"| {fmt(r['measured_over_refined_inrun'])} |")
    return "\n".join(lines)


def paired_table(rows: list[dict], gamma: int | None = None) -> str:
    """--paired-baseline: each drafting row against its baseline's runs just before and after it."""
    head = ("| method | batch | × base (paired) | × base (paired, decode) | model | meas/model (paired) "
            "| meas/model (paired, decode) | × base (whole run) | meas/model (whole run, decode) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if not r.get("paired_base"):
            continue
        lines.append(f"| {row_name(r, gamma)} | {r['batch']} | {fmt(r['vs_base_paired'])} | {fmt(r['vs_base_decode_paired'])} "
                     f"| {fmt(r['model_speedup'])} | {fmt(r['measured_over_model_paired'])} "
                     f"| {fmt(r['measured_over_model_decode_paired'])} | {fmt(r['vs_base'])} "
                     f"| {fmt(r['measured_over_model_decode'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random-pair", choices=sorted(SHAPES), help="random weights of these shapes (no download)")
    ap.add_argument("--target", help="target model dir (with --draft; default: the embedded trio)")
    ap.add_argument("--draft")
    ap.add_argument("--amateur", help="amateur for cd/dcd (default: the trio's; without one cd/dcd are skipped)")
    ap.add_argument("--models-dir", help="a trio directory <dir>/{tokenizer,target,draft,amateur}")
    ap.add_argument("--head", help="an exported head (default: a random MLP head, for its cost)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--extra-gammas", nargs="*", type=int, default=[],
                    help="every drafting cell again at each of these γ (its own (γ+1)-pass probed for the models)")
    ap.add_argument("--w", type=float, default=0.5, help="static ensemble weight")
    ap.add_argument("--lenience", type=float, default=0.5, help="lossy SD's lenience")
    ap.add_argument("--cascade-threshold", type=float, default=0.1, help="SpecCascade's threshold t")
    ap.add_argument("--fsd-threshold", type=float, default=4.0, help="Fuzzy SD's KL threshold")
    ap.add_argument("--epsilon", type=float, default=0.3, help="typical acceptance's epsilon")
    ap.add_argument("--fly-entropy", type=float, default=0.5, help="FLy's entropy threshold")
    ap.add_argument("--drafter", default=None,
                    help="an exported feature drafter for the target (train/drafter.py), for sd_feature and "
                         "dcd_feature; 'random': a freshly initialised one (its cost only; --smoke's default)")
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=32, help="random pairs: prompt length in tokens")
    ap.add_argument("--task", default=None, help="real models: the prompts of this task (e.g. mbpp) instead of the "
                                                 "bench's four text prompts, formatted as evaluation formats them")
    ap.add_argument("--data-path", default=None, help="--task's data file (e.g. ../shared/data/mbpp/sanitized-mbpp.json)")
    ap.add_argument("--n-prompts", type=int, default=8, help="--task: how many prompts (cycled to fill a batch)")
    ap.add_argument("--data-seed", type=int, default=0, help="--task: the seeded draw (eval/run.py's task.data.seed)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per cell (median kept), after a warm-up")
    ap.add_argument("--rotate", type=int, default=1,
                    help="batches per timed run, consecutive slices of the prompt pool decoded in turn and summed (at "
                         "batch 1 with --task, --rotate K times K different prompts instead of the first one)")
    ap.add_argument("--pick", choices=["median", "min"], default="median",
                    help="which timed run of a cell is kept (min: robust on a shared, loaded machine)")
    ap.add_argument("--paired-baseline", action="store_true",
                    help="time the baseline (ar_target; cd for dcd) again after every drafting cell's run, and give "
                         "each drafting cell's ratio also against the mean of the baseline runs just before and "
                         "after it (a drift in the machine's speed during a long run then cancels)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default=None, help="default: auto (bfloat16 where the device runs it fast: CUDA, or a "
                    "CPU with AVX512-BF16/AMX; float32 elsewhere)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--compile", action="store_true", help="torch.compile the models' forward (generate(compile=True))")
    ap.add_argument("--with-records", action="store_true", help="also sd and head with records=True")
    ap.add_argument("--slim-methods", nargs="*", default=[], choices=[m for m in METHODS if m not in FEATURE],
                    help="these methods again with a slimmed copy of the draft (--draft-int8, --draft-vocab)")
    ap.add_argument("--draft-int8", nargs="?", const="weight", default=None, choices=["weight", "dynamic"],
                    help="the slim draft: int8 linears, weight-only (the flag alone) or dynamic (activations too)")
    ap.add_argument("--draft-vocab", type=int, default=None, help="the slim draft: keep this many output ids")
    ap.add_argument("--smoke", action="store_true", help="tiny random pair, few tokens, batch 1 and 4: seconds")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default runs/bench/gpu_<time>.json)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype or "auto", device)
    if args.smoke:
        args.random_pair = args.random_pair or "tiny"
        args.new_tokens, args.batch_sizes, args.repeats = min(args.new_tokens, 16), [1, 4], 1
        args.drafter = args.drafter or "random"
    if args.target and not args.draft:
        ap.error("--target needs --draft")
    start = time.perf_counter()
    pair = load_pair(args, device, dtype)
    methods = [m for m in args.methods if m not in AMATEUR or pair.amateur is not None]
    if len(methods) < len(args.methods):
        print("[bench] no amateur: cd and dcd skipped (pass --amateur)", flush=True)
    if not args.drafter and any(m in FEATURE for m in methods):
        methods = [m for m in methods if m not in FEATURE]
        print("[bench] no feature drafter: sd_feature and dcd_feature skipped (pass --drafter)", flush=True)
    if "head" in methods or "head" in args.slim_methods:
        pair.head, head_label, pair.head_target = make_head(pair, args.head)
    slim_methods = [m for m in args.slim_methods if m not in AMATEUR or pair.amateur is not None]
    if slim_methods:
        pair.slim = make_slim_draft(args, device, dtype, pair)
    n_params = {r: sum(p.numel() for p in lm.model.parameters()) for r, lm in
                (("target", pair.target), ("draft", pair.draft), ("amateur", pair.amateur)) if lm is not None}
    print(f"[bench] {pair.label} on {device} ({dtype}), params "
          + ", ".join(f"{r} {n / 1e6:.1f}M" for r, n in n_params.items())
          + f"; γ={args.gamma}, T={args.temperature}, {args.new_tokens} new tokens", flush=True)

    costs = {}
    steps = 5 if args.smoke else 20
    for b in args.batch_sizes:
        prompts = [pair.prompts[i % len(pair.prompts)] for i in range(b)]
        calls = {"target_1": (pair.target, 1), "draft_1": (pair.draft, 1),
                 **{f"target_v{g}": (pair.target, g + 1) for g in all_gammas(args)}}
        if pair.amateur is not None:
            calls |= {"amateur_1": (pair.amateur, 1),
                      **{f"amateur_v{g}": (pair.amateur, g + 1) for g in all_gammas(args)}}
        if pair.slim is not None:
            calls["draft_slim_1"] = (pair.slim, 1)
        t = step_costs(calls, prompts, steps)
        c = {k: v for k, v in t.items() if k in ("target_1", "draft_1", "amateur_1", "draft_slim_1")}
        c["target_v_by_gamma"] = {g: t[f"target_v{g}"] for g in all_gammas(args)}
        c["target_v"] = c["target_v_by_gamma"][args.gamma]
        if pair.amateur is not None:
            c["amateur_v_by_gamma"] = {g: t[f"amateur_v{g}"] for g in all_gammas(args)}
            c["amateur_v"] = c["amateur_v_by_gamma"][args.gamma]
        if pair.slim is not None:
            c["c_slim"] = c["draft_slim_1"] / c["target_1"]
        c["c"] = c["draft_1"] / c["target_1"]
        c["c_v"] = c["target_v"] / c["target_1"]
        costs[b] = c
        print(f"[bench] batch {b}: target step {1e3 * c['target_1']:.2f} ms, (γ+1)-pass {1e3 * c['target_v']:.2f} ms "
              f"(c_v={c['c_v']:.2f}), draft step {1e3 * c['draft_1']:.2f} ms (c={c['c']:.3f})"
              + (f", slim draft step {1e3 * c['draft_slim_1']:.2f} ms (c={c['c_slim']:.3f})" if pair.slim else "")
              + "".join(f", ({g}+1)-pass {1e3 * v:.2f} ms" for g, v in c["target_v_by_gamma"].items() if g != args.gamma),
              flush=True)

    def log(c: Cell) -> None:
        wall, out = c.runs[-1]
        label = c.name + (" +records" if c.records else "") + (f" γ={c.gamma}" if c.gamma and c.gamma != args.gamma else "")
        print(f"[bench] {label:<16} batch {c.batch:>2}: "
              f"{out.stats['new_tokens'] / wall:9.1f} tok/s ({time.perf_counter() - start:.0f}s)", flush=True)

    rows = []
    for b in args.batch_sizes:
        cells = []
        for m in methods:
            cells.append(Cell(m, pair, b, args))
            if args.with_records and m in ("sd", "head"):
                cells.append(Cell(m, pair, b, args, records=True))
        cells += [Cell(m, pair, b, args, slim=True) for m in slim_methods]
        for g in all_gammas(args)[1:]:  # the drafting cells again at each extra γ (ar_target, cd draft nothing)
            cells += [c for c in (Cell(m, pair, b, args, gamma=g) for m in methods) if c.gamma]
            cells += [Cell(m, pair, b, args, slim=True, gamma=g) for m in slim_methods]
        rows += measure(cells, args.repeats, log, paired=args.paired_baseline)
    add_models(rows, costs, args)

    result = {
        "pair": pair.label, "pair_info": pair.info, "params": n_params, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "dtype": str(dtype), "torch": torch.__version__, "threads": args.threads,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "head": head_label if "head" in methods else None, "slim_draft": getattr(pair.slim, "slim", None),
        "step_costs_s": costs, "rows": rows,
        "wall_seconds": time.perf_counter() - start,
    }
    out = args.out or Path("runs/bench") / f"gpu_{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\n[bench] {pair.label}, {device} {result['device_name']}, {dtype}, γ={args.gamma}, "
          f"T={args.temperature}; shares are of a round's time; base = ar_target (cd for dcd); model = "
          f"(L+1)/(γc+1), refined = with the probed (γ+1)-pass and proposer-step costs, in-run = the same with the "
          f"per-call costs measured inside the runs; JSON: {out}; "
          f"{result['wall_seconds']:.0f}s\n")
    print(table(rows, args.gamma))
    if args.paired_baseline:
        print("\nAgainst the baseline's runs just before and after each drafting run (--paired-baseline):\n")
        print(paired_table(rows, args.gamma))
    return result


if __name__ == "__main__":
    main()
