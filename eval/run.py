"""Evaluate one decoding method (or a static-ensemble sweep) on a task: quality, acceptance and speed.

    python eval/run.py task=gsm8k method=sd eval.num_samples=100
    python eval/run.py task=gsm8k method=diversed head=outputs/.../export
    python eval/run.py task=gsm8k method=static_sweep
    python eval/run.py -m task=gsm8k method=ar_target,sd,lossy,cascade

Writes into the run directory: samples.jsonl (one line per finished sample, appended as batches finish),
batches.jsonl (timing per batch), run.json (what the run is; `resume=true` checks it), metrics.json, table.md.
A static sweep writes one such directory per w under the run directory plus a summary table.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python eval/run.py`: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

import data.build_models  # noqa: F401 (registers the embedded-trio builder: model=tiny is built on first use)
from data.tasks import Task, chat_stop_for, get_task, stop_on_match, stops_for
from eval.metrics import (
    acceptance_metrics,
    bootstrap_ci,
    markdown_table,
    speed_metrics,
    validate_metrics,
)
from specdec.jsonl import append_jsonl, read_jsonl, repair_jsonl, rewrite_jsonl, settings_diff
from specdec.models import encode_prompt
from specdec.proposers import drafter_sha256
from specdec.registry import MethodSpec, Models, build_method, head_task, w_str

SAMPLES, BATCHES, RUN, METRICS, TABLE = "samples.jsonl", "batches.jsonl", "run.json", "metrics.json", "table.md"
log = logging.getLogger(__name__)


# ---------------------------------------------------------------- per-row records from the engine
def row_record(out: Any, b: int, gamma: int) -> dict:
    """What eval keeps of one generated row: per-round acceptance data and per-token TV sums.

    Tokens are split into *tested* positions (an accepted draft, or the position of the first rejection) and
    bonus positions (after a full acceptance). On tested positions a static ensemble satisfies, in expectation,
    rejection + TV(nu, p) = TV(p, q) exactly, so the frontier line is checked there.
    """
    r = out.rounds
    active = r["active"][:, b].bool()
    acc = r["accepted"][active, b].tolist()
    drafted = r["drafted"][active, b].tolist()
    a = [[round(x, 6) for x in row] for row in r["expected_accept"][active, b].tolist()]
    beta = [[round(x, 6) for x in row] for row in r["accept_prob"][active, b].tolist()]
    rec = out.records
    T = int(rec["token_mask"][b].sum())
    bonus = torch.zeros(T, dtype=torch.bool)
    pos = 0
    for n, d in zip(acc, drafted):  # each active round emitted n+1 tokens (the last round may be cut short)
        if d > 0 and n == d and pos + n < T:
            bonus[pos + n] = True
        pos += n + 1
    tested = ~bonus
    res: dict[str, Any] = {"accepted": acc, "drafted": drafted, "a": a, "beta": beta, "new_tokens": T}
    for key, src in (("tv_bias", "tv_nu_p"), ("tv_pq", "tv_pq"), ("w", "w")):
        v = rec[src][b, :T].float().cpu() if src in rec else torch.full((T,), float("nan"))
        ok = ~torch.isnan(v)
        res[f"{key}_sum"], res[f"{key}_n"] = float(v[ok].sum()), int(ok.sum())
        okt = ok & tested
        res[f"{key}_tested_sum"], res[f"{key}_tested_n"] = float(v[okt].sum()), int(okt.sum())
    return res


def cut_at_stop(text: str, stops: tuple[str, ...] | list[str]) -> str:
    """The completion up to the first stop string (plain prompting has no other way to end a turn)."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


# ---------------------------------------------------------------- files
# Signature keys that run.json files written before they existed do not hold: not checked against those (the
# resumed run records them from then on).
SIGNATURE_ADDED_LATER = ("head_sha256", "method_config", "model_settings", "reward_opts", "model_fingerprints",
                         "drafter_sha256")
# Method parameters added later, with the value that decodes exactly as runs made before them did: a record
# without the key resumes when the key now holds that value.
PARAMS_ADDED_LATER = {
    "typical": {"bonus": "p"},  # typical acceptance's bonus token (its ν-form came later)
    "cascade": {"bonus": "nu"},  # cascade's bonus token (its p-form came later)
}


