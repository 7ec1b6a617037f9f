"""Pool evaluation runs over disjoint prompt sets, and compare methods prompt by prompt.

    python eval/pool.py runs/real/gsm8k_t1_n16_m320 runs/real/gsm8k_t1_n16_m320_d7s1 [--ref sd]

Each argument is an eval/frontier.py (or eval/run.py) output directory holding <label>/samples.jsonl and
<label>/metrics.json per method. For every method finished in any of them: the score pooled over the sets it ran on,
with its bootstrap 95% CI, and the pooled acceptance (accepted / drafted tokens). Then each method against a reference
(--ref; default the first trained head, `diversed...`): the paired difference on the prompts both ran, resampling
prompts (score: per-prompt differences; acceptance: the difference of ratios of sums, prompts resampled jointly).
Paired differences are what small evaluations can resolve: prompt difficulty cancels out.

For a head, the last line is its score minus the static line's (static weights and sd, joined by acceptance) at
the head's acceptance, with a bootstrap interval that resamples the prompts of the head and the line together.

The methods finished on *every* set (the same prompts) are also read against the issue's bars exactly as
eval/frontier.py reads one set (per head: the best static point scoring at least as well, and SD), and --plot draws
their pooled quality-vs-acceptance picture with frontier.py's code. A method finished on only some sets is pooled in
the first table and paired on the prompts it shares, but left out of the bars and the picture: its mean is over
other prompts.

--partial also reads the methods cut short (killed, or still running): the prompts they decoded, marked "partial" in
the first table with their n and paired on the prompts they share; like a method missing from a set, they stay out
of the bars and the picture. A long table built over several sessions can so be read before every row is finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.frontier import comparison_lines, plot_quality_vs_acceptance  # noqa: E402
from eval.metrics import bootstrap_ci  # noqa: E402
from specdec.jsonl import read_jsonl  # noqa: E402

N_BOOT = 2000


def has_run(d: Path, label: str, partial: bool = False) -> bool:
    """Whether set d holds `label`: finished (metrics.json), or, with partial, cut short with prompts decoded
    (run.json and a non-empty samples.jsonl: eval/run.py writes samples batch by batch, so a killed run keeps them)."""
    m = d / label
    if (m / "metrics.json").exists():
        return True
    return partial and (m / "run.json").exists() and (m / "samples.jsonl").exists() and \
        (m / "samples.jsonl").stat().st_size > 0


def finished_labels(run_dirs: list[Path], partial: bool = False) -> list[str]:
    """Method labels with a metrics.json (a finished method) in any of the run directories; with partial, also
    those cut short (has_run)."""
    return sorted({p.name for d in run_dirs for p in d.iterdir() if p.is_dir() and has_run(d, p.name, partial)})


def cut_short(run_dirs: list[Path], label: str) -> bool:
    """Whether `label` is unfinished in some set where it decoded prompts (a partial row)."""
    return any(has_run(d, label, partial=True) and not has_run(d, label) for d in run_dirs)


# Settings every method of one set shares (the same prompts, decoded alike), and every set shares but the data.
SAME_PROMPTS = ("task", "data", "num_samples")
SAME_DECODING = ("task", "temperature", "max_new_tokens", "model")


def check_sets(run_dirs: list[Path], labels: list[str], partial: bool = False) -> None:
    """Pairing by (set, prompt idx) is only meaningful if, within a set, every method ran on the same prompts, and
    pooling only if the sets are different prompts decoded alike: raise ValueError, naming the run, otherwise."""
    first_of_set = []
    for d in run_dirs:
        runs = {lab: json.loads((d / lab / "run.json").read_text()) for lab in labels
                if has_run(d, lab, partial) and (d / lab / "run.json").exists()}
        if not runs:
            continue
        lab0, r0 = next(iter(runs.items()))
        for lab, r in runs.items():
            bad = [k for k in SAME_PROMPTS + ("seed",) + SAME_DECODING if r.get(k) != r0.get(k)]
            if bad:
                raise ValueError(f"{d}: {lab} and {lab0} differ in {', '.join(bad)}: a set's methods must run on the "
                                 "same prompts with the same settings to be paired prompt by prompt")
        first_of_set.append((d, r0))
    for i, (d, r) in enumerate(first_of_set):
        for d2, r2 in first_of_set[:i]:
            if all(r.get(k) == r2.get(k) for k in SAME_PROMPTS):
                raise ValueError(f"{d} and {d2} are the same prompts (data {r.get('data')}): pool disjoint sets")
            bad = [k for k in SAME_DECODING if r.get(k) != r2.get(k)]
            if bad:
                raise ValueError(f"{d} and {d2} differ in {', '.join(bad)}: pool sets decoded alike")


def per_prompt(run_dirs: list[Path], label: str, partial: bool = False) -> dict[tuple[int, int], tuple[float, int, int]]:
    """(set index, prompt idx) -> (score, accepted tokens, drafted tokens), over the sets where `label` finished
    (with partial: also the prompts it decoded where it was cut short)."""
    out = {}
    for k, d in enumerate(run_dirs):
        if not has_run(d, label, partial):
            continue
        for s in read_jsonl(d / label / "samples.jsonl"):
            if s.get("score") is None:
                raise ValueError(f"{d / label}: sample {s['idx']} has no score (a task without a reward): pool.py "
                                 "compares task scores")
            out[(k, s["idx"])] = (float(s["score"]), int(sum(s["accepted"])), int(sum(s["drafted"])))
    return out


def method_of(run_dirs: list[Path], label: str) -> str:
    """The method name (sd, static, diversed, ...) of a label, from the first set that ran it."""
    for d in run_dirs:
        for name in ("metrics.json", "run.json"):
            if (d / label / name).exists():
                return json.loads((d / label / name).read_text())["method"]
    raise ValueError(f"{label}: no metrics.json or run.json in {', '.join(map(str, run_dirs))}")


def pooled_stats(per_prompt_rows: dict, level: float = 0.95) -> dict:
    """Score (mean, bootstrap CI), acceptance (accepted / drafted; None without drafts), n and drafted tokens of one
    method over its prompts, in eval/frontier.py's metric names."""
    v = per_prompt_rows.values()
    sc = [x[0] for x in v]
    acc, dr = sum(x[1] for x in v), sum(x[2] for x in v)
    return {"task_score": float(np.mean(sc)), "task_score_ci": list(bootstrap_ci(sc, n_boot=N_BOOT, level=level)),
            "acceptance_rate": acc / dr if dr else None, "num_samples": len(sc), "drafted": dr}


