"""The EAGLE-style feature drafter (specdec/feature_drafter.py, proposers.FeatureDrafter, train/drafter.py):
exact decoding through it, cached drafting equal to the training forward, distillation, export checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from specdec import LM, StaticEnsembleRule, generate
from specdec.feature_drafter import (
    DrafterMismatchError,
    head_weights,
    new_drafter,
    unrolled_features,
)
from specdec.models import load_model
from specdec.proposers import FeatureDrafter
from specdec.testing import exact_two_token_target, random_llama
from tests.two_token import two_token_fit

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _train(micro_trio: Path, run_dir: Path, *overrides: str) -> dict:
    from hydra import compose, initialize_config_dir

    from train.drafter import train_drafter

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("drafter", overrides=[
            f"model.dir={micro_trio}", "logger=disabled", "task=gsm8k", "data.n_train=8", "samples.max_new_tokens=24",
            "samples.batch_size=8", "train.batch_size=4", "train.unroll=2", "train.warmup=2", "checkpoint.every=4",
            "progress=false", *overrides])
    return train_drafter(cfg, run_dir)


@pytest.fixture(scope="module")
def drafter_run(micro_trio, tmp_path_factory) -> dict:
    """A drafter trained 8 steps on the micro target's own samples (one uninterrupted run)."""
    return _train(micro_trio, tmp_path_factory.mktemp("drafter_run"), "train.steps=8")


@pytest.fixture(scope="module")
def target(micro_trio):
    model, tok = load_model(micro_trio / "target")
    return model, tok


def _prompts(tok) -> list[list[int]]:
    texts = ["Question: Ann has 3 apples. She buys 4 more. How many?\nAnswer:", "x", "Question: 7 + 2 ="]
    return [tok.encode(t) for t in texts]


