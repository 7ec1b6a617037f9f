"""eval/frontier.py on synthetic metrics: best static point at equal accuracy, the per-head comparison against the
issue's bars, the rejection + bias = TV identity check, the quality-vs-acceptance picture, the table."""

import json
import warnings

import pytest

from eval.frontier import (
    best_static,
    closing_rows,
    collect,
    comparison_lines,
    head_comparison,
    head_group,
    head_lambda,
    identity_warnings,
    line_gap,
    line_z,
    write_report,
)

E_TV = 0.3
TESTED = 10_000


def _m(method, label, score, acc, wbar=None, off=0.0, **params):
    """A metrics.json dict; a run with mean weight wbar lies on the identity line (+ off)."""
    on_line = acc is not None and wbar is not None
    return {"method": method, "label": label, "task": "gsm8k", "data_label": "synthetic", "temperature": 1.0,
            "gamma": 4, "num_samples": 50, "seed": 0, "task_score": score,
            "task_score_ci": None if score is None else [score - 0.05, score + 0.05], "acceptance_rate": acc,
            "rejection_rate": wbar * E_TV + off if on_line else None,
            "tv_bias_tested": (1 - wbar) * E_TV if on_line else None, "tv_pq_tested": E_TV if on_line else None,
            "tested": TESTED if on_line else None, "params": params, "cross_task": False,
            "mean_accepted_length": None if acc is None else 4 * acc, "head": None}


def _rows():
    rows = [_m("ar_target", "ar_target", 0.60, None), _m("sd", "sd", 0.60, 0.55, 1.0)]
    for w in (0.0, 0.25, 0.5, 0.75, 1.0):
        rows.append(_m("static", f"static(w={w:.2f})", 0.2 + 0.4 * w, 1 - 0.45 * w, w, w=w))
    # heads lie on the identity line too (mean w 0.6 and 0.9): only their scores can beat the static curve
    rows.append(_m("diversed", "diversed(λ=0.1)", 0.5, 0.85, 0.6, head_lambda=0.1))
    rows.append(_m("diversed", "diversed(λ=0.02)", 0.59, 0.72, 0.9, head_lambda=0.02))
    rows.append(_m("lossy", "lossy(l=0.5)", 0.55, 0.7, 0.9, off=0.01, lenience=0.5))
    rows.append(_m("autojudge", "autojudge", 0.58, 0.66, 0.9, off=0.02))
    return rows


def test_best_static_at_equal_accuracy():
    rows = _rows()
    assert best_static(rows, 0.5)["label"] == "static(w=0.75)"  # scores 0.5 and 0.6 qualify; 0.75 accepts more
    assert best_static(rows, 0.9)["label"] == "static(w=1.00)"  # nothing qualifies: the most accurate one
    assert best_static(rows, None)["label"] == "static(w=0.00)"
    sel = [m["label"] for m in closing_rows(rows)]
    assert sel == ["ar_target", "sd", "static(w=0.75) (best ≥ diversed(λ=0.1) score)",
                   "static(w=1.00) (best ≥ diversed(λ=0.02) score)", "lossy(l=0.5)", "autojudge",
                   "diversed(λ=0.1)", "diversed(λ=0.02)"]
    # a head above every static point: the fallback (the highest-scoring static) is not labelled as reaching it
    rows.append(_m("diversed", "diversed(λ=1)", 0.65, 0.9, 0.5, head_lambda=1.0))
    sel = [m["label"] for m in closing_rows(rows)]
    assert "static(w=1.00) (best ≥ diversed(λ=0.02) score; highest-scoring static; none ≥ diversed(λ=1) score)" \
        in sel
    no_heads = [m for m in _rows() if m["method"] != "diversed" and m["label"] != "static(w=1.00)"]
    assert "static(w=0.75) (highest-scoring static; none ≥ sd score)" in [m["label"] for m in closing_rows(no_heads)]


def test_head_comparison_against_the_bars():
    c = {x["head"]["label"]: x for x in head_comparison(_rows())}
    lo, hi = c["diversed(λ=0.02)"], c["diversed(λ=0.1)"]  # sorted by λ
    assert [x["head"]["label"] for x in head_comparison(_rows())] == ["diversed(λ=0.02)", "diversed(λ=0.1)"]
    # λ=0.1 scores 0.5: static w=0.75 scores 0.5 at acceptance 0.6625 -> +18.75 points, bar met
    assert hi["static"]["label"] == "static(w=0.75)"
    assert hi["d_acc_static"] == pytest.approx(0.85 - 0.6625) and hi["bar_static"]
    # vs sd: +30 points of acceptance, but 10 points of score lost: the sd bar is missed
    assert hi["d_acc_sd"] == pytest.approx(0.30) and hi["d_score_sd"] == pytest.approx(-0.10)
    assert not hi["bar_sd"]
    # λ=0.02 scores 0.59: only w=1 (0.6) qualifies, acceptance 0.55 -> +17 points; vs sd +17 at -1 point: met
    assert lo["static"]["label"] == "static(w=1.00)" and lo["bar_static"]
    assert lo["d_acc_sd"] == pytest.approx(0.17) and lo["d_score_sd"] == pytest.approx(-0.01) and lo["bar_sd"]
    # a head scoring above every static point has no static comparison
    rows = _rows() + [_m("diversed", "diversed(λ=0.3)", 0.95, 0.9, 0.5, head_lambda=0.3)]
    top = [x for x in head_comparison(rows) if x["head"]["label"] == "diversed(λ=0.3)"][0]
    assert top["static"] is None and "bar_static" not in top
    # without a static(w=1.00) run, sd is the static line's w = 1 end: a head that no w < 1 matches is read against it
    no_w1 = [m for m in _rows() if m["label"] != "static(w=1.00)"]
    lo = [x for x in head_comparison(no_w1) if x["head"]["label"] == "diversed(λ=0.02)"][0]
    assert lo["static"]["label"] == "sd" and lo["d_acc_static"] == pytest.approx(0.17) and lo["bar_static"]
    line = [x for x in comparison_lines(no_w1) if x.startswith("- **diversed(λ=0.02)")][0]
    assert "Best static with score ≥ the head's: sd = static w = 1 (score 0.600" in line


