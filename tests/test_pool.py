"""eval/pool.py: pooling disjoint evaluation sets and paired differences, on run directories written here."""

import json
from pathlib import Path

import numpy as np
import pytest

from eval.pool import paired_difference, per_prompt, pooled_rows, pooled_stats, report


def write_method(run_dir: Path, label: str, rows: list[tuple[float, int, int]], finished: bool = True) -> None:
    d = run_dir / label
    d.mkdir(parents=True)
    with open(d / "samples.jsonl", "w") as f:
        for i, (score, acc, dr) in enumerate(rows):
            # accepted/drafted are per-round lists in real samples; split them to check they are summed
            f.write(json.dumps({"idx": i, "score": score, "accepted": [acc // 2, acc - acc // 2],
                                "drafted": [dr // 2, dr - dr // 2]}) + "\n")
    if finished:  # the metadata eval/run.py writes that pooling keeps (the scores are recomputed from samples)
        method = label.split("(")[0]
        params = {"w": float(label.split("=")[1].rstrip(")"))} if method == "static" else {}
        (d / "metrics.json").write_text(json.dumps({"method": method, "label": label, "params": params,
                                                    "task_score": -1.0, "acceptance_rate": -1.0}))


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
    # another confidence level: every interval at that level, and narrower than the 95% ones
    wide = paired_difference(per_prompt(two_sets, "diversed(λ=3)"), per_prompt(two_sets, "sd"))
    narrow = paired_difference(per_prompt(two_sets, "diversed(λ=3)"), per_prompt(two_sets, "sd"), level=0.5)
    assert wide["accept_ci"][0] <= narrow["accept_ci"][0] <= narrow["accept_ci"][1] <= wide["accept_ci"][1]
    assert "| 50% CI |" in report(two_sets, level=0.5) and "95% CI" not in report(two_sets, level=0.5)
    with pytest.raises(SystemExit, match="not a finished method"):
        report(two_sets, ref="lossy")


def test_pooled_rows_recompute_scores_and_acceptance_over_every_set_and_feed_the_bars(two_sets, tmp_path):
    data = {lab: per_prompt(two_sets, lab) for lab in ("sd", "diversed(λ=3)", "static(w=0.50)")}
    rows = {m["label"]: m for m in pooled_rows(two_sets, {lab: pooled_stats(v) for lab, v in data.items()})}
    assert set(rows) == {"sd", "diversed(λ=3)"}  # static(w=0.50) did not finish set 2: not comparable, left out
    assert rows["sd"]["task_score"] == pytest.approx(0.5) and rows["sd"]["num_samples"] == 4
    assert rows["sd"]["acceptance_rate"] == pytest.approx(16 / 32)
    assert rows["diversed(λ=3)"]["acceptance_rate"] == pytest.approx(29 / 32)
    lo, hi = rows["diversed(λ=3)"]["task_score_ci"]
    assert lo <= 0.75 <= hi
    png = tmp_path / "pool.png"
    text = report(two_sets, plot=png)
    # the head (0.75 at 29/32) against sd (0.5 at 16/32): +40.6 acceptance points at +25 score points
    assert "acceptance +40.6 points, score +25.0 points (bar ≥ +15 at a score ≥ sd − 2: met)" in text
    assert png.stat().st_size > 0


def test_above_static_line_interpolates_the_static_points_at_the_heads_acceptance():
    from eval.pool import above_static_line

    n = 40
    # static points on the line score = 2.1 - 2 * acceptance: sd 0.9 at 0.6, w = 0.5 0.5 at 0.8
    def method(score_ones: int, acc: int) -> dict:  # score_ones of n prompts solved; acc of 10 drafts accepted
        return {(0, i): (1.0 if i < score_ones else 0.0, acc, 10) for i in range(n)}

    data = {"sd": method(36, 6), "static(w=0.50)": method(20, 8), "static(w=0.00)": {(0, 0): (0.0, 10, 10)}}
    data["diversed(λ=1)"] = method(28, 7)  # exactly on the line between sd (0.9 at 0.6) and w=0.5 (0.5 at 0.8)
    methods = {lab: lab.split("(")[0] for lab in data}
    on = above_static_line(data, "diversed(λ=1)", methods)
    assert on["points"] == ["sd", "static(w=0.50)"]  # w=0 ran on one prompt only: left out, not shrinking n
    assert on["n"] == n and on["gap"] == pytest.approx(0.0, abs=1e-12)
    data["diversed(λ=1)"] = method(36, 8)  # sd's score at w=0.5's acceptance: 0.4 above the line
    above = above_static_line(data, "diversed(λ=1)", methods)
    assert above["gap"] == pytest.approx(0.4) and above["ci"][0] > 0.1
    assert above_static_line({"sd": data["sd"], "diversed(λ=1)": data["diversed(λ=1)"]}, "diversed(λ=1)",
                             methods) is None
    # the line's points are chosen by method, not by label: sd with another proposer is still its w = 1 end
    feat = {"sd[feature]" if k == "sd" else k: v for k, v in data.items()}
    moved = above_static_line(feat, "diversed(λ=1)", {**methods, "sd[feature]": "sd"})
    assert moved["points"] == ["sd[feature]", "static(w=0.50)"] and moved["gap"] == pytest.approx(0.4)


def _run_json(run_dir: Path, label: str, **over) -> None:
    r = {"task": "gsm8k", "data": {"path": "test.jsonl", "seed": 0}, "num_samples": 2, "seed": 0,
         "temperature": 1.0, "max_new_tokens": 64, "model": {"target": "t", "draft": "d"}}
    (run_dir / label / "run.json").write_text(json.dumps({**r, **over}))


def test_sets_that_cannot_be_paired_or_pooled_are_refused(two_sets):
    a, b = two_sets
    for lab in ("sd", "diversed(λ=3)"):
        _run_json(a, lab)
        _run_json(b, lab, data={"path": "test.jsonl", "seed": 7}, seed=1)
    assert "| sd (n=4) |" in report(two_sets)  # disjoint sets, each set's methods on the same prompts
    with pytest.raises(ValueError, match="same prompts"):
        report([a, a])
    _run_json(b, "sd", data={"path": "test.jsonl", "seed": 8}, seed=1)  # ran on other prompts than the head
    with pytest.raises(ValueError, match=r"set2: .* differ in data"):
        report(two_sets)
    _run_json(b, "sd", data={"path": "test.jsonl", "seed": 7}, seed=1, temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        report(two_sets)
    for lab in ("sd", "diversed(λ=3)"):
        _run_json(b, lab, data={"path": "test.jsonl", "seed": 7}, seed=1, max_new_tokens=32)
    with pytest.raises(ValueError, match="decoded alike"):
        report(two_sets)


def test_a_task_without_scores_is_a_clear_error(tmp_path):
    write_method(tmp_path, "sd", [(1.0, 6, 8)])
    (tmp_path / "sd" / "samples.jsonl").write_text(json.dumps({"idx": 0, "score": None, "accepted": [3],
                                                               "drafted": [4]}) + "\n")
    with pytest.raises(ValueError, match="no score"):
        report([tmp_path])


def test_two_runs_of_one_method_keep_their_directory_names_in_the_bars(two_sets):
    """Two training seeds of a head share a metrics label; the report names each by its directory."""
    import shutil

    for d in two_sets:
        shutil.copytree(d / "diversed(λ=3)", d / "diversed(λ=3, seed 2)")
    text = report(two_sets)
    assert "**diversed(λ=3)**" in text and "**diversed(λ=3, seed 2)**" in text


def test_an_autoregressive_method_is_paired_on_score_only(tmp_path):
    # ar_target drafts nothing: its acceptance difference is undefined and shows as "-", not as nan
    run = tmp_path / "set"
    write_method(run, "sd", [(1.0, 6, 8), (0.0, 2, 8)])
    write_method(run, "ar_target", [(0.0, 0, 0), (0.0, 0, 0)])
    text = report([run], ref="sd")
    assert "| ar_target (n=2) | +0.500 |" in text and text.count("nan") == 0
    assert "| - | - |" in text


def test_envelope_is_the_best_score_reachable_at_an_acceptance():
    from eval.pool import envelope_at

    acc, score = np.array([0.6, 0.8, 0.95]), np.array([0.9, 0.7, 0.3])
    assert envelope_at(acc, score, 0.7) == pytest.approx(0.8)  # halfway between 0.6 and 0.8
    assert envelope_at(acc, score, 0.8) == pytest.approx(0.7)
    assert envelope_at(acc, score, 0.5) == pytest.approx(0.9)  # a point at higher acceptance dominates
    # a dip in the middle: the coin flip between 0.6 and 0.95 beats both polyline segments at 0.8 (the hull)
    dip = np.array([0.9, 0.3, 0.45])
    assert envelope_at(acc, dip, 0.8) == pytest.approx(0.9 + (0.2 / 0.35) * (0.45 - 0.9))
    assert np.isnan(envelope_at(acc, score, 0.96))  # nothing reaches it


def test_above_rule_envelope_takes_every_training_free_rule_and_no_trained_method():
    from eval.pool import above_rule_envelope

    n = 40

    def method(score_ones: int, acc: int) -> dict:
        return {(0, i): (1.0 if i < score_ones else 0.0, acc, 10) for i in range(n)}

    data = {"sd": method(36, 6), "cascade(t=0.1)": method(30, 9), "typical(eps=0.3)": method(20, 8),
            "autojudge(t=0.5)": method(40, 10), "diversed(λ=1)": method(32, 8)}
    methods = {lab: lab.split("(")[0] for lab in data}
    env = above_rule_envelope(data, "diversed(λ=1)", methods)
    # at 0.8 the envelope is the coin flip between sd (0.9 at 0.6) and the cascade (0.75 at 0.9): 0.8; typical
    # (0.5 at 0.8) is below it, and AutoJudge (trained, 1.0 at 1.0) is not a point of it
    assert set(env["points"]) == {"sd", "cascade(t=0.1)", "typical(eps=0.3)"}
    assert env["envelope"] == pytest.approx(0.8) and env["gap"] == pytest.approx(0.0, abs=1e-12)
    data["diversed(λ=1)"] = method(38, 8)
    up = above_rule_envelope(data, "diversed(λ=1)", methods)
    assert up["gap"] == pytest.approx(0.15) and up["ci"][0] > 0.05
    data["diversed(λ=1)"] = method(38, 10)  # beyond every rule's acceptance: no envelope to compare with
    assert above_rule_envelope(data, "diversed(λ=1)", methods) is None
    # a rule as the point under test (one chosen on validation) is measured against the *other* rules: typical at
    # 0.8 is 0.3 below the sd-cascade coin flip, where counting itself would put the envelope at its own score or above
    rule = above_rule_envelope(data, "typical(eps=0.3)", methods)
    assert set(rule["points"]) == {"sd", "cascade(t=0.1)"}
    assert rule["envelope"] == pytest.approx(0.8) and rule["gap"] == pytest.approx(-0.3)


def test_partial_rows_are_paired_on_the_prompts_they_decoded_and_kept_out_of_the_bars(two_sets):
    """--partial: a run cut short (run.json and samples, no metrics.json) counts the prompts it decoded, marked."""
    cut = two_sets[1] / "static(w=0.50)"
    assert "static(w=0.50) | 2 |" in report(two_sets)  # without --partial: set 1 only (finished there)
    (cut / "run.json").write_text(json.dumps({"method": "static", "task": "gsm8k", "num_samples": 2}))
    assert "(partial)" not in report(two_sets)
    text = report(two_sets, partial=True)
    assert "| static(w=0.50) | 3 (partial) | 0.333 |" in text  # set 1's two prompts and set 2's first
    assert "| static(w=0.50) (n=3) |" in text and "| sd (n=4) |" in text
    stats = {lab: pooled_stats(per_prompt(two_sets, lab, partial=True)) for lab in ("sd", "static(w=0.50)")}
    assert [r["label"] for r in pooled_rows(two_sets, stats)] == ["sd"]  # never in the bars or the picture
    (cut / "samples.jsonl").write_text("")  # nothing decoded yet: not a row
    assert "static(w=0.50) | 2 |" in report(two_sets, partial=True)
