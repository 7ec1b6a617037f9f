"""eval/: methods on constructed pairs, the static frontier line, metrics.json, resume after a crash.

End-to-end runs use the micro trio (random-ish tiny models) with few samples and short outputs.
"""

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from data.tasks import get_task
from eval.metrics import SCHEMA, validate_metrics
from eval.run import BATCHES, SAMPLES, SIGNATURE_ADDED_LATER, run_method
from specdec.jsonl import read_jsonl
from specdec.registry import METHODS, Models, build_method, register
from specdec.targets import RoundScores
from specdec.verify import verify

GAMMA = 4


def _cfg(name: str, **method) -> OmegaConf:
    return OmegaConf.create({
        "seed": 0, "temperature": 1.0, "head_path": method.pop("head_path", None), "resume": False,
        "task": {"name": "gsm8k"}, "data": {}, "method": {"name": name, "gamma": GAMMA, **method},
        "eval": {"num_samples": 8, "batch_size": 4, "max_new_tokens": 24, "warmup": False, "progress": False,
                 "bootstrap": 200},
    })


def _examples(n: int, category: bool = False) -> SimpleNamespace:
    from data.synthetic import generate

    rows = generate("gsm8k", "test", n, seed=0)
    if category:
        rows = [{**r, "category": ["writing", "math"][i % 2]} for i, r in enumerate(rows)]
    return SimpleNamespace(rows=rows, label="synthetic", source="synthetic")


# No reward in these runs (the reward has its own tests); the score column is checked with a stand-in below.
TASK = dataclasses.replace(get_task("gsm8k"), reward=None)


@pytest.fixture(scope="module")
def head_dir(micro_trio, tmp_path_factory) -> Path:
    """A fresh (untrained) head for the micro trio: outputs its init_w everywhere."""
    from heads import EnsembleHead, HeadConfig, export_head
    from specdec.targets import PAIR_FEATURES

    cfgs = {r: json.loads((micro_trio / r / "config.json").read_text()) for r in ("target", "draft")}
    head = EnsembleHead(HeadConfig(hidden_q=cfgs["draft"]["hidden_size"], hidden_p=cfgs["target"]["hidden_size"],
                                   num_features=len(PAIR_FEATURES), init_w=0.7))
    return export_head(head, tmp_path_factory.mktemp("head") / "export", {"training": {"task": "cnndm",
                                                                                        "lambda": 0.1}})


@pytest.fixture(scope="module")
def models(micro_trio) -> Models:
    return Models({"dir": str(micro_trio)})


RULE_METHODS = [("sd", {}), ("static", {"w": 0.0}), ("static", {"w": 0.5}), ("static", {"w": 1.0}),
                ("lossy", {"lenience": 0.5}), ("cascade", {"threshold": 0.1}), ("diversed", {})]


def _acceptance(rule, p: torch.Tensor, q: torch.Tensor, hq: int, hp: int, seed: int = 0) -> float:
    """Acceptance rate of a rule on constructed per-position distributions p, q [N, γ+1, V]."""
    g = torch.Generator().manual_seed(seed)
    n = p.shape[0]
    drafts = torch.multinomial(q[:, :GAMMA].reshape(-1, q.shape[-1]), 1, generator=g).view(n, GAMMA)
    scores = RoundScores(p.log(), 1.0, q, None, torch.randn(n, GAMMA + 1, hp, generator=g),
                         torch.randn(n, GAMMA + 1, hq, generator=g))
    nu, _ = rule(scores)
    res = verify(drafts, q[:, :GAMMA], nu, generator=g)
    return float(res.num_accepted.float().mean() / GAMMA)


