"""GSM8K, ROUGE and MMLU rewards, on hand-made cases and on the real samples in ../shared/data."""

import json
import random

import pytest

from data.loaders import load_examples
from data.tasks import get_task
from rewards import score
from rewards.gsm8k import extract_answer
from rewards.mmlu import extract_letter


@pytest.fixture
def shared_data(shared_dir):
    if not (shared_dir / "data").is_dir():
        pytest.skip(f"{shared_dir / 'data'} is absent")
    return shared_dir / "data"


@pytest.mark.parametrize(
    "completion, expected, method",
    [
        ("5 + 3 = 8\n#### 8", "8", "####"),
        ("#### $1,234", "1234", "####"),
        ("#### 18.0.", "18", "####"),
        ("#### -7", "-7", "####"),
        ("#### $-7", "-7", "####"),
        ("Costs 3 then 4.\n#### \nFinal Answer: 12", "12", "final_answer"),
        ("The final answer is 2,000.50", "2000.5", "final_answer"),
        ("She pays 5 dollars, then 7 dollars more.", "7", "last_number"),
        ("#### 7 apples (not 8)", "7", "####"),
        ("no number here", None, None),
        # never a piece of a longer token: a bare decimal, a comma that is not a thousands group, a range
        ("#### .5", None, None),
        ("#### 1,5", None, None),  # neither 15 nor 1 nor 5
        ("#### 1,00", None, None),
        ("#### 12,5 apples", None, None),
        ("#### 1,000,5", None, None),
        ("#### −5", "-5", "####"),  # the Unicode minus sign
        ("#### – 5", "5", "####"),  # a sign spaced from its number is not read as one (a minus in "3 - 5")
        ("It takes 5-10 minutes", "10", "last_number"),
        ("#### 007.50", "7.5", "####"),
        # exact at any length (a Decimal context rounds at 28 digits)
        ("#### 12345678901234567890123456789999", "12345678901234567890123456789999", "####"),
    ],
)
def test_gsm8k_extraction_order_and_normalisation(completion, expected, method):
    assert extract_answer(completion) == (expected, method)


def test_gsm8k_scores():
    res = score("gsm8k", ["... #### 1,000", "#### 999", "Final Answer: $1000.00", ""], ["1000"] * 4)
    assert res.scores == [1.0, 0.0, 1.0, 0.0]
    wrong = score("gsm8k", ["#### .5", "#### 1,5", "#### 1,5", "#### 12345678901234567890123456789999", "#### −5"],
                  ["5", "15", "1", "12345678901234567890123456789000", "5"])
    assert wrong.scores == [0.0] * 5
    assert res.details[0] == {"extracted": "1000", "method": "####", "reference": "1000"}
    with pytest.raises(ValueError, match="completions but"):
        score("gsm8k", ["#### 1"], ["1", "2"])


def test_gsm8k_reference_answers_score_one(shared_data):
    ex = load_examples("gsm8k", path=shared_data / "gsm8k" / "test.jsonl")
    task = get_task("gsm8k")
    refs = [task.reference(r) for r in ex.rows]
    assert score(task, [task.target_text(r) for r in ex.rows], refs).scores == [1.0] * len(ex.rows)
    wrong = [f"#### {int(float(r.replace(',', ''))) + 1}" for r in refs]
    assert sum(score(task, wrong, refs).scores) == 0


def test_rouge_identity_and_shuffle(shared_data):
    for task, rel in (("cnndm", "cnn_dailymail/sample.jsonl"), ("xsum", "xsum/sample.json")):
        if not (shared_data / rel).exists():
            continue
        t = get_task(task)
        refs = [t.reference(r) for r in load_examples(task, path=shared_data / rel).rows]
        same = score(t, refs, refs)
        assert all(abs(s - 1.0) < 1e-9 for s in same.scores)
        assert all(abs(d[k] - 1.0) < 1e-9 for d in same.details for k in ("rouge1", "rouge2", "rougeL"))
        shuffled = refs[1:] + refs[:1]  # every summary paired with another article's
        other = score(t, shuffled, refs)
        assert all(o < s for o, s in zip(other.scores, same.scores))
        assert sum(other.scores) / len(refs) < 0.2


