"""Build the embedded default: a tiny target / draft / amateur trio trained here, on the synthetic tasks.

    python -m data.build_models [--out DIR] [--seed S]      (also: make models)

- tokenizer: character level (data/tokenizer.py), saved in Hugging Face format;
- target: Llama, the strongest 2 CPU cores train in minutes, cross-entropy on the gold completions;
- draft (the default recipe): cut out of the trained target (two of its three layers, half its MLP neurons;
  c ~ 0.52), as Llama-3.2-1B was cut out of Llama-3.1-8B, then trained on its own corpus: the same tasks with the
  completions written in wording style "c" (data/synthetic.py), as a real draft comes from other data; not
  distilled. `--recipe independent` trains a separate smaller draft (style b) instead, `--recipe pruned` the pruned
  draft on style b for 3000 steps;
- amateur: a weak model of the same family and tokenizer, trained on the data alone, briefly (for DCD).

Every model is trained on `format_prompt(ex) + target_text(ex) + <eos>` (after <bos>) over the synthetic
train splits of gsm8k, cnndm, xsum and mbpp, mixed; the loss covers the completion and <eos> only.
Resumable: each model writes `<name>/DONE` when finished and a checkpoint (`<name>.ckpt/`, specdec.checkpoint:
model + optimizer + RNG states, sha256-verified; an older build's `<name>.ckpt.pt` still resumes) every few
hundred steps; re-running continues where it stopped. A model or checkpoint of another recipe (e.g. a trio built
by an older default) is moved to `replaced/` and rebuilt, never resumed into or deleted. Deterministic by seed: the
batch of step i depends on (seed, i) only, and the weights are bit-identical on one machine and thread count (not
across them: the manifest records both). Where the trio lives: --out, else $SPECDEC_MODELS_DIR, else
artifacts/models/tiny.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from data import synthetic
from data.tasks import get_task
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB, encode_fast, save_tokenizer
from specdec import checkpoint as ckpt
from specdec.io import atomic_write_text
from specdec.loading import (
    DEFAULT_EMBEDDED_DIR,
    EMBEDDED_ENV_VAR,
    resolve_embedded_dir,
    set_embedded_builder,
    trio_is_built,
)

log = logging.getLogger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The engine knows where the embedded trio lives (specdec.loading: the API and the CLI use a built one); building it
# is this module's job, registered with the engine at the bottom of this file.
DEFAULT_DIR = DEFAULT_EMBEDDED_DIR
ENV_VAR = EMBEDDED_ENV_VAR
TASK_MIX = {"gsm8k": 0.7, "cnndm": 0.1, "xsum": 0.1, "mbpp": 0.1}  # gsm8k carries the accuracy bar
MODEL_NAMES = ("target", "draft", "amateur")


@dataclass
class Arch:
    hidden: int
    layers: int
    heads: int
    mlp: int


@dataclass
class Train:
    steps: int
    batch: int
    lr: float
    warmup: int = 50
    weight_decay: float = 0.01
    distill: bool = False  # on the gold data: KL to the target instead of cross-entropy
    sample_frac: float = 0.0  # share of each batch made of target samples, always trained with KL to the target
    mix: dict | None = None  # task mixture; None = TASK_MIX
    style: str = "a"  # wording style of the gold completions this model learns from (data/synthetic.py)
    # start from the target, structurally pruned (as Llama-3.2-1B and Minitron were made from their big models):
    # keep these target layers, and in each the `arch.mlp` MLP neurons of largest weight norm; None = random init
    prune_layers: tuple[int, ...] | None = None


@dataclass
class Recipe:
    target: Arch
    draft: Arch
    amateur: Arch
    train_target: Train
    train_draft: Train
    train_amateur: Train
    pool: int = 20000  # synthetic train rows per task
    samples: int = 0  # target samples (T=1) drawn once for distillation
    ckpt_every: int = 200
    gsm8k_knobs: dict = field(default_factory=lambda: {"steps": (2, 3), "max_operand": 9})


# The draft as an independent smaller model (issue 10's first recalibration; the default until the style-c pruned
# trio below replaced it): `--recipe independent`.
INDEPENDENT = Recipe(
    target=Arch(hidden=96, layers=3, heads=4, mlp=256),
    # a competent smaller model (issue 10): 2 layers of width 64, 2.8x fewer FLOPs per token than the target
    draft=Arch(hidden=64, layers=2, heads=2, mlp=176),
    amateur=Arch(hidden=48, layers=1, heads=2, mlp=128),
    # 3000 steps (2400 before issue 10): the richer paraphrase of the worked answers needs more of them
    train_target=Train(steps=3000, batch=16, lr=3e-3),
    # trained like the target but on its own corpus: the same tasks and mix, completions in wording style b
    train_draft=Train(steps=2400, batch=16, lr=3e-3, style="b"),
    train_amateur=Train(steps=300, batch=16, lr=5e-3),
)
# The draft cut out of the trained target (layers 0 and 2, half its MLP neurons; c ~ 0.52) and trained on its own
# corpus, as Llama-3.2-1B and Minitron were pruned from their big models (docs/results/calibration.md):
# `--recipe pruned`.
PRUNED = replace(INDEPENDENT, draft=Arch(hidden=96, layers=2, heads=4, mlp=128),
                 train_draft=Train(steps=3000, batch=16, lr=1e-3, style="b", prune_layers=(0, 2)))
# The default: the pruned draft trained 1500 steps on a corpus worded in style c (stronger paraphrase preferences).
# Chosen among candidates, before any head was trained on it, as the trio that resembles the real Qwen pair most
# (docs/results/pruned_c_head/README.md): SD acceptance 0.80 (real 0.70-0.81), digits 29% of the TV(p, q) mass
# (default-before 50%, real 10%), the draft alone at 0.58 of the target's GSM8K accuracy.
DEFAULT = replace(PRUNED, train_draft=replace(PRUNED.train_draft, steps=1500, style="c"))
MICRO = Recipe(
    target=Arch(hidden=32, layers=2, heads=2, mlp=64),
    draft=Arch(hidden=16, layers=1, heads=2, mlp=32),
    amateur=Arch(hidden=16, layers=1, heads=2, mlp=32),
    train_target=Train(steps=12, batch=8, lr=3e-3, warmup=2),
    train_draft=Train(steps=8, batch=8, lr=3e-3, warmup=2, sample_frac=0.5, style="b"),
    train_amateur=Train(steps=6, batch=8, lr=3e-3, warmup=2),
    pool=200,
    samples=8,
    ckpt_every=5,
)
RECIPES = {"default": DEFAULT, "independent": INDEPENDENT, "pruned": PRUNED, "micro": MICRO}


# ------------------------------------------------------------------ models
def make_config(arch: Arch) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(VOCAB), hidden_size=arch.hidden, intermediate_size=arch.mlp,
        num_hidden_layers=arch.layers, num_attention_heads=arch.heads, num_key_value_heads=arch.heads,
        max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        pad_token_id=PAD_ID, attn_implementation="sdpa",
    )


def flops_per_token(arch: Arch, context: int = 256) -> dict:
    """Forward FLOPs per token: 2 per weight multiply-add (projections, MLP, LM head) plus attention
    scores and values over `context` previous tokens."""
    h, L, V = arch.hidden, arch.layers, len(VOCAB)
    weights = L * (4 * h * h + 3 * h * arch.mlp) + h * V  # tied embedding used once, as the LM head
    return {"matmul": 2 * weights, "attention": 2 * 2 * L * context * h, "total": 2 * weights + 4 * L * context * h,
            "context": context}


# ------------------------------------------------------------------ data
def _rows(task: str, n: int, seed: int, knobs: dict, style: str = "a") -> list[dict]:
    return synthetic.generate(task, "train", n, seed, style=style, **(knobs if task == "gsm8k" else {}))


def encode_examples(task: str, rows: list[dict]) -> list[tuple[np.ndarray, int]]:
    """(ids of <bos> prompt completion <eos>, index of the first completion token) per row."""
    t = get_task(task)
    out = []
    for ex in rows:
        p, c = encode_fast(t.format_prompt(ex)), encode_fast(t.target_text(ex))
        out.append((np.concatenate([[BOS_ID], p, c, [EOS_ID]]), 1 + len(p)))
    return out


def make_batch(pool: list[tuple[np.ndarray, int]], idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B,T] and loss mask [B,T] (1 where the *next* token is completion or <eos>)."""
    T = max(len(pool[i][0]) for i in idx)
    ids = torch.full((len(idx), T), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(idx), T)
    for r, i in enumerate(idx):
        seq, start = pool[i]
        ids[r, : len(seq)] = torch.from_numpy(seq)
        mask[r, start - 1 : len(seq) - 1] = 1.0
    return ids, mask


