"""The static Pareto frontier: the static-ensemble sweep, trained heads and baselines side by side.

    python eval/frontier.py task=gsm8k heads=[outputs/a/export,outputs/b/export] eval.num_samples=100
    python eval/frontier.py frontier.from_dirs=[outputs/eval/gsm8k]   # redraw from existing metrics.json files

Runs (unless frontier.from_dirs is given) the baselines (frontier.baselines), the static sweep over
frontier.grid and every head in `heads`, each into <run dir>/<label>/ (resumable like eval/run.py), then writes
into the run directory:
  acceptance_vs_score.png  acceptance rate against task score (the static sweep is a curve; heads trained with
                           different lambda form their own curve);
  rejection_vs_bias.png    rejection rate against TV bias, with the theoretical static line
                           rejection + bias = E[TV(p, q)] (a static ensemble lies on it; a dynamic head can go below):
                           as measured, and divided by each run's own E[TV(p, q)], which differs between runs
                           because their texts differ (there the line is x + y = 1 exactly);
  frontier.md              every run, then the closing-note selection (ar_target, sd, the best static w at equal
                           accuracy, lossy, cascade, heads).
Rejection and bias are measured on tested positions (accepted drafts and first rejections), where the line holds
position by position; see eval/metrics.py.
"""

from __future__ import annotations

import json
import sys
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
_COL = {c[0]: c for c in TABLE_COLUMNS}
FRONTIER_COLUMNS = [
    *(_COL[k] for k in ("label", "task_score", "task_score_ci", "acceptance_rate", "mean_accepted_length",
                        "expected_length_exact", "expected_length_iid", "tokens_per_round", "tokens_per_second")),
    ("rejection_rate", "reject", "{:.3f}"), ("tv_bias_tested", "bias", "{:.3f}"),
    ("line_gap", "rej+bias−E[TV]", "{:+.3f}"), ("speedup", "× AR", "{:.2f}"), _COL["mean_w"],
    _COL["num_samples"],
]


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


def line_gap(m: dict) -> float | None:
    """rejection + bias − E[TV(p, q)] on tested positions: 0 in expectation for a static ensemble."""
    keys = ("rejection_rate", "tv_bias_tested", "tv_pq_tested")
    if any(m.get(k) is None for k in keys):
        return None
    return m["rejection_rate"] + m["tv_bias_tested"] - m["tv_pq_tested"]


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
    chosen: dict[str, tuple[dict, list[str]]] = {}  # one row per static point, naming every reference it matches
    for score, who in refs or [(None, "")]:
        b = best_static(rows, score)
        if b is not None:
            chosen.setdefault(b["label"], (b, []))[1].append(who)
    for b, whos in chosen.values():
        whos = [w for w in whos if w]
        out.append({**b, "label": f"{b['label']} (best ≥ {', '.join(whos)} score)" if whos else b["label"]})
    out += [m for k, m in by.items() if k not in ("ar_target", "ar_draft", "sd")]
    return out + heads


# ---------------------------------------------------------------- pictures
def _style(m: dict) -> dict:
    return {"static": {"color": "tab:blue", "marker": "o"}, "head": {"color": "tab:red", "marker": "*", "s": 160},
            "baseline": {"color": "tab:gray", "marker": "s"}}[kind(m)]


def _annotate(ax, m: dict, x: float, y: float) -> None:
    label = m["label"].replace("static(w=", "w=").rstrip(")") if kind(m) == "static" else m["label"]
    offset = (4, -10) if kind(m) == "baseline" else (4, 4)  # sd sits on static w=1: keep both labels legible
    ax.annotate(label, (x, y), textcoords="offset points", xytext=offset, fontsize=7)


def _curve(ax, pts: list[dict], xk: str, yk: str, **kw) -> None:
    pts = [m for m in pts if m.get(xk) is not None and m.get(yk) is not None]
    if len(pts) > 1:
        pts = sorted(pts, key=lambda m: m.get("params", {}).get("w", m.get("params", {}).get("head_lambda") or 0))
        ax.plot([m[xk] for m in pts], [m[yk] for m in pts], **kw)