@pytest.mark.parametrize("name,params", RULE_METHODS)
def test_equal_pair_accepts_everything_disjoint_pair_as_expected(name, params, models, head_dir):
    spec = build_method(name, models, _cfg(name, head_path=str(head_dir), **params))
    hq, hp = models.draft.hidden_size, models.target.hidden_size
    V, n = 12, 400
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(2 * torch.randn(n, GAMMA + 1, V, generator=g), -1)
    assert _acceptance(spec.rule, p, p.clone(), hq, hp) == 1.0  # p = q: nothing can be rejected
    # disjoint supports: p on even tokens, q on odd ones
    even = (torch.arange(V) % 2 == 0).float()
    pd = p * even
    pd = pd / pd.sum(-1, keepdim=True)
    qd = p * (1 - even)
    qd = qd / qd.sum(-1, keepdim=True)
    acc = _acceptance(spec.rule, pd, qd, hq, hp)
    if name == "sd" or (name == "static" and params["w"] == 1.0):
        assert acc == 0.0
    elif name == "static" and params["w"] == 0.0:
        assert acc == 1.0
    elif name == "static":  # accept prob (1 - w) at every position: E[accepted/γ] = sum_i (1-w)^i / γ
        assert acc == pytest.approx(sum(0.5 ** i for i in range(1, GAMMA + 1)) / GAMMA, abs=0.05)
    elif name == "lossy":  # ν = p/l is 0 on q's support: every draft is rejected, whatever the lenience
        assert acc == 0.0
    elif name == "cascade":  # w ∈ {0, 1}: a draft is accepted surely where w = 0 (ν = q), never where w = 1
        defer = (pd.amax(-1) - qd.amax(-1) > params["threshold"])[:, :GAMMA]
        want = float((~defer).long().cumprod(-1).sum(-1).float().mean() / GAMMA)
        assert 0.0 < want < 1.0 and acc == pytest.approx(want, abs=1e-12)
    elif name == "diversed":  # the fresh head's w = init_w = 0.7 everywhere: accept prob 0.3 at every position
        assert acc == pytest.approx(sum(0.3 ** i for i in range(1, GAMMA + 1)) / GAMMA, abs=0.05)
    else:
        raise AssertionError(f"no expectation for {name} {params}: add one")


def test_equal_pair_end_to_end(micro_trio, head_dir, tmp_path):
    """Draft = target (the same weights loaded twice): every draft-model method accepts (almost surely) all."""
    twin = Models({"dir": str(micro_trio), "draft": str(micro_trio / "target")})
    cfg_list = [("sd", {}), ("static", {"w": 0.3}), ("lossy", {"lenience": 0.5}), ("cascade", {"threshold": 0.1})]
    for name, params in cfg_list:
        cfg = _cfg(name, **params)
        cfg.eval.num_samples, cfg.eval.max_new_tokens = 4, 16
        spec = build_method(name, twin, cfg)
        m = run_method(cfg, spec, twin, TASK, _examples(4), tmp_path / name)
        # float32 round-off between one-token and parallel passes is ~1e-6 per draft, so >= 0.99 is generous
        assert m["acceptance_rate"] >= 0.99, (name, m["acceptance_rate"])
        assert m["mean_accepted_length"] >= 0.99 * GAMMA


def test_static_sweep_lies_on_the_theoretical_line(models, tmp_path):
    """rejection + TV(nu, p) = E[TV(p, q)] on tested positions, for every w (sampling error: binomial SE)."""
    for w in (0.3, 0.7):
        cfg = _cfg("static", w=w)
        cfg.eval.num_samples, cfg.eval.batch_size, cfg.eval.max_new_tokens = 8, 8, 32
        m = run_method(cfg, build_method("static", models, cfg), models, TASK, _examples(8), tmp_path / f"w{w}")
        r = m["rejection_rate"]
        se = (max(r * (1 - r), 0.01) / m["tested"]) ** 0.5
        gap = r + m["tv_bias_tested"] - m["tv_pq_tested"]
        assert abs(gap) < 4 * se, (w, r, m["tv_bias_tested"], m["tv_pq_tested"], se)
        # the bias is exactly (1 - w) TV(p, q) position by position
        assert m["tv_bias_tested"] == pytest.approx((1 - w) * m["tv_pq_tested"], rel=1e-4)
        # and the predicted lengths track the measured one
        assert m["expected_length_exact"] == pytest.approx(m["mean_accepted_length"], abs=0.6)


