"""MMLU: 0/1 on the extracted answer letter.

Extraction order: a leading letter ("B", " B.", "(B)", "B) ..."), then "answer is (B)" / "Answer: B",
then the first standalone capital A-D in the completion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

LEADING = re.compile(r"^\s*\(?([ABCD])(?:[\s.):,]|$)")
STATED = re.compile(r"answer\s*(?:is|:)?\s*:?\s*\(?([ABCD])\b", re.I)
STANDALONE = re.compile(r"\b([ABCD])\b")


def extract_letter(completion: str) -> tuple[str | None, str | None]:
    for method, pattern in (("leading", LEADING), ("stated", STATED), ("standalone", STANDALONE)):
        m = pattern.search(completion)
        if m:
            return m.group(1).upper(), method
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
