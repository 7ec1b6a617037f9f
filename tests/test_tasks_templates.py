"""Prompt templates, references and gold completions: the contract the embedded models are trained on."""

import json
import re

import pytest

from data.tasks import HUMANEVAL_STOP, TASKS, get_task, stop_on_match, stops_for

GSM = {"question": "What is 2 + 3?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"}
MMLU_CSV = {"question": "2 + 2 = ?", "A": "3", "B": "4", "C": "5", "D": "6", "answer": "B"}
MMLU_HUB = {"question": "2 + 2 = ?", "subject": "math", "choices": ["3", "4", "5", "6"], "answer": 1}


def test_plain_templates_are_exact():
    assert get_task("gsm8k").format_prompt(GSM) == "Question: What is 2 + 3?\nAnswer (end with #### <number>):\n"
    assert get_task("cnndm").format_prompt({"article": "A."}) == (
        "Article: A.\nSummarize the article in three sentences.\nSummary:\n"
    )
    assert get_task("xsum").format_prompt({"document": "D."}) == (
        "Document: D.\nSummarize the document in one sentence.\nSummary:\n"
    )
    mbpp = {"text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1, 2) == 3", "x"]}
    assert get_task("mbpp").format_prompt(mbpp) == (
        "Task: Add.\nYour code should pass this test:\nassert add(1, 2) == 3\nCode:\n"
    )
    sanitized = {**mbpp, "prompt": "Add (sanitized).", "text": None}
    assert get_task("mbpp").format_prompt(sanitized).startswith("Task: Add (sanitized).\n")
    he = {"prompt": "def f():\n    \"\"\"doc\"\"\"\n", "test": "t", "entry_point": "f", "canonical_solution": "    1\n"}
    assert get_task("humaneval").format_prompt(he) == he["prompt"]
    expected = "Question: 2 + 2 = ?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer with one letter.\nAnswer:"
    assert get_task("mmlu").format_prompt(MMLU_CSV) == expected
    assert get_task("mmlu").format_prompt(MMLU_HUB) == expected
    assert get_task("specbench").format_prompt({"question_id": 1, "category": "qa", "turns": ["Hi?", "More"]}) == "Hi?"


def test_references_and_targets():
    gsm = get_task("gsm8k")
    assert gsm.reference(GSM) == "5" and gsm.target_text(GSM) == GSM["answer"]
    mmlu = get_task("mmlu")
    assert mmlu.reference(MMLU_CSV) == "B" and mmlu.target_text(MMLU_CSV) == " B"
    assert mmlu.reference(MMLU_HUB) == "B" and mmlu.target_text(MMLU_HUB) == " B"
    mbpp = {"text": "t", "code": "c", "test_list": ["assert 1"], "test_setup_code": "import os"}
    assert get_task("mbpp").reference(mbpp) == {"test_list": ["assert 1"], "test_setup_code": "import os",
                                                "test_imports": []}
    assert get_task("mbpp").target_text(mbpp) == "c"
    he = {"prompt": "p", "test": "t", "entry_point": "f", "canonical_solution": "s"}
    ref = get_task("humaneval").reference(he)
    assert ref["test"] == "t" and ref["entry_point"] == "f" and get_task("humaneval").target_text(he) == "s"
    with pytest.raises(ValueError, match="eval only"):
        get_task("specbench").target_text({"question_id": 1, "category": "qa", "turns": ["x"]})
    with pytest.raises(ValueError, match="####"):
        gsm.reference({"question": "q", "answer": "no final line"})


def test_get_task_lists_known_tasks_and_aliases():
    with pytest.raises(KeyError) as e:
        get_task("gsm9k")
    for name in TASKS:
        assert name in str(e.value)
    assert get_task("cnn_dailymail").name == "cnndm" and get_task("GSM8K").name == "gsm8k"
    for name, task in TASKS.items():
        assert task.max_new_tokens > 0 and isinstance(task.stop, tuple)
        assert (task.reward is None) == (name == "specbench")


class ChatTokenizer:
    """Stands in for a tokenizer with a chat template; records what it was asked."""

    chat_template = "{{ messages }}"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        self.calls.append((messages, add_generation_prompt, tokenize))
        return "<user>" + messages[0]["content"] + "</user><assistant>"