def test_metrics_json_schema_and_category_table(models, tmp_path, monkeypatch):
    import rewards

    calls = []

    def fake_score(task, completions, references, **kw):  # deterministic stand-in reward
        calls.append(len(completions))
        return SimpleNamespace(scores=[float(len(c) % 2) for c in completions], details=[{}] * len(completions))

    monkeypatch.setattr(rewards, "score", fake_score, raising=False)
    cfg = _cfg("sd")
    m = run_method(cfg, build_method("sd", models, cfg), models, get_task("gsm8k"), _examples(8, category=True),
                   tmp_path)
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    validate_metrics(on_disk)
    assert set(SCHEMA) <= set(on_disk) and on_disk == json.loads(json.dumps(m))
    assert sum(calls) == 8 and m["task_score"] is not None
    lo, hi = m["task_score_ci"]
    assert lo <= m["task_score"] <= hi
    assert set(m["per_category"]) == {"writing", "math"}
    assert m["per_category"]["math"]["num_samples"] == 4
    assert m["tokens_per_round"] == pytest.approx(m["mean_accepted_length"] + 1)
    assert 0 < m["acceptance_rate"] <= 1 and m["tokens_per_second"] > 0
    assert len(m["tokens_per_second_repeats"]) == 2 * 1  # batches never mix categories: 2 groups of 4
    assert "| method |" in (tmp_path / "table.md").read_text()
    bad = dict(on_disk)
    del bad["tv_bias"]
    with pytest.raises(ValueError, match="tv_bias"):
        validate_metrics(bad)


class Crash(RuntimeError):
    pass


def test_killed_run_resumes_without_recomputing(models, tmp_path):
    from specdec.generate import generate

    seen: list[list[int]] = []

    def crashing(target, proposer, prompts, **kw):
        if len(seen) == 2:
            raise Crash("killed")
        seen.append(len(prompts))
        return generate(target, proposer, prompts, **kw)

    cfg = _cfg("sd")
    cfg.eval.batch_size = 2
    spec = build_method("sd", models, cfg)
    ex = _examples(8)
    with pytest.raises(Crash):
        run_method(cfg, spec, models, TASK, ex, tmp_path, generate_fn=crashing)
    first = (tmp_path / SAMPLES).read_text()
    assert sorted(s["idx"] for s in read_jsonl(tmp_path / SAMPLES)) == [0, 1, 2, 3]
    with open(tmp_path / SAMPLES, "a") as f:  # a torn line, as a kill during a write leaves
        f.write('{"idx": 4, "completion": "tru')

    with pytest.raises(FileExistsError, match="resume=true"):
        run_method(cfg, spec, models, TASK, ex, tmp_path)
    other = _cfg("sd")
    other.eval.batch_size, other.resume, other.seed = 2, True, 1
    with pytest.raises(ValueError, match="seed"):
        run_method(other, spec, models, TASK, ex, tmp_path)
    other.seed = 0
    other.method.max_ngram = 7  # a method setting the label does not show
    with pytest.raises(ValueError, match="method_config"):
        run_method(other, spec, models, TASK, ex, tmp_path)
    # the same model paths holding other weights (a trio rebuilt in place): refused by the weights' fingerprints
    saved = json.loads((tmp_path / "run.json").read_text())
    assert {r: saved["model_fingerprints"][r] for r in ("target", "draft")} == models.fingerprints(("target", "draft"))
    rebuilt = {**saved, "model_fingerprints": {**saved["model_fingerprints"], "draft": "sha256:0123456789abcdef"}}
    (tmp_path / "run.json").write_text(json.dumps(rebuilt))
    again = _cfg("sd")
    again.eval.batch_size, again.resume = 2, True
    with pytest.raises(ValueError, match=r"cannot resume .*\(model_fingerprints: "):
        run_method(again, spec, models, TASK, ex, tmp_path)
    (tmp_path / "run.json").write_text(json.dumps(saved))
    # a run.json written before the later signature keys existed resumes (they are recorded from then on)
    old_run = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({k: v for k, v in old_run.items()
                                                   if k not in SIGNATURE_ADDED_LATER}))

    resumed: list[int] = []

    def counting(target, proposer, prompts, **kw):
        resumed.append(len(prompts))
        return generate(target, proposer, prompts, **kw)

    cfg.resume = True
    m = run_method(cfg, spec, models, TASK, ex, tmp_path, generate_fn=counting)
    assert resumed == [2, 2]  # only samples 4..7 were generated again
    assert (tmp_path / SAMPLES).read_text().startswith(first)  # finished samples untouched
    idx = [s["idx"] for s in read_jsonl(tmp_path / SAMPLES)]
    assert sorted(idx) == list(range(8)) and m["num_samples"] == 8
    assert json.loads((tmp_path / "run.json").read_text()) == old_run


