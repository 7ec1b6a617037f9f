"""Task registry: prompt templates, references, gold completions and default generation settings.

The plain templates below are a contract: the embedded character-level models are trained on
`format_prompt(ex) + target_text(ex) + eos`, so changing a template means retraining them. Keep them short.
When the tokenizer has a chat template, the same instruction text becomes a single user message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LETTERS = ("A", "B", "C", "D")


@dataclass(frozen=True)
class Task:
    name: str
    # reward kind in rewards/: "gsm8k", "rouge", "code", "mmlu"; None = no reward (eval only)
    reward: str | None
    max_new_tokens: int  # default for the embedded character-level models; override for real models
    stop: tuple[str, ...]  # stop strings for plain (non-chat) prompting
    hub_id: str | None
    hub_config: str | None
    required: tuple[tuple[str, ...], ...]  # each entry: alternatives, one of which a row must have
    instruction: Callable[[dict], str]
    _reference: Callable[[dict], Any]
    _target: Callable[[dict], str] | None
    # chat models only: the user message (None: the plain instruction) and a regex that ends a completion once it
    # matches (the completion is kept up to the end of the match), e.g. a closed code block
    chat_instruction: Callable[[dict], str] | None = None
    chat_stop: str | None = None

    def format_prompt(self, example: dict, tokenizer: Any = None) -> str:
        """The prompt string: the plain template, or the tokenizer's chat template around the task's chat
        instruction (the plain instruction text when it has none)."""
        text = self.instruction(example)
        if is_chat(tokenizer):
            if self.chat_instruction is not None:
                text = self.chat_instruction(example)
            messages = [{"role": "user", "content": text}]
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return text

    def reference(self, example: dict) -> Any:
        """What the reward compares a completion against."""
        return self._reference(example)

    def target_text(self, example: dict) -> str:
        """The gold completion (what follows the prompt in training data)."""
        if self._target is None:
            raise ValueError(f"task {self.name!r} has no gold completion (it is eval only)")
        return self._target(example)



def is_chat(tokenizer: Any) -> bool:
    """Whether prompts for this tokenizer go through its chat template."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def chat_stop_for(task: Task, tokenizer: Any) -> re.Pattern | None:
    """The pattern that ends a chat model's row (e.g. a closed code block), or None: evaluation and training rollouts
    both end rows with it, so that the head trains on the positions it is evaluated on."""
    return re.compile(task.chat_stop, re.S) if task.chat_stop and is_chat(tokenizer) else None


def stops_for(task: Task, tokenizer: Any) -> tuple[str, ...]:
    """The stop strings that cut a completion: the task's plain-prompting ones, or none where a chat stop ends the row.
    A chat model answers with a whole message, e.g. a code block that repeats the function: HumanEval's Codex stops
    ("\\ndef ", "\\n#", ...) would cut it at its first import."""
    return () if chat_stop_for(task, tokenizer) is not None else tuple(task.stop)


def stop_on_match(pattern: re.Pattern | None, tokenizer: Any) -> Callable[[list[int]], bool] | None:
    """generate(stop=...): True once a row's decoded tokens match the pattern; None (no stop) without a pattern."""
    if pattern is None:
        return None
    return lambda toks: pattern.search(tokenizer.decode(toks, skip_special_tokens=True)) is not None