def _plain(x: Any) -> Any:
    return OmegaConf.to_container(x, resolve=True) if OmegaConf.is_config(x) else x


def _without_params_added_later(signature: dict, old: dict) -> dict:
    """The signature a resume compares with the record `old`: method parameters the record lacks are left out where
    they hold the value that decodes as the record did (PARAMS_ADDED_LATER)."""
    out, later = dict(signature), PARAMS_ADDED_LATER.get(signature.get("method"), {})
    for section in ("params", "method_config"):
        if isinstance(out.get(section), dict) and isinstance(old.get(section), dict):
            out[section] = {k: v for k, v in out[section].items()
                            if not (k not in old[section] and later.get(k, object()) == v)}
    return out


def _check_resume(out_dir: Path, signature: dict, resume: bool) -> None:
    signature = json.loads(json.dumps(signature))  # compare as stored (tuples become lists)
    run_file = out_dir / RUN
    if run_file.exists() or (out_dir / SAMPLES).exists():
        if not resume:
            raise FileExistsError(
                f"{out_dir} already holds results of an evaluation; pass resume=true to continue it, or choose "
                f"another directory (hydra.run.dir=...)"
            )
        old = json.loads(run_file.read_text()) if run_file.exists() else {}
        now = _without_params_added_later(signature, old)
        # the roles loaded so far depend on what ran before in this process (a sweep's cd loads the amateur):
        # compare the models both records fingerprint
        had, has = old.get("model_fingerprints") or {}, now["model_fingerprints"]
        diff = settings_diff({**old, "model_fingerprints": {r: had[r] for r in had.keys() & has.keys()}},
                             {**now, "model_fingerprints": {r: has[r] for r in had.keys() & has.keys()}},
                             optional=SIGNATURE_ADDED_LATER)
        if diff:
            shown = "; ".join(diff)
            raise ValueError(f"cannot resume {out_dir}: it was run with different settings ({shown})")
    out_dir.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(signature, indent=2, sort_keys=True))


# ---------------------------------------------------------------- data
def data_settings(cfg: DictConfig) -> dict:
    """Where examples come from: the task config's `data` section, overridden by the top-level `data`."""
    d: dict[str, Any] = {"source": "synthetic", "path": None, "split": "test"}
    for section in (cfg.task.get("data"), cfg.get("data")):
        if section:
            d.update({k: v for k, v in OmegaConf.to_container(section, resolve=True).items() if v is not None})
    if d.get("path") and d["source"] == "synthetic":
        d["source"] = "file"
    return d


def load_task_examples(cfg: DictConfig, task: Task):
    from data.loaders import load_examples

    d = data_settings(cfg)
    # the data seed (task config) is not the decoding seed: repeats with other seeds see the same examples.
    # data.holdout (file data): draw from the rows other evaluations did not, e.g. a validation set beside a test set
    return load_examples(task.name, path=d.get("path"), source=d["source"], split=d["split"],
                         n=None if cfg.eval.num_samples is None else int(cfg.eval.num_samples),
                         seed=int(d.get("seed", 0)), holdout=d.get("holdout"))


def encode_prompts(task: Task, rows: list[dict], tokenizer, window: int, reserve: int) -> tuple[list, int]:
    """Token ids of each prompt, keeping the last (window - reserve) tokens of an over-long prompt."""
    keep = window - reserve
    if keep < 1:
        raise ValueError(f"the context window ({window}) is smaller than max_new_tokens + gamma + 1 ({reserve}); "
                         "lower eval.max_new_tokens")
    ids, cut = [], 0
    for ex in rows:
        x = encode_prompt(tokenizer, task.format_prompt(ex, tokenizer))
        if len(x) > keep:
            x, cut = x[-keep:], cut + 1
        ids.append(x)
    return ids, cut


# ---------------------------------------------------------------- one method
def _batches(indices: list[int], groups: list[Any], size: int) -> list[list[int]]:
    """Batches that never mix groups (specbench categories), so speed is measured per group; groups in order of
    first appearance, indices in order within a group."""
    by_group: dict[Any, list[int]] = {}
    for i in indices:
        by_group.setdefault(groups[i], []).append(i)
    return [idx[k:k + size] for idx in by_group.values() for k in range(0, len(idx), size)]


