"""The method registry: every decoding method is a proposer + a verification rule + a draft length.

`METHODS[name](models, cfg) -> MethodSpec`. `cfg` is the whole eval config (method settings under cfg.method,
the head path under cfg.head_path, contrastive settings under cfg.alpha / cfg.beta). Other modules add methods
with the `register(name)` decorator (eval/methods_contrastive.py registers cd, dcd, scd, cos).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from specdec.loading import Models  # noqa: F401 (re-export)
from specdec.models import LM
from specdec.proposers import DraftModelProposer, FeatureDrafter, NgramProposer, Proposer
from specdec.targets import (
    CascadeRule,
    ContrastiveRule,
    ExactRule,
    HeadEnsembleRule,
    LossyRule,
    Rule,
    StaticEnsembleRule,
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
    # Hooks for methods with their own decoding loop or metrics (eval/methods_contrastive.py):
    generate_fn: Callable[..., Any] | None = None  # specdec.generate.generate's signature; None: the engine's
    extra_metrics: Callable[[list[dict], list[dict]], dict] | None = None  # (samples, batches) -> more metrics


# The trio loader lives in specdec.loading (training uses it too); re-exported here for method builders.
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
    t = float(_m(cfg, "threshold", 0.1))
    return _sd_like(models, cfg, CascadeRule(t), f"cascade(t={t:g})", {"threshold": t})


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


@register("diversed")
def _diversed(models: Models, cfg: DictConfig) -> MethodSpec:
    from heads import check_head_models, check_head_tokenizer, load_head

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
    check_head_tokenizer(path, meta, models.tokenizer)
    check_head_models(path, meta, models.fingerprints(("target", "draft") if kind == "draft" else ("target",)))
    base = None
    tgt = meta.get("target") if isinstance(meta.get("target"), dict) else {}
    if tgt.get("kind") == "contrastive":  # a head trained over pi_CD verifies against pi_CD
        base = ContrastiveRule(float(tgt.get("alpha", 0.0)), float(tgt.get("beta", 0.0)))
    rule = HeadEnsembleRule(head, base=base)
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
    from heads import check_head_models, check_head_tokenizer, load_head

    path = cfg.get("head_path")
    if not path:
        raise ValueError("method=autojudge needs a judge exported by train/autojudge.py: pass head=PATH")
    target, draft = models.target, models.draft
    head, meta = load_head(path, device=target.device,
                           expect={"hidden_q": draft.hidden_size, "hidden_p": target.hidden_size})
    check_head_tokenizer(path, meta, models.tokenizer)
    check_head_models(path, meta, models.fingerprints(("target", "draft")))
    if meta.get("method") != "autojudge":
        raise ValueError(f"{path} is not an AutoJudge export (config.json method={meta.get('method')!r}); "
                         "use method=diversed for an ensemble head")
    t = _m(cfg, "threshold")
    t = float(meta["threshold"]) if t is None else float(t)
    return MethodSpec(DraftModelProposer(draft), HeadEnsembleRule(ThresholdHead(head, t)), _gamma(cfg),
                      label=f"autojudge(t={t:.3g})", params={"proposer": "draft", "threshold": t}, head_meta=meta)


# Methods registered elsewhere (optional until they land).
try:
    import eval.methods_contrastive  # noqa: E402, F401
except ImportError as e:  # only a missing module is optional; a broken one must fail loudly
    if getattr(e, "name", None) != "eval.methods_contrastive":
        raise
