"""Where the head puts its weight: mean w by the class of the draft-proposed token and by TV(p, q) decile, next to
the token-class oracle's w on the same positions.

    python diagnostics/head_report.py task=gsm8k head=runs/train/<run>/head [--n 100] [--out DIR]
    python diagnostics/head_report.py model=tiny task=gsm8k head=A/head head=B/head --n 200 seed=1
    python diagnostics/head_report.py model=qwen25coder_15b_05b task=mbpp head=H --n 16 eval.max_new_tokens=128

OVERRIDES are eval's Hydra overrides (conf/eval.yaml: model=, task=, seed=, temperature=, eval.batch_size=,
eval.max_new_tokens=, data.path=, heads=[A,B], ...); `head=PATH` (repeatable) names exported heads
(train/run.py). Each head decodes the same held-out prompts through the one engine loop
(specdec.generate.generate, record_hidden=True) with eval's `diversed` method; two thin wrappers only record what
the loop already computes: the proposer's drafted tokens and, per round, the head's w, TV(p, q) and the oracle's w
on the same scores (diagnostics/oracle_head.py's TokenClassOracleRule: w = 1 where p or q puts > --threshold mass on a
critical token, --w0 elsewhere). The w the loop records per output token is checked against the wrapper's.

Only *tested* positions count (an accepted draft, or the draft rejected at the end of a round): those have a
draft-proposed token, classified on its decoded string (token_class); bonus positions have none and are only
counted. Prints a markdown table per head; writes head_report.json and head_report.png into --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.targets import RoundScores, Rule, total_variation  # noqa: E402

CLASSES = ("digit", "operator", "word", "whitespace", "punct", "other")
OPERATORS = set("+-*/=")


# ---------------------------------------------------------------- token classes
def token_class(s: str) -> str:
    """Class of one decoded token: char-level ("7", " ", "+") and BPE (" 12", "Ġthe" decoded as " the", "\\n\\n")
    alike. Surrounding whitespace is ignored unless the token is only whitespace; digits win over any "." or ","
    inside a number ("3.5", "1,000"); words may carry ' _ - inside ("don't", "snake_case")."""
    t = s.strip()
    if not t:
        return "whitespace" if s else "other"
    if any(c.isdigit() for c in t) and all(c.isdigit() or c in ".," for c in t):
        return "digit"
    if all(c in OPERATORS for c in t):
        return "operator"
    if any(c.isalpha() for c in t) and all(c.isalpha() or c in "'_-" for c in t):
        return "word"
    if all(unicodedata.category(c)[0] in "PS" for c in t):
        return "punct"
    return "other"


def vocab_classes(tokenizer: Any, vocab_size: int) -> list[str]:
    """token_class of every id (ids the tokenizer does not know, and special tokens, are "other")."""
    n = min(len(tokenizer), vocab_size)
    texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return [("other" if i in special else token_class(t)) for i, t in enumerate(texts)] + ["other"] * (vocab_size - n)


# ---------------------------------------------------------------- the oracle
try:
    from diagnostics.oracle_head import TokenClassOracleRule, critical_mask
except ImportError as e:  # the oracle script is optional (only its absence: a broken one fails loudly)
    if getattr(e, "name", None) != "diagnostics.oracle_head":
        raise
    TokenClassOracleRule = None

    def critical_mask(tokenizer: Any, vocab_size: int, critical: str = "digits") -> torch.Tensor:
        if critical != "digits":
            raise ValueError("without diagnostics/oracle_head.py only --critical digits is available")
        n = min(len(tokenizer), vocab_size)
        texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=True)
        mask = torch.zeros(vocab_size, dtype=torch.bool)
        mask[:n] = torch.tensor([any(c.isdigit() for c in t) for t in texts])
        return mask


def oracle_w(scores: RoundScores, critical: torch.Tensor, w0: float, threshold: float = 0.05) -> torch.Tensor:
    """The token-class oracle's w [B, γ+1] on a round's scores: 1 where p or q puts more than `threshold` of its
    mass on a critical token, w0 elsewhere (diagnostics/oracle_head.py's rule when present)."""
    if TokenClassOracleRule is not None:
        return TokenClassOracleRule(critical, w0, threshold)(scores)[1]
    p, q = scores.p, scores.q.to(scores.p.dtype)
    m = critical.to(device=p.device, dtype=p.dtype)
    crit = ((p * m).sum(-1) > threshold) | ((q * m).sum(-1) > threshold)
    return torch.where(crit, torch.ones_like(p[..., 0]), torch.full_like(p[..., 0], w0))