def test_resumed_run_equals_uninterrupted_run(models, tmp_path):
    """Per-batch seeds make a resumed run produce the same samples as one that never stopped."""
    cfg = _cfg("sd")
    cfg.eval.batch_size = 2
    spec = build_method("sd", models, cfg)
    ex = _examples(4)
    run_method(cfg, spec, models, TASK, ex, tmp_path / "a")
    (tmp_path / "b").mkdir()
    lines = (tmp_path / "a" / SAMPLES).read_text().splitlines()
    (tmp_path / "b" / SAMPLES).write_text(lines[0] + "\n" + lines[1] + "\n")
    shutil.copy(tmp_path / "a" / "run.json", tmp_path / "b" / "run.json")
    cfg.resume = True
    run_method(cfg, spec, models, TASK, ex, tmp_path / "b")
    strip = [{k: v for k, v in s.items()} for s in read_jsonl(tmp_path / "a" / SAMPLES)]
    again = read_jsonl(tmp_path / "b" / SAMPLES)
    assert [s["completion"] for s in again] == [s["completion"] for s in strip]


def test_batch_cut_mid_write_runs_again_whole(models, tmp_path):
    """A kill while a batch's samples are appended leaves part of the batch: resuming reruns the whole batch with its
    own seed, so the samples and the timing records equal those of a run that never stopped."""
    cfg = _cfg("sd")
    cfg.eval.batch_size = 2
    spec = build_method("sd", models, cfg)
    ex = _examples(4)
    full = run_method(cfg, spec, models, TASK, ex, tmp_path / "a")
    (tmp_path / "b").mkdir()
    for f in ("run.json", BATCHES):
        shutil.copy(tmp_path / "a" / f, tmp_path / "b" / f)
    lines = (tmp_path / "a" / SAMPLES).read_text().splitlines()
    assert [json.loads(x)["batch"] for x in lines] == [0, 0, 2, 2]
    (tmp_path / "b" / SAMPLES).write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])  # idx 3 torn

    from specdec.generate import generate

    seen: list[list[str]] = []

    def counting(target, proposer, prompts, **kw):
        seen.append(prompts)
        return generate(target, proposer, prompts, **kw)

    cfg.resume = True
    m = run_method(cfg, spec, models, TASK, ex, tmp_path / "b", generate_fn=counting)
    assert len(seen) == 1 and len(seen[0]) == 2  # the cut batch (idx 2, 3), whole
    again = read_jsonl(tmp_path / "b" / SAMPLES)
    assert [s["idx"] for s in again] == [0, 1, 2, 3]
    assert [s["completion"] for s in again] == [json.loads(x)["completion"] for x in lines]
    assert len(read_jsonl(tmp_path / "b" / BATCHES)) == 3  # the rerun's timing is appended ...
    assert len(m["tokens_per_second_repeats"]) == 2  # ... and replaces the first one's in the metrics
    assert m["new_tokens"] == full["new_tokens"]


def test_registry_hook_and_errors(models):
    @register("_test_method")
    def _builder(models, cfg):
        return build_method("sd", models, cfg)

    try:
        assert METHODS["_test_method"] is _builder
        with pytest.raises(ValueError, match="registered twice"):
            register("_test_method")(_builder)
    finally:
        del METHODS["_test_method"]
    with pytest.raises(ValueError, match="known methods"):
        build_method("nope", models, _cfg("nope"))
    with pytest.raises(ValueError, match="head=PATH"):
        build_method("diversed", models, _cfg("diversed"))
    with pytest.raises(ValueError, match="gamma"):
        build_method("sd", models, _cfg("sd", gamma=0))


