"""Ridge regressions of a mined swap harm on the head's inputs, shared by diagnostics/fork_gaps.py (how much of the
harm the inputs predict) and train/gate.py (a head built from that prediction): the mined file's reader, the design
matrix (the head's inputs as EnsembleHead sees them), ridge fit / predict, grouped folds and out-of-fold predictions."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

ALPHAS = (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)


def load_mined(path: Path) -> dict:
    """The mismatches train/autojudge.py mined (mined.pt, or the per-batch mined.partial.pt of a run still
    mining): the head's inputs, y = the gap that made each label, the prompt each came from (the fold groups), and
    "label", the label source (reward or selfjudge) from the mining's signature."""
    try:
        state = torch.load(path, weights_only=False)
    except Exception as e:  # a truncated or foreign file: say which, not a pickle traceback
        raise SystemExit(f"{path}: cannot be read as a train/autojudge.py mined file ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict):
        raise SystemExit(f"{path}: not a train/autojudge.py mined file (holds a {type(state).__name__})")
    if "out" in state:  # a partial checkpoint: lists of per-batch tensors
        from train.autojudge import concat_mined

        state = concat_mined(state["out"]) | {
            "signature": state.get("signature"), "stats": state.get("stats")}
    missing = [k for k in ("h_q", "h_p", "feats", "gap") if k not in state]
    if missing:
        raise SystemExit(f"{path}: not a train/autojudge.py mined file (missing {missing})")
    d = {k: state[k].double() for k in ("h_q", "h_p", "feats")} | {"y": state["gap"].double()}
    if "prompt" in state and len(state["prompt"]) == len(d["y"]):
        d["groups"] = state["prompt"].long()
    sig = state.get("signature") or {}
    d["label"] = str((sig.get("mine") or {}).get("label", "reward"))
    return d


def design(d: dict[str, torch.Tensor], inputs: str) -> torch.Tensor:
    """The regressors: the pair features, the head's whole input (layer-normed hidden blocks + features), or its
    hidden blocks alone ("hidden")."""
    if inputs == "features":
        return d["feats"]
    hidden = [F.layer_norm(d["h_q"], d["h_q"].shape[-1:]), F.layer_norm(d["h_p"], d["h_p"].shape[-1:])]
    return torch.cat(hidden if inputs == "hidden" else hidden + [d["feats"]], dim=-1)


def ridge_fit(X: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ridge on standardised columns (intercept unpenalised): returns (mean, scale, coefficients with intercept)."""
    mu, sd = X.mean(0), X.std(0).clamp_min(1e-8)
    Z = torch.cat([torch.ones(len(X), 1, dtype=X.dtype), (X - mu) / sd], dim=1)
    reg = alpha * torch.eye(Z.shape[1], dtype=X.dtype)
    reg[0, 0] = 0.0
    beta = torch.linalg.solve(Z.T @ Z + reg, Z.T @ y)
    return mu, sd, beta


def ridge_predict(model: tuple[torch.Tensor, torch.Tensor, torch.Tensor], X: torch.Tensor) -> torch.Tensor:
    mu, sd, beta = model
    return beta[0] + ((X - mu) / sd) @ beta[1:]


def folds_of(n: int, k: int, seed: int, groups: torch.Tensor | None = None) -> list[torch.Tensor]:
    """k folds of range(n); with `groups` ([n]), whole groups go to one fold each."""
    g = torch.Generator().manual_seed(seed)
    if groups is None:
        return list(torch.tensor_split(torch.randperm(n, generator=g), k))
    ids = torch.unique(groups)
    ids = ids[torch.randperm(len(ids), generator=g)]
    if len(ids) < k:
        raise SystemExit(f"{len(ids)} groups (prompts) cannot fill {k} folds: mine more prompts or pass --folds")
    return [torch.nonzero(torch.isin(groups, part)).flatten() for part in torch.tensor_split(ids, k)]


def choose_alpha(X: torch.Tensor, y: torch.Tensor, k: int, seed: int, groups: torch.Tensor | None = None) -> float:
    """The ridge strength (of ALPHAS) with the least k-fold squared error on (X, y); groups kept whole."""
    best, best_err = ALPHAS[0], math.inf
    folds = folds_of(len(y), k, seed, groups)
    for a in ALPHAS:
        err = 0.0
        for v in folds:
            m = torch.ones(len(y), dtype=torch.bool)
            m[v] = False
            err += float(((ridge_predict(ridge_fit(X[m], y[m], a), X[v]) - y[v]) ** 2).sum())
        if err < best_err:
            best, best_err = a, err
    return best


def out_of_fold(X: torch.Tensor, y: torch.Tensor, k: int, seed: int,
                groups: torch.Tensor | None = None) -> tuple[torch.Tensor, list[float]]:
    """Out-of-fold ridge predictions; the ridge strength of each outer fold is chosen by an inner k-fold split
    of its training part (never by the held-out fold). With `groups`, every split keeps a group whole."""
    pred = torch.empty_like(y)
    chosen = []
    for test in folds_of(len(y), k, seed, groups):
        train = torch.ones(len(y), dtype=torch.bool)
        train[test] = False
        Xt, yt = X[train], y[train]
        best = choose_alpha(Xt, yt, k, seed + 1, None if groups is None else groups[train])
        pred[test] = ridge_predict(ridge_fit(Xt, yt, best), X[test])
        chosen.append(best)
    return pred, chosen


def r_squared(y: torch.Tensor, pred: torch.Tensor) -> float:
    """1 − SSE / SST: out of sample, below 0 when a prediction is worse than y's mean."""
    return 1.0 - float(((y - pred) ** 2).sum()) / float(((y - y.mean()) ** 2).sum())
