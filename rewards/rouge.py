"""CNN/DM and XSum: ROUGE F1 via rouge_score (stemming on); the reward is one of them, ROUGE-2 by default.

rouge_score is called directly: evaluate.load("rouge") fetches a script from the hub and fails offline, and gives
the same numbers. rougeLsum splits summaries into sentences on newlines, as the CNN/DM convention does.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def score(
    completions: Sequence[str], references: Sequence[str], *, rouge_type: str = "rouge2"
) -> tuple[list[float], list[dict]]:
    if rouge_type not in ROUGE_TYPES:
        raise ValueError(f"rouge_type={rouge_type!r} is not one of {', '.join(ROUGE_TYPES)}")
    scores, details = [], []
    for completion, reference in zip(completions, references):
        result = _scorer().score(str(reference), str(completion))  # (target, prediction)
        f1 = {k: float(v.fmeasure) for k, v in result.items()}
        scores.append(f1[rouge_type])
        details.append(f1)
    return scores, details
