"""eval/pool.py: pooling disjoint evaluation sets and paired differences, on run directories written here."""

import json
from pathlib import Path

import numpy as np
import pytest

from eval.pool import paired_difference, per_prompt, report


def write_method(run_dir: Path, label: str, rows: list[tuple[float, int, int]], finished: bool = True) -> None:
    d = run_dir / label
    d.mkdir(parents=True)
    with open(d / "samples.jsonl", "w") as f:
        for i, (score, acc, dr) in enumerate(rows):
            # accepted/drafted are per-round lists in real samples; split them to check they are summed
            f.write(json.dumps({"idx": i, "score": score, "accepted": [acc // 2, acc - acc // 2],
                                "drafted": [dr // 2, dr - dr // 2]}) + "\n")
    if finished:
        (d / "metrics.json").write_text("{}")


@pytest.fixture
def two_sets(tmp_path):
    a, b = tmp_path / "set1", tmp_path / "set2"
    write_method(a, "sd", [(1.0, 6, 8), (0.0, 2, 8)])
    write_method(a, "diversed(λ=3)", [(1.0, 8, 8), (1.0, 7, 8)])
    write_method(a, "static(w=0.50)", [(0.0, 7, 8), (0.0, 8, 8)])
    write_method(b, "sd", [(0.0, 4, 8), (1.0, 4, 8)])
    write_method(b, "diversed(λ=3)", [(0.0, 8, 8), (1.0, 6, 8)])
    write_method(b, "static(w=0.50)", [(1.0, 8, 8)], finished=False)  # killed mid-run: must not be pooled
    return [a, b]


def test_pooling_keeps_prompts_apart_across_sets_and_skips_unfinished_methods(two_sets):
    sd = per_prompt(two_sets, "sd")
    assert sd == {(0, 0): (1.0, 6, 8), (0, 1): (0.0, 2, 8), (1, 0): (0.0, 4, 8), (1, 1): (1.0, 4, 8)}
    assert set(per_prompt(two_sets, "static(w=0.50)")) == {(0, 0), (0, 1)}


def test_paired_difference_is_the_mean_of_per_prompt_differences(two_sets):
    head, sd = per_prompt(two_sets, "diversed(λ=3)"), per_prompt(two_sets, "sd")
    p = paired_difference(head, sd)
    assert p["n"] == 4
    assert p["score"] == pytest.approx(np.mean([0.0, 1.0, 0.0, 0.0]))
    assert p["accept"] == pytest.approx(29 / 32 - 16 / 32)  # a ratio of sums, not a mean of ratios
    lo, hi = p["accept_ci"]
    assert lo <= p["accept"] <= hi
    static = per_prompt(two_sets, "static(w=0.50)")
    assert paired_difference(head, static)["n"] == 2  # only the prompts both ran
    with pytest.raises(ValueError, match="no prompt in common"):
        paired_difference({(1, 0): (1.0, 1, 1)}, static)


def test_report_tables_and_a_bad_reference(two_sets):
    text = report(two_sets)
    assert "| sd | 4 | 0.500 |" in text and "| 0.500 | 32 |" in text  # 16/32 accepted
    assert "| static(w=0.50) | 2 | 0.000 |" in text
    assert "diversed(λ=3) minus each method" in text and "| sd (n=4) | +0.250 |" in text
    assert "sd minus each method" in report(two_sets, ref="sd")
    with pytest.raises(SystemExit, match="not a finished method"):
        report(two_sets, ref="lossy")