# ---------------------------------------------------------------- recording wrappers (no second loop)
class RecordingProposer:
    """Delegates to a proposer and keeps each round's drafted tokens."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.drafts: list[torch.Tensor] = []

    def __getattr__(self, name: str) -> Any:  # lm, seconds, calls, start, commit, ...
        return getattr(self.inner, name)

    def propose(self, gamma: int, **kw: Any) -> Any:
        prop = self.inner.propose(gamma, **kw)
        self.drafts.append(prop.tokens.detach().cpu())
        return prop


class RecordingRule(Rule):
    """Delegates to a rule and keeps, per round, its w, TV(base, q) and the oracle's w on the same scores."""

    def __init__(self, inner: Rule, critical: torch.Tensor, w0: float, threshold: float):
        self.inner, self.critical, self.w0, self.threshold = inner, critical, w0, threshold
        self.needs_bonus_q, self.needs_amateur = inner.needs_bonus_q, inner.needs_amateur
        self.rounds: list[dict[str, torch.Tensor]] = []

    def base(self, scores: RoundScores) -> torch.Tensor:
        return self.inner.base(scores)

    def __call__(self, scores: RoundScores):
        nu, w = self.inner(scores)
        if w is None:
            raise ValueError("the reported rule gives no per-token w (use an ensemble head)")
        self.rounds.append({"w": w.detach().float().cpu(),
                            "tv": total_variation(self.inner.base(scores), scores.q).detach().float().cpu(),
                            "oracle": oracle_w(scores, self.critical, self.w0, self.threshold).float().cpu()})
        return nu, w


def tested_positions(out: Any, proposer: RecordingProposer, rule: RecordingRule, gamma: int) -> dict[str, list]:
    """Per tested position of every row: draft token, w, TV(p, q), oracle w; plus the w of bonus positions.

    A row's kept tokens are, round by round, its n accepted drafts and one emitted token (at draft position n:
    the rejection, or the bonus position when n = γ), cut at the row's final length (EOS, max_new_tokens)."""
    active, accepted = out.rounds["active"].cpu(), out.rounds["accepted"].cpu()
    if len(proposer.drafts) != active.shape[0] or len(rule.rounds) != active.shape[0]:
        raise RuntimeError("recorded rounds do not match the loop's rounds")
    res: dict[str, list] = {"token": [], "w": [], "tv": [], "oracle": [], "bonus_w": []}
    for b, toks in enumerate(out.tokens):
        pos, T, ws = 0, len(toks), []
        for r in range(active.shape[0]):
            if not active[r, b] or pos >= T:
                continue
            n = int(accepted[r, b])
            for k in range(min(n + 1, T - pos)):
                w = float(rule.rounds[r]["w"][b, k])
                ws.append(w)
                if k == gamma:
                    res["bonus_w"].append(w)
                    continue
                d = int(proposer.drafts[r][b, k])
                if k < n and d != toks[pos + k]:
                    raise RuntimeError(f"row {b} round {r}: accepted draft {d} is not the emitted {toks[pos + k]}")
                res["token"].append(d)
                res["w"].append(w)
                res["tv"].append(float(rule.rounds[r]["tv"][b, k]))
                res["oracle"].append(float(rule.rounds[r]["oracle"][b, k]))
            pos += n + 1
        loop_w = out.records["w"][b, :T].float().cpu()  # the loop's own per-token record: the same positions
        if len(ws) != T or not torch.allclose(loop_w, torch.tensor(ws), atol=1e-6):
            raise RuntimeError(f"row {b}: reconstructed positions disagree with the loop's records")
    return res


# ---------------------------------------------------------------- decoding
def decode_head(head_path: str, cfg: Any, models: Any, task: Any, prompts: list[list[int]], *, critical: torch.Tensor,
                w0: float, threshold: float, progress: bool = True) -> tuple[dict[str, list], dict]:
    """Decode the prompts with the head in the loop (eval's `diversed` method); tested positions + the spec's
    label and params."""
    from data.tasks import chat_stop_for, stop_on_match
    from eval.run import method_cfg
    from specdec.generate import generate
    from specdec.registry import build_method

    c = method_cfg(cfg, name="diversed", proposer="draft")
    c.head_path = str(head_path)
    spec = build_method("diversed", models, c)
    max_new = int(cfg.eval.max_new_tokens or cfg.task.get("max_new_tokens") or task.max_new_tokens)
    bs, seed = int(cfg.eval.batch_size), int(cfg.seed)
    eos = models.tokenizer.eos_token_id
    # rows end where eval/run.py ends them (a chat model's stop), so the report sees the positions eval decodes
    stop = stop_on_match(chat_stop_for(task, models.tokenizer), models.tokenizer)
    pos: dict[str, list] = {}
    from tqdm.auto import tqdm

    for i in tqdm(range(0, len(prompts), bs), desc=spec.label, disable=not progress):
        prop = RecordingProposer(spec.proposer)
        rule = RecordingRule(spec.rule, critical, w0, threshold)
        g = torch.Generator(device=models.target.device).manual_seed(seed * 1_000_003 + i)
        out = generate(models.target, prop, prompts[i:i + bs], rule=rule, gamma=spec.gamma, max_new_tokens=max_new,
                       temperature=float(cfg.temperature), eos_token_id=eos, amateur=spec.amateur, generator=g,
                       record_hidden=True, stop=stop)
        for k, v in tested_positions(out, prop, rule, spec.gamma).items():
            pos.setdefault(k, []).extend(v)
    return pos, {"label": spec.label, "params": spec.params, "head": str(head_path)}