def run_method(
    cfg: DictConfig, spec: MethodSpec, models: Models, task: Task, examples: Any, out_dir: Path,
    *, generate_fn: Any = None,
) -> dict:
    """Generate, score and measure one method on the examples; returns the metrics dict (also written)."""
    from specdec.generate import generate as engine_generate

    generate_fn = generate_fn or spec.generate_fn or engine_generate
    out_dir = Path(out_dir)
    rows = examples.rows
    n = len(rows)
    target = spec.target or models.target
    tok = models.tokenizer
    max_new = int(cfg.eval.max_new_tokens or cfg.task.get("max_new_tokens") or task.max_new_tokens)
    temperature = float(cfg.temperature)
    bs = int(cfg.eval.batch_size)
    seed = int(cfg.seed)
    head = cfg.get("head_path") if spec.head_meta is not None else None
    # chat models: a row ends once its text matches the task's chat stop (e.g. a closed code block)
    chat_stop = chat_stop_for(task, tok)
    signature = {
        "method": cfg.method.name, "label": spec.label, "params": spec.params, "task": task.name,
        "data": data_settings(cfg), "data_label": examples.label, "num_samples": n, "seed": seed,
        "temperature": temperature, "gamma": spec.gamma, "max_new_tokens": max_new, "batch_size": bs,
        "model": models.names(), "head": str(head) if head else None,
        # the models' weights, not only their paths: a trio rebuilt in place must not be resumed into
        "model_fingerprints": models.fingerprints(),
        "chat_stop": chat_stop.pattern if chat_stop else None,
        # the head's weights, not only its path: a resumed training run re-exports to the same directory
        "head_sha256": (spec.head_meta or {}).get("weights_sha256") if head else None,
        # likewise a feature drafter's weights: train/drafter.py re-exports to the same <run dir>/drafter
        "drafter_sha256": drafter_sha256(spec.proposer),
        "method_config": _plain(cfg.method),  # max_ngram, drafter, threshold, ...
        # the dtype used ("auto" resolved), so bf16 and float32 runs never resume into each other
        "model_settings": {"dtype": models.dtype, "device": (cfg.get("model") or {}).get("device")},
        "reward_opts": _plain(cfg.task.get("reward_opts") or {}),
    }
    _check_resume(out_dir, signature, bool(cfg.get("resume", False)))

    prompts, cut = encode_prompts(task, rows, tok, target.max_positions, max_new + spec.gamma + 1)
    if cut:
        log.warning(f"[eval] {cut} prompt(s) longer than the context window were cut to their last tokens")
    groups = [ex.get("category") for ex in rows]
    repair_jsonl(out_dir / SAMPLES)
    repair_jsonl(out_dir / BATCHES)
    drop_partial_batches(out_dir)
    done = {s["idx"] for s in read_jsonl(out_dir / SAMPLES)}
    todo = [i for i in range(n) if i not in done]
    if done:
        log.info(f"[eval] resuming {out_dir}: {len(done)} sample(s) done, {len(todo)} to go")
    eos = tok.eos_token_id
    stops = stops_for(task, tok)
    stop = stop_on_match(chat_stop, tok)

    def gen(idx: list[int], max_tokens: int, g: torch.Generator):
        return generate_fn(target, spec.proposer, [prompts[i] for i in idx], rule=spec.rule, gamma=spec.gamma,
                           max_new_tokens=max_tokens, temperature=temperature, eos_token_id=eos,
                           amateur=spec.amateur, generator=g, stop=stop)

    def finish_text(toks: list[int]) -> str:
        text = cut_at_stop(tok.decode([t for t in toks if t != eos], skip_special_tokens=True), stops)
        m = chat_stop.search(text) if chat_stop is not None else None
        return text[: m.end()] if m else text

    bar = tqdm(total=n, initial=n - len(todo), desc=spec.label, unit="sample",
               disable=not cfg.eval.get("progress", True))
    warm = not cfg.eval.get("warmup", True)
    for batch in _batches(todo, groups, bs):
        g = torch.Generator(device=target.device).manual_seed(seed * 1_000_003 + batch[0])
        if not warm:  # first call pays for allocations and kernel selection: never timed
            gen(batch[:1], min(8, max_new), torch.Generator(device=target.device).manual_seed(seed))
            warm = True
        t0 = time.perf_counter()
        out = gen(batch, max_new, g)
        wall = time.perf_counter() - t0
        texts = [finish_text(toks) for toks in out.tokens]
        scores: list[float | None] = [None] * len(batch)
        if task.reward is not None:
            from rewards import score

            opts = dict(cfg.task.get("reward_opts") or {})
            scores = list(score(task.name, texts, [task.reference(rows[i]) for i in batch], **opts).scores)
        lines = []
        for b, i in enumerate(batch):
            lines.append({"idx": i, "batch": batch[0], "id": rows[i].get("id", rows[i].get("question_id", i)),
                          "category": groups[i],
                          "completion": texts[b], "finish": out.finish_reason[b], "score": scores[b],
                          **row_record(out, b, spec.gamma)})
        st = out.stats
        append_jsonl(out_dir / BATCHES, [{
            "first_idx": batch[0], "size": len(batch), "category": groups[batch[0]], "wall_s": wall,
            "new_tokens": int(st.get("new_tokens", sum(len(t) for t in out.tokens))),
            "time_proposer": float(st.get("time_proposer", 0.0)), "time_target": float(st.get("time_target", 0.0)),
            "time_amateur": float(st.get("time_amateur", 0.0)), "time_verify": float(st.get("time_verify", 0.0)),
            "proposer_calls": int(st.get("proposer_calls", 0)), "target_calls": int(st.get("target_calls", 0)),
        }])
        append_jsonl(out_dir / SAMPLES, lines)  # last: a sample line means its batch is fully recorded
        bar.update(len(batch))
    bar.close()

    return finish_metrics(cfg, spec, task, examples, out_dir, signature)


