"""The training-free relaxed rules of 2025-26 (Fuzzy SD, typical acceptance, FLy): what each emits, exactly or
statistically. Their ν-forms' output distributions are checked with the other rules' in tests/test_verify.py."""

import math

import pytest
import torch

from specdec import LM, DraftModelProposer, generate
from specdec.targets import (
    CascadeRule,
    ExactRule,
    FlyRule,
    FuzzyRule,
    RoundScores,
    TypicalRule,
    entropy,
    kl_divergence,
    make_rule,
    typical_target,
)
from specdec.testing import noisy_copy, random_llama
from specdec.verify import verify

V, G = 7, 3


def _scores(seed=0, B=64, temperature=1.0):
    torch.manual_seed(seed)  # Dirichlet.sample draws from the global generator: fix it, whatever ran before
    g = torch.Generator().manual_seed(seed)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.5, dtype=torch.float64)).sample((B, G + 1))
    q = 0.6 * p + 0.4 * torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((B, G + 1))
    drafts = torch.stack([torch.multinomial(q[:, i], 1, generator=g).squeeze(-1) for i in range(G)], 1)
    return p, q, drafts, RoundScores(p.log(), temperature, q, drafts=drafts)


def test_fuzzy_rule_is_sd_below_every_divergence_and_the_draft_above():
    p, q, _, scores = _scores()
    nu, w = FuzzyRule(threshold=-1.0)(RoundScores(p.log(), 1.0, q[:, :G]))
    assert torch.allclose(nu, p) and torch.all(w == 1)  # D ≥ 0 > −1: the target always decides (standard SD)
    nu, w = FuzzyRule(threshold=math.inf)(RoundScores(p.log(), 1.0, q[:, :G]))
    assert torch.allclose(nu[:, :G], q[:, :G]) and torch.allclose(nu[:, G], p[:, G])  # every draft kept, bonus p
    assert torch.all(w[:, :G] == 0)


def test_fuzzy_rule_keeps_the_draft_exactly_where_the_divergence_is_small():
    p, q, _, _ = _scores(1)
    scores = RoundScores(p.log(), 1.0, q[:, :G])
    p = scores.p  # exp(log p): what the rule sees (the median position sits exactly on the threshold)
    thr = float(kl_divergence(p, q).median())
    paper_nu, w = FuzzyRule(thr)(scores)
    small = kl_divergence(p[:, :G], q[:, :G]) <= thr
    assert small.any() and (~small).any()
    assert torch.equal(w[:, :G] == 0, small)
    assert torch.allclose(paper_nu[:, :G][small], q[:, :G][small]) and torch.allclose(paper_nu[:, :G][~small],
                                                                                        p[:, :G][~small])
    # The ν-form differs from the paper's rule at the bonus position only (it needs q there).
    rule = FuzzyRule(thr, bonus="nu")
    assert rule.needs_bonus_q and not FuzzyRule(thr).needs_bonus_q
    nu_form, w_nu = rule(RoundScores(p.log(), 1.0, q))
    assert torch.equal(nu_form[:, :G], paper_nu[:, :G])
    bonus_small = kl_divergence(p[:, G], q[:, G]) <= thr
    assert torch.allclose(nu_form[:, G][bonus_small], q[:, G][bonus_small])
    assert torch.allclose(nu_form[:, G][~bonus_small], p[:, G][~bonus_small])
    for div in ("js", "tv"):
        assert FuzzyRule(0.1, divergence=div)(RoundScores(p.log(), 1.0, q[:, :G]))[0].shape == p.shape
    with pytest.raises(ValueError, match="unknown divergence"):
        FuzzyRule(0.1, divergence="hellinger")


