"""pass@1 for MBPP and HumanEval through the sandbox: gold solutions pass, broken ones fail, chat-style output works."""

import json
import random
from pathlib import Path

import pytest

from data.loaders import load_examples
from data.tasks import get_task
from rewards import score
from rewards.code import extract_code, humaneval_program

FIX = Path(__file__).resolve().parent / "fixtures" / "tasks"


@pytest.fixture
def shared_data(shared_dir):
    if not (shared_dir / "data").is_dir():
        pytest.skip(f"{shared_dir / 'data'} is absent")
    return shared_dir / "data"


def test_mbpp_canonical_solutions_pass(shared_data):
    """40 random problems of the sanitized sample. All 427 pass here (measured once, ~40 s on 2 cores); a failure
    must be explained by the sample itself, so the message lists each one with its reason."""
    task = get_task("mbpp")
    rows = json.loads((shared_data / "mbpp" / "sanitized-mbpp.json").read_text())
    rows = random.Random(0).sample(rows, 40)
    res = score(task, [r["code"] for r in rows], [task.reference(r) for r in rows], max_workers=2)
    failures = [(r["task_id"], d["status"], d["error"]) for r, s, d in zip(rows, res.scores, res.details) if not s]
    print(f"MBPP canonical solutions: {len(rows) - len(failures)}/{len(rows)} pass; failures: {failures}")
    assert not failures, failures


def test_mbpp_broken_solutions_fail(shared_data):
    task = get_task("mbpp")
    rows = json.loads((shared_data / "mbpp" / "sanitized-mbpp.json").read_text())[:4]
    refs = [task.reference(r) for r in rows]
    broken = [
        rows[0]["code"].replace("return", "return None and", 1),  # wrong answer
        "def f(:\n    pass",  # syntax error
        rows[2]["code"] + "\nraise RuntimeError('boom')",  # crashes before the tests
        "",  # nothing
    ]
    res = score(task, broken, refs)
    assert res.scores == [0.0] * 4
    assert [d["status"] for d in res.details[1:3]] == ["syntax_error", "error"]


def test_mbpp_fixture_uses_setup_code_and_imports():
    task = get_task("mbpp")
    rows = load_examples("mbpp", path=FIX / "mbpp.jsonl").rows
    rows += load_examples("mbpp", path=FIX / "mbpp_sanitized.json").rows
    res = score(task, [task.target_text(r) for r in rows], [task.reference(r) for r in rows])
    assert res.scores == [1.0, 1.0, 1.0], res.details


def test_humaneval_canonical_solutions_pass_and_broken_fail():
    task = get_task("humaneval")
    rows = load_examples("humaneval", n=12, seed=0).rows  # the bundled real problems
    refs = [task.reference(r) for r in rows]
    res = score(task, [task.target_text(r) for r in rows], refs, max_workers=2)
    assert res.scores == [1.0] * len(rows), [d for d in res.details if d["status"] != "passed"]
    broken = score(task, ["    return None\n"] * len(rows), refs)
    assert sum(broken.scores) == 0


def test_chat_style_completions():
    task = get_task("humaneval")
    row = load_examples("humaneval", path=FIX / "humaneval.jsonl").rows[0]
    ref = task.reference(row)
    fenced = "Here you go:\n```python\ndef double(x: int) -> int:\n    return x * 2\n```\nDone."
    body = "    return x + x\n"
    assert score(task, [fenced, body, "```python\ndef double(x):\n    return x\n```"], [ref] * 3).scores == [
        1.0, 1.0, 0.0,
    ]
    assert extract_code(fenced).startswith("def double") and extract_code(body) == body
    parts = humaneval_program(body, ref)
    assert parts[-1][1].rstrip().endswith("check(double)")


def test_tests_cannot_be_swallowed_by_an_open_string():
    task = get_task("mbpp")
    ref = {"test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"], "test_setup_code": "", "test_imports": []}
    # an unterminated triple quote would turn the asserts into a string if code and tests were one program
    completion = "def add(a, b):\n    return a + b\nx = '''"
    res = score(task, [completion], [ref])
    assert res.scores == [0.0] and res.details[0]["status"] == "syntax_error"