def test_chat_template_wraps_the_same_instruction():
    tok = ChatTokenizer()
    row = {"article": "A cat sat.", "highlights": "Cat sat."}
    plain = get_task("cnndm").format_prompt(row)
    assert get_task("cnndm").format_prompt(row, tokenizer=tok) == "<user>" + plain + "</user><assistant>"
    assert tok.calls == [([{"role": "user", "content": plain}], True, False)]

    class NoChat:
        chat_template = None

    assert get_task("cnndm").format_prompt(row, tokenizer=NoChat()) == plain
    assert get_task("gsm8k").format_prompt(GSM, tokenizer=NoChat()) == get_task("gsm8k").format_prompt(GSM)


def test_gsm8k_chat_asks_for_a_short_answer_and_ends_at_the_final_answer_line():
    tok = ChatTokenizer()
    prompt = get_task("gsm8k").format_prompt(GSM, tokenizer=tok)
    assert GSM["question"] in prompt and "short" in prompt and "#### <number>" in prompt
    stop = re.compile(get_task("gsm8k").chat_stop, re.S)
    assert stop.search("3 + 4 = 7\n#### 1") is None  # the number may still be growing, digit by digit
    assert stop.search("3 + 4 = 7\n#### 18") is None
    m = stop.search("3 + 4 = 7\n#### 18\nExplanation: ...")
    assert m is not None and "3 + 4 = 7\n#### 18\nExplanation: ..."[: m.end()].endswith("#### 18\n")
    assert stop.search("#### \n") is None  # no number yet
    assert stop_on_match(None, tok) is None  # no chat stop: generate(stop=None), rows end at EOS or the cap


def test_a_chat_models_humaneval_answer_is_not_cut_at_the_codex_stops():
    """A chat model repeats the whole function in a code block: the Codex stops ("\\ndef ", "\\n#") would cut it at its
    imports (the real pair scored 0 on HumanEval that way). Plain prompting keeps them: there they end the body."""
    from eval.run import cut_at_stop
    from rewards.code import humaneval_program

    he = get_task("humaneval")
    answer = "```python\nfrom typing import List\n\n\ndef add(a: int, b: int) -> int:\n    # sum\n    return a + b\n```"
    chat_stops = stops_for(he, ChatTokenizer())
    assert chat_stops == () and cut_at_stop(answer, chat_stops) == answer
    assert re.compile(he.chat_stop, re.S).search(answer).end() == len(answer)  # the row ends at the closed block
    ref = {"prompt": "def add(a: int, b: int) -> int:\n", "test": "def check(f):\n    assert f(2, 3) == 5\n",
           "entry_point": "add"}
    assert "return a + b" in "".join(src for _, src in humaneval_program(answer, ref))

    class NoChat:
        chat_template = None

    assert stops_for(he, NoChat()) == HUMANEVAL_STOP
    assert cut_at_stop("    return a + b\ndef other():\n", stops_for(he, NoChat())) == "    return a + b"
    assert stops_for(get_task("cnndm"), ChatTokenizer()) == get_task("cnndm").stop  # no chat stop: plain stops


@pytest.fixture
def shared_data(shared_dir):
    if not (shared_dir / "data").is_dir():
        pytest.skip(f"{shared_dir / 'data'} is absent")
    return shared_dir / "data"


def test_templates_on_shared_samples(shared_data):
    gsm = [json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines()[:50]]
    for row in gsm:
        ref = get_task("gsm8k").reference(row)
        assert ref and get_task("gsm8k").target_text(row).endswith(ref)
    mbpp = json.loads((shared_data / "mbpp" / "sanitized-mbpp.json").read_text())[:20]
    for row in mbpp:
        prompt = get_task("mbpp").format_prompt(row)
        assert prompt.startswith("Task: " + row["prompt"]) and row["test_list"][0] in prompt


def test_a_prompt_that_starts_with_bos_gets_no_second_one(micro_trio):
    """A rendered chat template often starts with BOS (Llama 3's does); the tokenizer must not add another."""
    from transformers import AutoTokenizer

    from specdec.models import encode_prompt

    tok = AutoTokenizer.from_pretrained(str(micro_trio / "tokenizer"))
    plain = encode_prompt(tok, "Q: 2+3?")
    assert plain[0] == tok.bos_token_id and plain[1] != tok.bos_token_id  # the tokenizer adds BOS itself
    rendered = encode_prompt(tok, tok.bos_token + "Q: 2+3?")
    assert rendered == plain
    with pytest.raises(ValueError, match="no tokens"):
        encode_prompt(type("Empty", (), {"bos_token": None, "__call__": lambda self, t, **k: {"input_ids": []}})(),
                      "x")