def test_training_reduces_loss_and_resumes_exactly(micro_trio, drafter_run, tmp_path):
    hist = [json.loads(line) for line in (Path(drafter_run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(hist) == 8
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"], [h["loss"] for h in hist]
    # Killed after step 4 (its checkpoint), resumed to 8: the same weights as the uninterrupted run.
    _train(micro_trio, tmp_path, "train.steps=8", "stop_at_step=5")
    _train(micro_trio, tmp_path, "train.steps=8", "resume=true")
    a = load_file(str(Path(drafter_run["drafter"]) / "drafter.safetensors"))
    b = load_file(str(tmp_path / "drafter" / "drafter.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 8
    config = json.loads((tmp_path / "drafter" / "config.json").read_text())
    assert config["target"]["hidden_size"] == 32 and config["target"]["tokenizer_hash"].startswith("sha256:")


def test_resume_refuses_other_settings_or_target_weights_and_a_fresh_run_sets_old_checkpoints_aside(
        micro_trio, tmp_path):
    """A resumed drafter run continues only the recipe it started with, on the same target weights; a fresh run in
    an old run directory keeps (moves aside) the old run's checkpoints instead of pruning its own."""
    import shutil

    from safetensors.torch import save_file

    run = tmp_path / "run"
    _train(micro_trio, run, "train.steps=8", "stop_at_step=5")  # checkpoint at step 4
    with pytest.raises(ValueError, match=r"train.lr: 0.003 there vs 0.1 now"):
        _train(micro_trio, run, "train.steps=8", "resume=true", "train.lr=0.1")
    # samples.json drawn under other sampling settings is never silently reused, resumed or not
    with pytest.raises(ValueError, match="samples.json holds target samples drawn under other settings"):
        _train(micro_trio, run, "train.steps=8", "samples.temperature=0.5")
    # the same trio path with other target weights
    trio = tmp_path / "trio"
    shutil.copytree(micro_trio, trio)
    moved_run = tmp_path / "run_trio"
    _train(trio, moved_run, "train.steps=8", "stop_at_step=5")
    weights = trio / "target" / "model.safetensors"
    save_file({k: v * 1.01 for k, v in load_file(str(weights)).items()}, str(weights))
    with pytest.raises(ValueError, match="other settings|other target weights"):
        _train(trio, moved_run, "train.steps=8", "resume=true")
    (moved_run / "samples.json").unlink()  # fresh samples from the new target, then the checkpoint's check
    with pytest.raises(ValueError, match="trained against other target weights"):
        _train(trio, moved_run, "train.steps=8", "resume=true")
    # a fresh run (resume=false) in the first run's directory, stopped before that run's step 4: nothing pruned
    _train(micro_trio, run, "train.steps=8", "stop_at_step=2", "checkpoint.every=1")
    ck = run / "checkpoints"
    assert (ck / "abandoned" / "step000004" / "drafter.safetensors").is_file()
    assert sorted(d.name for d in ck.iterdir() if d.name.startswith("step")) == ["step000001", "step000002"]
    assert (ck / "latest").read_text() == "step000002"


class Recording(FeatureDrafter):
    """Keeps each row's committed sequence and every proposal, to recompute them without the cache."""

    def start(self, prompts):
        super().start(prompts)
        self.seqs, self.log = [list(p) for p in prompts], []

    def propose(self, gamma, **kw):
        prop = super().propose(gamma, **kw)
        self.log.append(([list(s) for s in self.seqs], prop))
        return prop

    def commit(self, num_accepted, emitted):
        drafts = self._drafts.tolist()
        super().commit(num_accepted, emitted)
        for b, (n, x) in enumerate(zip(num_accepted, emitted)):
            self.seqs[b] += drafts[b][:n] + [x]


@pytest.mark.parametrize("bonus", [False, True])
def test_cached_drafting_equals_the_training_forward(target, bonus):
    """Every proposal of a batched T=1 decode (ragged acceptance, holes, rollbacks) equals the drafter's
    cache-free training forward (training-time test depths) on prefix + drafts, with the target's features;
    with the bonus position too (a rule mixing q into ν). An untrained (seeded) drafter: the trained one agrees
    with the micro target too well to leave rejections."""
    model, tok = target
    torch.manual_seed(0)
    prop = Recording(new_drafter(model), LM(model))
    gamma = 3
    rule = StaticEnsembleRule(0.5) if bonus else None
    out = generate(prop.target, prop, _prompts(tok), rule=rule, gamma=gamma, max_new_tokens=20, temperature=1.0,
                   generator=torch.Generator().manual_seed(0))
    acc = out.rounds["accepted"][out.rounds["active"]]
    assert (acc < gamma).any() and (acc > 0).any()
    w, b_ = head_weights(prop.net, model)
    checked = 0
    for seqs, p in prop.log[:6]:
        for b, seq in enumerate(seqs):
            full = torch.tensor([seq + p.tokens[b].tolist()])
            with torch.no_grad():
                h = model(full, output_hidden_states=True).hidden_states[-1]
                feats = unrolled_features(prop.net, model.get_input_embeddings()(full), h, gamma + bonus)
            k = len(seq) - 1
            for s in range(gamma + bonus):
                q = torch.softmax(torch.nn.functional.linear(feats[s][0, k + s], w, b_), -1)
                assert torch.allclose(p.probs[b, s], q, atol=1e-5), (b, s)
                assert torch.allclose(p.hidden[b, s], feats[s][0, k + s], atol=1e-5)
                checked += 1
    assert checked == 6 * 3 * (gamma + bonus)


def test_greedy_sd_feature_is_greedy_target_decoding(target, drafter_run):
    model, tok = target
    prompts = _prompts(tok)
    ar = generate(LM(model), None, prompts, gamma=0, max_new_tokens=40, temperature=0)
    fd = FeatureDrafter.load(drafter_run["drafter"], LM(model), tok)
    for gamma in (1, 4):
        for records in (True, False):
            sd = generate(fd.target, fd, prompts, gamma=gamma, max_new_tokens=40, temperature=0, records=records)
            assert sd.tokens == ar.tokens, (gamma, records)
    acc = sd.rounds["accepted"][sd.rounds["active"]]
    assert (acc == 4).any() and (acc < 4).any() and sd.stats["proposer_calls"] > 0  # full and partial accepts
    # Rules that mix q in need the bonus position's q (the drafter then feeds its last draft too): same tokens.
    st = generate(fd.target, fd, prompts, rule=StaticEnsembleRule(1.0), gamma=3, max_new_tokens=40, temperature=0)
    assert st.tokens == ar.tokens
    torch.manual_seed(0)  # an untrained drafter: many rejections, still the target's tokens
    raw = FeatureDrafter(new_drafter(model), LM(model))
    out = generate(raw.target, raw, prompts, gamma=4, max_new_tokens=40, temperature=0)
    assert out.tokens == ar.tokens
    # A reduced draft vocabulary (EAGLE3) keeps decoding exact; its proposals live on the draft ids only.
    ids = torch.tensor(sorted(set(t for p in prompts for t in p)))
    small = FeatureDrafter(new_drafter(model, draft_ids=ids), LM(model))
    out = generate(small.target, small, prompts, gamma=3, max_new_tokens=40, temperature=0)
    assert out.tokens == ar.tokens
    small.start(prompts)
    small.observe_target_hidden(small.target.prefill([p[:-1] for p in prompts]))
    q = small.propose(3, temperature=1.0).probs
    outside = torch.ones(q.shape[-1], dtype=torch.bool)
    outside[ids] = False
    assert torch.all(q[..., outside] == 0) and torch.allclose(q.sum(-1), torch.ones(()), atol=1e-5)


def _compose_eval(micro_trio, *overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("eval", overrides=[f"model.dir={micro_trio}", *overrides])


def test_greedy_dcd_feature_is_greedy_cd(micro_trio, drafter_run):
    from specdec.registry import Models, build_method

    models = Models({"dir": str(micro_trio)})
    prompts = _prompts(models.tokenizer)
    overrides = ["alpha=0.5", "beta=0.1", "temperature=0"]
    cd = build_method("cd", models, _compose_eval(micro_trio, "method=cd", *overrides))
    dcd = build_method("dcd", models, _compose_eval(micro_trio, "method=dcd", "method.proposer=feature",
                                                    f"method.drafter={drafter_run['drafter']}", *overrides))
    assert isinstance(dcd.proposer, FeatureDrafter) and dcd.params["contrastive"] == "dcd_feature"
    ref = generate(models.target, None, prompts, rule=cd.rule, gamma=0, amateur=cd.amateur, max_new_tokens=40,
                   temperature=0)
    out = generate(models.target, dcd.proposer, prompts, rule=dcd.rule, gamma=dcd.gamma, amateur=dcd.amateur,
                   max_new_tokens=40, temperature=0)
    assert out.tokens == ref.tokens
    assert 0 < out.acceptance_rate < 1
    sd = build_method("sd", models, _compose_eval(micro_trio, "method=sd", "method.proposer=feature",
                                                  f"method.drafter={drafter_run['drafter']}"))
    assert sd.label == "sd[feature]"
    with pytest.raises(ValueError, match="method.drafter=PATH"):
        build_method("dcd", models, _compose_eval(micro_trio, "method=dcd", "method.proposer=feature"))


def test_diversed_head_over_the_feature_drafter(micro_trio, drafter_run, tmp_path):
    """The ensemble head reads the drafter's feature as h_q (hidden_q = the drafter's width)."""
    from heads import EnsembleHead, HeadConfig, export_head
    from specdec.registry import Models, build_method

    models = Models({"dir": str(micro_trio)})
    H = models.target.hidden_size
    export_head(EnsembleHead(HeadConfig(hidden_q=H, hidden_p=H, init_w=0.5)), tmp_path / "head", {})
    spec = build_method("diversed", models, _compose_eval(
        micro_trio, "method=diversed", "method.proposer=feature", f"method.drafter={drafter_run['drafter']}",
        f"+head_path={tmp_path / 'head'}"))
    assert isinstance(spec.proposer, FeatureDrafter) and spec.params["proposer"] == "feature"
    out = generate(models.target, spec.proposer, _prompts(models.tokenizer), rule=spec.rule, gamma=spec.gamma,
                   max_new_tokens=12, temperature=1.0, record_hidden=True, generator=torch.Generator().manual_seed(0))
    m = out.records["token_mask"]
    assert out.records["h_q"].shape[-1] == H and torch.isfinite(out.records["h_q"][m]).all()


def test_loading_against_another_target_is_a_clear_error(micro_trio, drafter_run, target):
    model, tok = target
    amateur, _ = load_model(micro_trio / "amateur")
    with pytest.raises(DrafterMismatchError, match="trained for another target.*hidden_size: trained for 32"):
        FeatureDrafter.load(drafter_run["drafter"], LM(amateur), tok)
    # Same shapes, other weights: the fingerprint tells them apart.
    import copy

    other = copy.deepcopy(model)
    with torch.no_grad():
        other.get_input_embeddings().weight.mul_(1.5)
    with pytest.raises(DrafterMismatchError, match="fingerprint"):
        FeatureDrafter.load(drafter_run["drafter"], LM(other), tok)
    # A change confined to the decoder layers (a LoRA-style fine-tune) changes the hidden states it reads: refused.
    inner = copy.deepcopy(model)
    with torch.no_grad():
        for name, w in inner.named_parameters():
            if ".layers." in name:
                w.mul_(1.1)
    with pytest.raises(DrafterMismatchError, match="fingerprint"):
        FeatureDrafter.load(drafter_run["drafter"], LM(inner), tok)
    with pytest.raises(DrafterMismatchError, match="no feature drafter"):
        FeatureDrafter.load(micro_trio / "target", LM(model), tok)


def test_sampled_sd_feature_follows_the_target_distribution():
    """SD at T=1 with an (untrained, seeded) feature drafter over 2-token continuations vs the target's exact
    2-token distribution: chi-square p > 1e-4 and TV < 0.03 with 30k samples over 64 outcomes (fixed seed).
    An 8-token random target keeps the 64 outcomes well populated (the micro trio's 101-token vocabulary would
    need ~100x the samples)."""
    model = random_llama(8, hidden=16, layers=1, heads=2, seed=3, dtype=torch.float64, init_std=0.5)
    torch.manual_seed(5)
    prop = FeatureDrafter(new_drafter(model), LM(model))
    N, prompt = 30_000, [1, 4, 2]
    out = generate(prop.target, prop, [prompt] * N, gamma=3, max_new_tokens=2, temperature=1.0,
                   generator=torch.Generator().manual_seed(0))
    pvalue, tv = two_token_fit(out.tokens, exact_two_token_target(model, prompt), 8)
    assert pvalue > 1e-4 and tv < 0.03, (pvalue, tv)
    assert 0.05 < out.acceptance_rate < 0.98, out.acceptance_rate


def test_frontier_sweep_over_one_proposer(micro_trio, drafter_run, tmp_path):
    """frontier.proposer=feature puts every drafting method of the sweep on the drafter; AR baselines keep none."""
    from eval.frontier import run_all

    cfg = _compose_eval(micro_trio, "task=gsm8k", "eval.num_samples=2", "eval.batch_size=2", "eval.max_new_tokens=8",
                        "eval.progress=false", "frontier.grid=[0.5]", "frontier.baselines=[ar_target,sd]",
                        "frontier.proposer=feature", f"frontier.drafter={drafter_run['drafter']}")
    rows = run_all(cfg, tmp_path)
    by = {r["label"]: r for r in rows}
    assert set(by) == {"ar_target", "sd[feature]", "static(w=0.50)[feature]"}
    assert by["sd[feature]"]["acceptance_rate"] is not None and by["ar_target"]["acceptance_rate"] is None


def test_an_evaluation_resumes_only_with_the_same_drafter_weights(micro_trio, drafter_run, tmp_path):
    """run.json records the drafter's weights sha256, not only its path (train/drafter.py re-exports in place)."""
    from eval.run import evaluate

    args = ("task=gsm8k", "method=sd", "method.proposer=feature", f"method.drafter={drafter_run['drafter']}",
            "eval.num_samples=2", "eval.batch_size=2", "eval.max_new_tokens=8", "eval.progress=false")
    out = tmp_path / "eval"
    evaluate(_compose_eval(micro_trio, *args), out)
    run = json.loads((out / "run.json").read_text())
    sha = json.loads((Path(drafter_run["drafter"]) / "config.json").read_text())["weights_sha256"]
    assert run["drafter_sha256"] == sha
    (out / "run.json").write_text(json.dumps({**run, "drafter_sha256": "0" * 64}))  # re-exported since
    with pytest.raises(ValueError, match="drafter_sha256"):
        evaluate(_compose_eval(micro_trio, *args, "resume=true"), out)


def test_target_samples_end_chat_rows_at_the_chat_stop(target):
    """A chat model's samples end where evaluation ends its rows (train/drafter.py passes the task's chat stop)."""
    import re

    from train.drafter import sample_completions

    model, tok = target
    prompts = _prompts(tok)
    kw = dict(per_prompt=1, temperature=1.0, max_new_tokens=24, batch_size=3, stops=(), seed=0, progress=False)
    full = sample_completions(LM(model), tok, prompts, **kw)
    cut = sample_completions(LM(model), tok, prompts, chat_stop=re.compile(r".{6}", re.S), **kw)
    for p, a, b in zip(prompts, full, cut):
        done = tok.decode(a[len(p):], skip_special_tokens=True)
        if len(done) >= 6:
            assert b == a[:len(b)] and len(b) < len(a)  # the same draw, ended once 6 characters were out
            assert len(tok.decode(b[len(p):], skip_special_tokens=True)) >= 6
            assert len(tok.decode(b[len(p):-1], skip_special_tokens=True)) < 6
        else:
            assert b == a


@pytest.mark.parametrize("draft_vocab", [None, 24])
def test_teacher_cache_trains_as_the_per_step_teacher(micro_trio, tmp_path, draft_vocab):
    """train.cache_teacher computes the target's features once; the losses and weights match recomputing them."""
    runs = {}
    for cache in (False, True):
        over = ["train.steps=3", f"train.cache_teacher={str(cache).lower()}"]
        if draft_vocab:
            over.append(f"drafter.draft_vocab={draft_vocab}")
        runs[cache] = _train(micro_trio, tmp_path / str(cache), *over)
    hist = {c: [json.loads(x) for x in (Path(r["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
            for c, r in runs.items()}
    assert [h["loss"] for h in hist[True]] == pytest.approx([h["loss"] for h in hist[False]], rel=1e-4)
    a, b = (load_file(str(Path(runs[c]["drafter"]) / "drafter.safetensors")) for c in (False, True))
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-4) for k in a)


def test_rotary_angles_stay_float32_in_a_bfloat16_drafter():
    """On a bf16 target the drafter runs in bf16, but its positions must not: in bf16, 1000..1003 are one number,
    and a key's rotation would stop telling neighbouring positions apart."""
    from specdec.feature_drafter import DrafterConfig, DrafterNet

    torch.manual_seed(0)
    net = DrafterNet(DrafterConfig(hidden=32, heads=2, mlp=64, vocab=50))
    feats, embs = torch.randn(1, 1, 32), torch.randn(1, 1, 32)
    keys = {}
    for dtype in (torch.float32, torch.bfloat16):
        net = net.to(dtype)
        for pos in (1000, 1001):
            keys[dtype, pos] = net(feats.to(dtype), embs.to(dtype), torch.tensor([[pos]]), None)[1].float()
    assert not torch.allclose(keys[torch.bfloat16, 1000], keys[torch.bfloat16, 1001], atol=0.05)
    for pos in (1000, 1001):  # bf16 matches float32 to bf16's rounding of the weights and activations
        assert torch.allclose(keys[torch.bfloat16, pos], keys[torch.float32, pos], atol=0.05)


def test_save_pretrained_and_from_pretrained_round_trip_with_the_export_checks(tmp_path):
    """DrafterNet.save_pretrained / from_pretrained wrap export_drafter / load_drafter: the same files and checks
    (weights sha256, the target's widths and fingerprint), the config as `net.meta`."""
    from specdec.feature_drafter import DrafterNet, load_drafter, target_identity

    model = random_llama(48, hidden=16, layers=1, heads=2, seed=1)
    net = new_drafter(model, draft_ids=torch.tensor([0, 3, 5, 7]))
    with torch.no_grad():
        net.fc.weight.add_(0.1)
    out = net.save_pretrained(tmp_path / "drafter", {"task": "gsm8k"}, target=model, target_name="tiny-target")
    assert out == tmp_path / "drafter" and sorted(p.name for p in out.iterdir()) == ["config.json",
                                                                                   "drafter.safetensors"]
    back = DrafterNet.from_pretrained(out, target=model)
    assert not back.training and back.meta["task"] == "gsm8k" and back.meta["target"]["name"] == "tiny-target"
    assert back.meta["target"]["fingerprint"] == target_identity(model, "")["fingerprint"]
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), back.state_dict().values()))
    same, config = load_drafter(out, model)  # the function it wraps reads the same export
    assert config == back.meta and torch.equal(same.fc.weight, back.fc.weight)
    # an identity dict works as the target too (train/drafter.py passes the one it recorded)
    net.save_pretrained(tmp_path / "by_dict", target=target_identity(model, "named"))
    assert DrafterNet.from_pretrained(tmp_path / "by_dict", target=model).meta["target"]["name"] == "named"

    other = random_llama(48, hidden=16, layers=1, heads=2, seed=2)  # same shapes, other weights
    with pytest.raises(DrafterMismatchError, match="fingerprint"):
        DrafterNet.from_pretrained(out, target=other)
    weights = out / "drafter.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(DrafterMismatchError, match="sha256"):
        DrafterNet.from_pretrained(out, target=model)


def test_a_killed_draw_of_target_samples_resumes_to_the_uninterrupted_draw(micro_trio, tmp_path, monkeypatch):
    """The 1.5B's thousands of samples take hours: each batch is saved as it is drawn (samples.partial.jsonl) and
    draws from its own seed, so a draw killed after some batches continues to exactly the uninterrupted samples."""
    import train.drafter as drafter

    args = ("data.n_train=8", "samples.batch_size=2", "train.steps=1")
    _train(micro_trio, tmp_path / "whole", *args)
    whole = json.loads((tmp_path / "whole" / "samples.json").read_text())["sequences"]
    assert len(whole) == 8 and not (tmp_path / "whole" / "samples.partial.jsonl").exists()

    real, calls = drafter.sample_completions, {"n": 0}

    def dies_after_two_batches(*a, on_batch=None, **kw):
        def save_then_maybe_die(i, seqs):
            on_batch(i, seqs)
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt("killed")
        return real(*a, on_batch=save_then_maybe_die, **kw)

    monkeypatch.setattr(drafter, "sample_completions", dies_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        _train(micro_trio, tmp_path / "killed", *args)
    partial = tmp_path / "killed" / "samples.partial.jsonl"
    assert len(partial.read_text().splitlines()) == 3 and not (tmp_path / "killed" / "samples.json").exists()
    with partial.open("a") as f:
        f.write('{"task": "gsm8k", "batch": 4, "se')  # a torn last line (killed mid-write) is dropped
    drawn = []

    def counts(*a, on_batch=None, **kw):
        return real(*a, on_batch=lambda i, seqs: (drawn.append(i), on_batch(i, seqs)), **kw)

    monkeypatch.setattr(drafter, "sample_completions", counts)
    _train(micro_trio, tmp_path / "killed", *args, "resume=true")
    assert drawn == [4, 6]  # only the batches the kill left undrawn
    assert json.loads((tmp_path / "killed" / "samples.json").read_text())["sequences"] == whole
    assert not partial.exists()


def test_loss_positions_keep_the_answer_and_the_prompt_s_last_position():
    """Position j holds the prediction of token j+1: with loss_on=answer the loss counts j >= prompt length - 1."""
    from train.drafter import loss_positions, pad_right

    _, mask = pad_right([[1, 2, 3, 4, 5], [6, 7, 8]], "cpu")
    assert torch.equal(loss_positions(mask, [0, 0]), mask)  # loss_on=all
    got = loss_positions(mask, [3, 1])
    assert got.tolist() == [[False, False, True, True, True], [True, True, True, False, False]]


def test_answer_starts_refuse_samples_of_other_prompts():
    from train.drafter import answer_starts

    assert answer_starts([[1, 2, 9], [1, 2, 8, 7], [3, 5]], [[1, 2], [1, 2], [3]]) == [2, 2, 1]
    with pytest.raises(ValueError, match="does not start with its prompt"):
        answer_starts([[1, 2, 9], [4, 2, 8]], [[1, 2], [1, 2]])
    with pytest.raises(ValueError, match="2 target samples for 3 prompt draws"):
        answer_starts([[1, 2, 9], [1, 2, 8]], [[1, 2], [1, 2], [3]])


def test_answer_only_loss_counts_exactly_the_completion_positions(micro_trio, tmp_path, monkeypatch):
    """train.loss_on=answer: each step's counted positions are the samples' completions (plus each prompt's last
    position, which predicts the completion's first token), computed here from the prompts the draw was given."""
    import train.drafter as drafter
    from train.trainer import batch_indices

    real, seen = drafter.sample_completions, []

    def records_prompts(target, tok, prompts, **kw):
        seen.extend(list(p) for p in prompts for _ in range(kw["per_prompt"]))
        return real(target, tok, prompts, **kw)

    monkeypatch.setattr(drafter, "sample_completions", records_prompts)
    args = ("train.steps=3", "samples.per_prompt=2", "seed=3")
    _train(micro_trio, tmp_path / "answer", *args, "train.loss_on=answer")
    seqs = json.loads((tmp_path / "answer" / "samples.json").read_text())["sequences"]
    assert len(seqs) == len(seen) == 16 and all(len(q) >= 2 for q in seqs)
    hist = [json.loads(x) for x in (tmp_path / "answer" / "metrics.jsonl").read_text().splitlines()]
    for h in hist:
        idx = batch_indices(h["step"] - 1, len(seqs), 4, 3)
        assert h["tokens"] == sum(len(seqs[i]) - len(seen[i]) + 1 for i in idx)
        assert h["tokens"] < sum(len(seqs[i]) for i in idx)  # the prompts are left out
    # the same samples with every position counted: the loss differs, the samples are the same draw
    _train(micro_trio, tmp_path / "all", *args)
    every = [json.loads(x) for x in (tmp_path / "all" / "metrics.jsonl").read_text().splitlines()]
    assert json.loads((tmp_path / "all" / "samples.json").read_text())["sequences"] == seqs
    assert [h["tokens"] for h in every] == [sum(len(seqs[i]) for i in batch_indices(s, 16, 4, 3)) for s in range(3)]
    assert every[0]["loss"] != pytest.approx(hist[0]["loss"], rel=1e-3)
    with pytest.raises(ValueError, match="train.loss_on='prompt'"):
        _train(micro_trio, tmp_path / "bad", *args, "train.loss_on=prompt")
    assert not (tmp_path / "bad" / "samples.json").exists()  # refused before drawing anything