def test_typical_rule_accepts_exactly_the_typical_drafts():
    """Medusa's criterion, deterministically: x̃ is kept iff p(x̃) > min(ε, δ·exp(−H(p))) (or x̃ is the mode)."""
    p, q, drafts, scores = _scores(2, B=4000)
    eps, delta = 0.3, 0.3 ** 0.5
    nu, _ = TypicalRule(eps)(scores)
    assert torch.allclose(nu.sum(-1), torch.ones(nu.shape[:2], dtype=nu.dtype))
    assert torch.allclose(nu[:, G], p[:, G])  # the bonus from p
    res = verify(drafts, q[:, :G], nu, generator=torch.Generator().manual_seed(0))
    tau = torch.minimum(torch.full_like(p[:, :G, 0], eps), delta * torch.exp(-entropy(p[:, :G])))
    p_x = p[:, :G].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    typical = (p_x > tau) | (drafts == p[:, :G].argmax(-1))
    assert torch.equal(res.accept_prob == 1, typical) and torch.all(res.accept_prob[~typical] == 0)
    assert typical.any() and (~typical).any()
    # ε = 0 makes τ = 0: every token with p > 0 is typical, ν = q on the support of p (as good as w = 0 there).
    assert torch.allclose(typical_target(p, q, 0.0, 1.0), q / (q * (p > 0)).sum(-1, keepdim=True) * (p > 0))
    # Greedy decoding is greedy SD.
    greedy = TypicalRule(eps)(RoundScores(p.log(), 0.0, q[:, :G], drafts=drafts))[0]
    assert torch.allclose(greedy, p, rtol=0, atol=1e-12)


def test_fly_accepts_a_high_entropy_mismatch_only_when_its_window_agrees():
    top = [0, 1, 2, 3]  # the target's argmax at the 4 positions (γ = 3 drafts and the bonus)
    p = torch.full((1, 4, V), 0.02, dtype=torch.float64)
    for i, t in enumerate(top):
        p[0, i, t] = 0.5
        p[0, i, (t + 1) % V] = 0.4  # a close second: high entropy
    p = p / p.sum(-1, keepdim=True)
    q = torch.full((1, 3, V), 1.0 / V, dtype=torch.float64)
    H = float(entropy(p[0, 0]))

    def accepted(drafts, threshold=H - 0.1, window=2):
        d = torch.tensor([drafts])
        nu, w = FlyRule(threshold, window)(RoundScores(p.log(), 0.0, q, drafts=d))
        return int(verify(d, q, nu, greedy=True).num_accepted), w

    assert accepted([1, 1, 2])[0] == 3  # mismatch at 0 (the second choice), then the target's own tokens
    assert accepted([1, 1, 2], threshold=H + 0.1)[0] == 0  # entropy gate closed: greedy SD
    assert accepted([1, 5, 2])[0] == 0  # the window disagrees: rejected
    assert accepted([0, 1, 3])[0] == 2  # a mismatch at the last draft has no window inside the round: rejected
    n, w = accepted([1, 1, 2], window=1)
    assert n == 3 and w[0].tolist() == [0.0, 1.0, 1.0, 1.0]


@pytest.fixture(scope="module")
def pair():
    target = random_llama(64, hidden=48, layers=2, seed=0, dtype=torch.float64, init_std=0.3)
    return target, noisy_copy(target, noise=0.3, seed=1)


def test_fly_at_infinite_entropy_threshold_is_greedy_sd_and_finite_accepts_more(pair):
    target, draft = pair
    prompts = [[1, 5, 7], [1, 9, 3, 4, 22, 8, 9, 3], [1], [3, 3, 3, 3, 3]]

    def run(rule):
        return generate(LM(target), DraftModelProposer(LM(draft)), prompts, rule=rule, gamma=4, max_new_tokens=40,
                        temperature=0)

    sd, fly_inf, fly = run(ExactRule()), run(FlyRule(math.inf, 2)), run(make_rule("fly", entropy_threshold=0.5))
    assert fly_inf.tokens == sd.tokens
    assert torch.equal(fly_inf.rounds["accepted"], sd.rounds["accepted"])
    assert fly.acceptance_rate > sd.acceptance_rate and fly.tokens != sd.tokens


def test_fsd_and_typical_decode_through_generate(pair):
    """At T = 1 the relaxed rules decode end to end; Fuzzy SD sits between SD and the draft in acceptance, rising with
    its threshold. Typical acceptance is not ordered against SD in general (it accepts q(S) in expectation, SD
    Σ min(p, q); on this pair it accepts less in 5 of 6 seeds), so it is checked where it is exact: ε = 0 keeps p's
    whole support, ν = q, every draft accepted."""
    target, draft = pair
    prompts = [[1, 5 + b, 7] for b in range(8)]

    def run(rule):
        return generate(LM(target), DraftModelProposer(LM(draft)), prompts, rule=rule, gamma=4, max_new_tokens=32,
                        temperature=1.0, generator=torch.Generator().manual_seed(0))

    sd = run(ExactRule())
    fsd = [run(FuzzyRule(t)).acceptance_rate for t in (1.0, 3.0, 6.0)]
    assert sd.acceptance_rate < fsd[0] < fsd[1] < fsd[2] < 1.0, (sd.acceptance_rate, fsd)
    assert run(FuzzyRule(3.0, bonus="nu")).acceptance_rate > sd.acceptance_rate
    assert 0.0 < run(TypicalRule(0.3)).acceptance_rate < 1.0
    assert run(TypicalRule(0.0)).acceptance_rate == 1.0
    assert run(FuzzyRule(math.inf)).acceptance_rate == 1.0


