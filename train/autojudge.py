"""AutoJudge (Garipov et al., 2025, arXiv 2504.20039) as a baseline: a judge of which draft/target mismatches matter.

    python train/autojudge.py task=gsm8k                    # mine, fit, export <run dir>/head
    python train/autojudge.py task=cnndm mine.label=selfjudge   # SelfJudge's labels: no task reward needed
    python eval/run.py task=gsm8k method=autojudge head=<run dir>/head [method.threshold=0.3]
    # hours of mining on a real pair: one process per core, each mining a part, then the same run without
    # mine.shard merges the parts and fits (hydra.run.dir the same for all three)
    python train/autojudge.py ... mine.shards=2 mine.shard=0 & python train/autojudge.py ... mine.shards=2 mine.shard=1
    python train/autojudge.py ... mine.shards=2

1. Mine: decode the training prompts with the target's greedy decoding; at positions where the draft's greedy token
   differs from the target's, swap the draft token in and let the target continue greedily (the same counterfactual
   machinery as the paired forks: train/forks.py::run_forks with continuation=greedy_target). The mismatch is
   *important* when the swap changes the task reward (the paper checks whether the final answer changes; with a
   reward, a change of the answer that keeps the score is harmless for quality).
2. Fit: a light classifier on both models' hidden states and the pair features at the mismatch, i.e. the same
   EnsembleHead the learned ensemble uses, with a class-weighted logistic loss; its output is P(important).
3. Threshold: the largest tau that keeps `fit.recall` of the important mismatches of held-out calibration prompts
   flagged; recall, accuracy and the flagged share are then reported on other held-out prompts.
At inference (eval method `autojudge`) w_t = 1[P(important) >= tau]: an unimportant position verifies against q
(the draft is accepted), an important one against p (standard SD), through the one `verify`.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from specdec.io import atomic_torch_save

CONF = Path(__file__).resolve().parents[1] / "conf"
log = logging.getLogger(__name__)


@torch.no_grad()
def teacher_forced(lm, prompts: list[list[int]], completions: list[list[int]], temperature: float):
    """Next-token probs [B, T, V] and last hidden states [B, T, H] of `lm` at every completion position t (the
    distribution of completion[t] given prompt + completion[:t]); T = the longest completion, rows right-padded."""
    from specdec.targets import softmax_with_temperature

    lm.prefill([p[:-1] for p in prompts])
    T = max(len(c) for c in completions)
    toks = torch.zeros(len(prompts), T, dtype=torch.long)
    valid = torch.zeros(len(prompts), T, dtype=torch.bool)
    for b, (p, c) in enumerate(zip(prompts, completions)):
        seq = [p[-1]] + c[:-1]  # position t is fed the token before completion[t]
        toks[b, : len(seq)] = torch.tensor(seq)
        valid[b, : len(seq)] = True
    logprobs, hidden = lm.feed(toks, valid)
    return softmax_with_temperature(logprobs, temperature), hidden


@torch.no_grad()
def selfjudge_harm(lm, prompts: list[list[int]], completions: list[list[int]], positions: list[tuple[int, int]],
                   swaps: list[int], window: int, batch_size: int,
                   own_probs: torch.Tensor | None = None) -> torch.Tensor:
    """SelfJudge's self-supervised label (Yoon et al. 2025, arXiv 2510.02329): how much a swap hurts, read from the
    target alone. For a mismatch at t of row b, the target's mean log-likelihood of its own next `window` tokens
    (completion[t+1 : t+1+window]) after its own token completion[t], minus the same after the draft's token
    `swap`: large when the swap derails what the target would say next, ~0 when it reads on as before. No task
    reward, so every task (ROUGE's noisy one included) gets dense labels. Returns [len(positions)] in nats/token
    (0 where no token follows t).

    own_probs: the target's T = 1 next-token probs along the whole completions ([B, T, V], teacher_forced's); the
    own-token branch is then read from them and only the swapped branch is decoded (half the passes, and mining's
    cost on a real pair is these passes)."""

    def mean_ll(probs: torch.Tensor, follow: list[int]) -> float:  # probs[j]: the distribution of follow[j]
        idx = torch.tensor(follow, device=probs.device).unsqueeze(-1)
        return float(probs[: len(follow)].gather(-1, idx).clamp_min(1e-30).log().mean())

    harm = torch.zeros(len(positions))
    for s in range(0, len(positions), batch_size):
        chunk = positions[s:s + batch_size]
        pre, comp, nxt, own = [], [], [], []
        for (b, t), x in zip(chunk, swaps[s:s + batch_size]):
            follow = completions[b][t + 1:t + 1 + window]
            firsts = (completions[b][t], x) if own_probs is None else (x,)  # the target's own token, the draft's
            for first in firsts:
                pre.append(prompts[b] + completions[b][:t])
                comp.append([first] + follow)
                nxt.append(follow)
            if own_probs is not None:
                own.append(mean_ll(own_probs[b, t + 1:], follow) if follow else 0.0)
        probs, _ = teacher_forced(lm, pre, comp, 1.0)
        lls = [mean_ll(probs[i, 1:], follow) if follow else 0.0 for i, follow in enumerate(nxt)]
        if own_probs is None:
            own, lls = lls[0::2], lls[1::2]
        harm[s:s + len(chunk)] = torch.tensor(own) - torch.tensor(lls)
    return harm


def concat_mined(out: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The per-batch lists mining accumulates (and its checkpoint holds), as one tensor per field."""
    return {k: torch.cat(v) if v else torch.zeros(0) for k, v in out.items()}