# ---------------------------------------------------------------- summaries
def _stats(w: np.ndarray, oracle: np.ndarray, tv: np.ndarray) -> dict:
    if not w.size:
        return {"n": 0, "mean_w": None, "share_w_below_0.5": None, "oracle_w": None, "mean_tv": None}
    return {"n": int(w.size), "mean_w": float(w.mean()), "share_w_below_0.5": float((w < 0.5).mean()),
            "oracle_w": float(oracle.mean()), "mean_tv": float(tv.mean())}


def summarise(pos: dict[str, list], classes: list[str]) -> dict:
    """by_class (CLASSES order), by_tv_decile (deciles of this head's TV(p, q) over tested positions), overall."""
    w, tv, orc = (np.asarray(pos[k], dtype=np.float64) for k in ("w", "tv", "oracle"))
    cls = np.asarray([classes[t] for t in pos["token"]], dtype=object)
    by_class = [{"class": c, **_stats(w[cls == c], orc[cls == c], tv[cls == c])} for c in CLASSES]
    deciles = []
    if w.size:
        edges = np.quantile(tv, np.linspace(0, 1, 11))
        idx = np.clip(np.searchsorted(edges, tv, side="right") - 1, 0, 9)  # ties at an edge go up; max in bin 10
        for d in range(10):
            sel = idx == d
            deciles.append({"decile": d + 1, "tv_lo": float(edges[d]), "tv_hi": float(edges[d + 1]),
                            **_stats(w[sel], orc[sel], tv[sel])})
    bonus = np.asarray(pos["bonus_w"], dtype=np.float64)
    return {"overall": _stats(w, orc, tv), "by_class": by_class, "by_tv_decile": deciles,
            "bonus_positions": {"n": int(bonus.size), "mean_w": float(bonus.mean()) if bonus.size else None}}


