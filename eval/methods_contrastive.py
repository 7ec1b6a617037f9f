"""Contrastive decoding methods for eval/run.py: cd, dcd, dcd_ngram, scd, cos (all verify against π_CD).

    python eval/run.py method=cd alpha=0.5 beta=0.1
    python eval/run.py -m method=cd,dcd,dcd_ngram,scd,cos alpha=0.0,0.1,0.3,0.5,1.0
    python bench/contrastive_speed.py --tables multirun/eval/<dir>   # speed + α-robustness tables of a sweep

  * cd        vanilla contrastive decoding: expert and amateur one token at a time (γ = 0 through the engine).
  * dcd       the draft model (expert-aligned) proposes; expert and amateur each run one parallel pass over the
              γ+1 positions; verification against π_CD (the amateur is used only in verification).
  * dcd_ngram the same with the prompt-lookup proposer (also method=dcd method.proposer=ngram).
  * dcd with method.proposer=feature method.drafter=PATH: the EAGLE-style feature drafter (train/drafter.py),
              reported as dcd_feature.
  * scd       the amateur itself drafts (its own LM wrapper, so its proposer cache is separate from the
              verification-side amateur's cache).
  * cos       Fu et al. 2025 (alternate proposals, the amateur's drafting pass doubles as its verification pass);
              see specdec/cos.py for exactly what is implemented.

α and β are the root keys `alpha` / `beta` of the eval config. Every method is lossless with respect to π_CD, so
they differ only in speed; the extra metrics below (contrastive_metrics) put the latency decomposition next to
the measured speed: t_e (proposer step), t_p (expert pass), t_q (amateur pass) and the throughput model
(L+1)/(γ·t_e + t_p + t_q).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from eval.methods import MethodSpec, Models, make_proposer, register
from specdec.cos import cos_generate
from specdec.models import LM
from specdec.proposers import DraftModelProposer, NgramProposer
from specdec.targets import ContrastiveRule

CONTRASTIVE = ("cd", "dcd", "dcd_ngram", "scd", "cos")
# Table rows: the registered methods, plus dcd with the feature drafter (method=dcd method.proposer=feature).
TABLE_ORDER = (*CONTRASTIVE, "dcd_feature")


def _alpha_beta(cfg: DictConfig) -> tuple[float, float]:
    alpha = float(cfg.get("alpha", 0.5))
    beta = float(cfg.get("beta", 0.0) or 0.0)
    if alpha < 0:
        raise ValueError(f"alpha (the amateur penalty) must be >= 0, got {alpha}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta (the plausibility cut-off) must be in [0, 1], got {beta}")
    return alpha, beta


def _gamma(cfg: DictConfig, default: int = 4) -> int:
    g = int(cfg.method.get("gamma", default))
    if g < 1:
        raise ValueError(f"method {cfg.method.name!r} drafts tokens: method.gamma must be >= 1, got {g}")
    return g


def _spec(name: str, cfg: DictConfig, proposer, gamma: int, amateur: LM, extra: dict | None = None,
          generate_fn=None) -> MethodSpec:
    alpha, beta = _alpha_beta(cfg)
    spec = MethodSpec(proposer, ContrastiveRule(alpha, beta), gamma, amateur=amateur,
                      label=f"{name}(α={alpha:g},β={beta:g})",
                      params={"alpha": alpha, "beta": beta, "contrastive": name, **(extra or {})})
    # Hooks read by eval/run.py: a method-specific decoding loop, and metrics beyond the common ones.
    spec.generate_fn = generate_fn
    spec.extra_metrics = functools.partial(contrastive_metrics, gamma=gamma)
    return spec


@register("cd")
def _cd(models: Models, cfg: DictConfig) -> MethodSpec:
    return _spec("cd", cfg, None, 0, models.amateur)


@register("dcd")
def _dcd(models: Models, cfg: DictConfig) -> MethodSpec:
    proposer, kind = make_proposer(models, cfg)
    return _spec("dcd" if kind == "draft" else f"dcd_{kind}", cfg, proposer, _gamma(cfg), models.amateur,
                 {"proposer": kind})


@register("dcd_ngram")
def _dcd_ngram(models: Models, cfg: DictConfig) -> MethodSpec:
    proposer = NgramProposer(models.target.vocab_size, max_ngram=int(cfg.method.get("max_ngram", 12)),
                             min_ngram=int(cfg.method.get("min_ngram", 1)), device=models.target.device)
    return _spec("dcd_ngram", cfg, proposer, _gamma(cfg), models.amateur, {"proposer": "ngram"})


@register("scd")
def _scd(models: Models, cfg: DictConfig) -> MethodSpec:
    amateur = models.amateur
    # A second wrapper over the same weights: the drafting cache must not be the verification-side cache.
    proposer = DraftModelProposer(LM(amateur.model, name="amateur_proposer"))
    return _spec("scd", cfg, proposer, _gamma(cfg), amateur, {"proposer": "amateur"})


def cos_generate_fn(target: LM, proposer, prompts, *, rule: ContrastiveRule, gamma: int, max_new_tokens: int,
                    temperature: float, eos_token_id=None, amateur: LM | None = None, generator=None, stop=None,
                    **_: Any):
    """`specdec.generate.generate`'s signature, decoding with CoS (the proposer argument is unused)."""
    if amateur is None:
        raise ValueError("cos needs the amateur model")
    return cos_generate(target, amateur, prompts, alpha=rule.alpha, beta=rule.beta, gamma=gamma,
                        max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=eos_token_id,
                        generator=generator, stop=stop)