def step_indices(seed: int, step: int, batch: int, pools: dict[str, list], mix: dict[str, float]) -> list:
    """The batch of step `step`: a function of (seed, step) alone, so resuming replays the same data."""
    g = np.random.default_rng([seed, step])
    names = list(pools)
    tasks = g.choice(len(names), size=batch, p=np.array([mix[n] for n in names]) / sum(mix[n] for n in names))
    return [(names[t], int(g.integers(len(pools[names[t]])))) for t in tasks]


def batch_for(sel: list[tuple[str, int]], pools: dict[str, list]) -> tuple[torch.Tensor, torch.Tensor]:
    flat = [pools[t][i] for t, i in sel]
    return make_batch(flat, list(range(len(flat))))


# ------------------------------------------------------------------ training
def lr_at(step: int, tr: Train) -> float:
    """Warmup, constant, then a linear decay to 10% over the last quarter (warmup-stable-decay)."""
    if step < tr.warmup:
        return tr.lr * (step + 1) / tr.warmup
    decay_from = int(0.75 * tr.steps)
    if step < decay_from:
        return tr.lr
    return tr.lr * (1.0 - 0.9 * (step - decay_from) / max(1, tr.steps - decay_from))


def _same_recipe(rec: dict, want: dict) -> bool:
    """Whether a saved model or checkpoint record was trained under `want` (arch and training settings; compared
    through JSON so tuples and lists agree)."""
    return all(json.loads(json.dumps(rec.get(k))) == json.loads(json.dumps(v)) for k, v in want.items())


