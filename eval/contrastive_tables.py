"""Tables over a sweep of the contrastive methods (cd, dcd, dcd_ngram, scd, cos; built by specdec.registry):

    python eval/run.py -m method=cd,dcd,dcd_ngram,scd,cos alpha=0.0,0.1,0.3,0.5,1.0
    python bench/contrastive_speed.py --tables multirun/eval/<dir>   # speed + α-robustness tables of a sweep

The per-run latency decomposition (`contrastive_metrics`: t_e, t_p, t_q and the throughput model) is each
contrastive method's `extra_metrics` in specdec/registry.py; these tables read it back from the runs'
metrics.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdec.registry import CONTRASTIVE

# Table rows: the registered methods, plus dcd with the feature drafter (method=dcd method.proposer=feature).
TABLE_ORDER = (*CONTRASTIVE, "dcd_feature")


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