def merge_mined(parts: list[dict]) -> dict:
    """Shards' mined mismatches as one result: their fields concatenated in shard order, their counts summed."""
    data = concat_mined({k: [d[k] for d in parts] for k in parts[0] if k not in ("stats", "signature")})
    data["stats"] = {k: sum(d["stats"][k] for d in parts) for k in parts[0]["stats"]}
    return data


def check_mined_with(path: Path, old: dict | None, new: dict | None) -> None:
    """Refuse mined mismatches (whole or a checkpoint) whose settings signature differs from this run's."""
    if old == new:
        return
    old, new = old or {}, new or {}
    diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    raise ValueError(f"{path} was mined with other settings ({', '.join(diff)} differ: "
                     f"{ {k: old.get(k) for k in diff} } vs now { {k: new.get(k) for k in diff} }); "
                     "use another run directory, or move that file away to mine again")


def mine(models, prompts, refs, *, task, reward_opts, per_prompt: int, gamma: int, max_new_tokens: int,
         temperature: float, batch_size: int, seed: int, progress: bool = True, label: str = "reward",
         selfjudge: dict | None = None, checkpoint: Path | None = None,
         signature: dict | None = None, first_index: int = 0) -> dict[str, torch.Tensor]:
    """Mismatch examples: head inputs (h_q, h_p, feats), label important (1) / not (0), TV(p, q), and the gap that
    made the label. label="reward" (AutoJudge): the swap's change of task reward, important iff it is not 0.
    label="selfjudge": `selfjudge_harm` (nats/token), important iff it exceeds selfjudge["threshold"]; no forks
    are decoded and no reward is computed.

    checkpoint: a file the mined batches are saved to after each batch (with `signature`, the settings they were
    mined with), and continued from when it exists: mining a real pair on CPU takes hours, longer than a session.
    A checkpoint of other settings is refused. The caller removes it once the whole result is saved.

    first_index: the index of prompts[0] among all the mined prompts, when these are one shard of them: the
    mismatches' prompt ids and the forks' seeds are then global, and the positions are drawn with seed + first_index
    (0: the unsharded run's draw)."""
    if label not in ("reward", "selfjudge"):
        raise ValueError(f"mine.label must be 'reward' (AutoJudge) or 'selfjudge', got {label!r}")
    sj = {"window": 20, "threshold": 0.5, **(selfjudge or {})}
    from data.tasks import chat_stop_for, stop_on_match, stops_for
    from rewards import score
    from specdec.generate import generate
    from specdec.proposers import DraftModelProposer
    from specdec.targets import ExactRule, pair_features, total_variation
    from train.forks import run_forks
    from train.rollout import cut_at_stop

    rng = random.Random(seed + first_index)
    eos = models.tokenizer.eos_token_id
    # chat models: rows end at the task's chat stop, as evaluation and the trainer end them (mismatches after it
    # are never decoded there, and the texts scored must be the ones evaluation scores)
    chat = chat_stop_for(task, models.tokenizer)
    stops = stops_for(task, models.tokenizer)
    cut = functools.partial(cut_at_stop, chat_stop=chat)
    out: dict[str, list[torch.Tensor]] = {k: [] for k in ("h_q", "h_p", "feats", "label", "tv", "gap", "prompt",
                                                                 "position")}
    stats = {"positions": 0, "mismatches": 0, "forks": 0, "decoded_tokens": 0, "greedy_tokens": 0, "seconds": 0.0}
    first = 0
    if checkpoint is not None and Path(checkpoint).exists():
        state = torch.load(checkpoint, weights_only=False)
        check_mined_with(checkpoint, state.get("signature"), signature)
        out, stats, first = state["out"], state["stats"], int(state["next"])
        rng.setstate(state["rng"])
        log.info(f"[autojudge] continuing {checkpoint}: {first} of {len(prompts)} prompts mined")
    bar = tqdm(total=len(prompts), initial=min(first, len(prompts)), desc="mine", unit="prompt",
               disable=not progress)
    for start in range(first, len(prompts), batch_size):
        t_batch = time.perf_counter()
        P, R = prompts[start:start + batch_size], refs[start:start + batch_size]
        gen = generate(models.target, DraftModelProposer(models.draft), P, rule=ExactRule(), gamma=gamma,
                       max_new_tokens=max_new_tokens, temperature=0.0, eos_token_id=eos,
                       stop=stop_on_match(chat, models.tokenizer))
        comps = []
        for toks in gen.tokens:  # keep the completion up to its stop string: tokens after it are never scored
            _, keep = cut(models.tokenizer, toks, stops)
            comps.append(toks[:keep] or toks[:1])
        greedy = sum(len(t) for t in gen.tokens)  # the target's greedy paths (forks are counted below)
        stats["decoded_tokens"] += greedy
        stats["greedy_tokens"] += greedy
        # the draft first: its greedy tokens pick the mismatches, and of each model's [B, T, V] probs only the
        # picked positions are kept, so one model's are alive at a time (on the real pair a batch of 8 320-token
        # answers holds 1.6 GB of them per model; holding both through the forks OOM-killed one of two mining
        # shards on 24 GB)
        q, h_q = teacher_forced(models.draft, P, comps, temperature)
        # mismatches along the target's greedy path: the draft's greedy token differs from the target's
        positions, x_minus = [], []
        for b, c in enumerate(comps):
            draft_tok = q[b, : len(c)].argmax(-1).tolist()
            cand = [t for t in range(len(c)) if draft_tok[t] != c[t]]
            stats["positions"] += len(c)
            stats["mismatches"] += len(cand)
            for t in sorted(rng.sample(cand, min(per_prompt, len(cand)))):
                positions.append((b, t))
                x_minus.append(draft_tok[t])
        if positions:
            rows = torch.tensor([b for b, _ in positions])
            ts = torch.tensor([t for _, t in positions])
            q_at, hq_at = q[rows, ts], h_q[rows, ts]
            del q, h_q
            p, h_p = teacher_forced(models.target, P, comps, temperature)
            p_at, hp_at = p[rows, ts], h_p[rows, ts]
            # SelfJudge reads the own-token branch from the target's T = 1 probs along the whole completions
            own_probs = p if label == "selfjudge" and temperature == 1.0 else None
            del p, h_p
            # mined data lives on the CPU (the judge is fitted there), whatever the models' device
            tv = total_variation(p_at, q_at).float().cpu()
            x_plus = torch.tensor([comps[b][t] for b, t in positions])

            def score_fn(texts, rws, R=R):
                return score(task.name, texts, [R[r] for r in rws], **reward_opts).scores

            if label == "selfjudge":
                gap = selfjudge_harm(models.target, P, comps, positions, x_minus, int(sj["window"]), batch_size,
                                     own_probs=own_probs)
                important = (gap > float(sj["threshold"])).float()
            else:
                f = run_forks(models, ExactRule(), P, comps, positions, score_fn=score_fn, lam=0.0, gamma=gamma,
                              max_new_tokens=max_new_tokens, temperature=temperature, stops=stops,
                              seed=seed + first_index + start, cut_at_stop=cut, continuation="greedy_target",
                              fork_tokens=(x_plus, torch.tensor(x_minus), tv))
                gap = f.g_plus - f.g_minus
                important = (gap != 0).float()
                stats["decoded_tokens"] += f.decoded_tokens
            del own_probs
            out["h_q"].append(hq_at.float().cpu())
            out["h_p"].append(hp_at.float().cpu())
            out["feats"].append(pair_features(p_at, q_at).float().cpu())
            out["label"].append(important)
            out["tv"].append(tv)
            out["gap"].append(gap)
            out["prompt"].append(torch.tensor([first_index + start + b for b, _ in positions]))  # fit splits by it
            out["position"].append(ts)
            stats["forks"] += len(positions)
        stats["seconds"] += time.perf_counter() - t_batch
        if checkpoint is not None:
            atomic_torch_save({"out": out, "stats": stats, "next": start + batch_size, "rng": rng.getstate(),
                               "signature": signature}, checkpoint)
        bar.update(len(P))
        bar.set_postfix(mined=stats["forks"], important=int(sum(x.sum() for x in out["label"])), refresh=False)
    bar.close()
    data = concat_mined(out)
    data["stats"] = stats
    return data