# ---------------------------------------------------------------- gsm8k
def gsm8k_final_answer(answer: str) -> str:
    """The number after the last '####' in a GSM8K answer field."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return answer.rsplit("####", 1)[1].strip()


def _gsm8k_chat(ex: dict) -> str:
    # chat models are verbose at T=1 (real 1.5B coder: 19 of 24 answers cut at 256 tokens with the plain
    # instruction), so ask for a short solution; the final-answer line is what the reward reads and where rows end
    return (f"{ex['question']}\nSolve it step by step in a few short lines, then give the final answer as a number "
            "on its own last line, in the form: #### <number>")


# a finished final-answer line (the newline matters: digits arrive one token at a time, "#### 1" may become "#### 18")
GSM8K_ANSWER_LINE = r"####[^\n]*\d[^\n]*\n"


# ---------------------------------------------------------------- mbpp
def _mbpp_text(ex: dict) -> str:
    return ex["text"] if ex.get("text") else ex["prompt"]


def _mbpp_chat(ex: dict) -> str:
    # one prompt for every method; asks for code only so that answers end at the closing fence (chat_stop)
    return (f"{_mbpp_text(ex)}\nYour code should pass this test:\n{ex['test_list'][0]}\n"
            "Reply with only the Python code in one ```python block: a short solution, no explanation, no tests.")


# a closed fenced code block: what a code answer from a chat model needs, and where it ends
CODE_BLOCK_END = r"```[^\n`]*\n.*?\n```"


def _mbpp_reference(ex: dict) -> dict:
    return {
        "test_list": list(ex["test_list"]),
        "test_setup_code": ex.get("test_setup_code") or "",
        "test_imports": list(ex.get("test_imports") or []),
    }


# ---------------------------------------------------------------- mmlu
def mmlu_fields(ex: dict) -> tuple[str, list[str], str]:
    """(question, [A, B, C, D], answer letter) from the csv schema or the hub schema (choices, int answer)."""
    if "choices" in ex:
        choices = list(ex["choices"])
        ans = ex["answer"]
        letter = LETTERS[int(ans)] if not isinstance(ans, str) or ans.isdigit() else ans.strip().upper()
    else:
        choices = [ex[k] for k in LETTERS]
        letter = str(ex["answer"]).strip().upper()
    if len(choices) != 4 or letter not in LETTERS:
        raise ValueError(f"MMLU row needs 4 choices and an answer in A-D, got {len(choices)}, {letter!r}")
    return str(ex["question"]), [str(c) for c in choices], letter


def _mmlu_instruction(ex: dict) -> str:
    q, ch, _ = mmlu_fields(ex)
    return (
        f"Question: {q}\nA. {ch[0]}\nB. {ch[1]}\nC. {ch[2]}\nD. {ch[3]}\n"
        "Answer with one letter.\nAnswer:"
    )


# ---------------------------------------------------------------- specbench
def _specbench_prompt(ex: dict) -> str:
    turns = ex["turns"]
    if not turns:
        raise ValueError(f"specbench row {ex.get('question_id')!r} has no turns")
    return str(turns[0])


# HumanEval stops of the Codex paper: a new top-level statement ends the function body.
HUMANEVAL_STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(")

TASKS: dict[str, Task] = {
    "gsm8k": Task(
        name="gsm8k",
        reward="gsm8k",
        max_new_tokens=200,
        stop=("\nQuestion:",),
        hub_id="openai/gsm8k",
        hub_config="main",
        required=(("question",), ("answer",)),
        instruction=lambda ex: f"Question: {ex['question']}\nAnswer (end with #### <number>):\n",
        _reference=lambda ex: gsm8k_final_answer(ex["answer"]),
        _target=lambda ex: ex["answer"],
        chat_instruction=_gsm8k_chat,
        chat_stop=GSM8K_ANSWER_LINE,
    ),
    "cnndm": Task(
        name="cnndm",
        reward="rouge",
        max_new_tokens=200,
        stop=("\nArticle:",),
        hub_id="abisee/cnn_dailymail",
        hub_config="3.0.0",
        required=(("article",), ("highlights",)),
        instruction=lambda ex: (
            f"Article: {ex['article']}\nSummarize the article in three sentences.\nSummary:\n"
        ),
        _reference=lambda ex: ex["highlights"],
        _target=lambda ex: ex["highlights"],
    ),
    "xsum": Task(
        name="xsum",
        reward="rouge",
        max_new_tokens=100,
        stop=("\nDocument:",),
        hub_id="EdinburghNLP/xsum",
        hub_config=None,
        required=(("document",), ("summary",)),
        instruction=lambda ex: (
            f"Document: {ex['document']}\nSummarize the document in one sentence.\nSummary:\n"
        ),
        _reference=lambda ex: ex["summary"],
        _target=lambda ex: ex["summary"],
    ),
    "mbpp": Task(
        name="mbpp",
        reward="code",
        max_new_tokens=160,
        stop=("\nTask:",),
        hub_id="google-research-datasets/mbpp",
        hub_config="sanitized",
        required=(("text", "prompt"), ("code",), ("test_list",)),
        instruction=lambda ex: (
            f"Task: {_mbpp_text(ex)}\nYour code should pass this test:\n{ex['test_list'][0]}\nCode:\n"
        ),
        _reference=_mbpp_reference,
        _target=lambda ex: ex["code"],
        chat_instruction=_mbpp_chat,
        chat_stop=CODE_BLOCK_END,
    ),
    "humaneval": Task(
        name="humaneval",
        reward="code",
        max_new_tokens=300,
        stop=HUMANEVAL_STOP,
        hub_id="openai/openai_humaneval",
        hub_config=None,
        required=(("task_id",), ("prompt",), ("canonical_solution",), ("test",), ("entry_point",)),
        instruction=lambda ex: ex["prompt"],
        _reference=lambda ex: {"test": ex["test"], "entry_point": ex["entry_point"], "prompt": ex["prompt"]},
        _target=lambda ex: ex["canonical_solution"],
        chat_stop=CODE_BLOCK_END,
    ),
    "mmlu": Task(
        name="mmlu",
        reward="mmlu",
        max_new_tokens=2,
        stop=("\n",),
        hub_id="cais/mmlu",
        hub_config="all",
        required=(("question",), ("answer",)),
        instruction=_mmlu_instruction,
        _reference=lambda ex: mmlu_fields(ex)[2],
        _target=lambda ex: " " + mmlu_fields(ex)[2],
    ),
    "specbench": Task(
        name="specbench",
        reward=None,
        max_new_tokens=128,
        stop=(),
        hub_id=None,
        hub_config=None,
        required=(("question_id",), ("category",), ("turns",)),
        instruction=_specbench_prompt,
        _reference=lambda ex: None,
        _target=None,
    ),
}


def get_task(name: str) -> Task:
    """The registered task `name` (case-insensitive; 'cnn_dailymail' is an alias of 'cnndm')."""
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    key = {"cnndailymail": "cnndm", "openaihumaneval": "humaneval"}.get(key, key)
    if key not in TASKS:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[key]
