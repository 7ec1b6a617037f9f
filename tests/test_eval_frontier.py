"""eval/frontier.py on synthetic metrics: best static point at equal accuracy, the pictures, the table."""

import json

import pytest

from eval.frontier import best_static, closing_rows, collect, line_gap, write_report

E_TV = 0.3


def _m(method, label, score, acc, rej=None, bias=None, **params):
    return {"method": method, "label": label, "task": "gsm8k", "data_label": "synthetic", "temperature": 1.0,
            "gamma": 4, "num_samples": 50, "seed": 0, "task_score": score,
            "task_score_ci": None if score is None else [score - 0.05, score + 0.05], "acceptance_rate": acc,
            "rejection_rate": rej, "tv_bias_tested": bias, "tv_pq_tested": E_TV if rej is not None else None,
            "params": params, "cross_task": False, "mean_accepted_length": None if acc is None else 4 * acc}


def _rows():
    rows = [_m("ar_target", "ar_target", 0.60, None), _m("sd", "sd", 0.60, 0.55, E_TV, 0.0)]
    for w in (0.0, 0.25, 0.5, 0.75, 1.0):
        rows.append(_m("static", f"static(w={w:.2f})", 0.2 + 0.4 * w, 1 - 0.45 * w, w * E_TV, (1 - w) * E_TV, w=w))
    rows.append(_m("diversed", "diversed(λ=0.1)", 0.5, 0.85, 0.1, 0.05, head_lambda=0.1))
    rows.append(_m("lossy", "lossy(l=0.5)", 0.55, 0.7, 0.15, 0.1, lenience=0.5))
    return rows


def test_best_static_at_equal_accuracy():
    rows = _rows()
    assert best_static(rows, 0.5)["label"] == "static(w=0.75)"  # scores 0.5 and 0.6 qualify; 0.75 accepts more
    assert best_static(rows, 0.9)["label"] == "static(w=1.00)"  # nothing qualifies: the most accurate one
    assert best_static(rows, None)["label"] == "static(w=0.00)"
    sel = [m["label"] for m in closing_rows(rows)]
    assert sel == ["ar_target", "sd", "static(w=0.75) (best ≥ diversed(λ=0.1) score)", "lossy(l=0.5)",
                   "diversed(λ=0.1)"]


def test_line_gap():
    rows = _rows()
    assert line_gap(rows[3]) == pytest.approx(0.0)  # static points lie on the line
    assert line_gap(rows[-2]) == pytest.approx(0.1 + 0.05 - E_TV)  # the head lies below it
    assert line_gap(rows[0]) is None


def test_write_report_makes_pictures_and_table(tmp_path):
    for i, m in enumerate(_rows()):
        (tmp_path / "runs" / str(i)).mkdir(parents=True)
        (tmp_path / "runs" / str(i) / "metrics.json").write_text(json.dumps(m))
    rows = collect([tmp_path / "runs"])
    assert len(rows) == 9
    paths = write_report(rows, tmp_path / "out", "test")
    for k in ("acceptance_vs_score", "rejection_vs_bias"):
        assert paths[k].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[k].stat().st_size > 10_000
    text = paths["table"].read_text()
    assert "## Closing-note selection" in text and "(best ≥ diversed(λ=0.1) score)" in text
    assert "-0.150" in text  # the head's distance below the static line
    with pytest.raises(FileNotFoundError, match="run eval/run.py first"):
        collect([tmp_path / "empty"])
