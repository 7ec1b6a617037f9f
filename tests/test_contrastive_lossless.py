"""Accelerated contrastive decoding is lossless with respect to π_CD.

Greedy: dcd (draft and n-gram proposers), scd and cos return exactly greedy cd's tokens on the micro trio.
Sampling: the first two tokens of cd, dcd, scd and cos are distributed as π_CD, checked against the exact
2-token distribution (enumerated with plain full forwards, independent of the cache code) on a 12-token
vocabulary: chi-square over cells pooled to expected counts ≥ 5, p > 1e-3 at fixed seeds (the same test rejects
the expert's own distribution, TV ≈ 0.35 from π_CD, with p < 1e-12).
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from specdec.cos import cos_generate
from specdec.generate import generate
from specdec.models import LM, load_model
from specdec.proposers import DraftModelProposer, NgramProposer
from specdec.targets import ContrastiveRule, contrastive_target
from specdec.testing import noisy_copy, random_llama


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Micro models gain nothing from intra-op threads, and on a shared 2-core machine two threads per process
    thrash (measured 25x slower under load)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _prompts_from_tasks(tok) -> list[list[int]]:
    from data import synthetic
    from data.tasks import get_task

    rows = synthetic.generate("gsm8k", "test", n=3, seed=0) + synthetic.generate("xsum", "test", n=2, seed=0)
    tasks = ["gsm8k"] * 3 + ["xsum"] * 2
    prompts = [tok.encode(get_task(t).format_prompt(r))[-40:] for t, r in zip(tasks, rows)]
    prompts[1] = prompts[1][-7:]  # ragged lengths matter, not content
    return prompts


def _check_all_equal_cd(E, D, A, prompts, alpha, beta, gammas, eos=None, max_new_tokens=32, strict=True):
    """Greedy dcd (both proposers), scd and cos return greedy cd's tokens. strict: also require that CD differs
    from the expert alone and that every accelerated method both accepts and rejects drafts."""
    rule = ContrastiveRule(alpha, beta)
    kw = dict(max_new_tokens=max_new_tokens, temperature=0, eos_token_id=eos)
    cd = generate(LM(E, "expert"), None, prompts, rule=rule, gamma=0, amateur=LM(A, "amateur"), **kw)
    if strict:
        expert = generate(LM(E, "expert"), None, prompts, gamma=0, **kw)
        assert cd.tokens != expert.tokens  # α changes the greedy output, so the comparisons below can fail
    for gamma in gammas:
        outs = {
            "dcd": generate(LM(E, "expert"), DraftModelProposer(LM(D, "draft")), prompts, rule=rule, gamma=gamma,
                            amateur=LM(A, "amateur"), **kw),
            "dcd_ngram": generate(LM(E, "expert"), NgramProposer(E.config.vocab_size, max_ngram=4), prompts,
                                  rule=rule, gamma=gamma, amateur=LM(A, "amateur"), **kw),
            # scd: the amateur drafts through its own wrapper; a second wrapper verifies.
            "scd": generate(LM(E, "expert"), DraftModelProposer(LM(A, "amateur_proposer")), prompts, rule=rule,
                            gamma=gamma, amateur=LM(A, "amateur"), **kw),
            "cos": cos_generate(LM(E, "expert"), LM(A, "amateur"), prompts, alpha=alpha, beta=beta, gamma=gamma,
                                **kw),
        }
        for name, out in outs.items():
            assert out.tokens == cd.tokens, f"{name} γ={gamma}"
            assert out.finish_reason == cd.finish_reason, f"{name} γ={gamma}"
            if strict and name == "dcd":  # (scd/cos greedy may never accept: CD penalises the amateur's top token)
                assert 0.0 < out.acceptance_rate < 1.0, f"{name} γ={gamma}: {out.acceptance_rate}"


@pytest.fixture(scope="module")
def random_trio():
    """Peaked random Llamas: an expert, an expert-aligned draft and a weaker amateur (noisy copies)."""
    E = random_llama(64, hidden=48, layers=2, seed=0, init_std=0.3)
    return E, noisy_copy(E, noise=0.1, seed=1), noisy_copy(E, noise=0.6, seed=2)


@pytest.mark.parametrize("alpha,beta", [(0.5, 0.1), (1.0, 0.0)])
def test_greedy_accelerated_cd_equals_greedy_cd(random_trio, alpha, beta):
    E, D, A = random_trio
    prompts = [[1, 5, 7], [1, 9, 3, 4, 22, 8, 9, 3], [1], [3, 3, 3, 3, 3], [4, 4, 60, 2, 9]]
    _check_all_equal_cd(E, D, A, prompts, alpha, beta, gammas=(1, 4), eos=2)


def test_greedy_equal_on_micro_trio(micro_trio):
    """The same on the project's own (micro) trio, loaded like the embedded models, with real task prompts.
    The micro models are barely trained (near-uniform), so this is an integration check, not a power check."""
    E, tok = load_model(micro_trio / "target")
    D, A = load_model(micro_trio / "draft")[0], load_model(micro_trio / "amateur")[0]
    _check_all_equal_cd(E, D, A, _prompts_from_tasks(tok), 0.5, 0.1, gammas=(3,), eos=tok.eos_token_id,
                        max_new_tokens=16, strict=False)


def test_greedy_equal_on_embedded_trio():
    """The same on the embedded tiny trio when it has been built (skipped otherwise: building takes minutes)."""
    from data.build_models import is_built, resolve_dir

    d = resolve_dir(None)
    if not is_built(d):
        pytest.skip(f"embedded trio not built in {d} (make models)")
    E, tok = load_model(d / "target")
    D, A = load_model(d / "draft")[0], load_model(d / "amateur")[0]
    _check_all_equal_cd(E, D, A, _prompts_from_tasks(tok), 0.5, 0.1, gammas=(4,), eos=tok.eos_token_id,
                        max_new_tokens=24, strict=False)


def test_cos_alternation_is_exercised_and_exact():
    """A pair whose amateur agrees with the expert often, so CoS's expert proposals (after full acceptance) are
    both accepted and rejected; greedy CoS must still equal greedy CD, with EOS and ragged prompts."""
    E = random_llama(64, hidden=48, layers=2, seed=0, init_std=0.3)
    A = noisy_copy(E, noise=0.05, seed=1)
    prompts = [[1, 5, 7], [1, 9, 3, 4, 22, 8, 9, 3], [1], [3, 3, 3, 3, 3]]
    proposals = proposals_accepted = 0
    for gamma in (1, 3):
        cd = generate(LM(E), None, prompts, rule=ContrastiveRule(0.3, 0.1), gamma=0, max_new_tokens=40,
                      temperature=0, amateur=LM(A))
        eos = cd.tokens[1][9]
        cd = generate(LM(E), None, prompts, rule=ContrastiveRule(0.3, 0.1), gamma=0, max_new_tokens=40,
                      temperature=0, amateur=LM(A), eos_token_id=eos)
        cos = cos_generate(LM(E), LM(A), prompts, alpha=0.3, beta=0.1, gamma=gamma, max_new_tokens=40,
                           temperature=0, eos_token_id=eos)
        assert cos.tokens == cd.tokens and cos.finish_reason == cd.finish_reason
        r = cos.rounds
        expert_proposal = r["active"] & (r["drafted"] == gamma + 1)
        assert expert_proposal.any()
        proposals += cos.stats["expert_proposals"]
        proposals_accepted += cos.stats["expert_proposals_accepted"]
        # (a row that ends on the expert's proposal drafts nothing more in that round: drafted = 1 there)
        assert int(expert_proposal.sum()) <= cos.stats["expert_proposals"] <= int(expert_proposal.sum()) + len(prompts)
        for b, toks in enumerate(cos.tokens):
            assert int(cos.records["token_mask"][b].sum()) == len(toks)
        # CoS runs no separate amateur pass and at most one expert pass per round (+ the prompt's prefill)
        assert cos.stats["time_amateur"] == 0.0 and cos.stats["target_calls"] <= cos.stats["rounds"] + 1
    # both outcomes of the expert's proposal occur: accepted, and rejected (then replaced by CD's token)
    assert 0 < proposals_accepted < proposals


def test_cos_honours_the_stop_callback_like_cd():
    """eval/run.py passes every method a stop callback (a chat model's closed code block): CoS must end those rows
    too, or its token counts and speed are not comparable with cd's."""
    E = random_llama(64, hidden=48, layers=2, seed=0, init_std=0.3)
    A = noisy_copy(E, noise=0.5, seed=2)
    prompts = [[1, 5, 7], [1, 9, 3, 4]]

    def stop(toks: list[int]) -> bool:
        return len(toks) >= 3

    cd = generate(LM(E), None, prompts, rule=ContrastiveRule(0.5, 0.1), gamma=0, max_new_tokens=24, temperature=0,
                  amateur=LM(A), stop=stop)
    cos = cos_generate(LM(E), LM(A), prompts, alpha=0.5, beta=0.1, gamma=3, max_new_tokens=24, temperature=0,
                       stop=stop)
    assert cd.finish_reason == cos.finish_reason == ["stop", "stop"]
    for a, c in zip(cd.tokens, cos.tokens):  # CoS stops within the round that reached the stop, as generate does
        assert 3 <= len(c) < 24 and c[:3] == a[:3]


# ---------------------------------------------------------------- sampling: distribution over 2 tokens
V, N = 12, 4000
ALPHA, BETA = 0.5, 0.05
PROMPT = [1, 5, 7, 3]


@pytest.fixture(scope="module")
def small():
    E = random_llama(V, hidden=32, layers=2, seed=0, init_std=0.3)
    A = noisy_copy(E, 0.5, seed=1)
    D = noisy_copy(E, 0.3, seed=2)
    with torch.no_grad():
        def lp(m, seqs):
            return torch.log_softmax(m(torch.tensor(seqs)).logits[:, -1].double(), -1)

        seqs = [PROMPT + [x] for x in range(V)]
        joints = {}
        for t in (1.0, 0.7):
            p1 = contrastive_target(lp(E, [PROMPT]), lp(A, [PROMPT]), ALPHA, BETA, t)[0]
            p2 = contrastive_target(lp(E, seqs), lp(A, seqs), ALPHA, BETA, t)
            joints[t] = p1[:, None] * p2
        e1, e2 = lp(E, [PROMPT]).exp()[0], lp(E, seqs).exp()
    return E, A, D, joints, e1[:, None] * e2


def _pvalue(tokens: list[list[int]], joint: torch.Tensor) -> float:
    counts = torch.zeros(V, V, dtype=torch.float64)
    for t in tokens:
        counts[t[0], t[1]] += 1
    exp = joint * len(tokens)
    small = exp < 5
    obs = torch.cat([counts[~small], counts[small].sum().view(1)])
    ex = torch.cat([exp[~small], exp[small].sum().view(1)])
    return float(chisquare(obs.numpy(), ex.numpy() * obs.sum().item() / ex.sum().item()).pvalue)


@pytest.mark.parametrize("method,temperature", [("cd", 1.0), ("dcd", 1.0), ("dcd_ngram", 1.0), ("scd", 1.0),
                                                ("cos", 1.0), ("dcd", 0.7), ("cos", 0.7)])
def test_sampling_matches_pi_cd_on_two_tokens(small, method, temperature):
    """T divides the combined logits; the proposals (and CoS's expert proposal) are drawn at T as well."""
    E, A, D, joints, _ = small
    joint = joints[temperature]
    g = torch.Generator().manual_seed(11)
    rule = ContrastiveRule(ALPHA, BETA)
    kw = dict(max_new_tokens=2, temperature=temperature, generator=g)
    prompts = [PROMPT] * N
    if method == "cd":
        out = generate(LM(E), None, prompts, rule=rule, gamma=0, amateur=LM(A), **kw)
    elif method == "dcd":
        out = generate(LM(E), DraftModelProposer(LM(D)), prompts, rule=rule, gamma=3, amateur=LM(A), **kw)
    elif method == "dcd_ngram":  # one-hot proposals: prompt lookup, else the last token repeated
        out = generate(LM(E), NgramProposer(V, max_ngram=3), prompts, rule=rule, gamma=3, amateur=LM(A), **kw)
    elif method == "scd":
        out = generate(LM(E), DraftModelProposer(LM(A)), prompts, rule=rule, gamma=2, amateur=LM(A), **kw)
    else:  # γ = 1: the second token often comes from the expert's proposal (the alternation)
        out = cos_generate(LM(E), LM(A), prompts, alpha=ALPHA, beta=BETA, gamma=1, **kw)
        assert 0 < out.stats["expert_proposals_accepted"] < out.stats["expert_proposals"]
    if method != "cd":
        assert 0.05 < out.acceptance_rate < 0.95  # both acceptances and rejections shape the output
    assert all(len(t) == 2 for t in out.tokens)
    assert _pvalue(out.tokens, joint) > 1e-3


def test_two_token_check_has_power(small):
    """The same statistic rejects samples of the expert alone (what an implementation ignoring the amateur
    would produce)."""
    _, _, _, joints, expert_joint = small
    joint = joints[1.0]
    assert 0.5 * (joint - expert_joint).abs().sum() > 0.2
    g = torch.Generator().manual_seed(0)
    idx = torch.multinomial(expert_joint.flatten(), N, replacement=True, generator=g)
    assert _pvalue([[int(i) // V, int(i) % V] for i in idx], joint) < 1e-12