def pooled_rows(run_dirs: list[Path], stats: dict[str, dict]) -> list[dict]:
    """eval/frontier.py rows for the methods finished on every set: the first set's metrics.json (method, label,
    params, head) with the pooled statistics (pooled_stats) over all sets."""
    # labelled by directory, as everything else here: two runs of one method (e.g. training seeds) share a label
    return [{**json.loads((run_dirs[0] / lab / "metrics.json").read_text()), **st, "label": lab}
            for lab, st in stats.items() if all((d / lab / "metrics.json").exists() for d in run_dirs)]


def paired_difference(ref: dict, other: dict, seed: int = 0, level: float = 0.95) -> dict:
    """ref minus other on their shared prompts: mean score difference and acceptance difference with CIs."""
    keys = sorted(set(ref) & set(other))
    if not keys:
        raise ValueError("no prompt in common: the two methods ran on different sets")
    r = np.array([ref[k] for k in keys], dtype=np.float64)
    o = np.array([other[k] for k in keys], dtype=np.float64)
    d = r[:, 0] - o[:, 0]
    idx = np.random.default_rng(seed).integers(0, len(keys), size=(N_BOOT, len(keys)))

    def acc(x: np.ndarray) -> np.ndarray:  # accepted / drafted over the rows; 0 drafted (autoregressive) gives nan
        with np.errstate(invalid="ignore", divide="ignore"):
            return x[..., 1].sum(-1) / x[..., 2].sum(-1)

    boot = acc(r[idx]) - acc(o[idx])
    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    lo, hi = np.nanquantile(boot, q) if np.isfinite(boot).any() else (np.nan, np.nan)
    return {"n": len(keys), "score": float(d.mean()),
            "score_ci": bootstrap_ci(d, n_boot=N_BOOT, seed=seed, level=level),
            "accept": float(acc(r) - acc(o)), "accept_ci": (float(lo), float(hi))}