def fit(head, data: dict, *, steps: int, lr: float, holdout: float, recall: float, seed: int) -> dict:
    """Class-weighted logistic regression of `important` on the head's inputs. A `holdout` share of the prompts
    (their mismatches together: one prompt's mismatches are alike) is kept out of the fit and split in two: tau is
    set on the calibration half (the largest keeping `recall` of its important mismatches flagged), and the
    heldout_* figures are measured on the other half, so they are not the calibration target."""
    n = len(data["label"])
    if n < 10:
        raise ValueError(f"only {n} mismatches were mined: mine more prompts (mine.prompts) before fitting a judge")
    g = torch.Generator().manual_seed(seed)
    prompt = data.get("prompt")
    if prompt is None or len(prompt) != n:  # mined by an older version: every mismatch its own group
        prompt = torch.arange(n)
    groups = torch.unique(prompt)
    groups = groups[torch.randperm(len(groups), generator=g)]
    n_val = min(max(2, int(round(holdout * len(groups)))), len(groups) - 1)
    cal_groups, rep_groups = groups[: (n_val + 1) // 2], groups[(n_val + 1) // 2: n_val]
    cal = torch.nonzero(torch.isin(prompt, cal_groups)).flatten()
    rep = torch.nonzero(torch.isin(prompt, rep_groups)).flatten()
    tr = torch.nonzero(~torch.isin(prompt, groups[:n_val])).flatten()
    y = data["label"]
    pos = float(y[tr].sum())
    pos_weight = torch.tensor((len(tr) - pos) / max(pos, 1.0))
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    head.train()
    for _ in tqdm(range(steps), desc="fit", leave=False):
        logits = head.logits(data["h_q"][tr], data["h_p"][tr], data["feats"][tr])
        loss = F.binary_cross_entropy_with_logits(logits, y[tr], pos_weight=pos_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.eval()
    with torch.no_grad():
        prob = head(data["h_q"], data["h_p"], data["feats"])
    imp_cal = y[cal] > 0
    if imp_cal.any():  # largest tau flagging at least `recall` of the important calibration mismatches
        s = torch.sort(prob[cal][imp_cal], descending=True).values
        k = max(1, int(np.ceil(recall * len(s))))
        tau = float(s[k - 1])
    else:
        tau = 1.0

    def rates(idx: torch.Tensor) -> tuple[float | None, float | None, float | None]:
        # None (not NaN: the report is strict JSON) where a split holds no (important) mismatch
        if len(idx) == 0:
            return None, None, None
        flagged, imp = prob[idx] >= tau, y[idx] > 0
        return (float(flagged[imp].float().mean()) if imp.any() else None, float(flagged.float().mean()),
                float((flagged == imp).float().mean()))

    cal_recall = rates(cal)[0]
    recall_rep, flagged_rep, acc_rep = rates(rep)
    return {
        "threshold": tau, "train": int(len(tr)), "calibration": int(len(cal)), "heldout": int(len(rep)),
        "prompts": {"train": int(len(groups) - n_val), "calibration": int(len(cal_groups)),
                    "heldout": int(len(rep_groups))},
        "important_share": float(y.mean()), "calibration_recall": cal_recall,
        "heldout_recall": recall_rep, "heldout_flagged": flagged_rep, "heldout_accuracy": acc_rep,
        "final_loss": float(loss.detach()),
    }


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="autojudge")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
    from data.loaders import load_examples
    from data.tasks import chat_stop_for, get_task
    from heads import EnsembleHead, HeadConfig, export_head, tokenizer_hash
    from specdec.loading import Models
    from specdec.models import encode_prompt
    from specdec.targets import PAIR_FEATURES

    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.out_dir or HydraConfig.get().runtime.output_dir)
    task = get_task(cfg.task.name)
    models = Models({**OmegaConf.to_container(cfg.model, resolve=True), "device": cfg.device, "dtype": cfg.dtype})
    tok = models.tokenizer
    ex = load_examples(cfg.task.name, path=cfg.data.path, source=cfg.data.source, split=cfg.data.split,
                       n=cfg.mine.prompts, seed=cfg.seed, holdout=cfg.data.get("holdout"))
    prompts = [encode_prompt(tok, task.format_prompt(r, tokenizer=tok)) for r in ex.rows]
    refs = [task.reference(r) for r in ex.rows]
    opts = cfg.task.get("reward_opts")
    # mining is the expensive part (hours on a real pair on CPU): saved before fitting, reused when present
    mined = run_dir / "mined.pt"
    chat = chat_stop_for(task, tok)
    signature = {"task": task.name, "data": ex.source, "models": models.names(), "seed": int(cfg.seed),
                 "model_fingerprints": models.fingerprints(("target", "draft")),
                 "chat_stop": chat.pattern if chat is not None else None,
                 "temperature": float(cfg.temperature),
                 # which shard a process mines is not a setting of the result (the merge checks each shard's)
                 "mine": {k: v for k, v in OmegaConf.to_container(cfg.mine, resolve=True).items() if k != "shard"}}
    n_shards = int(cfg.mine.get("shards") or 1)
    only = None if cfg.mine.get("shard") is None else int(cfg.mine.shard)
    if only is not None and not 0 <= only < n_shards:
        raise ValueError(f"mine.shard={only} is not one of the {n_shards} shards (0 .. {n_shards - 1})")
    if only is not None and mined.exists():
        log.info(f"[autojudge] {mined} is already merged: shard {only} has nothing to mine")
        return
    if mined.exists():
        data = torch.load(mined, weights_only=False)
        old = data.get("signature")
        if old is None:
            log.warning(f"[autojudge] {mined} carries no signature (mined by an older version): reusing it as is")
        else:
            check_mined_with(mined, old, signature)
        t_mine = float(data["stats"].get("seconds", 0.0))
        log.info(f"[autojudge] reusing {mined} ({len(data['label'])} mismatches)")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        mine_kw = dict(task=task, reward_opts=OmegaConf.to_container(opts) if opts else {},
                       per_prompt=int(cfg.mine.per_prompt), gamma=int(cfg.mine.gamma),
                       max_new_tokens=int(cfg.mine.max_new_tokens or cfg.task.max_new_tokens),
                       temperature=float(cfg.temperature), batch_size=int(cfg.mine.batch_size), seed=int(cfg.seed),
                       label=str(cfg.mine.get("label", "reward")),
                       selfjudge=OmegaConf.to_container(cfg.mine.selfjudge) if cfg.mine.get("selfjudge") else None)
        parts = []
        # shards: contiguous parts of the prompts, each mined by its own process (`mine.shard=k`, one per core) and
        # saved apart; the run without mine.shard merges them (mining any that is missing itself), then fits
        for k in range(n_shards) if only is None else [only]:
            lo, hi = k * len(prompts) // n_shards, (k + 1) * len(prompts) // n_shards
            name = "mined" if n_shards == 1 else f"mined.shard{k}of{n_shards}"
            sig_k = signature if n_shards == 1 else {**signature, "shard": [k, n_shards]}
            part = run_dir / f"{name}.pt"
            if n_shards > 1 and part.exists():
                d = torch.load(part, weights_only=False)
                check_mined_with(part, d.get("signature"), sig_k)
                log.info(f"[autojudge] shard {k} of {n_shards}: reusing {part}")
            else:
                d = mine(models, prompts[lo:hi], refs[lo:hi], **mine_kw, checkpoint=run_dir / f"{name}.partial.pt",
                         signature=sig_k, first_index=lo)
                if n_shards > 1:
                    d["signature"] = sig_k
                    atomic_torch_save(d, part)
                    (run_dir / f"{name}.partial.pt").unlink(missing_ok=True)
            parts.append(d)
        if only is not None:
            log.info(f"[autojudge] shard {only} of {n_shards} mined; run without mine.shard to merge and fit")
            return
        data = parts[0] if n_shards == 1 else merge_mined(parts)
        t_mine = float(data["stats"]["seconds"])  # summed over every run that mined a part
        data["signature"] = signature
        atomic_torch_save(data, mined)
        (run_dir / "mined.partial.pt").unlink(missing_ok=True)
    n, gap = len(data["label"]), data["gap"]
    summary = {**data["stats"], "mined": n, "important_share": float(data["label"].mean()) if n else None,
               "gap_plus": int((gap > 0).sum()) if n else 0, "gap_minus": int((gap < 0).sum()) if n else 0,
               "mean_tv": float(data["tv"].mean()) if n else None, "data": ex.label}
    (run_dir / "mining.json").write_text(json.dumps(summary, indent=2))
    log.info(f"[autojudge] mining: {json.dumps(summary)}")
    hcfg = HeadConfig(hidden_q=models.draft.hidden_size, hidden_p=models.target.hidden_size,
                      num_features=len(PAIR_FEATURES) if cfg.head.features else 0, arch=cfg.head.arch,
                      mlp_hidden=cfg.head.mlp_hidden, use_hidden=cfg.head.use_hidden, normalize=cfg.head.normalize,
                      hidden_scale=str(cfg.head.get("hidden_scale", "unit")), init_w=0.5)
    head = EnsembleHead(hcfg)
    report = fit(head, data, steps=int(cfg.fit.steps), lr=float(cfg.fit.lr), holdout=float(cfg.fit.holdout),
                 recall=float(cfg.fit.recall), seed=int(cfg.seed))
    report.update({"mining": data["stats"], "seconds_mining": t_mine, "data": ex.label,
                   "label": str(cfg.mine.get("label", "reward"))})
    meta = {
        "method": "autojudge", "threshold": report["threshold"], "autojudge": report,
        "models": {k: Path(v).name if Path(v).exists() else v for k, v in models.names().items()},
        "tokenizer_hash": tokenizer_hash(tok), "model_fingerprints": models.fingerprints(("target", "draft")),
        "target": {"kind": "ensemble"}, "task": cfg.task.name,
        "data": ex.label, "training": OmegaConf.to_container(cfg, resolve=True),
    }
    export = run_dir / "head"
    export_head(head, export, meta)
    (run_dir / "autojudge.json").write_text(json.dumps(report, indent=2))
    rec = report["heldout_recall"]
    log.info(f"[autojudge] mined {data['stats']['forks']} mismatches ({report['important_share']:.1%} important) from "
          f"{len(prompts)} prompts in {t_mine:.0f}s; threshold {report['threshold']:.3f} keeps "
          + (f"{rec:.1%} of held-out important ones" if rec is not None else
             "- (no important mismatch among the held-out ones: tau = 1 accepts every mismatch; mine more prompts)")
          + f", flags {report['heldout_flagged']:.1%}")
    log.info(f"[autojudge] exported head: {export}")


if __name__ == "__main__":
    main()
