"""Rewards: score(task, completions, references, **opts) -> ScoreResult(scores, details).

gsm8k: exact match of the final number; cnndm/xsum: ROUGE F1 (ROUGE-2 by default, opts: rouge_type);
mbpp/humaneval: pass@1 in the sandbox (opts: timeout_s, memory_mb, max_workers, max_output_bytes, use_bwrap);
mmlu: exact match of the answer letter. Details hold, per item, what was extracted or why the code failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from data.tasks import Task, get_task


@dataclass
class ScoreResult:
    scores: list[float]
    details: list[dict]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


def score(task: str | Task, completions: Sequence[str], references: Sequence[Any], **opts: Any) -> ScoreResult:
    """Score a batch. references come from task.reference(example)."""
    task = get_task(task) if isinstance(task, str) else task
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    completions = [str(c) for c in completions]
    if task.reward == "gsm8k":
        from rewards import gsm8k as impl

        scores, details = impl.score(completions, references, **opts)
    elif task.reward == "rouge":
        from rewards import rouge as impl

        scores, details = impl.score(completions, references, **opts)
    elif task.reward == "code":
        from rewards import code as impl

        scores, details = impl.score(task.name, completions, references, **opts)
    elif task.reward == "mmlu":
        from rewards import mmlu as impl

        scores, details = impl.score(completions, references, **opts)
    else:
        raise ValueError(f"task {task.name!r} has no reward (it is for speed/acceptance evaluation only)")
    return ScoreResult(scores, details)