def test_diversed_records_cross_task(models, head_dir, tmp_path):
    cfg = _cfg("diversed", head_path=str(head_dir))
    cfg.eval.num_samples, cfg.eval.max_new_tokens = 4, 16
    spec = build_method("diversed", models, cfg)
    assert spec.label == "diversed(λ=0.1)"
    m = run_method(cfg, spec, models, TASK, _examples(4), tmp_path)
    assert m["cross_task"] and m["head_task"] == "cnndm"
    assert m["mean_w"] == pytest.approx(0.7, abs=1e-4)  # an untrained head outputs init_w everywhere
    assert "Cross-task" in (tmp_path / "table.md").read_text()


def test_a_head_trained_with_another_tokenizer_is_refused(models, head_dir, tmp_path):
    """Its hidden-state inputs came from other token ids: evaluation refuses it as the inference API does."""
    from heads import HeadFormatError, tokenizer_hash

    other = tmp_path / "other"
    shutil.copytree(head_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "tokenizer_hash": "sha256:0123456789abcdef"}))
    with pytest.raises(HeadFormatError, match="another tokenizer"):
        build_method("diversed", models, _cfg("diversed", head_path=str(other)))
    (other / "config.json").write_text(json.dumps({**config, "tokenizer_hash": tokenizer_hash(models.tokenizer)}))
    assert build_method("diversed", models, _cfg("diversed", head_path=str(other))).label == "diversed(λ=0.1)"


def test_a_head_trained_with_other_model_weights_is_refused(micro_trio, head_dir, tmp_path):
    """Same paths, tokenizer and widths, other weights (a trio rebuilt in place): refused per role, by the
    recorded weights fingerprints; the head is accepted again once the models are the ones it recorded."""
    from safetensors.torch import load_file, save_file

    from heads import HeadFormatError

    trio = tmp_path / "trio"
    shutil.copytree(micro_trio, trio)
    head = tmp_path / "head"
    shutil.copytree(head_dir, head)
    config = json.loads((head / "config.json").read_text())
    recorded = Models({"dir": str(trio)}).fingerprints(("target", "draft"))
    (head / "config.json").write_text(json.dumps({**config, "model_fingerprints": recorded}))
    assert build_method("diversed", Models({"dir": str(trio)}), _cfg("diversed", head_path=str(head)))

    weights = next((trio / "draft").glob("*.safetensors"))
    state = load_file(weights)
    save_file({k: v + 0.01 for k, v in state.items()}, str(weights))  # retrained in place, say
    rebuilt = Models({"dir": str(trio)})
    assert rebuilt.fingerprints(("target",)) == {"target": recorded["target"]}
    assert rebuilt.fingerprints(("draft",))["draft"] != recorded["draft"]
    with pytest.raises(HeadFormatError, match=r"other model weights \(draft: sha256:"):
        build_method("diversed", rebuilt, _cfg("diversed", head_path=str(head)))


def test_weights_fingerprint_ignores_the_load_dtype_and_sees_every_layer(models):
    """float32 and bfloat16 copies of the same weights agree; a change confined to one inner layer is seen."""
    import copy

    from specdec.models import weights_fingerprint

    model = models.target.model
    fp = weights_fingerprint(model)
    assert weights_fingerprint(copy.deepcopy(model).to(torch.bfloat16)) == fp
    changed = copy.deepcopy(model)
    inner = [p for name, p in changed.named_parameters() if "layers.0." in name and p.dim() == 2][0]
    with torch.no_grad():
        inner.mul_(1.5)
    assert weights_fingerprint(changed) != fp