def above_static_line(data: dict[str, dict], head: str, methods: dict[str, str], seed: int = 0,
                      level: float = 0.95) -> dict | None:
    """The head's score minus the static line's at the head's acceptance, on the prompts all of them share.

    The static line: every static(w) run plus sd (w = 1; `methods` maps labels to method names, so an sd with
    another proposer, sd[feature], counts too), as (acceptance, score) points joined linearly in order of
    acceptance (flat beyond the end points); points that did not run on all of the head's prompts are left out.
    Prompts are resampled jointly for the head and every static point, so the interval carries the line's own
    noise. None without two such points."""
    keys = sorted(data[head])
    line = [lab for lab in data if methods.get(lab) in ("sd", "static") and set(keys) <= set(data[lab])]
    if len(line) < 2 or not keys:
        return None
    h = np.array([data[head][k] for k in keys], dtype=np.float64)
    pts = np.stack([np.array([data[lab][k] for k in keys], dtype=np.float64) for lab in line])  # [L, n, 3]

    def gap(rows: np.ndarray) -> float:
        acc = pts[:, rows, 1].sum(-1) / pts[:, rows, 2].sum(-1)
        score = pts[:, rows, 0].mean(-1)
        order = np.argsort(acc)
        h_acc = h[rows, 1].sum() / h[rows, 2].sum()
        return float(h[rows, 0].mean() - np.interp(h_acc, acc[order], score[order]))

    rng = np.random.default_rng(seed)
    boot = np.array([gap(rng.integers(0, len(keys), len(keys))) for _ in range(N_BOOT)])
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"n": len(keys), "points": line, "gap": gap(np.arange(len(keys))), "ci": (float(lo), float(hi))}


# Rules that need no training (each swept over its knob by eval/frontier.py): the opponents a head must beat.
TRAINING_FREE = ("sd", "static", "lossy", "cascade", "fsd", "typical", "fly")


def envelope_at(acc: np.ndarray, score: np.ndarray, a: float) -> float:
    """The best score any training-free operating point reaches at acceptance >= a: a point with acceptance >= a,
    or a per-prompt coin flip between two points on either side of a (whose acceptance and score interpolate
    linearly), i.e. the upper concave hull of the points, non-increasing in acceptance. nan where no point reaches
    acceptance a."""
    if not (acc >= a).any():
        return float("nan")
    best = float(score[acc >= a].max())
    lo, hi = acc < a, acc > a
    if lo.any() and hi.any():
        ai, si = acc[lo][:, None], score[lo][:, None]
        aj, sj = acc[hi][None, :], score[hi][None, :]
        best = max(best, float((si + (a - ai) / (aj - ai) * (sj - si)).max()))
    return best


def above_rule_envelope(data: dict[str, dict], head: str, methods: dict[str, str], seed: int = 0,
                        level: float = 0.95) -> dict | None:
    """The head's score minus the upper envelope (envelope_at) of every training-free rule point (TRAINING_FREE)
    at the head's acceptance, on the prompts all of them share; prompts resampled jointly for the head and every
    point, and the envelope's value there. None when no rule point ran on all the head's prompts, or the head
    accepts more than any of them (the envelope does not reach it). `head` may itself be a rule point (one chosen on
    validation, say): it is then measured against every *other* point."""
    keys = sorted(data[head])
    pts_l = [lab for lab in data if lab != head and methods.get(lab) in TRAINING_FREE and keys
             and set(keys) <= set(data[lab])]
    if not pts_l:
        return None
    h = np.array([data[head][k] for k in keys], dtype=np.float64)
    pts = np.stack([np.array([data[lab][k] for k in keys], dtype=np.float64) for lab in pts_l])  # [L, n, 3]

    def gap(rows: np.ndarray) -> float:
        acc = pts[:, rows, 1].sum(-1) / pts[:, rows, 2].sum(-1)
        return float(h[rows, 0].mean() - envelope_at(acc, pts[:, rows, 0].mean(-1), h[rows, 1].sum() / h[rows, 2].sum()))

    g = gap(np.arange(len(keys)))
    if not np.isfinite(g):
        return None
    rng = np.random.default_rng(seed)
    boot = np.array([gap(rng.integers(0, len(keys), len(keys))) for _ in range(N_BOOT)])
    lo, hi = np.nanquantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"n": len(keys), "points": pts_l, "gap": g, "ci": (float(lo), float(hi)),
            "head_acceptance": h[:, 1].sum() / h[:, 2].sum(), "envelope": h[:, 0].mean() - g}


