"""Synthetic task generators: determinism, disjoint splits, schema, correctness of the gold answers."""

import re
import subprocess
import sys

import pytest

from data import synthetic
from data.synthetic import generate

SCHEMA = {
    "gsm8k": {"question": str, "answer": str},
    "cnndm": {"article": str, "highlights": str},
    "xsum": {"document": str, "summary": str},
    "mbpp": {"text": str, "code": str, "test_list": list, "test_setup_code": str},
}
CANON = {"gsm8k": "question", "cnndm": "article", "xsum": "document"}


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_same_seed_same_data_other_seed_other_data(task):
    a = generate(task, "train", 50, seed=3)
    assert a == generate(task, "train", 50, seed=3)
    b = generate(task, "train", 50, seed=4)
    assert sum(x != y for x, y in zip(a, b)) > 40


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_splits_disjoint_across_seeds(task):
    def key(r):
        return r[CANON[task]] if task in CANON else r["text"] + "\n".join(r["test_list"])

    train = {key(r) for s in (0, 1) for r in generate(task, "train", 2000, seed=s)}
    test = [key(r) for s in (0, 7) for r in generate(task, "test", 300, seed=s)]
    assert not train & set(test)
    assert len(set(test)) > 0.9 * len(test)  # held-out problems are mostly distinct


@pytest.mark.parametrize("task", synthetic.TASKS)
def test_schema_fields(task):
    for row in generate(task, "test", 30, seed=0):
        assert set(row) == set(SCHEMA[task])
        for k, t in SCHEMA[task].items():
            assert isinstance(row[k], t), (k, row)
            if t is str and k != "test_setup_code":
                assert row[k].strip()


@pytest.mark.parametrize("style", synthetic.STYLES)
def test_gsm8k_arithmetic_is_right(style):
    rows = generate("gsm8k", "train", 500, seed=0, style=style) + generate("gsm8k", "test", 200, seed=1, style=style)
    for row in rows:
        lines = row["answer"].split("\n")
        assert lines[-1].startswith("#### ")
        final = int(lines[-1][5:])
        last = None
        worked = [ln for ln in lines[:-1] if re.search(r"\d", ln)]  # the opener line (filler) has no number
        assert len(lines) - 1 - len(worked) <= 1 and worked
        for line in worked:
            eqs = re.findall(r"(\d+) ([-+*/]) (\d+) = \$?(\d+)", line)
            assert eqs, line
            for a, op, b, c in eqs:
                assert eval(f"{a} {op} {b}") == int(c), line  # noqa: S307 (our own digits)
                last = int(c)
        assert last == final, row


def test_gsm8k_difficulty_knobs():
    easy = generate("gsm8k", "test", 100, seed=0, steps=(1, 1), max_operand=5)
    hard = generate("gsm8k", "test", 100, seed=0, steps=(3, 3), max_operand=40)
    def worked(r):  # lines with numbers before the final "####" line (an opener line has none)
        return [ln for ln in r["answer"].split("\n")[:-1] if re.search(r"\d", ln)]

    assert all(len(worked(r)) == 1 for r in easy)
    assert sum(len(worked(r)) for r in hard) > 2.5 * 100
    with pytest.raises(ValueError, match="no generator knobs"):
        generate("mbpp", "test", 1, seed=0, steps=(1, 1))


def test_summaries_are_short_and_three_sentences():
    for row in generate("cnndm", "test", 100, seed=0):
        assert len(row["highlights"].split("\n")) == 3
    for row in generate("xsum", "test", 100, seed=0):
        assert row["summary"].count(".") == 1 and row["summary"].endswith(".")