def test_hydra_config_static_sweep_end_to_end(micro_trio, tmp_path):
    """The real conf/eval.yaml, the task's loader and reward: a two-point static sweep into w=*/ directories."""
    from hydra import compose, initialize_config_dir

    from eval.run import evaluate, rewrite_head_arg

    assert rewrite_head_arg(["run.py", "head=/a/b", "heads=[x]"]) == ["run.py", "head_path=/a/b", "heads=[x]"]
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("eval", overrides=[f"model.dir={micro_trio}", "method=static_sweep", "method.grid=[0.0,1.0]",
                                         "eval.num_samples=2", "eval.batch_size=2", "eval.max_new_tokens=12",
                                         "eval.progress=false", "eval.warmup=false"])
    results = evaluate(cfg, out_dir=tmp_path)
    assert [m["label"] for m in results] == ["static(w=0.00)", "static(w=1.00)"]
    assert results[0]["acceptance_rate"] == 1.0 and results[0]["mean_w"] == 0.0  # nu = q accepts everything
    assert results[1]["tv_bias"] == pytest.approx(0.0, abs=1e-5)  # nu = p: lossless
    for m in results:
        assert m["data_label"] == "synthetic" and m["task"] == "gsm8k" and m["task_score"] is not None
        validate_metrics(json.loads((tmp_path / f"w={m['params']['w']:.2f}" / "metrics.json").read_text()))
    assert "static(w=1.00)" in (tmp_path / "table.md").read_text()


def test_lossy_rule_is_leviathans_procedure():
    """LossyRule's ν = output_distribution(p/l, q) accepts each draft with the same probability and draws the
    same residual as Leviathan's p/l, and is the lenient rule's real output (so its TV bias is right)."""
    from specdec.targets import LossyRule, lossy_target
    from specdec.verify import output_distribution

    g = torch.Generator().manual_seed(0)
    B, V, lenience = 64, 10, 0.4
    p = torch.softmax(2 * torch.randn(B, GAMMA + 1, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(B, GAMMA, V, generator=g, dtype=torch.float64), -1)
    scores = RoundScores(p.log(), 1.0, q)
    raw = lossy_target(p, lenience)  # Leviathan's rule as written: accept min(1, p/(l·q)), residual p/l − q
    eff, _ = LossyRule(lenience)(scores)
    assert torch.allclose(eff[:, :GAMMA].sum(-1), torch.ones(B, GAMMA, dtype=torch.float64))
    assert torch.allclose(eff[:, GAMMA], p[:, GAMMA])  # the bonus token still comes from p
    beta_raw = torch.clamp(raw[:, :GAMMA] / q, max=1.0)
    beta_eff = torch.clamp(eff[:, :GAMMA] / q, max=1.0)
    assert torch.allclose(beta_raw, beta_eff)  # same acceptance probability for every possible draft token
    assert torch.allclose(output_distribution(eff[:, :GAMMA], q), output_distribution(raw[:, :GAMMA], q))
    assert torch.allclose(output_distribution(eff[:, :GAMMA], q), eff[:, :GAMMA])
    tv = 0.5 * (eff[:, :GAMMA] - p[:, :GAMMA]).abs().sum(-1)
    assert float(tv.mean()) > 0.05  # the lenient rule is biased, and now the records say so


def test_specbench_speed_and_acceptance_per_category(micro_trio, shared_dir, tmp_path):
    """task=specbench on the real question.jsonl: no reward, acceptance and speed per category."""
    from hydra import compose, initialize_config_dir

    from eval.run import evaluate

    path = shared_dir / "data" / "specbench" / "question.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("eval", overrides=[f"model.dir={micro_trio}", "task=specbench", f"data.path={path}",
                                         "eval.num_samples=6", "eval.batch_size=3", "eval.max_new_tokens=8",
                                         "eval.progress=false", "eval.warmup=false"])
    (m,) = evaluate(cfg, out_dir=tmp_path)
    assert m["task_score"] is None and m["task_score_ci"] is None and m["data_label"] == "real"
    cats = {json.loads(x)["category"] for x in path.read_text().splitlines() if x.strip()}
    assert m["per_category"] and set(m["per_category"]) <= cats
    assert sum(c["num_samples"] for c in m["per_category"].values()) == 6
    assert all(c["tokens_per_second"] and c["acceptance_rate"] is not None for c in m["per_category"].values())
    assert "Per category" in (tmp_path / "table.md").read_text()