def report(run_dirs: list[Path], ref: str | None = None, plot: Path | None = None, level: float = 0.95,
           partial: bool = False) -> str:
    labels = finished_labels(run_dirs, partial)
    if not labels:
        raise SystemExit(f"no finished method (<label>/metrics.json) under {', '.join(map(str, run_dirs))}")
    if not 0 < level < 1:
        raise SystemExit(f"--level must be in (0, 1), got {level}")
    pct = f"{100 * level:g}%"
    check_sets(run_dirs, labels, partial)
    data = {lab: per_prompt(run_dirs, lab, partial) for lab in labels}
    stats = {lab: pooled_stats(data[lab], level) for lab in labels}
    rows = pooled_rows(run_dirs, stats)
    if plot is not None and rows:
        plot_quality_vs_acceptance(rows, plot, f"pooled over {len(run_dirs)} set(s), n = "
                                   f"{max(m['num_samples'] for m in rows)}: task quality vs acceptance")
    lines = [f"Pooled over {len(run_dirs)} disjoint prompt set(s): {', '.join(map(str, run_dirs))}", "",
             f"| method | n | score | {pct} CI | acceptance | drafted |", "|---|---|---|---|---|---|"]
    for lab, st in stats.items():
        (lo, hi), a = st["task_score_ci"], st["acceptance_rate"]
        accept = "-" if a is None else f"{a:.3f}"
        n = f"{st['num_samples']} (partial)" if partial and cut_short(run_dirs, lab) else st["num_samples"]
        lines.append(f"| {lab} | {n} | {st['task_score']:.3f} | [{lo:.3f}, {hi:.3f}] | {accept} | "
                     f"{st['drafted']:,} |")
    comp = comparison_lines(rows)
    if comp:
        lines += ["", "Against the issue's bars, pooled (only methods finished on every set; point estimates, as "
                  "eval/frontier.py reads one set):", "", *comp]
    if ref is None:
        ref = next((lab for lab in labels if lab.startswith("diversed")), None)
        if ref is None:
            return "\n".join(lines)
    if ref not in data:
        raise SystemExit(f"--ref {ref!r} is not a finished method here; have: {', '.join(labels)}")
    lines += ["", f"Paired differences, {ref} minus each method (the same prompts; {N_BOOT:,} bootstrap resamples of "
              "prompts):", "", f"| method | score diff | {pct} CI | acceptance diff | {pct} CI |", "|---|---|---|---|---|"]
    for lab in labels:
        if lab == ref or not set(data[ref]) & set(data[lab]):
            continue
        p = paired_difference(data[ref], data[lab], level=level)
        (lo, hi), (alo, ahi) = p["score_ci"], p["accept_ci"]
        # an autoregressive method drafts nothing: it has no acceptance to differ in
        acc = (f"{p['accept']:+.3f} | [{alo:+.3f}, {ahi:+.3f}]" if np.isfinite(p["accept"]) else "- | -")
        lines.append(f"| {lab} (n={p['n']}) | {p['score']:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {acc} |")
    methods = {lab: method_of(run_dirs, lab) for lab in labels}
    line = above_static_line(data, ref, methods, level=level) if methods[ref] == "diversed" else None
    if line is not None:
        lo, hi = line["ci"]
        lines += ["", f"{ref} minus the static line at its acceptance (the line through {', '.join(line['points'])} "
                  f"by acceptance, linear between them and flat beyond its ends; n={line['n']}, prompts resampled "
                  "jointly): score "
                  f"{line['gap']:+.3f} [{lo:+.3f}, {hi:+.3f}]"]
    # a head, or a rule (chosen on validation, say) against the envelope of every other rule
    is_rule = methods[ref] in TRAINING_FREE
    pointed = methods[ref] == "diversed" or is_rule
    env = above_rule_envelope(data, ref, methods, level=level) if pointed else None
    other = " other" if is_rule else ""
    if env is not None:
        lo, hi = env["ci"]
        lines += ["", f"{ref} minus the upper envelope of every{other} training-free rule point ({len(env['points'])}: "
                  f"{', '.join(sorted(set(methods[p] for p in env['points'])))}) at its acceptance "
                  f"{env['head_acceptance']:.3f} (envelope {env['envelope']:.3f}; eval/pool.py envelope_at; "
                  f"n={env['n']}, prompts resampled jointly): score {env['gap']:+.3f} [{lo:+.3f}, {hi:+.3f}]"]
    elif pointed:
        lines += ["", f"{ref}: no{other} training-free rule point here reaches its acceptance (no envelope to compare)"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--ref", default=None, help="the method the others are compared with (default: the first head)")
    ap.add_argument("--plot", type=Path, default=None, help="write the pooled quality-vs-acceptance picture here")
    ap.add_argument("--level", type=float, default=0.95, help="confidence level of every interval (default 0.95)")
    ap.add_argument("--partial", action="store_true",
                    help="also the methods cut short (killed or still running): their decoded prompts, marked "
                         "'partial', paired on the prompts they share, and never in the bars or the picture")
    args = ap.parse_args()
    for d in args.run_dirs:
        if not d.is_dir():
            raise SystemExit(f"not a run directory: {d}")
    print(report(args.run_dirs, args.ref, args.plot, args.level, args.partial))


if __name__ == "__main__":
    main()
