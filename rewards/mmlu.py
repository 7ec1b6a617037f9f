"""MMLU: 0/1 on the extracted answer letter.

Extraction order: a leading letter ("B", " B.", "(B)", "B) ...", "B\n..."), then "answer is (B)" / "answer is B" /
"Answer: b", then the first standalone capital A-D in the completion. A capital followed by a word ("A rise in
rates ...") is not a leading letter, and "the answer is a decrease" does not state "A": after "is" only a capital or
a parenthesised letter counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

LEADING = re.compile(r"^\s*(?:\(([A-D])\)|([A-D])(?:[.):,]|[ \t]*(?:\n|$)))")
STATED = re.compile(r"(?i:\banswer\b)(?:\s+is)?\s*(?::\s*\(?([A-Da-d])\b|\(([A-Da-d])\)|([A-D])\b)")
STANDALONE = re.compile(r"\b([ABCD])\b")


def extract_letter(completion: str) -> tuple[str | None, str | None]:
    for method, pattern in (("leading", LEADING), ("stated", STATED), ("standalone", STANDALONE)):
        m = pattern.search(completion)
        if m:
            return next(g for g in m.groups() if g).upper(), method
    return None, None


def score(completions: Sequence[str], references: Sequence[str]) -> tuple[list[float], list[dict]]:
    scores, details = [], []
    for completion, reference in zip(completions, references):
        ref = str(reference).strip().upper()
        if ref not in ("A", "B", "C", "D"):
            raise ValueError(f"MMLU reference must be a letter A-D, got {reference!r}")
        got, method = extract_letter(completion)
        scores.append(1.0 if got == ref else 0.0)
        details.append({"extracted": got, "method": method, "reference": ref})
    return scores, details