def _summary(samples: list[dict], batches: list[dict], cfg: DictConfig) -> dict:
    m = acceptance_metrics(samples)
    m.update(speed_metrics(batches))
    scores = [s["score"] for s in samples if s.get("score") is not None]
    m["task_score"] = float(sum(scores) / len(scores)) if scores else None
    m["task_score_ci"] = (list(bootstrap_ci(scores, n_boot=int(cfg.eval.get("bootstrap", 2000)),
                                            seed=int(cfg.seed))) if scores else None)
    m["truncation_rate"] = (sum(s.get("finish") == "length" for s in samples) / len(samples)) if samples else None
    m["new_tokens"] = int(sum(s["new_tokens"] for s in samples))
    m["num_samples"] = len(samples)
    return m


def drop_partial_batches(out_dir: Path) -> None:
    """A kill in the middle of appending a batch's samples leaves part of the batch on disk. Drop that part, so the
    whole batch runs again with its own seed: the resumed run then equals an uninterrupted one and its timing
    record is replaced rather than joined by a second one. Lines without a batch tag (older runs) are kept."""
    sizes = {b["first_idx"]: b["size"] for b in read_jsonl(out_dir / BATCHES)}
    samples = read_jsonl(out_dir / SAMPLES)
    count = Counter(s.get("batch") for s in samples)
    partial = {k for k, c in count.items() if k is not None and k in sizes and c < sizes[k]}
    if partial:
        log.warning(f"[eval] {out_dir}: batch(es) starting at {sorted(partial)} were cut mid-write; they run again")
        rewrite_jsonl(out_dir / SAMPLES, [s for s in samples if s.get("batch") not in partial])


