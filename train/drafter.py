"""Train an EAGLE-style feature drafter for a target: `python train/drafter.py model=tiny task=gsm8k`.

Distillation from the target's own outputs: the target completes the task's training prompts (T=1 samples,
drawn once and kept in <run dir>/samples.json), then the drafter is fit, teacher-forced on those sequences, to the
target's next-token distribution p at every position (KL(p || q); train.loss_on=answer: only where the next
token is the target's completion), at drafting depths 1..train.unroll (depth s
runs on its own features: training-time test, specdec.feature_drafter.unrolled_features). The target's hidden
states and p come from one frozen forward per batch; its embeddings and LM head are shared, never trained.

    python train/drafter.py model=tiny task=gsm8k                              # embedded trio
    python train/drafter.py model=tiny task=gsm8k train.steps=50 logger=disabled
    python train/drafter.py ... hydra.run.dir=<old run dir> resume=true       # continue a killed run
    python eval/run.py method=dcd method.proposer=feature method.drafter=<run dir>/drafter

Resumable: checkpoints/stepN/{drafter.safetensors, optimizer.pt, state.json} (+ `latest`) every
checkpoint.every steps; the data order is a pure function of (seed, step), so a resumed run continues exactly.
Export: <run dir>/drafter (drafter.safetensors + config.json with the target's identity, checked at load).
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # `python train/drafter.py`: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from specdec import checkpoint as ckpt
from specdec.feature_drafter import (
    DrafterConfig,
    DrafterNet,
    head_weights,
    new_drafter,
    target_identity,
    unrolled_loss,
)
from specdec.io import atomic_write_text

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- data
def sample_completions(target, tokenizer, prompts: list[list[int]], *, per_prompt: int, temperature: float,
                       max_new_tokens: int, batch_size: int, stops: tuple[str, ...], seed: int,
                       progress: bool, chat_stop: re.Pattern | None = None,
                       done: dict[int, list[list[int]]] | None = None,
                       on_batch: Callable[[int, list[list[int]]], None] | None = None) -> list[list[int]]:
    """prompt + the target's own completion (cut after a stop string, the chat stop or EOS, as evaluation cuts
    rows), per_prompt samples per prompt. Each batch draws from its own seed, so `done` (batch start -> its
    sequences, e.g. read back after a kill) is skipped and the result equals an uninterrupted draw; `on_batch` gets
    each newly drawn batch (to save it)."""
    from data.tasks import stop_on_match
    from specdec.generate import generate
    from train.rollout import cut_at_stop

    jobs = [p for p in prompts for _ in range(per_prompt)]
    out: list[list[int]] = []
    done = done or {}
    stop = stop_on_match(chat_stop, tokenizer)
    starts = range(0, len(jobs), batch_size)
    bar = tqdm(total=len(starts), initial=sum(i in done for i in starts), desc="target samples",
               disable=not progress, leave=False)
    for i in starts:
        if i in done:
            out += done[i]
            continue
        batch = jobs[i:i + batch_size]
        gen = torch.Generator(target.device).manual_seed(seed * 1_000_003 + i)
        res = generate(target, None, batch, gamma=0, max_new_tokens=max_new_tokens, temperature=temperature,
                       eos_token_id=tokenizer.eos_token_id, generator=gen, records=False, stop=stop)
        seqs = []
        for p, toks in zip(batch, res.tokens):
            _, keep = cut_at_stop(tokenizer, toks, stops, chat_stop)
            seqs.append(list(p) + list(toks[:keep]))
        if on_batch is not None:
            on_batch(i, seqs)
        out += seqs
        bar.update(1)
    bar.close()
    return out


def _same_signature(path: Path, old: dict, signature: dict) -> None:
    """Refuse samples in `path` drawn under other settings than `signature` (never silently reused)."""
    from specdec.jsonl import settings_diff

    if old != signature:
        raise ValueError(f"{path} holds target samples drawn under other settings "
                         f"({'; '.join(settings_diff(old, signature))}): train in a new run directory, or "
                         f"delete it to draw new samples")


def sample_batches(path: Path, signature: dict) -> dict[str, dict[int, list[list[int]]]]:
    """The batches of target samples a killed run already drew (task -> batch start -> sequences), from the partial
    file `path` (first line: the signature, written here when the file holds none; a torn last line is dropped).
    One drawn under another signature is refused."""
    from specdec.jsonl import append_jsonl, read_jsonl, repair_jsonl

    if path.is_file():
        repair_jsonl(path)
    rows = read_jsonl(path) if path.is_file() else []
    if not rows:
        append_jsonl(path, [{"signature": signature}])
        return {}
    _same_signature(path, rows[0].get("signature") or {}, signature)
    out: dict[str, dict[int, list[list[int]]]] = {}
    for r in rows[1:]:
        out.setdefault(r["task"], {})[int(r["batch"])] = r["seqs"]
    return out


def load_or_sample(path: Path, make, signature: dict) -> list[list[int]]:
    """The sample set of a run: read back when the run directory holds one drawn under the same `signature` (the
    target's weights, tasks, data and sampling settings, as JSON stores them), drawn (and written atomically) when it
    holds none; one drawn under another signature is refused, never silently reused."""
    if path.is_file():
        saved = json.loads(path.read_text())
        old = saved.get("signature")  # files from before signatures were recorded: accepted
        if old is not None:
            _same_signature(path, old, signature)
        return saved["sequences"]
    seqs = make()
    atomic_write_text(path, json.dumps({"signature": signature, "sequences": seqs}))
    return seqs


def draft_vocabulary(seqs: list[list[int]], k: int, vocab: int) -> torch.Tensor:
    """The k most frequent token ids of the samples (ties: lower id), sorted (EAGLE3's reduced draft head)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(torch.tensor(s, dtype=torch.long), minlength=vocab)[:vocab]
    order = sorted(range(vocab), key=lambda i: (-int(counts[i]), i))[:k]
    return torch.tensor(sorted(order), dtype=torch.long)


def answer_starts(seqs: list[list[int]], prompts: list[list[int]]) -> list[int]:
    """Where each sample's answer begins: the length of its prompt. Samples are drawn in the order of `prompts`
    (each prompt repeated per_prompt times; sample_completions), so samples.json needs no extra field and sample
    sets drawn before this existed still work; a sample that does not start with its prompt is refused."""
    if len(seqs) != len(prompts):
        raise ValueError(f"{len(seqs)} target samples for {len(prompts)} prompt draws: samples.json does not belong "
                         "to these prompts (train into a new run directory)")
    for i, (q, p) in enumerate(zip(seqs, prompts)):
        if q[:len(p)] != list(p):
            raise ValueError(f"target sample {i} does not start with its prompt: samples.json does not belong to "
                             "these prompts (train into a new run directory)")
    return [len(p) for p in prompts]


def loss_positions(mask: torch.Tensor, starts: list[int]) -> torch.Tensor:
    """The positions the distillation loss counts. Position j holds the target's prediction of token j+1, so the
    answer's tokens are predicted at j >= start - 1. Starts of 0 count every valid position (loss_on=all)."""
    j = torch.arange(mask.shape[1], device=mask.device)
    first = torch.tensor([max(s - 1, 0) for s in starts], device=mask.device)
    return mask & (j[None, :] >= first[:, None])


def pad_right(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(s) for s in seqs)
    tokens = torch.zeros(len(seqs), L, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.bool)
    for i, s in enumerate(seqs):
        tokens[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = True
    return tokens.to(device), mask.to(device)


@torch.no_grad()
def teacher(model, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's last hidden states [B, L, H] and next-token log-probs [B, L, V] (float32), one forward."""
    out = model(input_ids=tokens, attention_mask=mask.long(), output_hidden_states=True, use_cache=False)
    return out.hidden_states[-1].float(), torch.log_softmax(out.logits.float(), -1)


class TeacherCache:
    """The frozen target's features and log-probs for every sample, computed once (EAGLE also precomputes them):
    a step then costs only the drafter. The log-probs are kept over the draft vocabulary only (restricted and
    renormalised, what the loss uses), so a 150k-vocabulary target needs draft_vocab to fit in memory."""

    def __init__(self, model, seqs: list[list[int]], draft_ids: torch.Tensor | None, batch_size: int, device,
                 progress: bool):
        width = model.config.hidden_size + (len(draft_ids) if draft_ids is not None else model.config.vocab_size)
        need = sum(len(q) for q in seqs) * width * 4
        if need > 8 * 2**30:
            raise ValueError(f"train.cache_teacher would hold {need / 2**30:.1f} GiB of features and log-probs: set "
                             "drafter.draft_vocab (e.g. 16384) or use fewer samples, or train.cache_teacher=false")
        self.hidden: list[torch.Tensor] = [None] * len(seqs)  # filled below, in sample order
        self.logp: list[torch.Tensor] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths together: little padding
        for j in tqdm(range(0, len(order), batch_size), desc="teacher cache", disable=not progress, leave=False):
            idx = order[j:j + batch_size]
            tokens, mask = pad_right([seqs[i] for i in idx], device)
            hidden, logp = teacher(model, tokens, mask)
            if draft_ids is not None:
                logp = torch.log_softmax(logp[..., draft_ids.to(logp.device)], -1)
            for r, i in enumerate(idx):
                n = len(seqs[i])
                self.hidden[i], self.logp[i] = hidden[r, :n].cpu(), logp[r, :n].cpu()

    def batch(self, idx: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, L, H] and logp [B, L, V'] of the samples idx, right-padded with zeros like pad_right."""
        L = max(self.hidden[i].shape[0] for i in idx)
        hidden = torch.zeros(len(idx), L, self.hidden[idx[0]].shape[-1])
        logp = torch.zeros(len(idx), L, self.logp[idx[0]].shape[-1])
        for r, i in enumerate(idx):
            n = self.hidden[i].shape[0]
            hidden[r, :n], logp[r, :n] = self.hidden[i], self.logp[i]
        return hidden.to(device), logp.to(device)


def lr_at(step: int, cfg: DictConfig) -> float:
    t = cfg.train
    if step < t.warmup:
        return float(t.lr) * (step + 1) / max(int(t.warmup), 1)
    frac = (step - t.warmup) / max(int(t.steps) - int(t.warmup), 1)
    floor = float(t.min_lr_ratio)
    return float(t.lr) * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


# ---------------------------------------------------------------- checkpoints
def save_checkpoint(root: Path, step: int, net: DrafterNet, opt: torch.optim.Optimizer, keep: int,
                    target_fingerprint: str | None = None) -> Path:
    """checkpoints/stepN (specdec.checkpoint: written to a temp dir with a sha256 manifest, renamed into place,
    then `latest` replaced; a crash mid-save leaves the previous checkpoint intact): drafter.safetensors and
    state.pt (optimizer state, step, architecture, the target's fingerprint, RNG states)."""
    weights = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    return ckpt.save_state(root, step, {"optimizer": opt.state_dict(), "arch": net.cfg.to_dict(),
                                        "target_fingerprint": target_fingerprint}, keep,
                           files={"drafter.safetensors": lambda path: save_file(weights, str(path))})


def load_checkpoint(root: Path, net: DrafterNet, opt: torch.optim.Optimizer,
                    target_fingerprint: str | None = None) -> int:
    """Restore the newest checkpoint under root; returns its step (0 when there is none). A checkpoint trained
    against other target weights (specdec.models.weights_fingerprint) is refused; a corrupt one (its manifest's
    sha256) is a CheckpointError. Checkpoints of before the manifest (state.json + optimizer.pt) still load."""
    ck = ckpt.resolve_resume(root)
    if ck is None:
        return 0
    if (ck / ckpt.STATE).is_file():
        state = ckpt.load_state(ck, restore_rng=False)  # RNG restored below, once the checkpoint is accepted
        opt_state = state["optimizer"]
    else:  # written before specdec.checkpoint: no manifest, no RNG states
        state = json.loads((ck / "state.json").read_text())
        opt_state = None
    if state["arch"] != net.cfg.to_dict():
        raise ValueError(f"checkpoint {ck} holds a drafter of another architecture ({state['arch']}) than this "
                         f"config builds ({net.cfg.to_dict()}): resume with the original config")
    had = state.get("target_fingerprint")
    if had is not None and target_fingerprint is not None and had != target_fingerprint:
        raise ValueError(f"checkpoint {ck} was trained against other target weights ({had}, here "
                         f"{target_fingerprint}), though the path may be the same: train in a new run directory")
    net.load_state_dict(load_file(str(ck / "drafter.safetensors")))
    opt.load_state_dict(opt_state if opt_state is not None else torch.load(ck / "optimizer.pt", weights_only=True))
    if "rng" in state:
        ckpt.set_rng_state(state["rng"])
    return int(state["step"])


# ---------------------------------------------------------------- the run
# What a resumed drafter run may change: its length, checkpointing, logging, threads, the device, where it exports.
# Anything else (target, tasks, data, samples, architecture, lr, unroll, seed) would continue under another recipe.
RESUME_MAY_CHANGE = ("resume", "train.steps", "train.cache_teacher", "checkpoint", "progress", "logger",
                     "num_threads", "device", "stop_at_step", "export_dir")
def train_drafter(cfg: DictConfig, run_dir: Path) -> dict:
    import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
    from data.loaders import load_examples
    from data.tasks import chat_stop_for, get_task, stops_for
    from specdec.jsonl import append_jsonl, read_jsonl, truncate_steps
    from specdec.loading import Models
    from specdec.models import encode_prompt, resolve_device
    from train import wandb_run
    from train.trainer import batch_indices, resume_config_diff

    loss_on = str(cfg.train.get("loss_on", "all"))
    if loss_on not in ("all", "answer"):  # before hours of sampling, not after
        raise ValueError(f"train.loss_on={loss_on!r}: use 'answer' (the target's completions only) or 'all'")
    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    torch.manual_seed(int(cfg.seed))
    device = resolve_device(cfg.device)
    run_dir.mkdir(parents=True, exist_ok=True)
    models = Models({**OmegaConf.to_container(cfg.model, resolve=True), "device": str(device), "dtype": cfg.dtype})
    target, tok = models.target, models.tokenizer
    model = target.model
    names = [cfg.task.name, *[t for t in (cfg.data.get("extra_tasks") or []) if t != cfg.task.name]]
    s = cfg.samples
    prompts: dict[str, list[list[int]]] = {}
    labels = []
    for name in names:  # the task's prompts, plus those of data.extra_tasks (a drafter for several tasks)
        task = get_task(name)
        ex = load_examples(name, path=cfg.data.path if name == cfg.task.name else None, source=cfg.data.source,
                           split=cfg.data.split, n=cfg.data.n_train, seed=int(cfg.seed),
                           holdout=cfg.data.get("holdout") if name == cfg.task.name else None)
        prompts[name] = [encode_prompt(tok, task.format_prompt(row, tokenizer=tok)) for row in ex.rows]
        labels.append(ex.label)
        if not prompts[name]:
            raise ValueError(f"no training prompts for task {name} (data={OmegaConf.to_container(cfg.data)})")

    partial = run_dir / "samples.partial.jsonl"  # each batch as it is drawn: a killed draw resumes where it stopped

    def draw() -> list[list[int]]:
        done = sample_batches(partial, signature)
        out = []
        for name in names:
            task = get_task(name)
            limit = s.max_new_tokens or (cfg.task.max_new_tokens if name == cfg.task.name else task.max_new_tokens)
            out += sample_completions(target, tok, prompts[name], per_prompt=int(s.per_prompt),
                                      temperature=float(s.temperature), max_new_tokens=int(limit),
                                      batch_size=int(s.batch_size), stops=stops_for(task, tok), seed=int(cfg.seed),
                                      progress=bool(cfg.progress), chat_stop=chat_stop_for(task, tok),
                                      done=done.get(name),
                                      on_batch=lambda i, seqs, name=name: append_jsonl(
                                          partial, [{"task": name, "batch": i, "seqs": seqs}]))
        return out

    saved_cfg = run_dir / "drafter_config.yaml"
    if cfg.resume and saved_cfg.exists():
        changed = resume_config_diff(OmegaConf.to_container(OmegaConf.load(saved_cfg)),
                                     OmegaConf.to_container(cfg, resolve=True), may_change=RESUME_MAY_CHANGE)
        if changed:
            raise ValueError(f"resume=true in {run_dir}, but settings differ from the run's drafter_config.yaml: "
                             f"{'; '.join(changed)}. Resume with the same settings (only "
                             f"{', '.join(RESUME_MAY_CHANGE)} may change), or train into a new run directory")
    fingerprint = models.fingerprints(("target",))["target"]
    signature = json.loads(json.dumps({  # as stored (compared with the files' signatures)
        "target": fingerprint, "tasks": names, "seed": int(cfg.seed),
        "data": OmegaConf.to_container(cfg.data, resolve=True),
        "samples": OmegaConf.to_container(cfg.samples, resolve=True),
        "task_max_new_tokens": cfg.task.get("max_new_tokens")}))
    max_len = int(cfg.train.max_len or target.max_positions)
    raw = load_or_sample(run_dir / "samples.json", draw, signature)
    partial.unlink(missing_ok=True)  # samples.json holds them all now
    draws = [p for name in names for p in prompts[name] for _ in range(int(s.per_prompt))]
    starts_all = answer_starts(raw, draws) if loss_on == "answer" else [0] * len(raw)
    keep = [i for i, q in enumerate(raw) if len(q) >= 2]
    seqs = [raw[i][:max_len] for i in keep]
    starts = [starts_all[i] for i in keep]

    k = cfg.drafter.draft_vocab
    draft_ids = draft_vocabulary(seqs, int(k), target.vocab_size) if k else None
    net = new_drafter(model, cfg.drafter.heads, cfg.drafter.mlp, draft_ids).to(device)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=float(cfg.train.lr), weight_decay=float(cfg.train.weight_decay))
    ckpt_root = run_dir / "checkpoints"
    start = load_checkpoint(ckpt_root, net, opt, fingerprint) if cfg.resume else 0
    if cfg.resume:
        log.info(f"[drafter] resumed at step {start}" if start else f"[drafter] no checkpoint under {ckpt_root}: "
              "starting from step 0")
    for moved in ckpt.set_aside_later(ckpt_root, start):  # an earlier run's later checkpoints: kept, never pruned
        log.info(f"[drafter] {moved.name}: from an earlier run in this directory; moved to {moved}")
    metrics_path = run_dir / "metrics.jsonl"
    if start:
        truncate_steps(metrics_path, start)
    elif metrics_path.exists():
        metrics_path.unlink()
    OmegaConf.save(cfg, run_dir / "drafter_config.yaml", resolve=True)
    wandb = wandb_run.start_run(cfg, name=f"drafter-{cfg.task.name}-s{cfg.seed}", run_dir=run_dir,
                                job_type="drafter", tags=[cfg.task.name])

    head_w, head_b = head_weights(net, model)
    head_w = head_w.detach().float()
    head_b = head_b.detach().float() if head_b is not None else None
    embed = model.get_input_embeddings()
    cache = None
    if cfg.train.get("cache_teacher"):
        cache = TeacherCache(model, seqs, draft_ids, int(cfg.train.batch_size), device, bool(cfg.progress))
    steps, unroll = int(cfg.train.steps), int(cfg.train.unroll)
    bar = tqdm(total=steps, initial=start, desc="drafter", unit="step", disable=not cfg.progress, dynamic_ncols=True)
    for step in range(start, steps):
        t0 = time.perf_counter()
        idx = batch_indices(step, len(seqs), int(cfg.train.batch_size), int(cfg.seed))
        tokens, mask = pad_right([seqs[i] for i in idx], device)
        hidden, logp = cache.batch(idx, device) if cache is not None else teacher(model, tokens, mask)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        counted = loss_positions(mask, [starts[i] for i in idx])
        loss, st = unrolled_loss(net, embed, head_w, head_b, tokens, hidden, logp, counted, unroll)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(net.parameters(), float(cfg.train.grad_clip))
        opt.step()
        rec = {"step": step + 1, "loss": float(loss.detach()), "lr": opt.param_groups[0]["lr"],
               "grad_norm": float(gn), "tokens": int(counted.sum()), "time_step": time.perf_counter() - t0,
               **{f"kl_d{d + 1}": v for d, v in enumerate(st["kl"])},
               **{f"top1_d{d + 1}": v for d, v in enumerate(st["top1"])}}
        append_jsonl(metrics_path, [rec])
        wandb_run.log_step(wandb, rec, step=rec["step"])
        bar.set_postfix(loss=f"{rec['loss']:.3f}", top1=f"{st['top1'][0]:.3f}", refresh=False)
        bar.update(1)
        every = int(cfg.checkpoint.every)
        if (every > 0 and (step + 1) % every == 0) or step + 1 == steps:
            save_checkpoint(ckpt_root, step + 1, net, opt, int(cfg.checkpoint.keep), fingerprint)
        if cfg.get("stop_at_step") is not None and step + 1 >= int(cfg.stop_at_step):
            bar.close()
            wandb_run.finish(wandb)
            return {"run_dir": str(run_dir), "stopped_at": step + 1}  # as a kill would: no export
    bar.close()

    hist = read_jsonl(metrics_path)
    tail = hist[-max(1, len(hist) // 10):]
    final = {key: sum(h[key] for h in tail) / len(tail) for key in tail[0] if key != "step"} if tail else {}
    export = Path(cfg.export_dir) if cfg.export_dir else run_dir / "drafter"
    name = models.names().get("target", "target")
    ident = target_identity(model, Path(name).name if Path(name).exists() else name, tok)
    net.save_pretrained(export, {"task": cfg.task.name, "tasks": names, "data": sorted(set(labels)),
                                 "samples": len(seqs), "training": OmegaConf.to_container(cfg, resolve=True),
                                 "metrics": final}, target=ident)
    summary = {"run_dir": str(run_dir), "drafter": str(export), "steps": len(hist), "final": final,
               "first": hist[0] if hist else {}}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    log.info(f"[drafter] exported {export} (last 10% of steps: loss={final.get('loss', float('nan')):.4f}, "
          f"top1 depth 1={final.get('top1_d1', float('nan')):.3f})")
    wandb_run.finish(wandb, {"final": final, "steps": len(hist)})
    return summary


@hydra.main(config_path="../conf", config_name="drafter", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    run_dir = Path(hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    return train_drafter(cfg, run_dir)


__all__ = ["DrafterConfig", "train_drafter", "main"]

if __name__ == "__main__":
    main()
