"""eval/choose_head.py choose: the shipped head is the validation-best candidate by J, the start winning ties; with
the paired gate, a challenger replaces the rule only if its J gain is clear of the validation noise."""

import json
from pathlib import Path

import pytest

from eval.choose_head import choose
from eval.frontier import collect


def _run(root: Path, label: str, head: str, score: float, acc: float, method: str = "diversed",
         samples: list[tuple[float, int, int]] | None = None) -> None:
    """A finished evaluation; samples: per prompt (score, accepted, drafted), whose means then give score and acc."""
    d = root / label
    d.mkdir(parents=True)
    if samples is not None:
        score = sum(s[0] for s in samples) / len(samples)
        acc = sum(s[1] for s in samples) / sum(s[2] for s in samples)
        (d / "samples.jsonl").write_text("".join(json.dumps({"idx": i, "score": s, "accepted": [a], "drafted": [n]})
                                                 + "\n" for i, (s, a, n) in enumerate(samples)))
    (d / "metrics.json").write_text(json.dumps({"method": method, "label": label, "task_score": score,
                                                "acceptance_rate": acc}))
    (d / "run.json").write_text(json.dumps({"head": head}))


def _prompts(n: int, wins: int, losses: int, accepted: int = 8) -> list[tuple[float, int, int]]:
    """n prompts where the candidate solves `wins` prompts the rule fails and fails `losses` the rule solves (the
    rule: every even prompt solved)."""
    rule = [float(i % 2 == 0) for i in range(n)]
    fails = [i for i in range(n) if rule[i] == 0][:wins]
    solved = [i for i in range(n) if rule[i] == 1][:losses]
    cand = [1.0 - r if (i in fails or i in solved) else r for i, r in enumerate(rule)]
    return [(c, accepted, 10) for c in cand]


def test_the_validation_best_candidate_is_chosen_and_the_start_wins_ties(tmp_path):
    _run(tmp_path, "diversed(λ=0.1)", "r/candidates/step000200/head", 0.50, 0.90)   # J 0.59
    _run(tmp_path, "diversed(λ=0.1)@a", "r/candidates/start/head", 0.52, 0.95)      # J 0.615
    _run(tmp_path, "diversed(λ=0.1)@b", "r/candidates/step000100/head", 0.53, 0.85)  # J 0.615: ties the start
    _run(tmp_path, "cascade(t=0.1)", "", 0.9, 0.99, method="cascade")                # a rule: not a candidate
    best, cands = choose(collect([tmp_path]), 0.1, confidence=0.0)
    assert best["head"] == "r/candidates/start/head" and best["J"] == pytest.approx(0.615)
    assert [Path(c["head"]).parent.name for c in cands] == ["start", "step000100", "step000200"]
    # a larger λ values the start's acceptance more; a smaller one the step-100 head's score
    assert choose(collect([tmp_path]), 0.0, confidence=0.0)[0]["head"] == "r/candidates/step000100/head"


def test_nothing_to_choose_is_a_clear_error(tmp_path):
    _run(tmp_path, "sd", "", 0.5, 0.8, method="sd")
    with pytest.raises(ValueError, match="no evaluated head"):
        choose(collect([tmp_path]), 0.1)


def test_the_cli_chooses_across_candidates_split_over_parallel_runs(tmp_path):
    import subprocess
    import sys

    # 200 prompts: the checkpoint solves 30 more than the start and accepts as much: J +0.15, far beyond the noise
    _run(tmp_path / "a", "diversed(λ=0.1)", "r/candidates/start/head", 0, 0, samples=_prompts(200, 0, 0))
    _run(tmp_path / "b", "diversed(λ=0.1)", "r/candidates/step000012/head", 0, 0, samples=_prompts(200, 30, 0))
    out = tmp_path / "selected.json"
    p = subprocess.run([sys.executable, "eval/choose_head.py", "choose", str(tmp_path / "a"), str(tmp_path / "b"),
                        "--lambda", "0.1", "--out", str(out)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr
    sel = json.loads(out.read_text())
    assert sel["best"]["head"] == "r/candidates/step000012/head" and len(sel["candidates"]) == 2
    assert sel["confidence"] == 0.95 and sel["candidates"][1]["clears"] is True


def test_the_gate_keeps_the_rule_against_a_gain_within_the_noise(tmp_path):
    """Four checkpoints on 200 prompts: the best by J wins 12 prompts and loses 8 (+2 points, a gain a paired
    bootstrap cannot tell from noise), so the gate ships the rule; the plain arg-max ships the checkpoint."""
    _run(tmp_path, "diversed(λ=0.1)", "r/candidates/rule/head", 0, 0, samples=_prompts(200, 0, 0))
    for k, (w, lo) in enumerate([(12, 8), (5, 5), (3, 6), (8, 7)]):
        _run(tmp_path, f"diversed(λ=0.1)@{k}", f"r/candidates/step0000{k}0/head", 0, 0,
             samples=_prompts(200, w, lo))
    assert choose(collect([tmp_path]), 0.1, confidence=0.0)[0]["head"] == "r/candidates/step000000/head"
    best, cands = choose(collect([tmp_path]), 0.1, confidence=0.95)
    assert best["head"] == "r/candidates/rule/head"
    top = next(c for c in cands if c["head"] == "r/candidates/step000000/head")
    assert top["J_gain"] == pytest.approx(0.02) and top["J_gain_bound"] < 0 and top["clears"] is False


def test_the_gate_passes_a_clear_gain_and_then_ships_the_best_that_clears(tmp_path):
    """On 100 prompts a checkpoint that solves 12 more (and loses none) clears the gate; one with a higher J that wins
    45 and loses 32 (+13 points with a paired spread of ±17) does not, so the cleared one ships."""
    _run(tmp_path, "diversed(λ=0.1)", "r/candidates/rule/head", 0, 0, samples=_prompts(100, 0, 0))
    _run(tmp_path, "diversed(λ=0.1)@a", "r/candidates/step000050/head", 0, 0, samples=_prompts(100, 12, 0))
    _run(tmp_path, "diversed(λ=0.1)@b", "r/candidates/step000100/head", 0, 0, samples=_prompts(100, 45, 32))
    best, cands = choose(collect([tmp_path]), 0.1, confidence=0.95)
    assert best["head"] == "r/candidates/step000050/head" and best["clears"] is True
    b = next(c for c in cands if c["head"] == "r/candidates/step000100/head")
    assert b["J"] > best["J"] and b["clears"] is False
    assert choose(collect([tmp_path]), 0.1, confidence=0.0)[0]["head"] == "r/candidates/step000100/head"


def test_the_gate_refuses_candidates_decoded_on_different_prompts(tmp_path):
    _run(tmp_path, "diversed(λ=0.1)", "r/candidates/rule/head", 0, 0, samples=_prompts(20, 0, 0))
    _run(tmp_path, "diversed(λ=0.1)@a", "r/candidates/step000050/head", 0, 0, samples=_prompts(24, 5, 0))
    with pytest.raises(ValueError, match="different prompts"):
        choose(collect([tmp_path]), 0.1, confidence=0.95)