def test_rouge_options():
    ref = "The cats were running across the gardens."
    pred = "the cat runs across a garden"
    r1 = score("xsum", [pred], [ref], rouge_type="rouge1").scores[0]
    r2 = score("xsum", [pred], [ref]).scores[0]  # ROUGE-2 by default
    assert 0 < r2 < r1 < 1  # stemming matches cats/cat, gardens/garden, running/runs
    assert score("xsum", [""], [ref]).scores == [0.0]
    with pytest.raises(ValueError, match="rouge_type"):
        score("xsum", [pred], [ref], rouge_type="bleu")


@pytest.mark.parametrize(
    "completion, letter",
    [(" B", "B"), ("B.", "B"), ("(C) because", "C"), ("D", "D"), ("The answer is (A).", "A"),
     ("Answer: c", "C"), ("I think it is D here", "D"), ("none of them", None), ("B\nbecause ...", "B"),
     # an article is not an answer: "A rise ..." is no leading letter, "answer is a decrease" states no letter
     ("A rise in rates cuts demand, so the answer is D.", "D"),
     ("The correct answer is a decrease in supply (C).", "C"), ("the answer is (b)", "B")],
)
def test_mmlu_letter_extraction(completion, letter):
    assert extract_letter(completion)[0] == letter


def test_mmlu_gold_targets_score_one(shared_data):
    task = get_task("mmlu")
    rows = load_examples("mmlu", path=shared_data / "mmlu" / "dev").rows
    refs = [task.reference(r) for r in rows]
    assert score(task, [task.target_text(r) for r in rows], refs).scores == [1.0] * len(rows)
    rng = random.Random(0)
    wrong = [" " + rng.choice([c for c in "ABCD" if c != ref]) for ref in refs]
    assert sum(score(task, wrong, refs).scores) == 0


def test_specbench_has_no_reward():
    with pytest.raises(ValueError, match="no reward"):
        score("specbench", ["x"], [None])


def test_shared_sample_is_valid_json(shared_data):
    # the ROUGE test above relies on these files; make their absence visible rather than silently passing
    present = [p for p in ("cnn_dailymail/sample.jsonl", "xsum/sample.json") if (shared_data / p).exists()]
    assert present, "no summarisation sample in ../shared/data"
    json.loads((shared_data / present[0]).read_text().splitlines()[0])


def test_evaluate_metric_module_loads_offline_and_equals_the_reward(monkeypatch, tmp_path):
    """rewards/evaluate_rouge: an `evaluate` metric module kept in the repo loads with evaluate.load(<dir>) offline
    and gives the numbers of rewards/rouge.py (the task reward) per example and as means."""
    from pathlib import Path

    import evaluate

    from rewards.rouge import ROUGE_TYPES
    from rewards.rouge import score as rouge_score

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    preds = ["The cats were sitting on the mats.", "A storm hit the coast on Monday.", "", "Nothing in common"]
    refs = ["The cat sat on the mat.", "Storms hit the coast on Monday night.", "Something.", "at all here"]
    metric = evaluate.load(str(Path(__file__).resolve().parents[1] / "rewards" / "evaluate_rouge"))
    per = metric.compute(predictions=preds, references=refs, use_aggregator=False)
    means = metric.compute(predictions=preds, references=refs)
    for t in ROUGE_TYPES:
        want, _ = rouge_score(preds, refs, rouge_type=t)
        assert per[t] == want and means[t] == pytest.approx(sum(want) / len(want))
    assert 0 < per["rouge2"][1] < 1 and per["rouge1"][2] == 0.0
