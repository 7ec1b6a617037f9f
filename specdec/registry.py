"""The method registry: every decoding method is a proposer + a verification rule + a draft length.

`METHODS[name](models, cfg) -> MethodSpec`, or `build_method(name, models, cfg)`. `models` is a
`specdec.loading.Models` trio; `cfg` holds the method settings under cfg.method (name, gamma, proposer, w,
lenience, threshold, ...), the head path under cfg.head_path and the contrastive settings under cfg.alpha /
cfg.beta (the eval config has this shape; `method_config(name, **options)` builds one from keyword options).
Evaluation (eval/run.py), training, the API (`specdec.SpeculativeGenerator`), `specdec.hf` and the CLI all build
their methods here; new methods join with the `register(name)` decorator.

Methods: ar_target, ar_draft, sd, static (w), lossy (lenience), cascade (threshold, bonus), fsd (Fuzzy SD: threshold,
divergence, bonus), typical (Medusa's typical acceptance: epsilon, delta), fly (FLy: entropy_threshold, window),
diversed (a trained head),
autojudge (a judge head), and the contrastive methods, which verify against π_CD (α = cfg.alpha, β = cfg.beta):

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

Every contrastive method is lossless with respect to π_CD, so they differ only in speed; `contrastive_metrics`
(each contrastive spec's `extra_metrics`) puts the latency decomposition next to the measured speed: t_e (proposer
step), t_p (expert pass), t_q (amateur pass) and the throughput model (L+1)/(γ·t_e + t_p + t_q).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from specdec.cos import cos_generate
from specdec.head import check_head_models, check_head_tokenizer, load_head
from specdec.loading import Models
from specdec.models import LM
from specdec.proposers import DraftModelProposer, FeatureDrafter, NgramProposer, Proposer
from specdec.targets import (
    CascadeRule,
    ContrastiveRule,
    ExactRule,
    FlyRule,
    FuzzyRule,
    HeadEnsembleRule,
    LossyRule,
    Rule,
    StaticEnsembleRule,
    TypicalRule,
)


@dataclass
class MethodSpec:
    proposer: Proposer | None
    rule: Rule
    gamma: int
    amateur: LM | None = None
    target: LM | None = None  # None: the trio's target (ar_draft decodes with the draft as its own target)
    label: str = ""  # short display name, e.g. "static(w=0.30)"
    params: dict[str, Any] = field(default_factory=dict)  # what metrics.json records about the method
    head_meta: dict | None = None  # config.json of the head, for heads
    # Hooks for methods with their own decoding loop or metrics (the contrastive methods below):
    generate_fn: Callable[..., Any] | None = None  # specdec.generate.generate's signature; None: the engine's
    extra_metrics: Callable[[list[dict], list[dict]], dict] | None = None  # (samples, batches) -> more metrics


MethodBuilder = Callable[[Models, DictConfig], MethodSpec]
METHODS: dict[str, MethodBuilder] = {}


def register(name: str) -> Callable[[MethodBuilder], MethodBuilder]:
    """Decorator: add a method builder to METHODS under `name`."""

    def deco(fn: MethodBuilder) -> MethodBuilder:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        METHODS[name] = fn
        return fn

    return deco


def build_method(name: str, models: Models, cfg: DictConfig) -> MethodSpec:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}")
    spec = METHODS[name](models, cfg)
    spec.label = spec.label or name
    return spec


# Friendly names for registry keys (the API, the CLI and specdec.hf accept both).
ALIASES = {"exact": "sd", "head": "diversed", "ar": "ar_target", "target": "ar_target"}


def method_config(name: str, *, head: str | Path | None = None, alpha: float = 0.5, beta: float = 0.1,
                  **method: Any) -> DictConfig:
    """The `cfg` a builder reads, from keyword options: method_config("static", w=0.7, gamma=4) is the eval config's
    {method: {name: static, w: 0.7, gamma: 4}, head_path: None, alpha: 0.5, beta: 0.1}. Options a method does not
    read are ignored by it, as in the eval config."""
    return OmegaConf.create({"method": {"name": ALIASES.get(name, name), **method},
                             "head_path": None if head is None else str(head), "alpha": alpha, "beta": beta})


def _m(cfg: DictConfig, key: str, default: Any = None) -> Any:
    return cfg.method.get(key, default)


def _gamma(cfg: DictConfig) -> int:
    g = int(_m(cfg, "gamma", 4))
    if g < 1:
        raise ValueError(f"method {cfg.method.name!r} drafts tokens: method.gamma must be >= 1, got {g}")
    return g


def make_proposer(models: Models, cfg: DictConfig) -> tuple[Proposer, str]:
    """The proposer named by method.proposer: 'draft' (the draft model), 'ngram' (prompt lookup) or 'feature'
    (an EAGLE-style feature drafter trained by train/drafter.py for this target: method.drafter=PATH)."""
    kind = _m(cfg, "proposer", "draft")
    if kind == "draft":
        return DraftModelProposer(models.draft), "draft"
    if kind == "ngram":
        ng = NgramProposer(models.target.vocab_size, max_ngram=int(_m(cfg, "max_ngram", 12)),
                           min_ngram=int(_m(cfg, "min_ngram", 1)), device=models.target.device)
        return ng, "ngram"
    if kind == "feature":
        path = _m(cfg, "drafter")
        if not path:
            raise ValueError("method.proposer=feature needs a trained drafter: method.drafter=PATH (the drafter/ "
                             "directory exported by `python train/drafter.py model=... task=...`)")
        return FeatureDrafter.load(path, models.target, tokenizer=models.tokenizer), "feature"
    raise ValueError(f"method.proposer must be 'draft', 'ngram' or 'feature', got {kind!r}")


def _sd_like(models: Models, cfg: DictConfig, rule: Rule, label: str, params: dict) -> MethodSpec:
    proposer, kind = make_proposer(models, cfg)
    g = _gamma(cfg)
    if kind != "draft":
        label += f"[{kind}]"
    return MethodSpec(proposer, rule, g, label=label, params={"proposer": kind, **params})


@register("ar_target")
def _ar_target(models: Models, cfg: DictConfig) -> MethodSpec:
    return MethodSpec(None, ExactRule(), 0, label="ar_target")


@register("ar_draft")
def _ar_draft(models: Models, cfg: DictConfig) -> MethodSpec:
    return MethodSpec(None, ExactRule(), 0, target=models.draft, label="ar_draft")


@register("sd")
def _sd(models: Models, cfg: DictConfig) -> MethodSpec:
    return _sd_like(models, cfg, ExactRule(), "sd", {})


def w_str(w: float) -> str:
    """0.5 -> '0.50', 0.975 -> '0.975': two decimals unless more are needed."""
    return f"{w:.2f}" if round(w, 2) == w else f"{w:g}"


@register("static")
def _static(models: Models, cfg: DictConfig) -> MethodSpec:
    w = float(_m(cfg, "w", 0.5))
    return _sd_like(models, cfg, StaticEnsembleRule(w), f"static(w={w_str(w)})", {"w": w})


@register("lossy")
def _lossy(models: Models, cfg: DictConfig) -> MethodSpec:
    lenience = float(_m(cfg, "lenience", 0.5))
    return _sd_like(models, cfg, LossyRule(lenience), f"lossy(l={lenience:g})", {"lenience": lenience})


@register("cascade")
def _cascade(models: Models, cfg: DictConfig) -> MethodSpec:
    t, bonus = float(_m(cfg, "threshold", 0.1)), str(_m(cfg, "bonus", "nu"))
    label = f"cascade(t={t:g}{', p' if bonus == 'p' else ''})"
    return _sd_like(models, cfg, CascadeRule(t, bonus), label, {"threshold": t, "bonus": bonus})


@register("fsd")
def _fsd(models: Models, cfg: DictConfig) -> MethodSpec:
    t, div, bonus = float(_m(cfg, "threshold", 0.5)), str(_m(cfg, "divergence", "kl")), str(_m(cfg, "bonus", "p"))
    label = f"fsd({div}<={t:g}{', nu' if bonus == 'nu' else ''})"
    return _sd_like(models, cfg, FuzzyRule(t, div, bonus), label, {"threshold": t, "divergence": div, "bonus": bonus})


@register("typical")
def _typical(models: Models, cfg: DictConfig) -> MethodSpec:
    eps, bonus = float(_m(cfg, "epsilon", 0.3)), str(_m(cfg, "bonus", "p"))
    delta = _m(cfg, "delta", None)
    rule = TypicalRule(eps, None if delta is None else float(delta), bonus)
    label = f"typical(eps={eps:g}{', nu' if bonus == 'nu' else ''})"
    return _sd_like(models, cfg, rule, label, {"epsilon": eps, "delta": rule.delta, "bonus": bonus})


@register("fly")
def _fly(models: Models, cfg: DictConfig) -> MethodSpec:
    h, win = float(_m(cfg, "entropy_threshold", 0.3)), int(_m(cfg, "window", 2))
    return _sd_like(models, cfg, FlyRule(h, win), f"fly(H>={h:g},W={win})", {"entropy_threshold": h, "window": win})


def head_label(path: str | Path, meta: dict) -> str:
    """Short name of a head: its lambda (then its advantage estimator unless the default, returns, and `feat` for a
    features-only head) when the export records them, else its directory name. Two heads must not share a label:
    it names the run directory that resume=true would take as already done."""
    lam = head_lambda(meta)
    if lam is None:
        return Path(path).name
    adv = meta.get("advantage")
    parts = [f"λ={lam:g}"] + ([adv] if adv and adv != "returns" else [])
    return ",".join(parts + (["feat"] if head_features_only(meta) else []))


def head_features_only(meta: dict) -> bool:
    """Whether an exported head reads only the pair features (its config.json's arch says use_hidden: false)."""
    arch = meta.get("arch")
    return isinstance(arch, dict) and arch.get("use_hidden") is False


def _find(meta: dict, key: str) -> Any:
    """meta[key], or meta[section][key] for the sections the training export writes."""
    if key in meta:
        return meta[key]
    for sec in ("training", "train", "config", "cfg"):
        sub = meta.get(sec)
        if isinstance(sub, dict):
            if key in sub:
                return sub[key]
            task = sub.get("task")
            if key == "task" and isinstance(task, dict):
                return task.get("name")
    return None


def head_lambda(meta: dict) -> float | None:
    lam = _find(meta, "lambda")
    try:
        return float(lam) if lam is not None else None
    except (TypeError, ValueError):
        return None


def head_task(meta: dict) -> str | None:
    t = _find(meta, "task")
    if isinstance(t, dict):
        t = t.get("name")
    return str(t) if t is not None else None


def head_rule(head: Callable, target: Any = None) -> HeadEnsembleRule:
    """The rule of an ensemble head: w·p + (1-w)·q over the target p, or over π_CD when the head was trained against
    it (target kind contrastive, with its alpha / beta), truncated to the base's typical set when the head was
    trained with target.typical_epsilon > 0 (HeadEnsembleRule). `target` is an export's `target` entry or the training
    config's (`train.rollout.make_rule` checks the kind first); training rollouts and method `diversed` both build
    their rule here."""
    target = target or {}
    typical = {"typical_epsilon": float(target.get("typical_epsilon") or 0.0),  # truncation to the typical set (0: none)
               "typical_end": str(target.get("typical_end") or "relaxed"),
               "relaxed_epsilon": float(target.get("relaxed_epsilon") or 0.0)}
    if target.get("kind") == "contrastive":  # a head trained over pi_CD verifies against pi_CD
        return HeadEnsembleRule(head, base=ContrastiveRule(float(target.get("alpha", 0.0)),
                                                           float(target.get("beta", 0.0))), **typical)
    return HeadEnsembleRule(head, **typical)


@register("diversed")
def _diversed(models: Models, cfg: DictConfig) -> MethodSpec:
    path = cfg.get("head_path")
    if not path:
        raise ValueError("method=diversed needs a trained head: pass head=PATH (an export/ dir with head.safetensors)")
    kind = _m(cfg, "proposer", "draft")
    if kind not in ("draft", "feature"):
        raise ValueError("the ensemble head reads the proposer's hidden states (h_q): use method.proposer=draft "
                         "or method.proposer=feature")
    target = models.target
    proposer = DraftModelProposer(models.draft) if kind == "draft" else make_proposer(models, cfg)[0]
    head, meta = load_head(path, device=target.device,
                           expect={"hidden_q": proposer.hidden_size if kind == "feature" else models.draft.hidden_size,
                                   "hidden_p": target.hidden_size})
    if models.tokenizer is not None:  # None: loaded models attached without one (specdec.hf); fingerprints below
        check_head_tokenizer(path, meta, models.tokenizer)
    check_head_models(path, meta, models.fingerprints(("target", "draft") if kind == "draft" else ("target",)))
    rule = head_rule(head, meta.get("target") if isinstance(meta.get("target"), dict) else None)
    label = f"diversed({head_label(path, meta)})" + ("[feature]" if kind == "feature" else "")
    spec = MethodSpec(proposer, rule, _gamma(cfg), label=label,
                      params={"proposer": kind, "head_lambda": head_lambda(meta)}, head_meta=meta)
    if rule.needs_amateur:
        spec.amateur = models.amateur
        spec.params["target_kind"] = "contrastive"
        check_head_models(path, meta, models.fingerprints(("amateur",)))  # it was trained against this pi_CD
    return spec


class ThresholdHead(torch.nn.Module):
    """AutoJudge's rule on a judge head: w = 1 where P(important) >= threshold (verify against p), else 0 (q)."""

    def __init__(self, head: torch.nn.Module, threshold: float):
        super().__init__()
        self.head, self.threshold = head, float(threshold)

    def forward(self, h_q: torch.Tensor, h_p: torch.Tensor, feats: torch.Tensor | None = None) -> torch.Tensor:
        return (self.head(h_q, h_p, feats) >= self.threshold).to(h_p.dtype)


@register("autojudge")
def _autojudge(models: Models, cfg: DictConfig) -> MethodSpec:
    """AutoJudge (train/autojudge.py): head=PATH of an exported judge; method.threshold overrides its own."""
    path = cfg.get("head_path")
    if not path:
        raise ValueError("method=autojudge needs a judge exported by train/autojudge.py: pass head=PATH")
    target, draft = models.target, models.draft
    head, meta = load_head(path, device=target.device,
                           expect={"hidden_q": draft.hidden_size, "hidden_p": target.hidden_size})
    if models.tokenizer is not None:  # None: loaded models attached without one (specdec.hf); fingerprints below
        check_head_tokenizer(path, meta, models.tokenizer)
    check_head_models(path, meta, models.fingerprints(("target", "draft")))
    if meta.get("method") != "autojudge":
        raise ValueError(f"{path} is not an AutoJudge export (config.json method={meta.get('method')!r}); "
                         "use method=diversed for an ensemble head")
    t = _m(cfg, "threshold")
    t = float(meta["threshold"]) if t is None else float(t)
    source = (meta.get("autojudge") or {}).get("label", "reward")  # selfjudge: SelfJudge's self-supervised labels
    name = "selfjudge" if source == "selfjudge" else "autojudge"
    return MethodSpec(DraftModelProposer(draft), HeadEnsembleRule(ThresholdHead(head, t)), _gamma(cfg),
                      label=f"{name}(t={t:.3g})", params={"proposer": "draft", "threshold": t, "label": source},
                      head_meta=meta)


# ---------------------------------------------------------------- contrastive methods (verify against π_CD)
CONTRASTIVE = ("cd", "dcd", "dcd_ngram", "scd", "cos")


def _alpha_beta(cfg: DictConfig) -> tuple[float, float]:
    alpha = float(cfg.get("alpha", 0.5))
    beta = float(cfg.get("beta", 0.0) or 0.0)
    if alpha < 0:
        raise ValueError(f"alpha (the amateur penalty) must be >= 0, got {alpha}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta (the plausibility cut-off) must be in [0, 1], got {beta}")
    return alpha, beta


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
