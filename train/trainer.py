"""The training loop behind train/run.py: rollout -> reward -> REINFORCE++ update, with metrics, checkpoints
and the final export. Every rank runs this; rank 0 alone writes logs and the export."""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from heads import EnsembleHead, HeadConfig, export_head, git_revision, tokenizer_hash
from specdec.jsonl import append_jsonl, read_jsonl, settings_diff, truncate_steps
from specdec.loading import Models
from specdec.models import encode_prompt, fingerprint_changes
from specdec.targets import PAIR_FEATURES
from train import checkpoint as ckpt
from train import wandb_run
from train.forks import ForkBatch, choose_fork_positions, run_forks
from train.reinforce import (
    FLAT_REWARD_MODES,
    all_reduce,
    bernoulli_kl,
    branch_clipped_loss,
    compute_advantages,
    expected_accept,
    fork_advantages,
    log_nu,
    masked_global_mean_std,
    policy_loss,
)
from train.rollout import RolloutBatch, cut_at_stop, make_rule, rollout

log = logging.getLogger(__name__)

# Global (all-rank) sums behind the per-step metrics, in this order.
SUM_KEYS = ("reward", "samples", "lam_seq", "acc_tok", "tokens", "accepted", "drafted", "active_rounds", "w",
            "tv", "kl", "new_tokens")


# What a resumed run may change: budgets, checkpointing, logging, threads and the device. Anything else (task, λ, data,
# models, head, algorithm, seed, rollout settings) would continue one trajectory under another objective.
RESUME_MAY_CHANGE = ("resume", "resume_from", "train", "checkpoint", "progress", "logger", "num_threads", "fault",
                     "export_dir", "device")