def test_head_labels_tell_estimators_apart():
    """Two heads of one λ trained with different advantage estimators get different labels (= run directories),
    so resume=true can never take one head's finished run for the other's."""
    from specdec.registry import head_label

    assert head_label("a/head", {"lambda": 0.1, "advantage": "returns"}) == "λ=0.1"
    assert head_label("b/head", {"lambda": 0.1, "advantage": "forks"}) == "λ=0.1,forks"
    assert head_label("c/head", {"lambda": 0.1}) == "λ=0.1"
    assert head_label("d/myhead", {}) == "myhead"
    feat = {"lambda": 3.0, "arch": {"use_hidden": False, "num_features": 5}}
    assert head_label("e/head", feat) == "λ=3,feat"
    assert head_label("f/head", {**feat, "advantage": "forks"}) == "λ=3,forks,feat"
    assert head_label("g/head", {**feat, "arch": {"use_hidden": True}}) == "λ=3"


def test_frontier_keeps_two_heads_of_one_lambda_apart(micro_trio, head_dir, tmp_path):
    """Two heads of the same λ (seeds, or a checkpoint next to the final head) get distinct labels and run dirs."""
    from hydra import compose, initialize_config_dir

    from eval.frontier import run_all
    from heads import EnsembleHead, export_head, load_head

    _, meta = load_head(head_dir)
    other = EnsembleHead(dataclasses.replace(load_head(head_dir)[0].cfg, init_w=0.2))
    other_dir = export_head(other, tmp_path / "other", {"training": meta["training"]})
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("eval", overrides=[f"model.dir={micro_trio}", "task=gsm8k", "eval.num_samples=2",
                                         "eval.batch_size=2", "eval.max_new_tokens=8", "eval.progress=false",
                                         "frontier.grid=[]", "frontier.baselines=[]",
                                         f"heads=[{head_dir},{other_dir}]"])
    rows = run_all(cfg, tmp_path / "frontier")
    labels = [r["label"] for r in rows]
    assert labels[0] == "diversed(λ=0.1)" and labels[1].startswith("diversed(λ=0.1)@") and len(set(labels)) == 2
    assert rows[0]["mean_w"] == pytest.approx(0.7, abs=1e-4) and rows[1]["mean_w"] == pytest.approx(0.2, abs=1e-4)


@pytest.mark.parametrize("method,knob,then,other", [("typical", {"epsilon": 0.3}, "p", "nu"),
                                                     ("cascade", {"threshold": 0.1}, "nu", "p")])
def test_run_recorded_before_a_method_parameter_existed_resumes(models, tmp_path, method, knob, then, other):
    """typical's and cascade's `bonus` came after runs were recorded without it: those resume when it holds the value
    that decodes as they did (typical: p, cascade: the ν-form), and are refused with any other."""
    cfg = _cfg(method, bonus=then, **knob)
    spec = build_method(method, models, cfg)
    ex = _examples(8)
    run_method(cfg, spec, models, TASK, ex, tmp_path)
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["params"]["bonus"] == then and saved["method_config"]["bonus"] == then
    before = {**saved, "params": {k: v for k, v in saved["params"].items() if k != "bonus"},
              "method_config": {k: v for k, v in saved["method_config"].items() if k != "bonus"}}
    (tmp_path / "run.json").write_text(json.dumps(before))
    changed = _cfg(method, bonus=other, **knob)
    changed.resume = True
    with pytest.raises(ValueError, match="cannot resume .*bonus"):
        run_method(changed, build_method(method, models, changed), models, TASK, ex, tmp_path)
    cfg.resume = True
    m = run_method(cfg, spec, models, TASK, ex, tmp_path)
    assert m["num_samples"] == 8
    assert json.loads((tmp_path / "run.json").read_text()) == saved  # recorded in full from then on