def test_mbpp_reference_code_passes_its_tests():
    rows = generate("mbpp", "test", 60, seed=0)
    prog = "\n\n".join(f"def _t{i}():\n" + "\n".join("    " + ln for ln in (
        r["code"] + "\n" + "\n".join(r["test_list"])).split("\n")) + f"\n_t{i}()" for i, r in enumerate(rows))
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    # and a broken solution fails its tests
    bad = rows[0]["code"].replace("return", "return None and", 1)
    out = subprocess.run([sys.executable, "-c", bad + "\n" + "\n".join(rows[0]["test_list"])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0


def test_bad_arguments_have_clear_errors():
    with pytest.raises(ValueError, match="no synthetic generator"):
        generate("humaneval", "train", 1, 0)
    with pytest.raises(ValueError, match="split must be"):
        generate("gsm8k", "validation", 1, 0)


def test_gsm8k_answer_connectives_follow_the_question_voice():
    """The wording is context-dependent: answer connectives mostly keep the voice the question set."""
    kept = total = 0
    for row in generate("gsm8k", "train", 800, seed=0):
        q_conns = {s.split(", ")[0] for s in row["question"].split(". ")[1:] if ", " in s}
        voice = [v for v, conns in enumerate(synthetic.Q_CONNECTIVES) if q_conns & set(conns)]
        assert len(voice) == 1, row["question"]
        for line in row["answer"].split("\n"):
            line = line.removeprefix("- ")
            for v, conns in enumerate(synthetic.A_CONNECTIVES):
                if any(line.startswith(c + " ") for c in conns):
                    total += 1
                    kept += v == voice[0]
    assert total > 300
    # VOICE_KEEP = 0.8 in-voice plus 1/3 of the other 0.2: about 0.87 expected, 1/3 if it were ignored
    assert 0.8 < kept / total < 0.94


def test_wording_style_b_prefers_other_paraphrases_with_the_same_content():
    """Style b (the draft's corpus) picks the same free wordings with other preferences: the openers and
    bullets of the worked answers are skewed towards the later options, while the questions (content) follow
    the same distribution."""
    def shares(rows):
        n = len(rows)
        first = [r["answer"].split("\n")[0] for r in rows]
        return {"count": sum(f.startswith("We count the ") for f in first) / n,
                "bullet": sum(r["answer"].count("\n- ") + r["answer"].startswith("- ") > 0 for r in rows) / n,
                "share_q": sum("shares them equally" in r["question"] for r in rows) / n}

    a = shares(generate("gsm8k", "train", 2000, seed=0))
    b = shares(generate("gsm8k", "train", 2000, seed=0, style="b"))
    c = shares(generate("gsm8k", "train", 2000, seed=0, style="c"))
    # opener: 1/4 uniform vs 27/40 under style b, 1000/1111 under c; bullet: 1/2 vs 3/4 vs 10/11
    # (binomial sd < 0.012 at n = 2000)
    assert abs(a["count"] - 0.25) < 0.04 and abs(b["count"] - 27 / 40) < 0.04 and abs(c["count"] - 1000 / 1111) < 0.04
    assert abs(a["bullet"] - 0.5) < 0.04 and abs(b["bullet"] - 0.75) < 0.04 and abs(c["bullet"] - 10 / 11) < 0.04
    # which problems are asked does not depend on the style
    assert abs(a["share_q"] - b["share_q"]) < 0.04 and abs(a["share_q"] - c["share_q"]) < 0.04
    with pytest.raises(ValueError, match="style must be"):
        generate("gsm8k", "train", 1, seed=0, style="d")


@pytest.mark.parametrize("task", ["cnndm", "xsum", "mbpp"])
def test_style_a_is_the_uniform_choice_and_style_b_differs(task):
    """Style a keeps the uniform draws (the same rows as before styles existed); style b changes the wording."""
    a = generate(task, "train", 300, seed=2)
    b = generate(task, "train", 300, seed=2, style="b")
    assert a == generate(task, "train", 300, seed=2, style="a")
    assert sum(x != y for x, y in zip(a, b)) > 100
    for row in b:
        assert set(row) == set(SCHEMA[task])