def plot_acceptance_vs_score(rows: list[dict], path: Path, title: str = "") -> Path | None:
    pts = [m for m in rows if m.get("task_score") is not None and m.get("acceptance_rate") is not None]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    _curve(ax, [m for m in pts if kind(m) == "static"], "task_score", "acceptance_rate", color="tab:blue",
           lw=1, label="static ensemble sweep")
    _curve(ax, [m for m in pts if kind(m) == "head"], "task_score", "acceptance_rate", color="tab:red", lw=1,
           ls="--", label="heads (by λ)")
    for m in pts:
        ax.scatter(m["task_score"], m["acceptance_rate"], zorder=3, **_style(m))
        ci = m.get("task_score_ci")
        if ci:
            ax.plot(ci, [m["acceptance_rate"]] * 2, color=_style(m)["color"], lw=0.6, alpha=0.5)
        _annotate(ax, m, m["task_score"], m["acceptance_rate"])
    ax.set_xlabel("task score (95% bootstrap interval)")
    ax.set_ylabel("acceptance rate (accepted / drafted)")
    ax.set_title(title or "acceptance vs task score")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _norm(m: dict, key: str) -> float | None:
    """A run's quantity divided by its own E[TV(p, q)] on tested positions."""
    tv = m.get("tv_pq_tested")
    return m[key] / tv if tv else None


def plot_rejection_vs_bias(rows: list[dict], path: Path, title: str = "") -> Path | None:
    """Left: rejection vs bias as measured, with the line at the sweep's mean E[TV(p, q)]. Right: both divided by
    each run's own E[TV(p, q)] (it differs between methods because their texts differ), where the static theory
    is exactly the line x + y = 1 for every w and a point below it beats the static trade-off."""
    pts = [m for m in rows if m.get("rejection_rate") is not None and m.get("tv_bias_tested") is not None]
    if not pts:
        return None
    for m in pts:
        m["_rej_n"], m["_bias_n"] = _norm(m, "rejection_rate"), _norm(m, "tv_bias_tested")
    fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.2))
    statics = [m for m in pts if kind(m) == "static"]
    heads = [m for m in pts if kind(m) == "head"]
    tvs = [m["tv_pq_tested"] for m in (statics or pts) if m.get("tv_pq_tested") is not None]
    panels = (
        (axes[0], "tv_bias_tested", "rejection_rate", sum(tvs) / len(tvs) if tvs else None,
         "TV bias: mean TV(ν, p) on tested positions", "rejection rate (rejections / tested drafts)",
         "static theory at the sweep's mean E[TV(p,q)] = {:.3f}"),
        (axes[1], "_bias_n", "_rej_n", 1.0, "TV bias / E[TV(p, q)] of the same run",
         "rejection rate / E[TV(p, q)] of the same run", "static theory: rejection + bias = E[TV(p,q)]"),
    )
    for ax, xk, yk, e_tv, xlabel, ylabel, line_label in panels:
        if e_tv:
            ax.plot([0, e_tv], [e_tv, 0], color="black", lw=1.5, ls=":", zorder=2.5, label=line_label.format(e_tv))
        _curve(ax, statics, xk, yk, color="tab:blue", lw=1, alpha=0.6, label="static ensemble sweep (measured)")
        _curve(ax, heads, xk, yk, color="tab:red", lw=1, ls="--", label="heads (by λ)")
        for m in pts:
            if m.get(xk) is None or m.get(yk) is None:
                continue
            ax.scatter(m[xk], m[yk], zorder=3, **_style(m))
            _annotate(ax, m, m[xk], m[yk])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_xlim(left=-0.01)
        ax.set_ylim(bottom=-0.01)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    axes[0].set_title("measured")
    axes[1].set_title("normalised by each run's E[TV(p, q)]")
    fig.suptitle(title or "rejection vs bias")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    for m in pts:
        del m["_rej_n"], m["_bias_n"]
    return path