@register("cos")
def _cos(models: Models, cfg: DictConfig) -> MethodSpec:
    return _spec("cos", cfg, None, _gamma(cfg), models.amateur, {"proposer": "amateur"},
                 generate_fn=cos_generate_fn)


# ---------------------------------------------------------------- metrics
def _ms(total_s: float, calls: int) -> float | None:
    return 1000.0 * total_s / calls if calls else None


def contrastive_metrics(samples: list[dict], batches: list[dict], gamma: int) -> dict[str, Any]:
    """Latency decomposition and throughput model from a run's samples.jsonl / batches.jsonl records.

    t_e = proposer seconds per proposer call, t_p = expert seconds per expert call, t_q = amateur seconds per
    expert call (the verification-side amateur runs once per round; 0 for cos, whose drafting pass is the amateur
    pass). L = accepted drafts per round. The model (L+1)/(γ·t_e + t_p + t_q) is per sequence; it is multiplied
    by the mean number of rows decoded per round (the batch) to compare with the measured tokens/s. Python
    overhead and verification are outside the model, so measured/model < 1 is expected.
    """
    tp = sum(b.get("time_proposer", 0.0) for b in batches)
    tt = sum(b.get("time_target", 0.0) for b in batches)
    ta = sum(b.get("time_amateur", 0.0) for b in batches)
    npc = sum(b.get("proposer_calls", 0) for b in batches)
    ntc = sum(b.get("target_calls", 0) for b in batches)
    wall = sum(b.get("wall_s", 0.0) for b in batches)
    new_tokens = sum(b.get("new_tokens", 0) for b in batches)
    row_rounds = sum(len(s.get("accepted", [])) for s in samples)
    accepted = sum(sum(s.get("accepted", [])) for s in samples)
    t_e = _ms(tp, npc) or 0.0
    t_p = _ms(tt, ntc)
    t_q = _ms(ta, ntc) or 0.0
    L = accepted / row_rounds if row_rounds else None
    rows_per_round = row_rounds / ntc if ntc else None
    model = None
    if t_p and L is not None and rows_per_round:
        model = 1000.0 * (L + 1.0) / (gamma * t_e + t_p + t_q) * rows_per_round
    measured = new_tokens / wall if wall > 0 else None
    return {
        "t_e_ms": t_e,
        "t_p_ms": t_p,
        "t_q_ms": t_q,
        "proposer_calls_per_round": npc / ntc if ntc else None,
        "tokens_per_second_total": measured,
        "throughput_model_tps": model,
        "measured_over_model": measured / model if (measured and model) else None,
    }


# ---------------------------------------------------------------- tables over a sweep
def _fmt(v: Any, f: str = "{:.2f}") -> str:
    return "-" if v is None else f.format(v)


def speed_table(rows: list[dict]) -> str:
    """Speed over vanilla CD (same α, β, temperature, task), latency decomposition and throughput model."""
    base = {(r["task"], r["temperature"], r["params"]["alpha"], r["params"]["beta"]): r
            for r in rows if r["params"].get("contrastive") == "cd"}
    out = ["| task | T | α | method | L | tok/s | × CD | t_e ms | t_p ms | t_q ms | model tok/s | meas/model |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["task"], r["temperature"], r["params"]["alpha"],
                                          TABLE_ORDER.index(r["params"].get("contrastive", "cd")))):
        p = r["params"]
        cd = base.get((r["task"], r["temperature"], p["alpha"], p["beta"]))
        tps, cd_tps = r.get("tokens_per_second"), (cd or {}).get("tokens_per_second")
        ratio = tps / cd_tps if (tps and cd_tps) else None
        out.append(f"| {r['task']} | {r['temperature']:g} | {p['alpha']:g} | {p.get('contrastive')} | "
                   f"{_fmt(r.get('mean_accepted_length'))} | {_fmt(tps, '{:.1f}')} | {_fmt(ratio)} | "
                   f"{_fmt(r.get('t_e_ms'))} | {_fmt(r.get('t_p_ms'))} | {_fmt(r.get('t_q_ms'))} | "
                   f"{_fmt(r.get('throughput_model_tps'), '{:.1f}')} | {_fmt(r.get('measured_over_model'))} |")
    return "\n".join(out)


def alpha_robustness(rows: list[dict]) -> str:
    """L at α normalised to L at α = 0, per method (and task, temperature): how much CD's correction costs in
    acceptance. cd itself drafts nothing and is left out."""
    groups: dict[tuple, dict[float, float]] = {}
    for r in rows:
        name = r["params"].get("contrastive")
        if name in (None, "cd") or r.get("mean_accepted_length") is None:
            continue
        key = (r["task"], r["temperature"], name)
        groups.setdefault(key, {})[float(r["params"]["alpha"])] = float(r["mean_accepted_length"])
    alphas = sorted({a for g in groups.values() for a in g})
    out = ["| task | T | method | L(α=0) | " + " | ".join(f"α={a:g}" for a in alphas) + " |",
           "|---|---|---|---|" + "---|" * len(alphas)]
    for (task, temp, name), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                         TABLE_ORDER.index(kv[0][2]))):
        l0 = g.get(0.0)
        cells = [_fmt(g[a] / l0 if (a in g and l0) else None) for a in alphas]
        out.append(f"| {task} | {temp:g} | {name} | {_fmt(l0)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def load_metrics(root: str | Path) -> list[dict]:
    """Every contrastive metrics.json under a (multi)run directory."""
    rows = []
    for p in sorted(Path(root).rglob("metrics.json")):
        m = json.loads(p.read_text())
        if isinstance(m.get("params"), dict) and m["params"].get("contrastive") in TABLE_ORDER:
            rows.append(m)
    return rows
