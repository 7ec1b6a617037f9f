"""Task quality against acceptance: the static-ensemble sweep, trained heads and baselines side by side.

    python eval/frontier.py task=gsm8k heads=[outputs/a/export,outputs/b/export] eval.num_samples=100
    python eval/frontier.py frontier.from_dirs=[outputs/eval/gsm8k]   # redraw from existing metrics.json files

Runs (unless frontier.from_dirs is given) the baselines (frontier.baselines), the static sweep over
frontier.grid and every head in `heads`, each into <run dir>/<label>/ (resumable like eval/run.py), then writes
into the run directory:
  quality_vs_acceptance.png  the headline: task score (95% bootstrap interval) against acceptance rate; the static
                             sweep is a curve over w, the heads a curve over their training λ (one curve per
                             training recipe), baselines are markers (ar_target: a horizontal line, it drafts
                             nothing);
  frontier.md                per head, the best static point scoring at least as well and standard SD next to it
                             (acceptance and score differences in points, against the issue's bars); the
                             closing-note selection; every run; the consistency check.

Why quality vs acceptance and not rejection vs bias: at every tested position of *any* mixture
ν_t = w_t p_t + (1 − w_t) q_t, static or dynamic, P(reject) = TV(q_t, ν_t) = w_t TV_t and the bias
TV(ν_t, p_t) = (1 − w_t) TV_t, so rejection + bias = TV(p_t, q_t) whatever w_t is. Every mixture lies on that line,
so it cannot separate a head from static weights; it is kept only as a consistency check of the records (column
rej+bias−TV and its z-score; a warning when a mixture run is off the line beyond sampling noise, or when any run is
below it, which no verification rule can be: TV(q, p) ≤ TV(q, ν) + TV(ν, p)). What a head can change is *which*
tokens it hands to the draft, and that shows only in the task score at a given acceptance.
Rejection and bias are measured on tested positions (accepted drafts and first rejections); see eval/metrics.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from eval.metrics import TABLE_COLUMNS, markdown_table  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"
log = logging.getLogger(__name__)
_COL = {c[0]: c for c in TABLE_COLUMNS}
FRONTIER_COLUMNS = [
    *(_COL[k] for k in ("label", "task_score", "task_score_ci", "acceptance_rate", "mean_accepted_length",
                        "expected_length_exact", "expected_length_iid", "tokens_per_round", "tokens_per_second")),
    ("rejection_rate", "reject", "{:.3f}"), ("tv_bias_tested", "bias", "{:.3f}"),
    ("line_gap", "rej+bias−TV", "{:+.3f}"), ("line_z", "z", "{:+.1f}"), ("speedup", "× AR", "{:.2f}"),
    _COL["mean_w"], _COL["num_samples"],
]
# Methods whose ν is a mixture of the base distribution and q at every position: on the identity line exactly.
MIXTURES = ("sd", "static", "diversed", "cascade", "fsd")
Z_WARN = 4.0  # |z| beyond this is not sampling noise (two-sided p ≈ 6e-5 per run)
# The bars, in acceptance points (100 × rate) and score points.
BAR_VS_STATIC = 5.0
BAR_VS_SD = 15.0
SD_SCORE_TOL = 2.0


# ---------------------------------------------------------------- collecting results
def collect(dirs: list[str | Path]) -> list[dict]:
    """Every metrics.json under the given directories (a static sweep's subdirectories included)."""
    rows = []
    for d in dirs:
        d = Path(d)
        files = [d] if d.is_file() else sorted(d.rglob("metrics.json"))
        for f in files:
            m = json.loads(f.read_text())
            m["_dir"] = str(f.parent)
            rows.append(m)
    if not rows:
        raise FileNotFoundError(f"no metrics.json under {', '.join(map(str, dirs))}: run eval/run.py first")
    return rows


def kind(m: dict) -> str:
    return {"static": "static", "diversed": "head"}.get(m["method"], "baseline")


def _head_config(m: dict) -> dict:
    """config.json of the head a run used, when that directory is still there."""
    f = Path(m["head"]) / "config.json" if m.get("head") else None
    try:
        return json.loads(f.read_text()) if f is not None and f.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def head_lambda(m: dict) -> float | None:
    """The training λ of a head run: metrics.json's params, else the head's config.json."""
    lam = (m.get("params") or {}).get("head_lambda")
    if lam is None:
        from specdec.registry import head_lambda as meta_lambda

        lam = meta_lambda(_head_config(m))
    return None if lam is None else float(lam)


def head_recipe(m: dict) -> str | None:
    """The training recipe of a head run, when its config.json says: its advantage estimator (algo.advantage;
    for forks and critic also the continuation of the fork branches, policy or greedy_target), plus "features
    only" for a head that reads no hidden states, plus its initial w when that is not today's default (a head
    started near w = 1 is another recipe: at small λ it stays at SD)."""
    from heads import HeadConfig
    from specdec.registry import head_features_only

    cfg = _head_config(m)
    training = cfg.get("training") or {}
    algo = training.get("algo") or {}
    adv = algo.get("advantage")
    init_w = (training.get("head") or {}).get("init_w")
    cont = (algo.get("forks") or {}).get("continuation") if adv in ("forks", "critic") else None
    estimator = " ".join(str(x) for x in (adv, cont) if x)
    parts = ([estimator] if estimator else []) + (["features only"] if head_features_only(cfg) else [])
    if init_w is not None and float(init_w) != HeadConfig.init_w:
        parts.append(f"init w {float(init_w):g}")
    return ", ".join(parts) or None


def head_group(m: dict) -> str:
    """Which curve a head belongs to: heads of one training recipe differ only in λ."""
    r = head_recipe(m)
    return f"heads ({r})" if r else "heads"


# ---------------------------------------------------------------- the identity check
def line_gap(m: dict) -> float | None:
    """rejection + bias − E[TV(p, q)] on tested positions: 0 in expectation for every mixture (static or not)."""
    keys = ("rejection_rate", "tv_bias_tested", "tv_pq_tested")
    if any(m.get(k) is None for k in keys):
        return None
    return m["rejection_rate"] + m["tv_bias_tested"] - m["tv_pq_tested"]


def line_z(m: dict) -> float | None:
    """line_gap over its sampling standard error. Given the path, bias and TV are fixed numbers and each tested
    position rejects independently with its own probability r_t; Var(mean) = Σ r_t(1 − r_t)/n² ≤ r̄(1 − r̄)/n,
    so the binomial SE at the observed rate is a conservative scale (the z-score is, if anything, too small)."""
    gap, n, r = line_gap(m), m.get("tested"), m.get("rejection_rate")
    if gap is None or not n:
        return None
    se = math.sqrt(max(r * (1 - r), 0.25 / n) / n)  # a floor for r ≈ 0: at least one half-event of noise
    return gap / se


def identity_warnings(rows: list[dict], z_max: float = Z_WARN) -> list[str]:
    """Runs that break the identity beyond sampling noise: a mixture off the line (either side), or any rule
    below it (impossible by the triangle inequality). A non-empty list means a bookkeeping bug. Greedy runs
    (temperature 0) are skipped: their acceptance test is an argmax match."""
    out = []
    for m in rows:
        z = line_z(m)
        if z is None or not m.get("temperature"):  # greedy verification is not min(1, ν/q): no identity
            continue
        if (m["method"] in MIXTURES and abs(z) > z_max) or z < -z_max:
            out.append(f"{m['label']}: rejection + bias − TV(p,q) = {line_gap(m):+.4f} (z = {z:+.1f}, "
                       f"{m.get('tested')} tested positions): off the identity line beyond sampling noise")
    return out


# ---------------------------------------------------------------- selections
def best_static(rows: list[dict], min_score: float | None) -> dict | None:
    """The static point with the highest acceptance among those scoring at least min_score (equal accuracy);
    without scores, the one with the highest acceptance."""
    statics = [m for m in rows if kind(m) == "static" and m.get("acceptance_rate") is not None]
    if min_score is not None:
        ok = [m for m in statics if m.get("task_score") is not None and m["task_score"] >= min_score - 1e-12]
        statics = ok or sorted(statics, key=lambda m: -(m.get("task_score") or 0))[:1]
    return max(statics, key=lambda m: m["acceptance_rate"]) if statics else None


def closing_rows(rows: list[dict]) -> list[dict]:
    """ar_target, sd, the best static w at the accuracy of each head (or of sd without heads), lossy, cascade,
    heads: the table of the evaluation issue's closing note."""
    by = {m["method"]: m for m in rows if kind(m) == "baseline"}
    heads = [m for m in rows if kind(m) == "head"]
    out = [by[k] for k in ("ar_target", "ar_draft", "sd") if k in by]
    refs = [(h["task_score"], h["label"]) for h in heads if h.get("task_score") is not None]
    if not refs and "sd" in by and by["sd"].get("task_score") is not None:
        refs = [(by["sd"]["task_score"], "sd")]
    chosen: dict[str, tuple[dict, list[str], list[str]]] = {}  # one row per static point: whom it matches or not
    for score, who in refs or [(None, "")]:
        b = best_static(rows, score)
        if b is not None:
            entry = chosen.setdefault(b["label"], (b, [], []))
            # best_static falls back to the highest-scoring point when none scores as well: say so
            reaches = score is None or (b.get("task_score") is not None and b["task_score"] >= score - 1e-12)
            (entry[1] if reaches else entry[2]).append(who)
    for b, reached, missed in chosen.values():
        notes = ([f"best ≥ {', '.join(w for w in reached if w)} score"] if any(reached) else []) + \
                ([f"highest-scoring static; none ≥ {', '.join(missed)} score"] if missed else [])
        out.append({**b, "label": f"{b['label']} ({'; '.join(notes)})" if notes else b["label"]})
    out += [m for k, m in by.items() if k not in ("ar_target", "ar_draft", "sd")]
    return out + heads


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def head_comparison(rows: list[dict]) -> list[dict]:
    """Per head: the best static point scoring at least as well (sd, the static line's w = 1 end, when no w < 1
    does), and standard SD, with acceptance and score
    differences in points and whether the issue's bars are met (head ≥ that static + 5 points; head ≥ SD + 15
    points with a score at most 2 points below SD's)."""
    sd = next((m for m in rows if m["method"] == "sd" and m.get("acceptance_rate") is not None), None)
    out = []
    for h in sorted((m for m in rows if kind(m) == "head"), key=lambda m: (head_lambda(m) or 0, m["label"])):
        acc, score = h.get("acceptance_rate"), h.get("task_score")
        if acc is None or score is None:
            continue
        c: dict[str, Any] = {"head": h, "static": None, "sd": sd}
        b = best_static(rows, score)
        if (b is None or b.get("task_score") is None or b["task_score"] < score - 1e-12) and sd is not None \
                and sd.get("task_score") is not None and sd["task_score"] >= score - 1e-12:
            b = sd  # no w < 1 scores as well: the static line's w = 1 end (nu = p) is sd
        if b is not None and b.get("task_score") is not None and b["task_score"] >= score - 1e-12:
            c["static"] = b
            c["d_acc_static"] = acc - b["acceptance_rate"]
            c["d_score_static"] = score - b["task_score"]
            c["bar_static"] = 100 * c["d_acc_static"] >= BAR_VS_STATIC - 1e-9
        if sd is not None and sd.get("task_score") is not None:
            c["d_acc_sd"] = acc - sd["acceptance_rate"]
            c["d_score_sd"] = score - sd["task_score"]
            c["bar_sd"] = (100 * c["d_acc_sd"] >= BAR_VS_SD - 1e-9
                           and 100 * c["d_score_sd"] >= -SD_SCORE_TOL - 1e-9)
        out.append(c)
    return out


def _ci(m: dict) -> str:
    ci = m.get("task_score_ci")
    return f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else ""


def comparison_lines(rows: list[dict]) -> list[str]:
    """frontier.md's per-head lines (see head_comparison)."""
    lines = []
    for c in head_comparison(rows):
        h = c["head"]
        label = h["label"] + (f" [{head_recipe(h)}]" if head_recipe(h) else "")
        s = [f"- **{label}**: score {h['task_score']:.3f}{_ci(h)}, acceptance {h['acceptance_rate']:.3f}."]
        b = c["static"]
        if b is None:
            s.append("No static point scores at least as well (bar vs static: not measurable here).")
        else:
            name = b["label"] + (" = static w = 1" if b["method"] == "sd" else "")
            s.append(f"Best static with score ≥ the head's: {name} (score {b['task_score']:.3f}{_ci(b)}, "
                     f"acceptance {b['acceptance_rate']:.3f}): acceptance {_pts(c['d_acc_static'])} points, score "
                     f"{_pts(c['d_score_static'])} points (bar ≥ +{BAR_VS_STATIC:g}: "
                     f"{'met' if c['bar_static'] else 'missed'}).")
        if "d_acc_sd" in c:
            sd = c["sd"]
            s.append(f"vs sd (score {sd['task_score']:.3f}{_ci(sd)}, acceptance {sd['acceptance_rate']:.3f}): "
                     f"acceptance {_pts(c['d_acc_sd'])} points, score {_pts(c['d_score_sd'])} points (bar ≥ "
                     f"+{BAR_VS_SD:g} at a score ≥ sd − {SD_SCORE_TOL:g}: {'met' if c['bar_sd'] else 'missed'}).")
        lines.append(" ".join(s))
    return lines


# ---------------------------------------------------------------- the picture
BASELINE_MARKERS = {"sd": "D", "lossy": "s", "cascade": "^", "autojudge": "P", "ar_draft": "v", "fsd": "X",
                    "typical": "o", "fly": ">"}
BASELINE_COLORS = {"sd": "black", "lossy": "tab:green", "cascade": "tab:purple", "autojudge": "tab:orange",
                   "fsd": "tab:brown", "typical": "tab:cyan", "fly": "tab:olive",
                   "ar_draft": "tab:brown"}
HEAD_COLORS = ("tab:red", "tab:pink", "tab:olive", "tab:cyan", "darkgoldenrod", "teal", "navy")


def _yerr(m: dict) -> list[list[float]] | None:
    ci = m.get("task_score_ci")
    if not ci or None in ci:
        return None
    return [[max(m["task_score"] - ci[0], 0.0)], [max(ci[1] - m["task_score"], 0.0)]]


def _series(ax, pts: list[dict], key, label: str, color: str, marker: str, text) -> None:
    """Points with vertical 95% CI bars, joined in the order of `key`, each annotated with text(m)."""
    pts = sorted(pts, key=key)
    if len(pts) > 1:
        ax.plot([m["acceptance_rate"] for m in pts], [m["task_score"] for m in pts], color=color, lw=1, alpha=0.7)
    for i, m in enumerate(pts):
        ax.errorbar(m["acceptance_rate"], m["task_score"], yerr=_yerr(m), fmt=marker, color=color, ms=6,
                    capsize=2, lw=0.8, zorder=3, label=label if i == 0 else None)
        ax.annotate(text(m), (m["acceptance_rate"], m["task_score"]), textcoords="offset points", xytext=(4, 4),
                    fontsize=7, color=color)


def plot_quality_vs_acceptance(rows: list[dict], path: Path, title: str = "") -> Path | None:
    """The headline picture: task score (95% CI bars) against acceptance rate. Static sweep: a curve over w;
    heads: a curve over λ per training recipe; every other method a marker; ar_target a horizontal line."""
    pts = [m for m in rows if m.get("task_score") is not None and m.get("acceptance_rate") is not None]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 5.2))
    statics = [m for m in pts if kind(m) == "static"]
    if statics:
        _series(ax, statics, lambda m: m["params"].get("w", 0), "static ensemble (over w)", "tab:blue", "o",
                lambda m: f"w={m['params'].get('w', 0):g}")
        sd = next((m for m in pts if m["method"] == "sd"), None)
        top = max(statics, key=lambda m: m["params"].get("w", 0))
        if sd is not None and top["params"].get("w", 0) < 1:  # sd is the static line's w = 1 end
            ax.plot([top["acceptance_rate"], sd["acceptance_rate"]], [top["task_score"], sd["task_score"]],
                    color="tab:blue", lw=1, ls=":", alpha=0.7)
    groups: dict[str, list[dict]] = {}
    for m in pts:
        if kind(m) == "head":
            groups.setdefault(head_group(m), []).append(m)
    for i, (g, hs) in enumerate(sorted(groups.items())):
        _series(ax, hs, lambda m: (head_lambda(m) is None, head_lambda(m) or 0, m["label"]),
                f"{g} (over training λ)", HEAD_COLORS[i % len(HEAD_COLORS)], "*",
                lambda m: f"λ={head_lambda(m):g}" if head_lambda(m) is not None else m["label"])
    baselines: dict[str, list[dict]] = {}
    for m in pts:
        if kind(m) == "baseline":
            baselines.setdefault(m["method"], []).append(m)
    for meth, bs in baselines.items():  # one method at several settings (AutoJudge's thresholds): one curve
        c, mk = BASELINE_COLORS.get(meth, "tab:gray"), BASELINE_MARKERS.get(meth, "X")
        if len(bs) == 1:
            _series(ax, bs, lambda m: 0, bs[0]["label"], c, mk, lambda m: "")
        else:
            _series(ax, bs, lambda m: m["acceptance_rate"], f"{meth} (over its setting)", c, mk,
                    lambda m, meth=meth: m["label"].removeprefix(meth).strip("()"))
    for m in rows:  # autoregressive decoding drafts nothing: its quality is a reference level
        if m["method"] == "ar_target" and m.get("task_score") is not None:
            ax.axhline(m["task_score"], color="gray", ls="--", lw=1, label=f"ar_target ({m['task_score']:.3f})")
            ci = m.get("task_score_ci")
            if ci and None not in ci:
                ax.axhspan(ci[0], ci[1], color="gray", alpha=0.12, lw=0)
    ax.set_xlabel("acceptance rate (accepted / drafted)")
    ax.set_ylabel("task score (bars: 95% bootstrap interval)")
    ax.set_title(title or "task quality vs acceptance")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(rows: list[dict], out_dir: Path, title: str = "") -> dict[str, Path]:
    """quality_vs_acceptance.png and frontier.md into out_dir; returns the paths written. Warns (and says so in
    frontier.md) when a run breaks the rejection + bias = TV identity beyond sampling noise."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ar = next((m for m in rows if m["method"] == "ar_target" and m.get("tokens_per_second")), None)
    for m in rows:
        m["line_gap"], m["line_z"] = line_gap(m), line_z(m)
        tps = m.get("tokens_per_second")
        m["speedup"] = tps / ar["tokens_per_second"] if (ar and tps) else None
    order = {"baseline": 0, "static": 1, "head": 2}
    rows = sorted(rows, key=lambda m: (order[kind(m)], m.get("params", {}).get("w", 0),
                                       (head_lambda(m) or 0) if kind(m) == "head" else 0, m["label"]))
    paths: dict[str, Path] = {}
    p = plot_quality_vs_acceptance(rows, out_dir / "quality_vs_acceptance.png",
                                   f"{title}: task quality vs acceptance" if title else "")
    if p is not None:
        paths["quality_vs_acceptance"] = p
    problems = identity_warnings(rows)
    for w in problems:
        warnings.warn(w, stacklevel=2)
    first = rows[0]
    gamma = next((m["gamma"] for m in rows if m.get("gamma")), 0)
    header = (f"# {title or 'Frontier'}\n\ntask={first['task']} ({first['data_label']} data), "
              f"temperature={first['temperature']}, gamma={gamma}, n={first['num_samples']}, "
              f"seed={first['seed']}, models={first.get('model')}\n")
    cross = [f"- {m['label']}: head trained on {m['head_task']}, evaluated on {m['task']}" for m in rows
             if m.get("cross_task")]
    comp = comparison_lines(rows)
    check = (["**Warning: the identity rejection + bias = TV(p, q) fails beyond sampling noise:**", "",
              *[f"- {w}" for w in problems]] if problems else
             [f"All runs satisfy rejection + bias = TV(p, q) within sampling noise (|z| ≤ {Z_WARN:g})."])
    text = "\n".join([
        header,
        *(["## Heads against static and SD\n", *comp, ""] if comp else []),
        "## Closing-note selection\n", markdown_table(closing_rows(rows), FRONTIER_COLUMNS),
        "\n## All runs\n", markdown_table(rows, FRONTIER_COLUMNS),
        *(["\n## Cross-task\n", *cross] if cross else []),
        "\n## Consistency check\n", *check,
        "\nrej+bias−TV: rejection rate + TV(ν, p) − TV(p, q), all on tested positions, and its z-score (z). It is 0 "
        "in expectation for every mixture ν = w·p + (1 − w)·q, static or per-token (a head), so it is a check of "
        "the records, not a comparison; other rules are ≥ 0 (triangle inequality). The comparison is score vs "
        "acceptance (quality_vs_acceptance.png). × AR: tokens/s over ar_target's (medians over batches, same "
        "run). Points: 100 × the difference of rates.\n",
    ])
    (out_dir / "frontier.md").write_text(text)
    paths["table"] = out_dir / "frontier.md"
    return paths


# ---------------------------------------------------------------- running
def method_config(name: str) -> dict:
    """Defaults of conf/method/<name>.yaml."""
    f = CONF / "method" / f"{name}.yaml"
    if not f.exists():
        raise ValueError(f"no method config {f}; frontier.baselines must name files of conf/method/")
    return OmegaConf.to_container(OmegaConf.load(f), resolve=True)


def run_all(cfg: DictConfig, out_dir: Path) -> list[dict]:
    from data.tasks import get_task
    from eval.run import load_task_examples, run_method
    from specdec.registry import Models, build_method

    task = get_task(cfg.task.name)
    examples = load_task_examples(cfg, task)
    models = Models(cfg.model)
    gamma = int(cfg.method.get("gamma", 4))
    jobs: list[tuple[str, dict[str, Any], str | None]] = []
    for name in cfg.frontier.baselines:
        jobs.append((name, method_config(name), None))
    sweeps = cfg.frontier.get("sweeps") or {}
    for name in cfg.frontier.get("sweep_methods") or []:
        if name not in sweeps or len(sweeps[name]) != 1:
            raise ValueError(f"frontier.sweep_methods names {name!r}, but frontier.sweeps has no single knob for it "
                             f"(frontier.sweeps.{name}: {{knob: [values]}}); known: {sorted(sweeps)}")
        (knob, values), = sweeps[name].items()
        jobs += [(name, {**method_config(name), knob: v}, None) for v in values]
    for w in cfg.frontier.grid:
        jobs.append(("static", {**method_config("static"), "w": float(w)}, None))
    for h in cfg.get("heads") or []:
        jobs.append(("diversed", method_config("diversed"), str(h)))
    results, seen = [], set()
    proposer = cfg.frontier.get("proposer")
    for name, mcfg, head in jobs:
        c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        if mcfg.get("gamma", 0) > 0:  # autoregressive baselines keep gamma = 0
            mcfg = {**mcfg, "gamma": gamma}
        if proposer and "proposer" in mcfg:  # one proposer for the whole sweep (e.g. the feature drafter)
            mcfg = {**mcfg, "proposer": proposer, "drafter": cfg.frontier.get("drafter")}
        c.method = OmegaConf.create(mcfg)
        c.head_path = head
        spec = build_method(name, models, c)
        if spec.label in seen and spec.head_meta is not None:  # two heads of one λ (seeds, checkpoints)
            spec = dataclasses.replace(spec, label=f"{spec.label}@{str(spec.head_meta.get('weights_sha256'))[:8]}")
        seen.add(spec.label)
        sub = spec.label.replace("/", "_").replace(" ", "")
        results.append(run_method(c, spec, models, task, examples, out_dir / sub))
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    import torch

    from eval.run import log_wandb

    logging.captureWarnings(True)  # the identity check's warnings go to run.log as well
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg.num_threads))
    out_dir = Path(cfg.get("out_dir") or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    if cfg.frontier.get("from_dirs"):
        rows = collect(list(cfg.frontier.from_dirs))
    else:
        rows = run_all(cfg, out_dir)
    title = f"{rows[0]['task']} T={rows[0]['temperature']}"
    paths = write_report(rows, out_dir, title)
    log.info("[frontier] %s:\n%s", paths["table"], paths["table"].read_text().rstrip())
    log.info("[frontier] wrote " + ", ".join(str(p) for p in paths.values()))
    log_wandb(cfg, rows, {k: v for k, v in paths.items() if k != "table"}, run_dir=out_dir)


if __name__ == "__main__":
    from eval.run import rewrite_head_arg

    sys.argv = rewrite_head_arg(sys.argv)
    main()
