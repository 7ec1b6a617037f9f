"""A truncating head (HeadEnsembleRule with typical_epsilon): ν = truncate(w·p + (1 − w)·q, p, S) with S typical
acceptance's set. At w = 0 it is typical acceptance, at w = 1 SD against p restricted to S; ν stays linear in w, and
rollouts record both of its ends so that training recomputes log ν exactly."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from specdec.targets import (
    HeadEnsembleRule,
    RoundScores,
    TypicalRule,
    ensemble_target,
    pair_features,
    total_variation,
    truncate,
    typical_set,
    typical_target,
)
from train.reinforce import expected_accept, log_nu

EPS = 0.3


def _scores(seed: int = 0, B: int = 3, K: int = 5, V: int = 40) -> RoundScores:
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(2.5 * torch.randn(B, K, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2.5 * torch.randn(B, K, V, generator=g, dtype=torch.float64), -1)
    q = 0.5 * q + 0.5 * logp.exp()  # a draft that partly agrees with the target
    return RoundScores(target_logprobs=logp, temperature=1.0, q=q, h_p=torch.zeros(B, K, 4), h_q=torch.zeros(B, K, 3))


def _const(w: float):
    return lambda h_q, h_p, feats: torch.full(feats.shape[:-1], w)


def test_w0_is_typical_acceptance_w1_the_truncated_target_and_nu_is_linear_in_w():
    s = _scores()
    p, q = s.p, s.q
    keep = typical_set(p, EPS, EPS ** 0.5)
    assert 0 < keep.sum(-1).float().mean() < p.shape[-1] - 5  # the set truncates, so the checks below can fail
    nu0, w0 = HeadEnsembleRule(_const(0.0), typical_epsilon=EPS)(s)
    nu1, _ = HeadEnsembleRule(_const(1.0), typical_epsilon=EPS)(s)
    nu3, _ = HeadEnsembleRule(_const(0.3), typical_epsilon=EPS)(s)
    assert torch.equal(w0, torch.zeros_like(w0))
    assert torch.allclose(nu0, typical_target(p, q, EPS, EPS ** 0.5), atol=1e-12)
    assert torch.allclose(nu1, p * keep / (p * keep).sum(-1, keepdim=True), atol=1e-12)
    assert torch.allclose(nu3, truncate(ensemble_target(p, q, 0.3), p, keep), atol=1e-12)
    assert torch.allclose(nu3, 0.3 * nu1 + 0.7 * nu0, atol=1e-12)  # linear in w: the optimum is at an end
    for nu in (nu0, nu1, nu3):
        assert torch.allclose(nu.sum(-1), torch.ones(nu.shape[:-1], dtype=nu.dtype))
        assert float(nu[~keep].abs().max()) == 0.0  # nothing outside the typical set, whatever w is


def test_the_head_at_w0_is_typical_acceptances_nu_form_and_medusas_form_differs_only_at_the_bonus():
    s = _scores(4)
    head_nu, _ = HeadEnsembleRule(_const(0.0), typical_epsilon=EPS)(s)
    nu_form, _ = TypicalRule(EPS, bonus="nu")(s)
    medusa, _ = TypicalRule(EPS)(s)
    assert TypicalRule(EPS, bonus="nu").needs_bonus_q and not TypicalRule(EPS).needs_bonus_q
    assert torch.allclose(head_nu, nu_form, atol=1e-12)
    assert torch.allclose(medusa[:, :-1], nu_form[:, :-1], atol=1e-12)
    assert torch.equal(medusa[:, -1], s.p[:, -1]) and not torch.allclose(nu_form[:, -1], s.p[:, -1])
    with pytest.raises(ValueError, match="bonus"):
        TypicalRule(EPS, bonus="q")


def test_epsilon_zero_is_the_untruncated_head_and_the_features_read_the_truncated_target():
    s = _scores(1)
    seen = {}

    def head(h_q, h_p, feats):
        seen["feats"] = feats
        return torch.full(feats.shape[:-1], 0.4)

    nu, _ = HeadEnsembleRule(head)(s)
    assert torch.allclose(nu, ensemble_target(s.p, s.q, 0.4), atol=1e-8)  # the head's w is float32
    assert HeadEnsembleRule(head).relaxed(s) is None
    rule = HeadEnsembleRule(head, typical_epsilon=EPS)
    rule(s)
    # rollouts record pair_features(rule.base, q): the head must see the same numbers while decoding
    assert torch.equal(seen["feats"], pair_features(rule.base(s), s.q))
    with pytest.raises(ValueError, match="typical_epsilon"):
        HeadEnsembleRule(head, typical_epsilon=1.5)


def test_the_acceptance_term_is_exact_at_the_ends_and_a_lower_bound_between():
    s = _scores(2)
    rule = HeadEnsembleRule(_const(0.0), typical_epsilon=EPS)
    b, r, q = rule.base(s), rule.relaxed(s), s.q
    tv_p, tv_r = total_variation(b, q), total_variation(r, q)
    for w in (0.0, 0.25, 0.5, 0.9, 1.0):
        true = torch.minimum(q, ensemble_target(b, r, w)).sum(-1)  # P(a draft from q is accepted against ν)
        chord = expected_accept(torch.full_like(tv_p, w), tv_p, tv_r)
        if w in (0.0, 1.0):
            assert torch.allclose(chord, true, atol=1e-12)
        else:
            assert bool((chord <= true + 1e-12).all())
    # untruncated (r = q): 1 − w·TV(p, q), exact everywhere
    tv = total_variation(s.p, q)
    assert torch.allclose(expected_accept(torch.full_like(tv, 0.3), tv),
                          torch.minimum(q, ensemble_target(s.p, q, 0.3)).sum(-1), atol=1e-12)


def test_rollout_records_recompute_a_truncating_heads_nu(micro_trio):
    """Through the real decoding loop (micro trio): the recorded ends give back ν(x_t) of every emitted token, so
    training's log ν (log_nu on p_tok, r_tok) is the log-probability the rollout sampled from."""
    from specdec.generate import generate
    from specdec.loading import Models
    from specdec.proposers import DraftModelProposer
    from train.rollout import make_rule, rollout

    models = Models({"dir": str(micro_trio), "dtype": "float32"})
    tok = models.tokenizer
    prompts = [tok.encode(t) for t in ("Question: 3 + 4 =", "Tom has 5 apples and buys", "x")]

    def head(h_q, h_p, feats):  # varies with its inputs, in (0, 1)
        return torch.sigmoid(4 * (feats[..., 3] - feats[..., 4]) + h_p[..., 0].clamp(-3, 3))

    cfg = OmegaConf.create({"kind": "ensemble", "typical_epsilon": EPS})
    rule = make_rule(head, cfg)
    assert isinstance(rule, HeadEnsembleRule) and rule.typical_epsilon == EPS
    out = generate(models.target, DraftModelProposer(models.draft), prompts, rule=rule, gamma=3, max_new_tokens=16,
                   temperature=1.0, generator=torch.Generator().manual_seed(0), record_hidden=True)
    rec, m = out.records, out.records["token_mask"]
    assert int(m.sum()) > 20
    nu_again = rec["w"] * rec["p_token"] + (1 - rec["w"]) * rec["relaxed_token"]
    assert torch.allclose(nu_again[m], rec["nu_token"][m], atol=1e-5)
    assert float((rec["relaxed_token"][m] - rec["q_token"][m]).abs().max()) > 1e-3  # r is not q: the test bites
    b = rollout(models, head, prompts, target_cfg=cfg, gamma=3, max_new_tokens=16, temperature=1.0,
                generator=torch.Generator().manual_seed(0))
    assert int(b.mask.sum()) > 10 and float((b.r_tok - b.q_tok)[b.mask].abs().max()) > 1e-3  # r_tok is r, not q
    lp = log_nu(b.w, b.p_tok, b.r_tok)
    assert torch.isfinite(lp[b.mask]).all() and bool((b.tv_r[b.mask] >= 0).all())
    assert torch.allclose(lp[b.mask].exp(), (b.w * b.p_tok + (1 - b.w) * b.r_tok)[b.mask])
    # the untruncated head's records are the old ones: r = q and no second TV
    plain = rollout(models, head, prompts, target_cfg=OmegaConf.create({"kind": "ensemble"}), gamma=3,
                    max_new_tokens=8, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(plain.r_tok, plain.q_tok) and float(plain.tv_r.abs().sum()) == 0.0


def test_a_truncating_flip_head_trains_from_typical_acceptance_and_exports_its_target(micro_trio, tmp_path):
    """The start eval/choose_start.py gives typical acceptance (cascade t = 1, i.e. w = 0, plus the truncation):
    the run trains, its update recomputes the rollout's w, and the export carries the truncation, which the registry's
    rule of the head (what method=diversed decodes with) applies."""
    import json

    from heads import load_head
    from specdec.registry import head_rule
    from tests.test_train import metrics, run, smoke_args

    run_dir = tmp_path / "typ"
    p = run(smoke_args(micro_trio, run_dir, "head.init_rule=cascade", "head.init_knob=1", "head.init_mode=flip",
                       f"target.typical_epsilon={EPS}"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = metrics(run_dir)
    assert rows[0]["w_recompute_gap"] <= 1e-5  # the update recomputes the w the rollout decoded with
    assert all(math.isfinite(r["lam_term_per_token"]) and 0 < r["lam_term_per_token"] <= 1 for r in rows)
    head, meta = load_head(run_dir / "head")
    assert meta["target"]["typical_epsilon"] == EPS
    rule = head_rule(head, meta["target"])
    assert rule.typical_epsilon == EPS
    s = _scores(3)
    s.h_q, s.h_p = torch.zeros(3, 5, head.cfg.hidden_q), torch.zeros(3, 5, head.cfg.hidden_p)
    nu, w = rule(s)
    assert float(w.max()) < 0.1  # flip 0.02 from w = 0 (a trained smoke head stays near it)
    assert float(nu[~typical_set(s.p, EPS, EPS ** 0.5)].abs().max()) == 0.0
    bad = run(smoke_args(micro_trio, tmp_path / "bad", "algo.advantage=forks", f"target.typical_epsilon={EPS}"))
    assert bad.returncode != 0 and "a truncating head" in bad.stdout + bad.stderr
    json.dumps(meta)  # the export's metadata stays plain JSON


def test_the_benchmark_decodes_an_exported_head_under_its_own_target():
    """bench/gpu.py builds a loaded head's rule with the registry's head_rule, as evaluation and training do (it
    used to build a plain HeadEnsembleRule, which would drop a head's truncation or its π_CD)."""
    from types import SimpleNamespace

    from bench.gpu import method_spec
    from specdec.testing import random_pair

    target, draft = random_pair(vocab_size=32)
    pair = SimpleNamespace(target=target, draft=draft, amateur=None, head=_const(0.0),
                           head_target={"kind": "ensemble", "typical_epsilon": EPS})
    _, rule, gamma, amateur = method_spec("head", pair, SimpleNamespace(gamma=3))
    assert isinstance(rule, HeadEnsembleRule) and rule.typical_epsilon == EPS and gamma == 3 and amateur is None
    pair.head_target = {"kind": "contrastive", "alpha": 0.5, "beta": 0.1}
    with pytest.raises(ValueError, match="pass --amateur"):
        method_spec("head", pair, SimpleNamespace(gamma=3))


def test_strict_end_puts_typical_acceptance_at_w1_and_the_draft_at_w0():
    """typical_end="strict": ν = w·typical_target(p, q) + (1 − w)·q, so w = 1 is typical acceptance's ν-form (every
    position, the bonus too), w = 0 accepts any draft (ν = q), and ν is linear in w; the head reads the features of
    (typical's ν, q), which rollouts record from rule.base. The export's target entry selects it."""
    from specdec.registry import head_rule

    s = _scores(5)
    seen = {}

    def head(h_q, h_p, feats):
        seen["feats"] = feats
        return torch.full(feats.shape[:-1], 0.4, dtype=torch.float64)

    strict = {w: HeadEnsembleRule(_const(w), typical_epsilon=EPS, typical_end="strict")(s)[0] for w in (0.0, 1.0)}
    typical, _ = TypicalRule(EPS, bonus="nu")(s)
    assert torch.allclose(strict[1.0], typical, atol=1e-12)
    assert torch.allclose(strict[0.0], s.q, atol=1e-12)
    rule = HeadEnsembleRule(head, typical_epsilon=EPS, typical_end="strict")
    nu, _ = rule(s)
    assert torch.allclose(nu, 0.4 * strict[1.0] + 0.6 * strict[0.0], atol=1e-12)
    assert rule.relaxed(s) is None and torch.allclose(rule.base(s), typical, atol=1e-12)
    assert torch.equal(seen["feats"], pair_features(rule.base(s), s.q))
    # typical acceptance rejects some drafts (ν < q somewhere), the strict head's w = 0 end none
    assert float(torch.minimum(s.q, typical).sum(-1).min()) < 0.99
    assert torch.allclose(torch.minimum(s.q, strict[0.0]).sum(-1), torch.ones(s.q.shape[:-1], dtype=s.q.dtype))
    assert head_rule(head, {"kind": "ensemble", "typical_epsilon": EPS, "typical_end": "strict"}).typical_end == "strict"
    assert head_rule(head, {"kind": "ensemble", "typical_epsilon": EPS}).typical_end == "relaxed"
    with pytest.raises(ValueError, match="typical_end"):
        HeadEnsembleRule(head, typical_epsilon=EPS, typical_end="both")
    with pytest.raises(ValueError, match="needs typical_epsilon"):
        HeadEnsembleRule(head, typical_end="strict")


def test_strict_end_with_a_relaxed_epsilon_chooses_between_two_typical_knobs_per_token():
    """relaxed_epsilon ε₀: w = 1 is typical acceptance at ε, w = 0 typical acceptance at the looser ε₀ (not q), ν
    linear between; `relaxed` hands rollouts the w = 0 end; ε₀ must lie in (0, ε) and needs the strict end."""
    s = _scores(6)
    e0 = 0.03
    ends = {w: HeadEnsembleRule(_const(w), typical_epsilon=EPS, typical_end="strict", relaxed_epsilon=e0)(s)[0]
            for w in (0.0, 0.5, 1.0)}
    assert torch.allclose(ends[1.0], TypicalRule(EPS, bonus="nu")(s)[0], atol=1e-12)
    assert torch.allclose(ends[0.0], TypicalRule(e0, bonus="nu")(s)[0], atol=1e-12)
    assert not torch.allclose(ends[0.0], ends[1.0])
    assert torch.allclose(ends[0.5], 0.5 * ends[0.0] + 0.5 * ends[1.0], atol=1e-12)
    rule = HeadEnsembleRule(_const(0.5), typical_epsilon=EPS, typical_end="strict", relaxed_epsilon=e0)
    assert torch.allclose(rule.relaxed(s), ends[0.0], atol=1e-12)
    from train.rollout import make_rule  # training rollouts build the same rule from the config's target block

    made = make_rule(_const(0.5), OmegaConf.create({"kind": "ensemble", "typical_epsilon": EPS,
                                                     "typical_end": "strict", "relaxed_epsilon": e0}))
    assert (made.typical_end, made.relaxed_epsilon) == ("strict", e0)
    assert torch.allclose(made(s)[0], ends[0.5], atol=1e-12)
    for bad in ({"typical_end": "strict", "relaxed_epsilon": 0.5}, {"relaxed_epsilon": 0.03}):
        with pytest.raises(ValueError, match="relaxed_epsilon"):
            HeadEnsembleRule(_const(0.5), typical_epsilon=EPS, **bad)
