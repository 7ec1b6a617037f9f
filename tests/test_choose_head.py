"""eval/choose_head.py choose: the shipped head is the validation-best candidate by J, the start winning ties."""

import json
from pathlib import Path

import pytest

from eval.choose_head import choose
from eval.frontier import collect


def _run(root: Path, label: str, head: str, score: float, acc: float, method: str = "diversed") -> None:
    d = root / label
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps({"method": method, "label": label, "task_score": score,
                                                "acceptance_rate": acc}))
    (d / "run.json").write_text(json.dumps({"head": head}))


def test_the_validation_best_candidate_is_chosen_and_the_start_wins_ties(tmp_path):
    _run(tmp_path, "diversed(λ=0.1)", "r/candidates/step000200/head", 0.50, 0.90)   # J 0.59
    _run(tmp_path, "diversed(λ=0.1)@a", "r/candidates/start/head", 0.52, 0.95)      # J 0.615
    _run(tmp_path, "diversed(λ=0.1)@b", "r/candidates/step000100/head", 0.53, 0.85)  # J 0.615: ties the start
    _run(tmp_path, "cascade(t=0.1)", "", 0.9, 0.99, method="cascade")                # a rule: not a candidate
    best, cands = choose(collect([tmp_path]), 0.1)
    assert best["head"] == "r/candidates/start/head" and best["J"] == pytest.approx(0.615)
    assert [Path(c["head"]).parent.name for c in cands] == ["start", "step000100", "step000200"]
    # a larger λ values the start's acceptance more; a smaller one the step-100 head's score
    assert choose(collect([tmp_path]), 0.0)[0]["head"] == "r/candidates/step000100/head"


def test_nothing_to_choose_is_a_clear_error(tmp_path):
    _run(tmp_path, "sd", "", 0.5, 0.8, method="sd")
    with pytest.raises(ValueError, match="no evaluated head"):
        choose(collect([tmp_path]), 0.1)


def test_the_cli_chooses_across_candidates_split_over_parallel_runs(tmp_path):
    import subprocess
    import sys

    _run(tmp_path / "a", "diversed(λ=0.1)", "r/candidates/start/head", 0.50, 0.90)        # J 0.59
    _run(tmp_path / "b", "diversed(λ=0.1)", "r/candidates/step000012/head", 0.56, 0.80)   # J 0.64
    out = tmp_path / "selected.json"
    p = subprocess.run([sys.executable, "eval/choose_head.py", "choose", str(tmp_path / "a"), str(tmp_path / "b"),
                        "--lambda", "0.1", "--out", str(out)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr
    sel = json.loads(out.read_text())
    assert sel["best"]["head"] == "r/candidates/step000012/head" and len(sel["candidates"]) == 2