def test_cascade_with_the_bonus_from_p_keeps_the_draft_positions_and_saves_a_draft_call(pair):
    """CascadeRule(bonus="p") is the ν-form at every draft position and p at the bonus position, so it needs no q
    there: one draft call fewer per round. At t = −1 (always defer) both forms are SD token for token."""
    p, q, _, _ = _scores(4)
    scores = RoundScores(p.log(), 1.0, q)
    p = scores.p
    t = float((p.amax(-1) - q.amax(-1)).median())  # both decisions occur
    nu_form, w_nu = CascadeRule(t)(scores)
    assert (w_nu[:, :G] == 0).any() and (w_nu[:, :G] == 1).any()
    for q_given in (q[:, :G], q):  # with or without the bonus position's q: the same ν
        nu, w = CascadeRule(t, bonus="p")(RoundScores(p.log(), 1.0, q_given))
        assert torch.equal(nu[:, :G], nu_form[:, :G]) and torch.equal(w[:, :G], w_nu[:, :G])
        assert torch.allclose(nu[:, G], p[:, G]) and torch.all(w[:, G] == 1)
    assert CascadeRule(t).needs_bonus_q and not CascadeRule(t, bonus="p").needs_bonus_q
    with pytest.raises(ValueError, match="bonus must be"):
        CascadeRule(t, bonus="q")

    target, draft = pair
    prompts = [[1, 5 + b, 7] for b in range(4)]

    def run(rule):
        return generate(LM(target), DraftModelProposer(LM(draft)), prompts, rule=rule, gamma=4, max_new_tokens=24,
                        temperature=1.0, generator=torch.Generator().manual_seed(0))

    def draft_calls_per_round(out):
        return (out.stats["proposer_calls"] - out.stats["prefill_proposer_calls"]) / out.stats["rounds"]

    sd, p_form, nu_form = run(ExactRule()), run(CascadeRule(-1.0, bonus="p")), run(CascadeRule(-1.0))
    assert p_form.tokens == sd.tokens and nu_form.tokens == sd.tokens
    assert draft_calls_per_round(p_form) == draft_calls_per_round(sd) <= 4
    assert draft_calls_per_round(nu_form) == draft_calls_per_round(sd) + 1
    relaxed = run(CascadeRule(0.1, bonus="p"))
    assert relaxed.acceptance_rate > sd.acceptance_rate and draft_calls_per_round(relaxed) <= 4


