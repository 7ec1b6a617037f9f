"""GSM8K: 0/1 exact match of the extracted final number.

Extraction order (the first that yields a number wins):
1. the first number after the last "####", on the same line (the GSM8K format the prompt asks for);
2. the first number after the last "Final Answer:" (case-insensitive; "The final answer is" too);
3. the last number anywhere in the completion.
Numbers are normalised before comparing: thousands commas and "$" removed, "-" kept, "18.0" == "18", "1,000" == "1000".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# "-$1,234.50", "$-5", "1,000", "3." (as 3). Never part of a longer token: ".5" is not read as 5 (GSM8K answers
# have a leading digit), "1,5" or "1,00" neither as 15 nor as 1 nor as 5 (commas only as whole thousands groups),
# "5-10" not as -10. A sign spaced from its number ("- 5") is not read as one: it cannot be told from a minus.
NUMBER = re.compile(r"(?<![\d.])(?<!\d,)(-)?\$?(-)?(?<![\d.])(?<!\d,)"
                    r"((?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+(?!\d|,\d))(?:\.\d+)?)")
MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})  # Unicode minus and en dash, as models write them
FINAL_ANSWER = re.compile(r"final answer(?:\s+is)?\s*[:：]?", re.I)


def normalize_number(text: str) -> str | None:
    """Canonical string of the first number in text ('-1,234.50' -> '-1234.5'), or None."""
    m = NUMBER.search(text.translate(MINUS_SIGNS))
    return None if m is None else _canonical(m)


def _canonical(m: re.Match) -> str:
    """Exact at any length (no rounding to a float or a Decimal context): leading and trailing zeros dropped."""
    whole, _, frac = m.group(3).replace(",", "").partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    text = whole + ("." + frac if frac else "")
    negative = bool(m.group(1)) or bool(m.group(2))
    return "-" + text if negative and text != "0" else text


def extract_answer(completion: str) -> tuple[str | None, str | None]:
    """(canonical number, method) where method is '####', 'final_answer' or 'last_number'; (None, None) if none."""
    completion = completion.translate(MINUS_SIGNS)
    if "####" in completion:
        found = normalize_number(completion.rsplit("####", 1)[1].lstrip(" \t").split("\n", 1)[0])
        if found is not None:
            return found, "####"
    marks = list(FINAL_ANSWER.finditer(completion))
    if marks:
        found = normalize_number(completion[marks[-1].end() :])
        if found is not None:
            return found, "final_answer"
    numbers = list(NUMBER.finditer(completion))
    if numbers:
        return _canonical(numbers[-1]), "last_number"
    return None, None


def score(completions: Sequence[str], references: Sequence[str]) -> tuple[list[float], list[dict]]:
    scores, details = [], []
    for completion, reference in zip(completions, references):
        ref = normalize_number(str(reference))
        if ref is None:
            raise ValueError(f"GSM8K reference {reference!r} is not a number")
        got, method = extract_answer(completion)
        scores.append(1.0 if got is not None and got == ref else 0.0)
        details.append({"extracted": got, "method": method, "reference": ref})
    return scores, details