def _set_aside(out: Path, name: str, why: str) -> None:
    """Move out/name to out/replaced/name-<time> (resuming or keeping it would mix two recipes' models)."""
    dest = out / "replaced" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(out / name, dest)
    log.warning(f"[build_models] {out / name}: {why}; moved to {dest} and rebuilding")


def train_model(
    name: str, arch: Arch, tr: Train, pools: dict[str, list], out: Path, seed: int, ckpt_every: int,
    teacher: LlamaForCausalLM | None = None, sample_pool: list | None = None, progress: bool = True,
) -> dict:
    """Train one model (resumable) and save it to out/name; returns its training record."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    done = out / name / "DONE"
    want = {"arch": asdict(arch), "train": asdict(tr)}
    if done.exists():
        rec = json.loads(done.read_text())
        if _same_recipe(rec, want):
            return rec
        _set_aside(out, name, "built by another recipe")  # rebuilt below; the old model is kept, never deleted
    torch.manual_seed(seed * 1000 + MODEL_NAMES.index(name))
    model = LlamaForCausalLM(make_config(arch))
    if tr.prune_layers is not None:
        if teacher is None:
            raise ValueError(f"{name}: prune_layers needs the trained target")
        model.load_state_dict(pruned_state(teacher, arch, tr.prune_layers))
    opt = torch.optim.AdamW(model.parameters(), lr=tr.lr, weight_decay=tr.weight_decay, betas=(0.9, 0.98))
    ckpt_root, legacy = out / f"{name}.ckpt", out / f"{name}.ckpt.pt"  # legacy: one file, before specdec.checkpoint
    start, elapsed, tokens = 0, 0.0, 0
    state, found = None, None
    if (latest := ckpt.resolve_resume(ckpt_root)) is not None:
        try:
            state, found = ckpt.load_state(latest, restore_rng=False), ckpt_root
        except ckpt.CheckpointError as e:  # a file that fails its sha256: never resumed into
            _set_aside(out, ckpt_root.name, f"unusable checkpoint ({e})")
    elif legacy.exists():
        state, found = torch.load(legacy, weights_only=False), legacy  # our own file, written by an older build
    if state is not None and not _same_recipe(state.get("recipe", {}), want):  # another recipe's partial run
        _set_aside(out, found.name, "a checkpoint of another recipe")
        state = None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start, elapsed, tokens = state["step"], state["elapsed"], state["tokens"]
        if "rng" in state:
            ckpt.set_rng_state(state["rng"])
    model.train()
    t0 = time.time() - elapsed
    bar = tqdm(range(start, tr.steps), desc=f"train {name}", disable=not progress, initial=start, total=tr.steps)
    ema = None
    for step in bar:
        n_samp = int(round(tr.sample_frac * tr.batch)) if sample_pool else 0
        n_gold = tr.batch - n_samp
        sel = step_indices(seed + 17 * MODEL_NAMES.index(name), step, n_gold, pools, tr.mix or TASK_MIX)
        if n_samp:
            g = np.random.default_rng([seed, step, 99])
            sel += [("_samples", int(g.integers(len(sample_pool)))) for _ in range(n_samp)]
        ids, mask = batch_for(sel, {**pools, "_samples": sample_pool or []})
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tr)
        logits = model(input_ids=ids).logits.float()
        per_tok = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1),
                                  reduction="none").view(ids.size(0), -1)
        per_tok = F.pad(per_tok, (0, 1))
        kl_from = 0 if tr.distill else n_gold  # rows trained with KL(p_target || q): samples, and gold if distill
        if kl_from < ids.size(0):
            with torch.no_grad():
                p_log = F.log_softmax(teacher(input_ids=ids[kl_from:]).logits.float(), -1)
            q_log = F.log_softmax(logits[kl_from:], -1)
            per_tok = torch.cat([per_tok[:kl_from], (p_log.exp() * (p_log - q_log)).sum(-1)])
        loss = (per_tok * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += int((ids != PAD_ID).sum())
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        bar.set_postfix(loss=f"{ema:.3f}", tok_s=f"{tokens / max(1e-9, time.time() - t0):.0f}")
        if (step + 1) % ckpt_every == 0 and step + 1 < tr.steps:
            # specdec.checkpoint: a kill mid-save leaves the previous checkpoint; a torn one is refused by sha256
            ckpt.save_state(ckpt_root, step + 1, {"model": model.state_dict(), "opt": opt.state_dict(),
                                                  "elapsed": time.time() - t0, "tokens": tokens, "recipe": want},
                            keep=1)
            legacy.unlink(missing_ok=True)  # superseded
    bar.close()
    model.eval()
    model.save_pretrained(out / name)
    rec = {"name": name, "arch": asdict(arch), "train": asdict(tr), "final_loss": ema, "tokens_seen": tokens,
           "seconds": round(time.time() - t0, 1),
           "params": sum(p.numel() for p in model.parameters()), "flops_per_token": flops_per_token(arch)}
    atomic_write_text(done, json.dumps(rec, indent=1))
    shutil.rmtree(ckpt_root, ignore_errors=True)
    legacy.unlink(missing_ok=True)
    return rec


@torch.no_grad()
def pruned_state(teacher: LlamaForCausalLM, arch: Arch, keep: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """A state dict for `arch` cut out of the target: layers `keep` in order, in each the arch.mlp MLP neurons with
    the largest |down column|·(|gate row| + |up row|); embeddings, norms and attention copied as they are."""
    t = teacher.config
    if arch.hidden != t.hidden_size or arch.heads != t.num_attention_heads or len(keep) != arch.layers:
        raise ValueError(f"pruning keeps width and heads ({t.hidden_size}, {t.num_attention_heads}) and needs one "
                         f"kept layer per draft layer; got {arch} and layers {keep}")
    if max(keep) >= t.num_hidden_layers or arch.mlp > t.intermediate_size:
        raise ValueError(f"cannot keep layers {keep} / {arch.mlp} neurons of a {t.num_hidden_layers}-layer target "
                         f"with MLP {t.intermediate_size}")
    src = teacher.state_dict()
    out = {k: v.clone() for k, v in src.items() if ".layers." not in k}
    for i, j in enumerate(keep):
        pre, new = f"model.layers.{j}.", f"model.layers.{i}."
        for k, v in src.items():
            if k.startswith(pre) and ".mlp." not in k:
                out[new + k[len(pre):]] = v.clone()
        g, u, d = (src[f"{pre}mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
        idx = (d.norm(dim=0) * (g.norm(dim=1) + u.norm(dim=1))).topk(arch.mlp).indices.sort().values
        out[f"{new}mlp.gate_proj.weight"] = g[idx].clone()
        out[f"{new}mlp.up_proj.weight"] = u[idx].clone()
        out[f"{new}mlp.down_proj.weight"] = d[:, idx].clone()
    return out


@torch.no_grad()
def sample_completions(model: LlamaForCausalLM, pools: dict[str, list], n: int, seed: int,
                       progress: bool = True, batch: int = 64) -> list[tuple[np.ndarray, int]]:
    """n target samples at temperature 1 for prompts of the training pools (the distillation data)."""
    sel = step_indices(seed, 10**6, n, pools, TASK_MIX)
    torch.manual_seed(seed + 4242)
    out = []
    model.eval()
    for b in tqdm(range(0, n, batch), desc="sample target", disable=not progress):
        chunk = sel[b : b + batch]
        prompts = [pools[t][i][0][: pools[t][i][1]] for t, i in chunk]
        max_new = max(get_task(t).max_new_tokens for t, _ in chunk)
        L = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), L), PAD_ID, dtype=torch.long)
        att = torch.zeros(len(prompts), L, dtype=torch.long)
        for r, p in enumerate(prompts):  # left padding
            ids[r, L - len(p):] = torch.from_numpy(p)
            att[r, L - len(p):] = 1
        gen = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, max_new_tokens=max_new, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
        for r, p in enumerate(prompts):
            new = gen[r, L:].tolist()
            new = new[: new.index(EOS_ID) + 1] if EOS_ID in new else new
            out.append((np.concatenate([p, np.array(new, dtype=np.int64)]), len(p)))
    return out


# ------------------------------------------------------------------ build
def resolve_dir(out: str | Path | None = None) -> Path:
    """--out / config, else $SPECDEC_MODELS_DIR, else artifacts/models/tiny; relative paths are taken from
    the project root."""
    return resolve_embedded_dir(out, DEFAULT_DIR)


def is_built(out: str | Path) -> bool:
    return trio_is_built(out)


def build(out: str | Path | None = None, seed: int = 0, recipe: Recipe = DEFAULT, progress: bool = True) -> Path:
    """Build (or finish building) the trio into `out`; returns the directory."""
    out = resolve_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    save_tokenizer(out / "tokenizer")
    pools = {t: encode_examples(t, _rows(t, recipe.pool, seed, recipe.gsm8k_knobs)) for t in TASK_MIX}
    styled = {}  # pools in another wording style, for a model trained on another corpus (the draft)
    for tr in (recipe.train_draft, recipe.train_amateur):
        if tr.style != "a" and tr.style not in styled:
            styled[tr.style] = {t: encode_examples(t, _rows(t, recipe.pool, seed, recipe.gsm8k_knobs, tr.style))
                                for t in TASK_MIX}
    recs = {"target": train_model("target", recipe.target, recipe.train_target, pools, out, seed,
                                  recipe.ckpt_every, progress=progress)}
    teacher = LlamaForCausalLM.from_pretrained(out / "target", attn_implementation="sdpa").eval()
    teacher.requires_grad_(False)
    samples = None
    if not (out / "draft" / "DONE").exists() and recipe.train_draft.sample_frac > 0 and recipe.samples:
        # drawn once, in the target's own wording (style a prompts are the same in every style)
        samples = sample_completions(teacher, pools, recipe.samples, seed, progress)
    recs["draft"] = train_model("draft", recipe.draft, recipe.train_draft, styled.get(recipe.train_draft.style, pools),
                                out, seed, recipe.ckpt_every, teacher=teacher, sample_pool=samples, progress=progress)
    recs["amateur"] = train_model("amateur", recipe.amateur, recipe.train_amateur,
                                  styled.get(recipe.train_amateur.style, pools), out, seed, recipe.ckpt_every,
                                  progress=progress)
    for name in MODEL_NAMES:  # every model directory is self-contained for from_pretrained
        shutil.copytree(out / "tokenizer", out / name, dirs_exist_ok=True)
    ft, fd = recs["target"]["flops_per_token"]["total"], recs["draft"]["flops_per_token"]["total"]
    manifest = {
        "data": "synthetic", "seed": seed, "tasks": TASK_MIX, "pool_per_task": recipe.pool,
        "gsm8k_knobs": recipe.gsm8k_knobs, "tokenizer": {"kind": "character", "vocab_size": len(VOCAB)},
        "models": recs, "draft_flops_ratio": round(ft / fd, 1),
        "build_seconds_this_run": round(time.time() - t_start, 1),
        "recipe": asdict(recipe),
        # the same seed gives the same weights on one machine, not across CPU kinds (other kernels round
        # differently and 3000 steps amplify it): record where the trio was built
        "machine": machine_info(),
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    return out


def built_by(out: str | Path, recipe: Recipe) -> bool:
    """Whether the trio in `out` was built by `recipe` (its manifest's record)."""
    try:
        m = json.loads((Path(out) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return _same_recipe({"recipe": m.get("recipe")}, {"recipe": asdict(recipe)})


def machine_info() -> dict:
    """The CPU model, torch version and thread count a build ran with."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "torch": torch.__version__, "threads": torch.get_num_threads()}


def ensure_embedded(dir: str | Path | None = None, seed: int = 0) -> Path:
    """The embedded trio's directory, building it first (once, ~12 minutes on 2 cores) when missing. The default
    directory is also brought up to the current default recipe (a trio built by an older default has its changed
    models rebuilt, the old ones kept under replaced/); a trio elsewhere is used as it is."""
    out = resolve_dir(dir)
    if not is_built(out):
        # a warning: shown even where nobody configured logging (a 12-minute wait must not be silent)
        log.warning(f"[specdec] embedded model trio not found in {out}: building it now with `python -m "
                    f"data.build_models` (synthetic data, ~12 min on 2 CPU cores, resumable; {usable_cores()} "
                    f"threads)")
        with all_cores():
            build(out, seed=seed)
    elif out == resolve_dir(DEFAULT_DIR) and not built_by(out, DEFAULT):
        log.warning(f"[specdec] the trio in {out} was built by another recipe than the current default: "
                    f"rebuilding the models that differ (the old ones move to {out / 'replaced'})")
        with all_cores():
            build(out, seed=seed)
    return out


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else os.cpu_count())."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def all_cores():
    """torch on every usable core for the block, the caller's thread count restored after. A job that builds the
    trio on first use may run with fewer threads (OMP_NUM_THREADS=1, a thread-limited evaluation): the build
    alone is minutes per core it is denied (target: ~20 min on one of 2 cores, ~9 on both)."""
    before = torch.get_num_threads()
    torch.set_num_threads(usable_cores())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_micro_trio(dir: str | Path, seed: int = 0) -> Path:
    """A micro trio (same code, tiny dims, a few steps) for tests: seconds, not minutes."""
    return build(Path(dir).resolve(), seed=seed, recipe=MICRO, progress=False)


# specdec.loading.Models(embedded=True) builds the trio on first use through this (looked up at call time).
set_embedded_builder(lambda d=None: ensure_embedded(d))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help=f"output directory (default: ${ENV_VAR} or {DEFAULT_DIR})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--micro", action="store_true", help="build the micro trio used by tests")
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="default", help="which recipe (default: default)")
    ap.add_argument("--target-steps", type=int, default=None, help="override the target's training steps")
    ap.add_argument("--draft-steps", type=int, default=None, help="override the draft's training steps")
    ap.add_argument("--draft-style", choices=("a", "b", "c"), default=None,
                    help="override the wording style of the draft's corpus (data/synthetic.py)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = MICRO if args.micro else RECIPES[args.recipe]
    if args.target_steps:
        recipe = replace(recipe, train_target=replace(recipe.train_target, steps=args.target_steps))
    if args.draft_steps:
        recipe = replace(recipe, train_draft=replace(recipe.train_draft, steps=args.draft_steps))
    if args.draft_style:
        recipe = replace(recipe, train_draft=replace(recipe.train_draft, style=args.draft_style))
    out = build(args.out, seed=args.seed, recipe=recipe)
    m = json.loads((out / "manifest.json").read_text())
    for n in MODEL_NAMES:
        r = m["models"][n]
        print(f"{n:8s} params={r['params']:>8,d} flops/token={r['flops_per_token']['total']:>10,d} "
              f"loss={r['final_loss']:.3f} time={r['seconds']}s")
    print(f"draft FLOPs/token ratio: {m['draft_flops_ratio']}x; trio in {out}")


if __name__ == "__main__":
    main()