def _f(x: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(label: str, s: dict) -> str:
    """Two tables for one head: by token class, by TV(p, q) decile."""
    head = ["| class | n | mean w | share w<0.5 | oracle w | mean TV(p,q) |", "|---|---|---|---|---|---|"]
    rows = [f"| {r['class']} | {r['n']} | {_f(r['mean_w'])} | {_f(r['share_w_below_0.5'])} | {_f(r['oracle_w'])} "
            f"| {_f(r['mean_tv'])} |" for r in [*s["by_class"], {"class": "all", **s["overall"]}]]
    dec = ["| TV decile | TV range | n | mean w | share w<0.5 | oracle w |", "|---|---|---|---|---|---|"]
    dec += [f"| {r['decile']} | [{r['tv_lo']:.3f}, {r['tv_hi']:.3f}] | {r['n']} | {_f(r['mean_w'])} "
            f"| {_f(r['share_w_below_0.5'])} | {_f(r['oracle_w'])} |" for r in s["by_tv_decile"]]
    b = s["bonus_positions"]
    return "\n".join([f"### {label}", "", "By class of the draft-proposed token:", "", *head, *rows, "",
                      "By TV(p, q) decile:", "", *dec, "",
                      f"Bonus positions (no draft token, not above): {b['n']}, mean w {_f(b['mean_w'])}.", ""])


def plot(report: dict, path: Path) -> Path:
    """Bars: mean w per token class and per TV decile, one bar per head, and the oracle's w on each head's
    positions as a black tick on that head's bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = report["heads"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, key, tick, name in ((axes[0], "by_class", "class", "class of the draft-proposed token"),
                                (axes[1], "by_tv_decile", "decile", "TV(p, q) decile")):
        width = 0.8 / max(len(heads), 1)
        for j, h in enumerate(heads):
            rows = h["summary"][key]
            x = np.arange(len(rows)) + (j - (len(heads) - 1) / 2) * width
            ys = [r["mean_w"] if r["mean_w"] is not None else np.nan for r in rows]
            os_ = [r["oracle_w"] if r["oracle_w"] is not None else np.nan for r in rows]
            ax.bar(x, ys, width=width, label=h["label"], alpha=0.85)
            ax.scatter(x, os_, marker="_", s=300 * width, color="black", zorder=3,
                       label="oracle w (same positions)" if j == 0 else None)
        ticks = [str(r[tick]) for r in heads[0]["summary"][key]] if heads else []
        ax.set_xticks(np.arange(len(ticks)))
        ax.set_xticklabels(ticks)
        ax.set_xlabel(name)
        ax.set_ylabel("mean w (1 = verify against the target)")
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(report.get("title", "where the head puts its weight"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- entry
def report(cfg: Any, heads: list[str], out_dir: Path, *, critical: str = "digits", w0: float = 0.0,
           threshold: float = 0.05, models: Any = None, progress: bool = True) -> dict:
    """Decode cfg's held-out prompts with every head; write head_report.json / .md / .png into out_dir."""
    from data.tasks import get_task
    from eval.run import encode_prompts, load_task_examples
    from specdec.registry import Models

    if not heads:
        raise ValueError("no head given: pass head=PATH (an exported head directory from train/run.py)")
    task = get_task(cfg.task.name)
    examples = load_task_examples(cfg, task)
    if not examples.rows:
        raise ValueError(f"no examples for task {task.name!r}")
    models = models or Models(cfg.model)
    tok, V = models.tokenizer, models.target.vocab_size
    classes = vocab_classes(tok, V)
    mask = critical_mask(tok, V, critical)
    gamma = int(cfg.method.get("gamma", 4))
    max_new = int(cfg.eval.max_new_tokens or cfg.task.get("max_new_tokens") or task.max_new_tokens)
    prompts, _ = encode_prompts(task, examples.rows, tok, models.target.max_positions, max_new + gamma + 1)
    out: dict[str, Any] = {
        "task": task.name, "data_label": examples.label, "num_prompts": len(prompts), "seed": int(cfg.seed),
        "temperature": float(cfg.temperature), "gamma": gamma, "max_new_tokens": max_new, "model": models.names(),
        "oracle": {"critical": critical, "w0": w0, "threshold": threshold,
                   "source": "diagnostics/oracle_head.py" if TokenClassOracleRule is not None else "diagnostics/head_report.py"},
        "title": f"{task.name}: where the head puts its weight ({len(prompts)} {examples.label} prompts, "
                 f"T={float(cfg.temperature):g})",
        "heads": [],
    }
    for h in heads:
        pos, info = decode_head(h, cfg, models, task, prompts, critical=mask, w0=w0, threshold=threshold,
                                progress=progress)
        if any(x["label"] == info["label"] for x in out["heads"]):  # e.g. two heads trained with one λ
            info["label"] += f" [{Path(h).resolve().parent.name}/{Path(h).name}]"
        out["heads"].append({**info, "summary": summarise(pos, classes)})
    out_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join([f"# {out['title']}", "",
                      f"Oracle: w = 1 where p or q puts > {threshold:g} of its mass on '{critical}' tokens, "
                      f"w = {w0:g} elsewhere, evaluated on each head's own positions.", "",
                      *(markdown(h["label"], h["summary"]) for h in out["heads"])])
    (out_dir / "head_report.md").write_text(text)
    (out_dir / "head_report.json").write_text(json.dumps(out, indent=1))
    plot(out, out_dir / "head_report.png")
    out["markdown"] = text
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="eval overrides and head=PATH, e.g. task=gsm8k head=runs/x/head")
    ap.add_argument("--n", type=int, default=None, help="held-out prompts (default eval.num_samples)")
    ap.add_argument("--critical", default="digits", help="oracle's critical class: digits | digits+ops | REGEX")
    ap.add_argument("--w0", type=float, default=0.0, help="oracle's w off the critical class")
    ap.add_argument("--threshold", type=float, default=0.05, help="mass on the class that makes a position critical")
    ap.add_argument("--out", default=None, help="output directory (default runs/head_report/<task>_<time>)")
    args = ap.parse_intermixed_args(argv)  # overrides may come before and after the options

    heads = [a.split("=", 1)[1] for a in args.overrides if a.startswith(("head=", "head_path="))]
    overrides = [a for a in args.overrides if not a.startswith(("head=", "head_path="))]
    if args.n is not None:
        overrides.append(f"eval.num_samples={args.n}")
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(Path(__file__).resolve().parents[1] / "conf")):
        cfg = compose(config_name="eval", overrides=overrides)
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg.num_threads))
    heads += [str(h) for h in cfg.get("heads") or []]
    out_dir = Path(args.out or f"runs/head_report/{cfg.task.name}_{time.strftime('%Y%m%d-%H%M%S')}")
    res = report(cfg, heads, out_dir, critical=args.critical, w0=args.w0, threshold=args.threshold,
                 progress=bool(cfg.eval.get("progress", True)))
    print(res["markdown"])
    print(f"wrote {out_dir}/head_report.md, head_report.json, head_report.png")


if __name__ == "__main__":
    main()