def test_identity_line_is_a_check_for_heads_and_static_alike():
    rows = _rows()
    assert line_gap(rows[3]) == pytest.approx(0.0)  # static w=0.25 on the line
    assert line_gap(rows[7]) == pytest.approx(0.0)  # and so is the head: rejection + bias = TV for any w_t
    assert line_gap(rows[0]) is None and line_z(rows[0]) is None
    se = (0.28 * 0.72 / TESTED) ** 0.5  # lossy: rejection 0.28
    assert line_z(rows[-2]) == pytest.approx(0.01 / se)
    assert identity_warnings(rows) == []  # lossy / autojudge above the line: triangle-inequality slack, no warning
    bad_head = _m("diversed", "diversed(λ=0.5)", 0.3, 0.9, 0.5, off=-0.02, head_lambda=0.5)  # below: impossible
    bad_static = _m("static", "static(w=0.90)", 0.5, 0.6, 0.9, off=+0.03, w=0.9)  # a mixture above it
    noisy = _m("static", "static(w=0.60)", 0.4, 0.7, 0.6, off=+0.003, w=0.6)  # within noise: z ≈ 0.6
    greedy = {**bad_static, "label": "greedy", "temperature": 0.0}  # greedy acceptance: no identity to check
    out = identity_warnings(rows + [bad_head, bad_static, noisy, greedy])
    assert [w.split(":")[0] for w in out] == ["diversed(λ=0.5)", "static(w=0.90)"]


def test_heads_grouped_by_lambda_from_config(tmp_path):
    head_dir = tmp_path / "head"
    head_dir.mkdir()
    (head_dir / "config.json").write_text(json.dumps({"training": {"lambda": 0.2, "algo": {"advantage": "forks"}}}))
    m = {**_m("diversed", "diversed(head)", 0.5, 0.8, 0.7), "head": str(head_dir)}  # params lack head_lambda
    assert head_lambda(m) == 0.2 and head_group(m) == "heads (forks)"
    assert head_lambda(_rows()[7]) == 0.1 and head_group(_rows()[7]) == "heads"
    # a features-only head is another recipe: its own curve, not a point on the hidden-state heads' one
    (head_dir / "config.json").write_text(json.dumps({"training": {"lambda": 3.0, "algo": {"advantage": "returns"}},
                                                      "arch": {"use_hidden": False}}))
    assert head_group(m) == "heads (returns, features only)"
    # so is a head trained from another initial w than today's default (0.5)
    (head_dir / "config.json").write_text(json.dumps({"training": {"lambda": 0.1, "algo": {"advantage": "returns"},
                                                                   "head": {"init_w": 0.95}}}))
    assert head_group(m) == "heads (returns, init w 0.95)"
    (head_dir / "config.json").write_text(json.dumps({"training": {"lambda": 0.1, "algo": {"advantage": "returns"},
                                                                   "head": {"init_w": 0.5}}}))
    assert head_group(m) == "heads (returns)"
    # fork branches continued by the policy or by the target's greedy decoding: two recipes, not two λ points
    for cont in ("policy", "greedy_target"):
        algo = {"advantage": "critic", "forks": {"continuation": cont}}
        (head_dir / "config.json").write_text(json.dumps({"training": {"lambda": 0.1, "algo": algo}}))
        assert head_group(m) == f"heads (critic {cont})"


def test_write_report_from_dirs_makes_picture_and_table(tmp_path):
    bad = _m("static", "static(w=0.90)", 0.5, 0.6, 0.9, off=+0.03, w=0.9)
    judge2 = _m("autojudge", "autojudge(t=0.2)", 0.55, 0.75, 0.8, off=0.02)  # a second setting: drawn as a curve
    for i, m in enumerate(_rows() + [bad, judge2]):
        (tmp_path / "runs" / str(i)).mkdir(parents=True)
        (tmp_path / "runs" / str(i) / "metrics.json").write_text(json.dumps(m))
    rows = collect([tmp_path / "runs"])
    assert len(rows) == 13
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_report(rows, tmp_path / "out", "test")
    assert any("static(w=0.90)" in str(w.message) for w in caught)
    assert set(paths) == {"quality_vs_acceptance", "table"}
    png = paths["quality_vs_acceptance"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = paths["table"].read_text()
    assert "## Heads against static and SD" in text and "## Closing-note selection" in text
    line = [x for x in text.splitlines() if x.startswith("- **diversed(λ=0.1)**")][0]
    assert "static(w=0.75)" in line and "acceptance +18.8 points" in line and "(bar ≥ +5: met)" in line
    assert "acceptance +30.0 points, score -10.0 points" in line and "missed" in line
    assert "## Consistency check" in text and "static(w=0.90): rejection + bias" in text
    assert "below" not in text and "beats the static" not in text  # no claim that a head can beat the line
    with pytest.raises(FileNotFoundError, match="run eval/run.py first"):
        collect([tmp_path / "empty"])