def finish_metrics(cfg: DictConfig, spec: MethodSpec, task: Task, examples: Any, out_dir: Path,
                   signature: dict) -> dict:
    """Aggregate samples.jsonl + batches.jsonl of a run directory into metrics.json and table.md."""
    samples = sorted({s["idx"]: s for s in read_jsonl(out_dir / SAMPLES)}.values(), key=lambda s: s["idx"])
    # a crash between the two appends re-runs that batch on resume: keep its last timing only
    batches = list({b["first_idx"]: b for b in read_jsonl(out_dir / BATCHES)}.values())
    htask = head_task(spec.head_meta) if spec.head_meta else None
    m: dict[str, Any] = {
        "method": cfg.method.name, "label": spec.label, "task": task.name, "data_label": examples.label,
        "data_source": str(examples.source), "seed": signature["seed"], "temperature": signature["temperature"],
        "gamma": spec.gamma, "batch_size": signature["batch_size"], "max_new_tokens": signature["max_new_tokens"],
        "model": signature["model"], "params": spec.params, "head": signature["head"], "head_task": htask,
        "cross_task": bool(htask is not None and htask != task.name),
        "dtype": signature["model_settings"]["dtype"],  # the models' dtype ("auto" resolved)
    }
    m.update(_summary(samples, batches, cfg))
    if spec.extra_metrics is not None:
        m.update(spec.extra_metrics(samples, batches))
    cats = sorted({s["category"] for s in samples if s.get("category") is not None})
    m["per_category"] = ({c: _summary([s for s in samples if s.get("category") == c],
                                      [b for b in batches if b.get("category") == c], cfg) for c in cats}
                         if cats else None)
    validate_metrics(m)
    (out_dir / METRICS).write_text(json.dumps(m, indent=2, sort_keys=True))
    table = markdown_table([m])
    if m["per_category"]:
        table += "\n\nPer category:\n\n" + markdown_table([{**v, "label": c} for c, v in m["per_category"].items()])
    if m["cross_task"]:
        table += f"\n\nCross-task: head trained on {htask}, evaluated on {task.name}."
    (out_dir / TABLE).write_text(table + "\n")
    return m


# ---------------------------------------------------------------- entry
def method_cfg(cfg: DictConfig, **overrides: Any) -> DictConfig:
    """A copy of cfg with method fields replaced (used by the static sweep and the frontier)."""
    c = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for k, v in overrides.items():
        c.method[k] = v
    return c


def evaluate(cfg: DictConfig, out_dir: str | Path | None = None, models: Models | None = None) -> list[dict]:
    """Run the configured method (or a static sweep) into out_dir; returns one metrics dict per run."""
    if out_dir is None:
        out_dir = cfg.get("out_dir") or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir
    out_dir = Path(out_dir)
    torch.manual_seed(int(cfg.seed))
    task = get_task(cfg.task.name)
    examples = load_task_examples(cfg, task)
    if not examples.rows:
        raise ValueError(f"no examples loaded for task {task.name!r} (data: {data_settings(cfg)})")
    models = models or Models(cfg.model)
    if cfg.method.name == "static_sweep":
        results = []
        for w in cfg.method.grid:
            c = method_cfg(cfg, name="static", w=float(w))
            spec = build_method("static", models, c)
            results.append(run_method(c, spec, models, task, examples, out_dir / f"w={w_str(float(w))}"))
        table = markdown_table(results)
        (out_dir / TABLE).write_text(table + "\n")
        log.info("[eval] results (%s):\n%s", out_dir / TABLE, table)
        return results
    spec = build_method(cfg.method.name, models, cfg)
    m = run_method(cfg, spec, models, task, examples, out_dir)
    log.info("[eval] results (%s):\n%s", out_dir / TABLE, (out_dir / TABLE).read_text().rstrip())
    return [m]


def log_wandb(cfg: DictConfig, results: list[dict], images: dict[str, Path] | None = None,
              run_dir: str | Path | None = None) -> None:
    """Metrics (and pictures) to W&B when the logger group says so (logger=wandb|online|offline): each method's
    final metrics go into the run summary (train/wandb_run.py, the one W&B helper of the jobs)."""
    from train.wandb_run import log_results

    log_results(cfg, results, images, run_dir=run_dir, job_type="eval")


def rewrite_head_arg(argv: list[str]) -> list[str]:
    """`head=PATH` → `head_path=PATH`: conf/head/ is the training's head-architecture group, so Hydra would read
    `head=...` as a choice in that group."""
    return [("head_path=" + a[len("head="):]) if a.startswith("head=") else a for a in argv]


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    if cfg.get("num_threads"):
        torch.set_num_threads(int(cfg.num_threads))
    results = evaluate(cfg)
    out_dir = cfg.get("out_dir") or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir
    log_wandb(cfg, results, run_dir=out_dir)


if __name__ == "__main__":
    sys.argv = rewrite_head_arg(sys.argv)
    main()