def resume_config_diff(saved: dict, now: dict, may_change: tuple[str, ...] = RESUME_MAY_CHANGE) -> list[str]:
    """'key: there vs now' for each setting a resume would change, other than those under `may_change` (top-level
    or dotted keys); keys absent from either side (settings added or retired since the run started) are not
    compared."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            out.update(flat(v, key + ".") if isinstance(v, dict) else {key: v})
        return out

    a, b = flat(saved), flat(now)
    def may(k: str) -> bool:
        return any(k == m or k.startswith(m + ".") for m in may_change)

    return settings_diff(a, {k: b[k] for k in sorted(a.keys() & b.keys()) if not may(k)})


def batch_indices(step: int, n_examples: int, per_step: int, seed: int) -> list[int]:
    """The step's global prompt indices: consecutive slices of a per-epoch permutation, a pure function of
    (seed, step), so a resumed run sees exactly the data an uninterrupted run would."""
    out, pos = [], step * per_step
    while len(out) < per_step:
        epoch, offset = divmod(pos, n_examples)
        perm = np.random.default_rng([seed, epoch]).permutation(n_examples)
        take = min(per_step - len(out), n_examples - offset)
        out += perm[offset:offset + take].tolist()
        pos += take
    return out


def rollout_seed(seed: int, step: int, rank: int) -> int:
    return (seed * 1_000_003 + step * 1009 + rank) % (2**63)


def _all_gather_list(x: list) -> list:
    if dist.get_world_size() == 1:
        return [x]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, x)
    return out


class Trainer:
    def __init__(self, cfg: DictConfig, run_dir: Path, device: torch.device, rank: int, world: int):
        import deepspeed

        import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
        from data.loaders import load_examples
        from data.tasks import chat_stop_for, get_task, stops_for

        self.cfg, self.run_dir, self.device, self.rank, self.world = cfg, run_dir, device, rank, world
        self.lam = float(cfg["lambda"])
        self.algo = cfg.algo
        if self.algo.lambda_mode not in ("differentiable", "reward"):
            raise ValueError(f"algo.lambda_mode must be 'differentiable' or 'reward', got {self.algo.lambda_mode!r}")
        if self.algo.get("flat_reward", "normalise") not in FLAT_REWARD_MODES:  # before the first rollout
            raise ValueError(f"algo.flat_reward must be one of {FLAT_REWARD_MODES}, got {self.algo.flat_reward!r}")
        self.advantage = str(self.algo.get("advantage", "returns"))
        if self.advantage not in ("returns", "forks", "critic"):
            raise ValueError(f"algo.advantage must be 'returns', 'forks' or 'critic', got {self.advantage!r}")
        if self.advantage != "returns" and cfg.target.kind != "ensemble":
            raise ValueError(f"algo.advantage={self.advantage} supports target.kind=ensemble only (the fork residuals "
                             "are built from p and q); use algo.advantage=returns for target=contrastive")
        if self.advantage != "returns" and float(cfg.target.get("typical_epsilon") or 0.0):
            raise ValueError(f"algo.advantage={self.advantage} builds its forks from p and q; a truncating head "
                             "(target.typical_epsilon > 0) trains with algo.advantage=returns")
        r = cfg.rollout
        if self.advantage == "returns" and self.algo.get("group_baseline") and int(r.samples_per_prompt) < 2:
            # every group would be one sample, and its baseline that sample's own reward: no task signal at all
            raise ValueError("algo.group_baseline needs rollout.samples_per_prompt >= 2 (got "
                             f"{r.samples_per_prompt}): a group of one sample has advantage 0")
        if r.prompts_per_step % world:
            raise ValueError(f"rollout.prompts_per_step={r.prompts_per_step} must be divisible by the number of "
                             f"ranks ({world}) so that every rank decodes the same number of prompts")
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)

        # ---- task, data, models
        self.task = get_task(cfg.task.name)
        self.max_new_tokens = int(r.max_new_tokens or cfg.task.max_new_tokens)
        opts = cfg.task.get("reward_opts")
        self.reward_opts = OmegaConf.to_container(opts, resolve=True) if opts else {}
        self.target_cfg = OmegaConf.to_container(cfg.target, resolve=True)
        self.models = Models({**OmegaConf.to_container(cfg.model, resolve=True), "device": str(device),
                              "dtype": cfg.dtype})
        self.models.target, self.models.draft  # noqa: B018 (load both now: tokenizer checks before decoding)
        if cfg.target.kind == "contrastive":
            self.models.amateur  # noqa: B018
        tok = self.models.tokenizer
        ex = load_examples(cfg.task.name, path=cfg.data.path, source=cfg.data.source, split=cfg.data.split,
                           n=cfg.data.n_train, seed=cfg.seed, holdout=cfg.data.get("holdout"))
        self.data_label = ex.label
        # chat models end a row at the task's chat stop (a closed code block), exactly as eval/run.py does
        self.chat_stop = chat_stop_for(self.task, tok)
        self.stops = stops_for(self.task, tok)  # the plain-prompting stops, none where the chat stop ends rows
        self.prompts = [encode_prompt(tok, self.task.format_prompt(row, tokenizer=tok)) for row in ex.rows]
        self.refs = [self.task.reference(row) for row in ex.rows]
        if not self.prompts:
            raise ValueError(f"no training examples for task {cfg.task.name} (data={OmegaConf.to_container(cfg.data)})")

        # ---- head, its frozen copy (KL reference), DeepSpeed engine
        hcfg = head_config(cfg.head, self.models.draft.hidden_size, self.models.target.hidden_size)
        head = EnsembleHead(hcfg).to(device)
        if cfg.head.get("init_rule") and hcfg.base_rule is None:  # a soft start on a rule's curve (KL reference)
            head.init_as_rule(str(cfg.head.init_rule), float(cfg.head.init_knob), float(cfg.head.init_sharpness))
        self.ref_head = copy.deepcopy(head).eval().requires_grad_(False)
        # algo.advantage=critic: a regressor of the fork gap G+ - G- on the head's own inputs (train/forks.py)
        self.critic = None
        if self.advantage == "critic":
            self.critic = ForkCritic(HeadConfig(**{**hcfg.to_dict(), "init_w": 0.5, "base_rule": None}), device,
                                     lr=float(self.algo.critic.lr), buffer=int(self.algo.critic.buffer))
        self.engine, *_ = deepspeed.initialize(model=head, model_parameters=head.parameters(),
                                               config=deepspeed_config(cfg))
        self.baseline: float | None = None  # plain REINFORCE's moving baseline
        self.decoded_tokens = 0  # all tokens generated so far, rollouts and forks: the compute budget's unit
        self.train_seconds = 0.0  # wall time of all steps so far, over resumes (train.max_minutes)
        self.start_step = 0
        self.ckpt_root = run_dir / "checkpoints"
        self._maybe_resume()

        # ---- logging (rank 0)
        self.metrics_path = run_dir / "metrics.jsonl"
        self.wandb = None
        self.wandb_summary: dict = {}  # final metrics: the W&B run summary at close()
        if rank == 0:
            run_dir.mkdir(parents=True, exist_ok=True)
            truncate_steps(self.metrics_path, self.start_step)
            OmegaConf.save(cfg, run_dir / "train_config.yaml", resolve=True)
            self.wandb = wandb_run.start_run(cfg, name=self.run_name(), run_dir=run_dir, job_type="train",
                                             tags=[cfg.task.name])
        self.history: list[dict] = []

    # ------------------------------------------------------------------ setup helpers
    def run_name(self) -> str:
        name = f"{self.cfg.task.name}-lam{self.lam:g}-{self.cfg.target.kind}-s{self.cfg.seed}"
        return name + ("-synthetic" if self.data_label == "synthetic" else "")

    def _maybe_resume(self) -> None:
        cfg = self.cfg
        if not (cfg.resume or cfg.resume_from):
            return
        path = ckpt.resolve_resume(self.ckpt_root, cfg.resume_from)
        if path is None:
            if self.rank == 0:
                log.warning(f"[train] resume=true but no checkpoint under {self.ckpt_root}: starting from step 0")
            return
        saved = self.run_dir / "train_config.yaml"
        if cfg.resume and not cfg.resume_from and saved.exists():
            changed = resume_config_diff(OmegaConf.to_container(OmegaConf.load(saved)),
                                         OmegaConf.to_container(cfg, resolve=True))
            if changed:
                raise ValueError(f"resume=true in {self.run_dir}, but settings differ from the run's "
                                 f"train_config.yaml: {'; '.join(changed)}. Resume with the same settings (only "
                                 f"{', '.join(RESUME_MAY_CHANGE)} may change), or train into a new run directory")
        state = ckpt.load_checkpoint(self.engine, path)
        saved_fp = state.get("model_fingerprints") or {}  # checkpoints from before they were recorded: unchecked
        changed = fingerprint_changes(saved_fp, self.models.fingerprints(tuple(saved_fp)))
        if changed:
            raise ValueError(f"cannot resume from {path}: the model weights differ from those it was trained with "
                             f"({'; '.join(changed)}), though the paths may be the same (a rebuilt trio?). Train "
                             f"into a new run directory")
        self.start_step = int(state["step"])
        if self.rank == 0:
            for moved in ckpt.set_aside_later(self.ckpt_root, self.start_step):
                log.info(f"[train] {moved.name}: after the resumed step, from the trajectory this run replaces; "
                      f"moved to {moved}")
        self.baseline = state.get("baseline")
        self.decoded_tokens = int(state.get("decoded_tokens", 0))
        self.train_seconds = float(state.get("train_seconds", 0.0))
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        self.ref_head.load_state_dict(state["ref_head"])
        if self.rank == 0:
            log.info(f"[train] resumed from {path} at step {self.start_step}")

    @property
    def head(self) -> EnsembleHead:
        return self.engine.module

    # ------------------------------------------------------------------ one step
    def step(self, step: int) -> dict:
        cfg, r = self.cfg, self.cfg.rollout
        t_start = time.perf_counter()
        idx = batch_indices(step, len(self.prompts), r.prompts_per_step, cfg.seed)[self.rank::self.world]
        n = int(r.samples_per_prompt)
        prompts = [self.prompts[i] for i in idx for _ in range(n)]
        refs = [self.refs[i] for i in idx for _ in range(n)]
        group = torch.tensor([i for i in idx for _ in range(n)], device=self.device)
        gen = torch.Generator(self.device).manual_seed(rollout_seed(cfg.seed, step, self.rank))

        self.head.eval()
        batch = rollout(self.models, self.head, prompts, target_cfg=self.target_cfg, gamma=r.gamma,
                        max_new_tokens=self.max_new_tokens, temperature=r.temperature,
                        stops=self.stops, chat_stop=self.chat_stop, generator=gen)
        t_rollout = time.perf_counter() - t_start
        if cfg.fault.kill_at_step is not None and step == cfg.fault.kill_at_step:
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection for the resume test: die mid-step

        t0 = time.perf_counter()
        from rewards import score

        task_reward = torch.tensor(score(cfg.task.name, batch.texts, refs, **self.reward_opts).scores, dtype=torch.float32,
                                   device=self.device)
        t_reward = time.perf_counter() - t0

        forks = None
        if self.advantage in ("forks", "critic"):
            t0 = time.perf_counter()
            forks = self.make_forks(batch, prompts, refs, step)
            batch.stats["time_forks"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.advantage == "returns":
            upd = self.update(batch, task_reward, group, step)
        elif self.advantage == "forks":
            upd = self.update_forks(batch, forks, step)
        else:
            upd = self.update_critic(batch, forks, step)
        t_update = time.perf_counter() - t0
        return self.metrics(step, batch, task_reward, upd, t_rollout, t_reward, t_update,
                            time.perf_counter() - t_start)

    def update(self, b: RolloutBatch, task_reward: torch.Tensor, group: torch.Tensor, step: int) -> dict:
        algo = self.algo
        with torch.no_grad():
            w_now = self.head(b.h_q, b.h_p, b.feats)
            logp_old = log_nu(w_now, b.p_tok, b.r_tok)  # r_tok: nu's w = 0 end (q, or typical's nu)
            logp_ref = log_nu(self.ref_head(b.h_q, b.h_p, b.feats), b.p_tok, b.r_tok)
            w_gap = ((w_now - b.w).abs() * b.mask).max().item() if b.mask.any() else 0.0
            lam_weight = per_token_weight(b.mask)  # lambda is per token: 1/T_i on row i
            lam_tok = self.lam * expected_accept(b.w, b.tv, b.tv_r) * lam_weight if algo.lambda_mode == "reward" else None
            if algo.name == "reinforce":  # moving baseline of the mean sequence return, updated after use
                seq_ret = _global_mean(task_reward)
            adv, adv_scale = compute_advantages(
                algo=algo.name, task_reward=task_reward, mask=b.mask, group=group, logp_old=logp_old,
                logp_ref=logp_ref, kl_coef=float(algo.kl_coef), lam_per_token=lam_tok, gamma=float(algo.gamma),
                group_baseline_on=bool(algo.group_baseline), moving_baseline=self.baseline,
                flat_reward=str(algo.get("flat_reward", "normalise")),
            )
            if algo.name == "reinforce":
                m = float(algo.baseline_momentum)
                self.baseline = seq_ret if self.baseline is None else m * self.baseline + (1 - m) * seq_ret
        clip_eps = None if algo.clip_eps is None else float(algo.clip_eps)
        self.head.train()
        N = b.mask.shape[0]
        g = torch.Generator().manual_seed(rollout_seed(self.cfg.seed, step, 7919))
        stats = {"pg_loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "grad_norm": 0.0, "updates": 0}
        for _ in range(int(algo.update_epochs)):
            perm = torch.randperm(N, generator=g)
            for mb in perm.chunk(int(algo.minibatches)):
                mb = mb.to(self.device)
                w = self.engine(b.h_q[mb], b.h_p[mb], b.feats[mb])
                out = policy_loss(w, b.p_tok[mb], b.r_tok[mb], b.tv[mb], logp_old[mb], adv[mb], b.mask[mb],
                                  lam=self.lam / adv_scale, lambda_mode=algo.lambda_mode, clip_eps=clip_eps,
                                  lam_weight=lam_weight[mb], tv_r=b.tv_r[mb])
                self.engine.backward(out.loss)
                gn = _grad_norm(self.head)  # before step (which zeroes grads); None where ZeRO-2 partitions them
                self.engine.step()
                if gn is None:
                    gn = self.engine.get_global_grad_norm()
                stats["pg_loss"] += out.pg_loss.item()
                stats["clip_frac"] += out.clip_frac.item()
                stats["approx_kl"] += out.approx_kl.item()
                stats["grad_norm"] += float(gn) if gn is not None else float("nan")
                stats["updates"] += 1
        k = max(stats.pop("updates"), 1)
        stats = {key: v / k for key, v in stats.items()}
        stats["w_recompute_gap"] = w_gap
        stats["adv_scale"] = adv_scale
        stats["kl_sum"] = float(((logp_old - logp_ref) * b.mask).sum())
        return stats

    def make_forks(self, b: RolloutBatch, prompts: list[list[int]], refs: list, step: int) -> ForkBatch | None:
        """Paired forks at TV-weighted positions of this step's rollouts (train/forks.py)."""
        f = self.algo.forks
        g = torch.Generator().manual_seed(rollout_seed(self.cfg.seed, step, 104729 + self.rank))
        positions = choose_fork_positions(b.tv.cpu(), b.mask.cpu(), int(f.per_rollout), g)
        if not positions:
            return None
        from rewards import score

        def score_fn(texts: list[str], rows: list[int]) -> list[float]:
            return score(self.cfg.task.name, texts, [refs[r] for r in rows], **self.reward_opts).scores

        # the rollout's lambda terms up to and including each fork position (the same in both branches)
        terms = ((1 - b.w.double() * b.tv.double().nan_to_num(0.0)) * b.mask).cpu()
        prefix_lam = [float(terms[i, : t + 1].sum()) for i, t in positions]
        self.head.eval()
        r = self.cfg.rollout
        return run_forks(self.models, make_rule(self.head, self.target_cfg), prompts, b.tokens, positions,
                         score_fn=score_fn, lam=self.lam, gamma=int(r.gamma), max_new_tokens=self.max_new_tokens,
                         temperature=float(r.temperature), stops=self.stops,
                         seed=rollout_seed(self.cfg.seed, step, 7 + self.rank),
                         cut_at_stop=functools.partial(cut_at_stop, chat_stop=self.chat_stop),
                         continuation=str(f.continuation), prefix_lam=prefix_lam)

    def _branch_update(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor, w_old: torch.Tensor,
                       w_ref: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, step: int) -> dict:
        """REINFORCE++ epochs over the leading dimension (forks, or rollout rows whose valid tokens `mask` selects):
        the clipped branch ratio (branch_clipped_loss) plus kl_coef * KL(Bern(w) || Bern(w_ref))."""
        algo = self.algo
        clip_eps = None if algo.clip_eps is None else float(algo.clip_eps)
        self.head.train()
        g = torch.Generator().manual_seed(rollout_seed(self.cfg.seed, step, 7919))
        stats = {"pg_loss": 0.0, "clip_frac": 0.0, "approx_kl": 0.0, "grad_norm": 0.0, "updates": 0}
        # The same number of optimizer steps on every rank (each one all-reduces gradients), though the number of
        # forks differs between ranks: tensor_split always gives k pieces, k at most the smallest rank's count.
        k = int(all_reduce(torch.tensor([min(int(algo.minibatches), len(adv))], dtype=torch.float64),
                           dist.ReduceOp.MIN).item())
        for _ in range(int(algo.update_epochs)):
            for mb in torch.randperm(len(adv), generator=g).tensor_split(k):
                mb = mb.to(self.device)
                sel = mask[mb]
                w = self.engine(h_q[mb], h_p[mb], feats[mb])[sel]
                pg, clip_frac = branch_clipped_loss(w, w_old[mb][sel], adv[mb][sel], clip_eps)
                kl = bernoulli_kl(w, w_ref[mb][sel]).mean()
                self.engine.backward(pg + float(algo.kl_coef) * kl)
                gn = _grad_norm(self.head)
                self.engine.step()
                if gn is None:
                    gn = self.engine.get_global_grad_norm()
                stats["pg_loss"] += pg.item()
                stats["clip_frac"] += clip_frac.item()
                stats["approx_kl"] += bernoulli_kl(w_old[mb][sel], w.detach()).mean().item()
                stats["grad_norm"] += float(gn) if gn is not None else float("nan")
                stats["updates"] += 1
        k = max(stats.pop("updates"), 1)
        return {key: v / k for key, v in stats.items()}

    def update_critic(self, b: RolloutBatch, f: ForkBatch | None, step: int) -> dict:
        """algo.advantage=critic: fit the gap critic on this step's forks (plus its buffer of earlier ones), then
        REINFORCE++ with the critic's per-token advantages TV_t (g(x_t) - lambda / T) at *every* valid token."""
        critic_stats = {"critic_loss": None, "critic_buffer": 0.0}
        if f is not None:
            i, t = f.row.to(self.device), f.pos.to(self.device)
            self.critic.add(b.h_q[i, t], b.h_p[i, t], b.feats[i, t], (f.g_plus - f.g_minus).to(self.device))
        if len(self.critic):
            critic_stats = self.critic.fit(int(self.algo.critic.steps), world=self.world)
        m = b.mask
        with torch.no_grad():
            gap = self.critic.predict(b.h_q, b.h_p, b.feats)
            length = m.sum(1, keepdim=True).to(torch.float32)
            adv_raw = b.tv * (gap - self.lam / length.clamp_min(1)) * m
            w_old = self.head(b.h_q, b.h_p, b.feats)
            w_ref = self.ref_head(b.h_q, b.h_p, b.feats)
            mean, std = masked_global_mean_std(adv_raw, m)
            scale = float(torch.sqrt(mean * mean + std * std)) + 1e-8
            adv = adv_raw / scale
        stats = self._branch_update(b.h_q, b.h_p, b.feats, w_old, w_ref, adv, m, step)
        with torch.no_grad():
            kl_sum = float((bernoulli_kl(self.head(b.h_q, b.h_p, b.feats), w_ref) * m).sum())
        stats.update({"w_recompute_gap": 0.0, "adv_scale": scale, "kl_sum": kl_sum, **critic_stats,
                      "critic_gap_mean": float((gap * m).sum() / m.sum().clamp_min(1))})
        if f is not None:
            stats.update({"forks": float(len(f.row)), "fork_tokens": float(f.decoded_tokens),
                          "fork_delta_mean": float(f.delta.mean()),
                          "fork_differ": float((f.g_plus != f.g_minus).float().mean())})
        return stats

    def update_forks(self, b: RolloutBatch, f: ForkBatch | None, step: int) -> dict:
        """REINFORCE++ on the fork advantages: the clipped ratio over the mixture's latent branch, KL to the
        initial head, advantages divided by their global scale (train/reinforce.py::branch_clipped_loss).
        A step where some rank has no fork position (TV = 0 everywhere, or empty rollouts) updates nothing on any
        rank, so that every rank enters the same collectives."""
        M = 0 if f is None else len(f.row)
        if int(all_reduce(torch.tensor([M], dtype=torch.float64), dist.ReduceOp.MIN).item()) == 0:
            return {"forks": float(M), "fork_tokens": float(f.decoded_tokens) if f is not None else 0.0,
                    "kl_sum": 0.0, "pg_loss": None, "clip_frac": None, "approx_kl": None, "grad_norm": None,
                    "w_recompute_gap": 0.0, "adv_scale": None}
        i, t = f.row.to(self.device), f.pos.to(self.device)
        h_q, h_p, feats = b.h_q[i, t], b.h_p[i, t], b.feats[i, t]
        length = b.mask.sum(1)[i].to(torch.float32)
        with torch.no_grad():
            w_old = self.head(h_q, h_p, feats)
            w_ref = self.ref_head(h_q, h_p, feats)
            adv, scale = fork_advantages(f.delta.to(self.device), f.tv.to(self.device), length, self.lam)
        M = len(adv)
        stats = self._branch_update(h_q, h_p, feats, w_old, w_ref, adv, torch.ones_like(adv, dtype=torch.bool), step)
        with torch.no_grad():
            w_new = self.head(h_q, h_p, feats)
        stats.update({
            "w_recompute_gap": 0.0, "adv_scale": scale,
            "kl_sum": float(bernoulli_kl(w_new, w_ref).sum()) * float(b.mask.sum()) / max(M, 1),
            "forks": float(M), "fork_tokens": float(f.decoded_tokens),
            "fork_delta_mean": float(f.delta.mean()), "fork_differ": float((f.g_plus != f.g_minus).float().mean()),
            "fork_w_old": float(w_old.mean()),
        })
        return stats

    def metrics(self, step: int, b: RolloutBatch, task_reward: torch.Tensor, upd: dict, t_rollout: float,
                t_reward: float, t_update: float, t_step: float) -> dict:
        m = b.mask.to(torch.float64)
        acc = expected_accept(b.w, b.tv, b.tv_r).to(torch.float64) * m
        s = b.stats
        local = torch.tensor([
            task_reward.sum().item(), len(task_reward),
            (acc.sum(-1) / m.sum(-1).clamp_min(1.0)).sum().item(),  # sum over rows of each row's mean acceptance
            acc.sum().item(), m.sum().item(),
            s["accepted"], s["drafted"], s["active_rounds"], (b.w * m).sum().item(), (b.tv * m).sum().item(),
            upd["kl_sum"], s["new_tokens"],
        ], dtype=torch.float64)
        tot = dict(zip(SUM_KEYS, all_reduce(local).tolist()))
        rank_rewards = [x[0] for x in _all_gather_list([task_reward.mean().item()])]
        ws = torch.tensor([v for x in _all_gather_list(b.w[b.mask].tolist()) for v in x])
        max_roll = all_reduce(torch.tensor([t_rollout], dtype=torch.float64), dist.ReduceOp.MAX).item()
        samples, tokens = max(tot["samples"], 1), max(tot["tokens"], 1)
        fork_tokens = all_reduce(torch.tensor([upd.get("fork_tokens", 0.0)], dtype=torch.float64)).item()
        self.decoded_tokens += int(tot["new_tokens"] + fork_tokens)
        q = torch.quantile(ws, torch.tensor([0.1, 0.5, 0.9])).tolist() if len(ws) else [math.nan] * 3
        lam_seq = tot["lam_seq"] / samples
        out = {
            "step": step + 1,
            "task_reward": tot["reward"] / samples,
            "lam_term": lam_seq,  # mean over samples of (1/T) sum_t (1 - w_t tv_t): lambda's per-token term
            "lam_term_per_token": tot["acc_tok"] / tokens,  # mean expected acceptance per token
            "total_reward": tot["reward"] / samples + self.lam * lam_seq,
            "acceptance_rate": tot["accepted"] / max(tot["drafted"], 1),
            "mean_accepted_length": tot["accepted"] / max(tot["active_rounds"], 1),
            "w_mean": tot["w"] / tokens, "w_q10": q[0], "w_q50": q[1], "w_q90": q[2],
            "tv_mean": tot["tv"] / tokens,
            "kl": tot["kl"] / tokens,
            "clip_frac": upd["clip_frac"], "approx_kl": upd["approx_kl"], "grad_norm": upd["grad_norm"],
            "pg_loss": upd["pg_loss"], "w_recompute_gap": upd["w_recompute_gap"], "adv_scale": upd["adv_scale"],
            "decoded_tokens": self.decoded_tokens,  # cumulative, rollouts + forks (equal-compute comparisons)
            # fork / critic figures: null (not NaN, which never equals itself) where the estimator has none
            "forks": upd.get("forks", 0.0), "fork_delta_mean": upd.get("fork_delta_mean"),
            "fork_differ": upd.get("fork_differ"), "time_forks": b.stats.get("time_forks", 0.0),
            "critic_loss": upd.get("critic_loss"), "critic_gap_mean": upd.get("critic_gap_mean"),
            "new_tokens": tot["new_tokens"], "tokens_per_s": tot["new_tokens"] / max(max_roll, 1e-9),
            "time_rollout": t_rollout, "time_reward": t_reward, "time_update": t_update, "time_step": t_step,
            "reward_ranks": rank_rewards,
        }
        return out

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict:
        cfg = self.cfg
        steps = int(cfg.train.steps)
        bar = tqdm(total=steps, initial=self.start_step, desc="train", unit="step",
                   disable=self.rank != 0 or not cfg.progress, dynamic_ncols=True)
        budget = int(cfg.train.get("max_decoded_tokens") or 0)  # 0: no budget, run train.steps
        max_s = 60.0 * float(cfg.train.get("max_minutes") or 0)  # 0: no time limit
        for step in range(self.start_step, steps):
            if budget and self.decoded_tokens >= budget:  # a resumed run that had already spent its budget
                break
            if max_s and self.train_seconds >= max_s:
                break
            t_step = time.perf_counter()
            rec = self.step(step)
            self.train_seconds += time.perf_counter() - t_step
            if self.world > 1:  # every rank must take the same stop decision: go by the slowest clock
                self.train_seconds = float(all_reduce(torch.tensor(self.train_seconds, dtype=torch.float64),
                                                      dist.ReduceOp.MAX))
            rec["train_seconds"] = self.train_seconds
            if self.rank == 0:
                append_jsonl(self.metrics_path, [rec])
                wandb_run.log_step(self.wandb, rec, step=rec["step"])  # numbers only (reward_ranks is a list)
                bar.set_postfix(R=f"{rec['task_reward']:.3f}", acc=f"{rec['acceptance_rate']:.3f}",
                                w=f"{rec['w_mean']:.3f}", tps=f"{rec['tokens_per_s']:.0f}", refresh=False)
                bar.update(1)
            self.history.append(rec)
            every = int(cfg.checkpoint.every)
            spent = bool(budget) and self.decoded_tokens >= budget
            out_of_time = bool(max_s) and self.train_seconds >= max_s
            if (every > 0 and (step + 1) % every == 0) or step + 1 == steps or spent or out_of_time:
                state = {"step": step + 1, "baseline": self.baseline, "ref_head": self.ref_head.state_dict(),
                         "decoded_tokens": self.decoded_tokens, "train_seconds": self.train_seconds,
                         "model_fingerprints": self.models.fingerprints()}
                if self.critic is not None:
                    state["critic"] = self.critic.state_dict()
                ckpt.save_checkpoint(self.engine, self.ckpt_root, step + 1, state, keep=int(cfg.checkpoint.keep))
            if spent:
                if self.rank == 0:
                    log.info(f"[train] decoded-token budget {budget} spent after step {step + 1}: stopping")
                break
            if out_of_time:
                if self.rank == 0:
                    log.info(f"[train] train.max_minutes={cfg.train.max_minutes} reached after step {step + 1} "
                          f"({self.train_seconds / 60:.1f} min of steps): stopping")
                break
        bar.close()
        return self.finish()

    def finish(self) -> dict:
        cfg = self.cfg
        hist = read_jsonl(self.metrics_path) if self.rank == 0 else self.history
        tail = hist[-max(1, len(hist) // 5):]  # headline figures: mean over the last 20% of steps
        keys = ("task_reward", "acceptance_rate", "mean_accepted_length", "w_mean", "lam_term_per_token", "kl")
        final = {k: float(np.mean([h[k] for h in tail])) for k in keys} if tail else {}
        first = {k: hist[0][k] for k in keys} if hist else {}
        export = Path(cfg.export_dir) if cfg.export_dir else self.run_dir / "head"
        summary = {"run_dir": str(self.run_dir), "head": str(export), "task": cfg.task.name, "lambda": self.lam,
                   "target": cfg.target.kind, "data": self.data_label, "steps": len(hist),
                   "dtype": self.models.dtype,  # the frozen models' ("auto" resolved)
                   "final": final, "first": first}
        if self.rank == 0:
            export_head(self.head, export, export_meta(cfg, self.models, self.data_label, final))
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            self.wandb_summary = {"final": final, "first": first, "steps": len(hist),
                                  "decoded_tokens": self.decoded_tokens, "train_seconds": self.train_seconds}
            log.info(f"[train] exported head: {export}")
            log.info(f"[train] run dir: {self.run_dir} (metrics.jsonl, checkpoints/, summary.json)")
            if final:
                log.info("[train] headline (mean of last 20% of steps; first step in brackets): "
                      + ", ".join(f"{k}={final[k]:.4f} [{first[k]:.4f}]" for k in keys))
        return summary

    def close(self) -> None:
        wandb_run.finish(self.wandb, self.wandb_summary)
        self.wandb = None


def head_config(head: DictConfig, hidden_q: int, hidden_p: int) -> HeadConfig:
    """The HeadConfig of a training run's `head` config group (the trainer and train/export_checkpoint.py agree).
    head.init_mode=flip with head.init_rule: the rule itself as base_rule, corrected by a learned flip probability
    that starts at head.init_flip (heads.HeadConfig.base_rule); soft (default): a sigmoid start (init_as_rule)."""
    mode = str(head.get("init_mode") or "soft")
    if mode not in ("soft", "flip"):
        raise ValueError(f"head.init_mode must be 'soft' or 'flip', got {mode!r}")
    flip = mode == "flip"
    if flip and (not head.get("init_rule") or head.init_rule == "static"):
        raise ValueError("head.init_mode=flip corrects a rule: set head.init_rule=cascade or fsd_tv (and init_knob)")
    return HeadConfig(hidden_q=hidden_q, hidden_p=hidden_p, num_features=len(PAIR_FEATURES) if head.features else 0,
                      arch=head.arch, mlp_hidden=head.mlp_hidden, use_hidden=head.use_hidden,
                      normalize=head.normalize, hidden_scale=str(head.get("hidden_scale", "unit")),
                      init_w=float(head.get("init_flip", 0.02)) if flip else head.init_w,
                      base_rule=str(head.init_rule) if flip else None,
                      base_knob=float(head.init_knob) if flip else 0.0)


def export_meta(cfg: DictConfig, models: Models, data_label: str, metrics: dict,
                fingerprints: dict | None = None, **extra: Any) -> dict:
    """config.json metadata of an exported head (train/run.py and train/export_checkpoint.py): the models and
    their tokenizer's hash (checked at load), the verification target, λ and its meaning, the advantage estimator,
    the whole training config."""
    return {
        "models": {k: Path(v).name if Path(v).exists() else v for k, v in models.names().items()},
        "tokenizer_hash": tokenizer_hash(models.tokenizer_only()),
        # checked at load (heads.check_head_models); export_checkpoint passes the checkpoint's own
        "model_fingerprints": models.fingerprints() if fingerprints is None else fingerprints,
        "model_dtype": models.dtype,  # the frozen models' dtype in training ("auto" resolved)
        "target": OmegaConf.to_container(cfg.target, resolve=True),
        "lambda": float(cfg["lambda"]),
        "lambda_meaning": "per token: objective E[R + lambda * (1/T) sum_t (1 - w_t TV(p_t, q_t))]; with "
                          "target.typical_epsilon > 0, (1/T) sum_t (1 - w_t TV(q_t, p_S,t) - (1 - w_t) TV(q_t, r_t)), "
                          "r_t typical acceptance's nu",
        "advantage": str(cfg.algo.get("advantage", "returns")),
        "task": cfg.task.name,
        "data": data_label,
        "training": OmegaConf.to_container(cfg, resolve=True),
        "metrics": metrics,
        "git_revision": git_revision(),
        **extra,
    }


# ---------------------------------------------------------------------- the gap critic
class ForkCritic:
    """g(h_q, h_p, feats) ~ E[G+ - G- | features]: the value of x_t coming from p rather than q, per unit of TV,
    regressed (MSE) on the fork gaps of a FIFO buffer of recent forks. One fork is a +-1 / 0 sample; the regression
    averages them over similar contexts, and its prediction serves every token, not only forked ones.
    Same architecture as the head (its real-valued logit is the prediction). Several ranks average gradients."""

    def __init__(self, cfg: HeadConfig, device: torch.device, *, lr: float, buffer: int):
        self.net = EnsembleHead(cfg).to(device)
        torch.nn.init.zeros_(self.net.out.bias)  # predicts a zero gap until trained
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.capacity = buffer
        self.data: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return 0 if not self.data else len(self.data["y"])

    def add(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor, y: torch.Tensor) -> None:
        new = {"h_q": h_q.float(), "h_p": h_p.float(), "feats": feats.float(), "y": y.float()}
        self.data = {k: (torch.cat([self.data[k], v]) if self.data else v)[-self.capacity:] for k, v in new.items()}

    def predict(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.net.logits(h_q, h_p, feats)

    def fit(self, steps: int, world: int = 1) -> dict:
        d = self.data
        for _ in range(steps):
            loss = F.mse_loss(self.net.logits(d["h_q"], d["h_p"], d["feats"]), d["y"])
            self.opt.zero_grad()
            loss.backward()
            if world > 1:
                for p in self.net.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            self.opt.step()
        return {"critic_loss": float(loss.detach()), "critic_buffer": float(len(self))}

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(), "data": self.data}

    @property
    def device(self) -> torch.device:
        return self.net.out.weight.device

    def load_state_dict(self, state: dict) -> None:
        # DeepSpeed's load_checkpoint hands the client state back on the CPU. The net's load copies into its own
        # parameters and Adam moves its state to theirs, but the fork buffer is a plain dict of tensors: moved here
        # to the critic's device (float32, as add() stores it), or a resumed GPU run meets CPU tensors in add/fit.
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.data = {k: v.to(self.device, torch.float32) for k, v in state["data"].items()}


# ---------------------------------------------------------------------- helpers
def deepspeed_config(cfg: DictConfig) -> dict:
    algo = cfg.algo
    return {
        "train_micro_batch_size_per_gpu": 1,  # the loss is computed on whole minibatches by us
        "gradient_accumulation_steps": 1,
        "gradient_clipping": float(algo.grad_clip),
        "zero_optimization": {"stage": int(cfg.deepspeed.stage)},
        "optimizer": {
            "type": "AdamW",
            # torch_adam: the plain torch AdamW (DeepSpeed's FusedAdam would JIT-compile for a tiny head)
            "params": {"lr": float(algo.lr), "weight_decay": float(algo.weight_decay), "betas": [0.9, 0.999],
                       "eps": 1e-8, "torch_adam": True},
        },
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def per_token_weight(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] 1/T_i on the valid tokens of row i: lambda's acceptance term is a per-trajectory mean."""
    maskf = mask.to(torch.float32)
    return maskf / maskf.sum(1, keepdim=True).clamp_min(1.0)


def _grad_norm(module: torch.nn.Module) -> float | None:
    grads = [p.grad for p in module.parameters() if p.requires_grad]
    if not grads or any(g is None for g in grads):
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def _global_mean(x: torch.Tensor) -> float:
    s = all_reduce(torch.tensor([x.sum().item(), float(x.numel())], dtype=torch.float64))
    return (s[0] / s[1].clamp_min(1)).item()


