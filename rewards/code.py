"""pass@1 for MBPP and HumanEval: build the program from completion + tests and run it in the sandbox."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rewards.sandbox import ExecResult, Limits, run_many

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The first fenced code block when the completion has one (chat models), else the completion itself."""
    m = _FENCE.search(completion)
    return m.group(1) if m else completion


def mbpp_program(completion: str, reference: dict) -> list[tuple[str, str]]:
    """[(name, source)] parts: imports + setup, the generated code, the asserts (separate parts, one namespace)."""
    setup = "\n".join(list(reference.get("test_imports") or []) + [reference.get("test_setup_code") or ""])
    tests = "\n".join(reference["test_list"])
    return [("setup", setup + "\n"), ("completion", extract_code(completion) + "\n"), ("tests", tests + "\n")]


def humaneval_program(completion: str, reference: dict) -> list[tuple[str, str]]:
    """prompt + completion, then the test code and check(entry_point).

    A completion that repeats the whole function (typical of chat models) is appended after the prompt as a
    redefinition; the prompt's imports and helper functions stay in scope either way.
    """
    code = extract_code(completion)
    entry = reference["entry_point"]
    if re.search(rf"^def\s+{re.escape(entry)}\s*\(", code, re.M):
        program = reference["prompt"] + "\n    pass\n\n" + code
    else:
        program = reference["prompt"] + code
    return [("completion", program + "\n"), ("tests", reference["test"] + f"\ncheck({entry})\n")]


def score(
    task: str,
    completions: Sequence[str],
    references: Sequence[dict],
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_workers: int = 2,
    max_output_bytes: int = 1 << 16,
    use_bwrap: bool | None = None,
) -> tuple[list[float], list[dict]]:
    build = {"mbpp": mbpp_program, "humaneval": humaneval_program}.get(task)
    if build is None:
        raise ValueError(f"code reward: unknown task {task!r} (expected mbpp or humaneval)")
    programs = [build(c, r) for c, r in zip(completions, references)]
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=max_output_bytes)
    results: list[ExecResult] = run_many(programs, max_workers=max_workers, limits=limits, use_bwrap=use_bwrap)
    details = [
        {"status": r.status, "error": r.error, "seconds": round(r.seconds, 3), "sandbox": r.sandbox}
        for r in results
    ]
    return [1.0 if r.passed else 0.0 for r in results], details