def test_frontier_sweeps_each_rule_over_its_knob(micro_trio, tmp_path):
    """frontier.sweep_methods runs each named rule at every value of its knob, through the registry, as one curve."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from eval.frontier import run_all

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("eval", overrides=[f"model.dir={micro_trio}", "task=gsm8k", "eval.num_samples=2",
                                         "eval.batch_size=2", "eval.max_new_tokens=8", "eval.progress=false",
                                         "frontier.grid=[]", "frontier.baselines=[]",
                                         "frontier.sweep_methods=[fsd,typical,fly]",
                                         "frontier.sweeps.fsd.threshold=[0.0,1000.0]",
                                         "frontier.sweeps.typical.epsilon=[0.3]",
                                         "frontier.sweeps.fly.entropy_threshold=[0.5]"])
    rows = run_all(cfg, tmp_path / "frontier")
    labels = [r["label"] for r in rows]
    assert labels == ["fsd(kl<=0)", "fsd(kl<=1000)", "typical(eps=0.3)", "fly(H>=0.5,W=2)"]
    assert [r["params"]["threshold"] for r in rows[:2]] == [0.0, 1000.0]
    assert rows[1]["acceptance_rate"] == 1.0 and rows[0]["acceptance_rate"] < 1.0  # every draft kept at 1000 nats
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        bad = compose("eval", overrides=[f"model.dir={micro_trio}", "frontier.grid=[]", "frontier.baselines=[]",
                                         "frontier.sweep_methods=[nonesuch]"])
    with pytest.raises(ValueError, match="frontier.sweeps has no single knob"):
        run_all(bad, tmp_path / "bad")


def test_api_and_cli_serve_the_new_rules(micro_trio, tmp_path):
    import json

    from specdec import SpeculativeGenerator
    from specdec.__main__ import main as cli_main

    prompt = "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:"
    for rule, opts in (("fsd", {"threshold": 1000.0, "divergence": "js"}), ("typical", {"epsilon": 0.1}),
                       ("fly", {"entropy_threshold": 0.5, "window": 1})):
        sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule=rule, device="cpu", **opts)
        (c,) = sg.generate([prompt], max_new_tokens=12, temperature=0.0 if rule == "fly" else 1.0, seed=0)
        assert 0 < len(c.token_ids) <= 12 and rule in sg.label
        if rule == "fsd":  # every draft kept (JS ≤ log 2 < 1000)
            assert c.stats["acceptance_rate"] == 1.0
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"prompt": prompt}) + "\n")
    cli_main(["--models-dir", str(micro_trio), "--prompts-file", str(src), "--out", str(out), "--device", "cpu",
              "--rule", "typical", "--epsilon", "0.2", "--max-new-tokens", "8"])
    (rec,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert "error" not in rec and len(rec["token_ids"]) <= 8
    # the ν-form (the bonus token from typical's ν) through the API and the CLI
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="typical", device="cpu", epsilon=0.2,
                                              bonus="nu")
    assert sg.label == "typical(eps=0.2, nu)" and sg.spec.rule.needs_bonus_q
    # cascade's bonus: the ν-form by default, p on request
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="cascade", device="cpu")
    assert sg.label == "cascade(t=0.1)" and sg.spec.rule.needs_bonus_q
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, rule="cascade", device="cpu", bonus="p")
    assert sg.label == "cascade(t=0.1, p)" and not sg.spec.rule.needs_bonus_q
    out2 = tmp_path / "out_nu.jsonl"
    cli_main(["--models-dir", str(micro_trio), "--prompts-file", str(src), "--out", str(out2), "--device", "cpu",
              "--rule", "typical", "--epsilon", "0.2", "--bonus", "nu", "--max-new-tokens", "8"])
    (rec,) = [json.loads(x) for x in out2.read_text().splitlines()]
    assert "error" not in rec and 0 < len(rec["token_ids"]) <= 8


def test_a_linear_head_starts_exactly_at_the_rules_it_can_express():
    from specdec.head import EnsembleHead, HeadConfig
    from specdec.targets import PAIR_FEATURES, cascade_weight, pair_features, total_variation

    p, q, _, _ = _scores(3, B=500)
    feats = pair_features(p, q).float()
    h_q, h_p = torch.randn(500, G + 1, 8), torch.randn(500, G + 1, 12)
    head = EnsembleHead(HeadConfig(hidden_q=8, hidden_p=12, num_features=len(PAIR_FEATURES)))
    head.init_as_rule("cascade", 0.05, sharpness=1e4)  # sharp: the rule itself away from its boundary
    w = head(h_q, h_p, feats)
    margin = (p.amax(-1) - q.amax(-1) - 0.05).abs() > 1e-3
    assert torch.equal((w > 0.5)[margin], cascade_weight(p, q, 0.05).bool()[margin])
    head.init_as_rule("fsd_tv", 0.2, sharpness=1e4)
    tv = total_variation(p, q)
    assert torch.equal((head(h_q, h_p, feats) > 0.5)[(tv - 0.2).abs() > 1e-3], (tv > 0.2)[(tv - 0.2).abs() > 1e-3])
    head.init_as_rule("static", 0.3)
    assert torch.allclose(head(h_q, h_p, feats), torch.full((500, G + 1), 0.3))
    with pytest.raises(ValueError, match="known: cascade"):
        head.init_as_rule("fly", 0.3)
    with pytest.raises(ValueError, match="linear head"):
        EnsembleHead(HeadConfig(hidden_q=8, hidden_p=12, num_features=5, arch="mlp")).init_as_rule("cascade", 0.1)


def test_choose_start_maximises_the_training_objective_on_validation():
    from eval.choose_start import choose

    def row(method, label, score, acc, **params):
        return {"method": method, "label": label, "task_score": score, "acceptance_rate": acc, "params": params}

    rows = [row("sd", "sd", 0.60, 0.80), row("cascade", "cascade(t=0.02)", 0.55, 0.97, threshold=0.02),
            row("cascade", "cascade(t=0.2)", 0.45, 0.98, threshold=0.2),
            row("static", "static(w=0.85)", 0.43, 0.83, w=0.85),
            row("fsd", "fsd(kl<=1)", 0.59, 0.99, threshold=1.0, divergence="kl"),  # not expressible: skipped
            row("fsd", "fsd(tv<=0.3)", 0.50, 0.95, threshold=0.3, divergence="tv")]
    best, cands = choose(rows, 0.1)
    # SD (w = 1) is the cascade that always defers: J 0.68 beats cascade t = 0.02's 0.647
    assert best["label"] == "sd" and (best["rule"], best["knob"]) == ("cascade", -1.0)
    assert {c["label"] for c in cands} == {"sd", "cascade(t=0.02)", "cascade(t=0.2)", "static(w=0.85)",
                                           "fsd(tv<=0.3)"}
    best, _ = choose(rows[1:], 0.1)
    assert best["label"] == "cascade(t=0.02)" and (best["rule"], best["knob"]) == ("cascade", 0.02)
    best, _ = choose(rows, 20.0)  # acceptance dominates
    assert best["label"] == "cascade(t=0.2)"
    # the draft alone (w = 0) is the cascade that never defers
    best, _ = choose(rows + [row("static", "static(w=0)", 0.20, 1.0, w=0.0)], 20.0)
    assert best["label"] == "static(w=0)" and (best["rule"], best["knob"]) == ("cascade", 1.0)
    with pytest.raises(ValueError, match="no run of sd, cascade"):
        choose([rows[4]], 0.1)
    # typical acceptance is the truncating head at w = 0 (the cascade that never defers), at Medusa's δ = sqrt(ε)
    from eval.choose_start import overrides_of

    typ = [row("typical", "typical(eps=0.3)", 0.70, 0.92, epsilon=0.3, delta=0.3 ** 0.5),
           row("typical", "typical(eps=0.1, delta=0.9)", 0.99, 0.99, epsilon=0.1, delta=0.9)]  # other δ: skipped
    best, cands = choose(rows + typ, 0.1)
    assert best["label"] == "typical(eps=0.3)" and (best["rule"], best["knob"], best["typical_epsilon"]) == (
        "cascade", 1.0, 0.3)
    assert "typical(eps=0.1, delta=0.9)" not in {c["label"] for c in cands}
    assert overrides_of(best) == "head.init_rule=cascade head.init_knob=1 target.typical_epsilon=0.3"
    assert overrides_of(cands[1]) == "head.init_rule=cascade head.init_knob=-1"


def test_choose_keeping_score_takes_the_most_acceptance_within_the_margin_of_the_reference():
    from eval.choose_start import choose_keeping_score

    def row(method, label, score, acc, **params):
        return {"method": method, "label": label, "task_score": score, "acceptance_rate": acc, "params": params}

    rows = [row("sd", "sd", 0.344, 0.765),
            row("typical", "typical(eps=0.1,nu)", 0.453, 0.859, epsilon=0.1),
            row("typical", "typical(eps=0.03,nu)", 0.330, 0.900, epsilon=0.03),
            row("cascade", "cascade(t=0.3)", 0.219, 0.963, threshold=0.3),
            row("fsd", "fsd(kl<=4)", 0.40, 0.99, threshold=4.0, divergence="kl")]  # not expressible: never chosen
    best, cands = choose_keeping_score(rows, 0.1, "sd", 0.02)  # floor 0.324: ε = 0.03 is in, cascade out
    assert best["label"] == "typical(eps=0.03,nu)" and best["typical_epsilon"] == 0.03
    assert [c["label"] for c in cands][-1] == "cascade(t=0.3)"
    best, _ = choose_keeping_score(rows, 0.1, "sd", 0.0)  # ε = 0.03 is 1.4 points below SD: out
    assert best["label"] == "typical(eps=0.1,nu)"
    best, _ = choose_keeping_score(rows, 0.1, "sd", 0.2)
    assert best["label"] == "cascade(t=0.3)"
    with pytest.raises(ValueError, match="no run labelled 'ar_target'"):
        choose_keeping_score(rows, 0.1, "ar_target", 0.02)
    with pytest.raises(ValueError, match="no candidate scores within"):
        choose_keeping_score([rows[0], rows[3], rows[4]], 0.1, "fsd(kl<=4)", 0.0)  # a reference that is no start
