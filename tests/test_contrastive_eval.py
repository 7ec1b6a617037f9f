"""The contrastive methods through eval/run.py (real conf/eval.yaml, micro trio) and their tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eval.contrastive_tables import alpha_robustness, speed_table
from eval.metrics import validate_metrics
from specdec.registry import CONTRASTIVE, METHODS, Models, build_method, contrastive_metrics
from specdec.targets import ContrastiveRule


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _compose(micro_trio, *overrides):
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("eval", overrides=[f"model.dir={micro_trio}", "eval.num_samples=2", "eval.batch_size=2",
                                          "eval.max_new_tokens=10", "eval.progress=false", "eval.warmup=false",
                                          *overrides])


def test_registry_builds_each_method(micro_trio):
    assert set(CONTRASTIVE) <= set(METHODS)
    models = Models({"dir": str(micro_trio)})
    for name in CONTRASTIVE:
        spec = build_method(name, models, _compose(micro_trio, f"method={name}", "alpha=0.3", "beta=0.2"))
        assert isinstance(spec.rule, ContrastiveRule) and (spec.rule.alpha, spec.rule.beta) == (0.3, 0.2)
        assert spec.amateur is models.amateur
        assert spec.gamma == (0 if name == "cd" else 4)
        assert (spec.generate_fn is not None) == (name == "cos")
    scd = build_method("scd", models, _compose(micro_trio, "method=scd"))
    # scd drafts with the amateur's weights through a separate wrapper (separate cache)
    assert scd.proposer.lm is not models.amateur and scd.proposer.lm.model is models.amateur.model
    with pytest.raises(ValueError, match="alpha"):
        build_method("cd", models, _compose(micro_trio, "method=cd", "alpha=-1"))
    with pytest.raises(ValueError, match="gamma"):
        build_method("dcd", models, _compose(micro_trio, "method=dcd", "method.gamma=0"))


@pytest.mark.parametrize("method", ["cd", "cos", "scd"])
def test_eval_run_writes_contrastive_metrics(micro_trio, tmp_path, method):
    from eval.run import evaluate

    cfg = _compose(micro_trio, f"method={method}", "alpha=0.5", "beta=0.1", "temperature=0")
    (m,) = evaluate(cfg, out_dir=tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    validate_metrics(saved)
    for k in ("t_e_ms", "t_p_ms", "t_q_ms", "throughput_model_tps", "measured_over_model"):
        assert k in saved, k
    assert saved["params"]["contrastive"] == method and saved["params"]["alpha"] == 0.5
    assert saved["t_p_ms"] > 0 and saved["throughput_model_tps"] > 0
    if method == "cos":
        assert saved["t_q_ms"] == 0.0 and saved["t_e_ms"] > 0  # the drafting pass is the amateur pass
    elif method == "cd":
        assert saved["t_q_ms"] > 0 and saved["t_e_ms"] == 0.0 and saved["mean_accepted_length"] is None
    else:
        assert saved["t_q_ms"] > 0 and saved["t_e_ms"] > 0


def test_throughput_model_formula():
    batches = [{"time_proposer": 0.4, "proposer_calls": 200, "time_target": 0.5, "target_calls": 50,
                "time_amateur": 0.1, "wall_s": 2.0, "new_tokens": 150}]
    samples = [{"accepted": [2] * 25}, {"accepted": [1] * 25}]  # L = 1.5, 2 rows per round
    m = contrastive_metrics(samples, batches, gamma=4)
    assert m["t_e_ms"] == pytest.approx(2.0) and m["t_p_ms"] == pytest.approx(10.0)
    assert m["t_q_ms"] == pytest.approx(2.0)
    model = 1000 * (1.5 + 1) / (4 * 2.0 + 10.0 + 2.0) * 1.0  # 50 row-rounds over 50 expert calls
    assert m["throughput_model_tps"] == pytest.approx(model)
    assert m["measured_over_model"] == pytest.approx(75.0 / model)


def test_tables():
    def row(method, alpha, L, tps, T=0.0):
        return {"task": "gsm8k", "temperature": T, "params": {"alpha": alpha, "beta": 0.1, "contrastive": method},
                "mean_accepted_length": L, "tokens_per_second": tps}

    rows = [row("cd", 0.0, None, 100.0), row("dcd", 0.0, 2.0, 250.0), row("dcd", 0.5, 1.5, 200.0),
            row("cd", 0.5, None, 80.0), row("scd", 0.5, 1.0, 120.0), row("scd", 0.0, 4.0, 300.0)]
    rob = alpha_robustness(rows)
    assert "| gsm8k | 0 | dcd | 2.00 | 1.00 | 0.75 |" in rob
    assert "| gsm8k | 0 | scd | 4.00 | 1.00 | 0.25 |" in rob
    sp = speed_table(rows)
    assert "| gsm8k | 0 | 0.5 | dcd | 1.50 | 200.0 | 2.50 |" in sp  # 200 / 80 over vanilla CD at the same α
