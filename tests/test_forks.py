"""Paired forks (train/forks.py) and their REINFORCE++ update (train/reinforce.py::branch_clipped_loss)."""

import torch
from scipy.stats import chisquare

from specdec.loading import Models
from specdec.targets import ExactRule, StaticEnsembleRule
from train.forks import choose_fork_positions, coupled_residuals, fork_delta, run_forks
from train.reinforce import bernoulli_kl, branch_clipped_loss, fork_advantages
from train.rollout import cut_at_stop


def _dists(seed: int, m: int, v: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(m, v, generator=g, dtype=torch.float64) ** 3
    q = torch.rand(m, v, generator=g, dtype=torch.float64) ** 3
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def test_coupling_identity_delta_equals_tv_times_residual_gap():
    """sum_x (p - q) V(x) = TV * (E_{x+}[V] - E_{x-}[V]) for the residuals of the maximal coupling, any V."""
    p, q = _dists(0, 6, 11)
    V = torch.randn(6, 11, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = ((p - q) * V).sum(-1)
    plus, minus = (p - q).clamp_min(0), (q - p).clamp_min(0)
    tv = plus.sum(-1)
    assert torch.allclose(tv, 0.5 * (p - q).abs().sum(-1))
    via = fork_delta(tv, (plus / tv[:, None] * V).sum(-1), (minus / tv[:, None] * V).sum(-1))
    assert torch.allclose(exact, via, atol=1e-12)


def test_coupled_residuals_sample_the_residual_distributions():
    """x+ ~ norm(max(0, p - q)) and x- ~ norm(max(0, q - p)): chi-square at the 0.1% level, fixed seed."""
    p, q = _dists(2, 1, 8)
    n = 20000
    P, Q = p.expand(n, -1).clone(), q.expand(n, -1).clone()
    xp, xm, tv = coupled_residuals(P, Q, torch.Generator().manual_seed(3))
    assert torch.allclose(tv, 0.5 * (p - q).abs().sum(-1).expand(n))
    for x, res in ((xp, (p - q).clamp_min(0)), (xm, (q - p).clamp_min(0))):
        res = (res / res.sum())[0]
        support = res > 0
        assert not (~support)[x].any(), "sampled a token outside the residual's support"
        counts = torch.bincount(x, minlength=8)[support].double()
        assert chisquare(counts.numpy(), (res[support] * n).numpy()).pvalue > 1e-3
    # identical rows have no residual: TV 0 (their Delta is 0 whatever is sampled)
    _, _, tv0 = coupled_residuals(p, p.clone())
    assert float(tv0) == 0.0


def test_fork_positions_follow_tv_and_skip_invalid_tokens():
    tv = torch.tensor([[0.0, 0.5, 0.1, 0.4, 0.9], [0.2, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True, False], [True, True, True, False, False]])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(5)
    for _ in range(3000):
        for r, t in choose_fork_positions(tv, mask, 1, g):
            assert mask[r, t] and tv[r, t] > 0
            if r == 0:
                counts[t] += 1
    # row 0: positions 1, 2, 3 with probabilities 0.5, 0.1, 0.4 (tolerance: > 5 binomial std)
    assert torch.allclose(counts[1:4] / 3000, torch.tensor([0.5, 0.1, 0.4]), atol=0.05)
    assert choose_fork_positions(tv, mask, 5, g).count((1, 0)) == 1  # row 1 has one usable position only


def test_branch_clipped_loss_has_gradient_minus_advantage_at_the_old_policy():
    """d loss / d w = -adv / M at w = w_old: the update follows dJ/dw_t = Delta_t - lam_t TV_t."""
    w_old = torch.tensor([0.1, 0.5, 0.9, 0.99], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.5, -0.3], dtype=torch.float64)
    w = w_old.clone().requires_grad_(True)
    loss, frac = branch_clipped_loss(w, w_old, adv, clip_eps=0.2)
    loss.backward()
    assert torch.allclose(w.grad, -adv / 4)
    assert float(frac) == 0.0
    # far outside the trust region in the advantage's direction, the clipped surrogate stops pulling
    w_far = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    loss, frac = branch_clipped_loss(w_far, torch.tensor([0.1], dtype=torch.float64), torch.tensor([1.0]), 0.2)
    loss.backward()
    assert float(w_far.grad) == 0.0 and float(frac) > 0


def test_fork_advantages_subtract_the_per_token_lambda_cost_and_keep_the_sign():
    delta = torch.tensor([0.0, 0.0, 0.3])
    tv = torch.tensor([0.5, 0.2, 0.5])
    length = torch.tensor([10.0, 100.0, 10.0])
    adv, scale = fork_advantages(delta, tv, length, lam=0.1)
    raw = torch.tensor([-0.005, -0.0002, 0.295])
    assert torch.allclose(adv * scale, raw, atol=1e-6)
    assert abs(scale - float(raw.pow(2).mean().sqrt())) < 1e-6
    # all-equal advantages keep their sign (no mean subtraction)
    adv2, _ = fork_advantages(torch.zeros(3), tv, length, lam=0.1)
    assert (adv2 < 0).all()


def test_bernoulli_kl_is_zero_at_the_reference_and_positive_elsewhere():
    w = torch.tensor([0.2, 0.5, 0.9])
    assert torch.allclose(bernoulli_kl(w, w), torch.zeros(3), atol=1e-6)
    assert (bernoulli_kl(w, torch.tensor([0.5, 0.9, 0.2])) > 0).all()


def _micro(micro_trio):
    return Models({"dir": str(micro_trio), "embedded": False, "device": "cpu", "dtype": "float32"})


def test_run_forks_continues_the_prefix_and_uses_common_random_numbers(micro_trio, monkeypatch):
    models = _micro(micro_trio)
    tok = models.tokenizer
    prompts = [tok("Q: 2+3?\nA:")["input_ids"], tok("Q: 7 apples\nA:")["input_ids"]]
    completions = [tok(" 2 + 3 = 5", add_special_tokens=False)["input_ids"],
                   tok(" she has 7", add_special_tokens=False)["input_ids"]]
    positions = [(0, 3), (1, 0)]
    seen = []

    def score_fn(texts, rows):
        seen.append((list(texts), list(rows)))
        return [float(len(t) % 3) for t in texts]

    kw = dict(score_fn=score_fn, lam=0.0, gamma=3, max_new_tokens=16, temperature=1.0, stops=(), seed=5,
              cut_at_stop=cut_at_stop)
    f = run_forks(models, ExactRule(), prompts, completions, positions, **kw)
    for texts in (f.texts_plus, f.texts_minus):
        assert texts[0].startswith(tok.decode(completions[0][:3]))
        assert all(len(t) >= 1 for t in texts)
    assert seen[0][1] == [0, 1] and seen[1][1] == [0, 1]
    assert torch.allclose(f.delta, f.tv * (f.g_plus - f.g_minus))
    assert (f.tv > 0).all() and f.decoded_tokens > 0

    # common random numbers: with the two fork tokens forced equal, both branches decode the same continuation
    import train.forks as forks

    def same(p, q, generator=None):
        x = torch.multinomial(p.double(), 1, generator=generator).squeeze(-1)
        return x, x.clone(), 0.5 * (p - q).abs().sum(-1)

    monkeypatch.setattr(forks, "coupled_residuals", same)
    f2 = run_forks(models, ExactRule(), prompts, completions, positions, **kw)
    assert f2.texts_plus == f2.texts_minus
    assert torch.equal(f2.delta, torch.zeros_like(f2.delta))


def test_fork_returns_carry_the_whole_branch_lambda_term_whatever_its_length(micro_trio):
    """With w = 0 every token's acceptance term 1 - w TV is exactly 1, so each branch's lambda part,
    lam * (1/T) sum_t (1 - w_t TV_t), is lam whatever the branch's length T: with a zero task reward G+ = G- = lam
    and Delta = 0. Summing only the continuation's terms over the whole length made the longer branch win."""
    models = _micro(micro_trio)
    tok = models.tokenizer
    prompts = [tok("Q: 2+3?\nA:")["input_ids"], tok("Q: 7 apples\nA:")["input_ids"], tok("Q: 4+4?\nA:")["input_ids"]]
    completions = [tok(" 2 + 3 = 5 so", add_special_tokens=False)["input_ids"],
                   tok(" she has 7 now", add_special_tokens=False)["input_ids"],
                   tok(" it is 8 then", add_special_tokens=False)["input_ids"]]
    positions = [(0, 4), (1, 5), (2, 3)]
    lam = 1.0
    f = run_forks(models, StaticEnsembleRule(0.0), prompts, completions, positions,
                  score_fn=lambda texts, rows: [0.0] * len(texts), lam=lam, gamma=3, max_new_tokens=24,
                  temperature=1.0, stops=(":",), seed=3, cut_at_stop=cut_at_stop,
                  prefix_lam=[float(t + 1) for _, t in positions])  # the rollout's terms up to t: each exactly 1
    lengths = {len(tok(t)["input_ids"]) for t in f.texts_plus + f.texts_minus}
    assert len(lengths) > 1  # branches of different lengths (the stop string cuts some)
    assert torch.allclose(f.g_plus, torch.full_like(f.g_plus, lam), atol=1e-6)
    assert torch.allclose(f.g_minus, torch.full_like(f.g_minus, lam), atol=1e-6)
    assert torch.allclose(f.delta, torch.zeros_like(f.delta), atol=1e-6)


def test_greedy_target_continuations_are_deterministic_and_equal_target_greedy(micro_trio):
    """continuation=greedy_target: both branches are the target's greedy decoding after the fork token, whatever
    the seed (so a harmless swap gives exactly 0)."""
    from specdec.generate import generate

    models = _micro(micro_trio)
    tok = models.tokenizer
    prompts = [tok("Q: 2+3?\nA:")["input_ids"]]
    completions = [tok(" 2 + 3 = 5", add_special_tokens=False)["input_ids"]]
    xs = torch.tensor(tok(" 7", add_special_tokens=False)["input_ids"][:1])
    forced = (xs, xs.clone(), torch.tensor([0.3]))
    kw = dict(score_fn=lambda texts, rows: [0.0] * len(texts), lam=0.1, gamma=3, max_new_tokens=12,
              temperature=1.0, stops=(), cut_at_stop=cut_at_stop, continuation="greedy_target", fork_tokens=forced)
    a = run_forks(models, ExactRule(), prompts, completions, [(0, 2)], seed=1, **kw)
    b = run_forks(models, ExactRule(), prompts, completions, [(0, 2)], seed=2, **kw)
    assert a.texts_plus == b.texts_plus == a.texts_minus
    start = prompts[0] + completions[0][:2] + [int(xs[0])]
    ref = generate(models.target, None, [start], gamma=0, max_new_tokens=9, temperature=0.0,
                   eos_token_id=tok.eos_token_id)
    assert a.texts_plus[0] == tok.decode(completions[0][:2] + [int(xs[0])] + ref.tokens[0], skip_special_tokens=True)


def test_fork_continuations_stop_decoding_once_their_text_is_cut(micro_trio):
    """A continuation that reaches a stop string ends there (the rest would be cut away before scoring): the same
    texts as decoding to the end and then cutting, fewer decoded tokens."""
    models = _micro(micro_trio)
    tok = models.tokenizer
    prompts = [tok("Q: 2+3?\nA:")["input_ids"], tok("Q: 7 apples\nA:")["input_ids"]]
    completions = [tok(" 2 + 3 = 5", add_special_tokens=False)["input_ids"],
                   tok(" she has 7", add_special_tokens=False)["input_ids"]]
    kw = dict(score_fn=lambda texts, rows: [0.0] * len(texts), lam=0.0, gamma=3, max_new_tokens=30,
              temperature=1.0, seed=0, cut_at_stop=cut_at_stop, continuation="greedy_target")
    full = run_forks(models, ExactRule(), prompts, completions, [(0, 3), (1, 2)], stops=(), **kw)
    stop = full.texts_plus[0][len(tok.decode(completions[0][:3])) + 3:][:2]  # two characters the branch decodes
    assert len(stop) == 2
    cut = run_forks(models, ExactRule(), prompts, completions, [(0, 3), (1, 2)], stops=(stop,), **kw)
    for a, b in zip(full.texts_plus + full.texts_minus, cut.texts_plus + cut.texts_minus):
        assert b == a[: a.index(stop)] if stop in a else b == a
    assert cut.decoded_tokens < full.decoded_tokens


def test_fork_critic_regresses_the_gap_on_the_head_inputs_and_keeps_a_fifo_buffer():
    from heads import HeadConfig
    from train.trainer import ForkCritic

    g = torch.Generator().manual_seed(0)
    n = 600
    feats = torch.randn(n, 5, generator=g)
    gap = (feats[:, 0] > 0.5).float()  # "harmful" contexts: a swap loses the reward
    y = torch.where(torch.rand(n, generator=g) < 0.8, gap, torch.zeros(n))  # noisy +-1 / 0 samples
    critic = ForkCritic(HeadConfig(hidden_q=2, hidden_p=3, num_features=5, use_hidden=False, arch="mlp"),
                        torch.device("cpu"), lr=0.02, buffer=500)
    assert torch.equal(critic.predict(torch.zeros(3, 2), torch.zeros(3, 3), feats[:3]), torch.zeros(3))
    critic.add(torch.zeros(n, 2), torch.zeros(n, 3), feats, y)
    assert len(critic) == 500 and torch.equal(critic.data["y"], y[-500:])
    critic.fit(300)
    pred = critic.predict(torch.zeros(n, 2), torch.zeros(n, 3), feats)
    hi, lo = pred[gap > 0].mean(), pred[gap == 0].mean()
    assert abs(hi - 0.8) < 0.15 and abs(lo) < 0.1  # the conditional mean of the noisy gaps