def write_report(rows: list[dict], out_dir: Path, title: str = "") -> dict[str, Path]:
    """The two PNGs and frontier.md into out_dir; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ar = next((m for m in rows if m["method"] == "ar_target" and m.get("tokens_per_second")), None)
    for m in rows:
        m["line_gap"] = line_gap(m)
        tps = m.get("tokens_per_second")
        m["speedup"] = tps / ar["tokens_per_second"] if (ar and tps) else None
    order = {"baseline": 0, "static": 1, "head": 2}
    rows = sorted(rows, key=lambda m: (order[kind(m)], m.get("params", {}).get("w", 0), m["label"]))
    paths: dict[str, Path] = {}
    for name, fn in (("acceptance_vs_score", plot_acceptance_vs_score), ("rejection_vs_bias", plot_rejection_vs_bias)):
        p = fn(rows, out_dir / f"{name}.png", title)
        if p is not None:
            paths[name] = p
    first = rows[0]
    gamma = next((m["gamma"] for m in rows if m.get("gamma")), 0)
    header = (f"# {title or 'Frontier'}\n\ntask={first['task']} ({first['data_label']} data), "
              f"temperature={first['temperature']}, gamma={gamma}, n={first['num_samples']}, "
              f"seed={first['seed']}, models={first.get('model')}\n")
    cross = [f"- {m['label']}: head trained on {m['head_task']}, evaluated on {m['task']}" for m in rows
             if m.get("cross_task")]
    text = "\n".join([
        header, "## Closing-note selection\n", markdown_table(closing_rows(rows), FRONTIER_COLUMNS),
        "\n## All runs\n", markdown_table(rows, FRONTIER_COLUMNS),
        *(["\n## Cross-task\n", *cross] if cross else []),
        "\nrej+bias−E[TV]: rejection rate + TV bias − mean TV(p, q), all on tested positions; 0 in expectation "
        "for a static ensemble, negative where a head beats the static frontier. × AR: tokens/s over ar_target's "
        "(medians over batches, same run).\n",
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
    from eval.methods import Models, build_method
    from eval.run import load_task_examples, run_method

    task = get_task(cfg.task.name)
    examples = load_task_examples(cfg, task)
    models = Models(cfg.model)
    gamma = int(cfg.method.get("gamma", 4))
    jobs: list[tuple[str, dict[str, Any], str | None]] = []
    for name in cfg.frontier.baselines:
        jobs.append((name, method_config(name), None))
    for w in cfg.frontier.grid:
        jobs.append(("static", {**method_config("static"), "w": float(w)}, None))
    for h in cfg.get("heads") or []:
        jobs.append(("diversed", method_config("diversed"), str(h)))
    results = []
    for name, mcfg, head in jobs:
        c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        if mcfg.get("gamma", 0) > 0:  # autoregressive baselines keep gamma = 0
            mcfg = {**mcfg, "gamma": gamma}
        c.method = OmegaConf.create(mcfg)
        c.head_path = head
        spec = build_method(name, models, c)
        sub = spec.label.replace("/", "_").replace(" ", "")
        results.append(run_method(c, spec, models, task, examples, out_dir / sub))
    return results


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    import torch

    from eval.run import log_wandb

    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg.num_threads))
    out_dir = Path(cfg.get("out_dir") or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    if cfg.frontier.get("from_dirs"):
        rows = collect(list(cfg.frontier.from_dirs))
    else:
        rows = run_all(cfg, out_dir)
    title = f"{rows[0]['task']} T={rows[0]['temperature']}"
    paths = write_report(rows, out_dir, title)
    print(paths["table"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    log_wandb(cfg, rows, {k: v for k, v in paths.items() if k != "table"})


if __name__ == "__main__":
    from eval.run import rewrite_head_arg

    sys.argv = rewrite_head_arg(sys.argv)
    main()
