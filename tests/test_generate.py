"""generate(): exactness of greedy SD, distribution of sampled SD, cache correctness, bad input."""

import pytest
import torch
from scipy.stats import chisquare

from specdec import LM, DraftModelProposer, NgramProposer, StaticEnsembleRule, generate
from specdec.models import TokenizerMismatchError, check_tokenizers_match, pad_left
from specdec.targets import ContrastiveRule
from specdec.testing import noisy_copy, random_llama

PROMPTS = [[1, 5, 7], [1, 9, 3, 4, 22, 8, 9, 3], [1], [3, 3, 3, 3, 3]]


@pytest.fixture(scope="module")
def pair64():
    target = random_llama(64, hidden=48, layers=2, seed=0, dtype=torch.float64, init_std=0.3)
    draft = noisy_copy(target, noise=0.05, seed=1)
    return target, draft


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_sd_equals_greedy_autoregressive(pair64, gamma):
    target, draft = pair64
    ar = generate(LM(target), None, PROMPTS, gamma=0, max_new_tokens=40, temperature=0)
    sd = generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, gamma=gamma, max_new_tokens=40, temperature=0)
    assert sd.tokens == ar.tokens
    # The pair must exercise both partial acceptance (holes) and full acceptance.
    acc = sd.rounds["accepted"][sd.rounds["active"]]
    assert 0.2 < sd.acceptance_rate < 0.95 and (acc == gamma).any() and (acc < gamma).any()
    # Greedy acceptance is deterministic: the recorded per-draft probabilities are indicators whose leading ones
    # count each round's accepted drafts, so the predicted lengths of eval/metrics.py equal the measured one.
    ap = sd.rounds["accept_prob"][sd.rounds["active"]]
    assert torch.equal(ap.long().cumprod(-1).sum(-1), acc) and ((ap == 0) | (ap == 1)).all()
    assert torch.equal(sd.rounds["expected_accept"][sd.rounds["active"]], ap)
    ng = generate(LM(target), NgramProposer(64, max_ngram=4), PROMPTS, gamma=gamma, max_new_tokens=40, temperature=0)
    assert ng.tokens == ar.tokens
    # Greedy through the static w=1 rule (with bonus q) is the same decoding.
    st = generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, rule=StaticEnsembleRule(1.0), gamma=gamma,
                  max_new_tokens=40, temperature=0)
    assert st.tokens == ar.tokens


def test_eos_and_records(pair64):
    target, draft = pair64
    ar = generate(LM(target), None, PROMPTS, gamma=0, max_new_tokens=12, temperature=0)
    eos = ar.tokens[1][5]
    out = generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, gamma=3, max_new_tokens=12, temperature=0,
                   eos_token_id=eos, record_hidden=True, rule=StaticEnsembleRule(1.0))
    assert out.tokens[1][-1] == eos and out.finish_reason[1] == "eos" and len(out.tokens[1]) <= 6
    for b, toks in enumerate(out.tokens):
        assert int(out.records["token_mask"][b].sum()) == len(toks)
    m = out.records["token_mask"]
    assert out.records["h_p"].shape[-1] == 48 and "h_q" not in out.records  # exact rule: no bonus q, no h_q
    assert torch.all(out.records["w"][m] == 1) and torch.all(out.records["tv_nu_p"][m].abs() < 1e-6)
    mix = generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, gamma=3, max_new_tokens=12, temperature=0,
                   record_hidden=True, rule=StaticEnsembleRule(0.25))
    m = mix.records["token_mask"]
    assert mix.records["h_q"].shape[-1] == 48 and mix.records["feats"].shape[-1] == 5
    assert torch.all(mix.records["w"][m] == 0.25)
    # TV(ν, p) = (1 − w)·TV(p, q) for the ensemble.
    assert torch.allclose(mix.records["tv_nu_p"][m], 0.75 * mix.records["tv_pq"][m], atol=1e-6)


def _exact_two_token_dist(target, draft, prompt, w):
    """P(x1, x2) of ν-sampling with ν = w·p + (1−w)·q, by enumeration."""
    V = target.config.vocab_size
    ids = torch.tensor([prompt])

    def dist(ids):
        p = torch.softmax(target(ids).logits[0, -1].double(), -1)
        q = torch.softmax(draft(ids).logits[0, -1].double(), -1)
        return w * p + (1 - w) * q

    first = dist(ids)
    joint = torch.zeros(V, V, dtype=torch.float64)
    for x in range(V):
        joint[x] = first[x] * dist(torch.cat([ids, torch.tensor([[x]])], 1))
    return joint.flatten()


@pytest.mark.parametrize("w", [1.0, 0.4])
def test_sampled_sd_matches_nu_chain_in_distribution(w):
    """Sampling SD (γ=3) over 2-token continuations vs the exact ν-chain: chi-square p > 1e-4 and TV < 0.03
    with 30k samples over 64 outcomes (fixed seed)."""
    target = random_llama(8, hidden=16, layers=1, heads=2, seed=3, dtype=torch.float64, init_std=0.5)
    draft = noisy_copy(target, noise=0.4, seed=4)
    N, prompt = 30_000, [1, 4, 2]
    out = generate(LM(target), DraftModelProposer(LM(draft)), [prompt] * N, rule=StaticEnsembleRule(w), gamma=3,
                   max_new_tokens=2, temperature=1.0, generator=torch.Generator().manual_seed(0))
    pairs = torch.tensor([t[0] * 8 + t[1] for t in out.tokens])
    counts = torch.bincount(pairs, minlength=64).double()
    expected = _exact_two_token_dist(target, draft, prompt, w)
    keep = expected * N > 5
    obs, exp = counts[keep], expected[keep] * N
    stat = chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy())
    tv = 0.5 * (counts / N - expected).abs().sum()
    assert stat.pvalue > 1e-4 and tv < 0.03, (stat.pvalue, float(tv))
    assert 0.05 < out.acceptance_rate < 0.98


def test_cache_matches_fresh_forward_after_many_rejections():
    model = random_llama(64, hidden=32, layers=2, seed=5, dtype=torch.float64)
    lm = LM(model)
    g = torch.Generator().manual_seed(0)
    seqs = [[1, 2, 3], [1], [4, 5, 6, 7, 8, 9]]
    lm.prefill([s[:-1] for s in seqs])
    pending = [s[-1] for s in seqs]
    for _ in range(15):  # rounds: feed pending + 4 random drafts, keep a random prefix per row
        drafts = torch.randint(64, (3, 4), generator=g)
        lm.feed(torch.cat([torch.tensor(pending).unsqueeze(1), drafts], 1))
        n = torch.randint(0, 5, (3,), generator=g)
        lm.rollback(4 - n)
        for b in range(3):
            seqs[b] += drafts[b, : n[b]].tolist() + [int(torch.randint(64, (1,), generator=g))]
        pending = [s[-1] for s in seqs]
    cached, _ = lm.feed(torch.tensor(pending).unsqueeze(1))
    for b, s in enumerate(seqs):
        fresh = torch.log_softmax(model(torch.tensor([s])).logits[0, -1].float(), -1)
        assert torch.allclose(cached[b, -1], fresh, atol=1e-5), b
    assert lm.mask.shape[1] < sum(len(s) for s in seqs)  # trailing all-hole slots were cropped


def test_prefill_keeps_only_the_last_logits_and_matches_a_full_feed():
    """A prompt's [B, L, V] log-probs are never read; prefill must not materialise them (the real pair's 900-token
    CNN/DM prompts at batch 8 ran out of 24 GB with them), and must leave the same cache and hidden states."""
    model = random_llama(64, hidden=32, layers=2, seed=6, dtype=torch.float64)
    seqs = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11, 12, 13, 14, 15]]
    full, lean = LM(model), LM(model)
    full.reset(len(seqs))
    lean.reset(len(seqs))
    tokens, valid = pad_left(seqs)
    logp_full, hidden_full = full.feed(tokens, valid)
    logp_lean, hidden_lean = lean.feed(tokens, valid, last_logits_only=True)
    assert logp_full.shape[1] == 7 and logp_lean.shape[1] == 1
    assert torch.allclose(logp_lean[:, 0], logp_full[:, -1], atol=1e-10)
    assert torch.allclose(hidden_lean, hidden_full, atol=1e-10)
    assert torch.allclose(lean.prefill(seqs), hidden_full, atol=1e-10)
    step = torch.tensor([[20], [21], [22]])
    assert torch.allclose(lean.feed(step)[0], full.feed(step)[0], atol=1e-10)  # same cache after the prompt


def test_bad_input_errors(pair64):
    target, draft = pair64
    with pytest.raises(ValueError, match="gamma"):
        generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, gamma=-1)
    with pytest.raises(ValueError, match="empty"):
        generate(LM(target), None, [[1], []], gamma=0)
    with pytest.raises(ValueError, match="context window"):
        generate(LM(target), None, [[1] * 600], gamma=0)
    other = random_llama(65, hidden=16, layers=1, heads=2)
    with pytest.raises(ValueError, match="vocabulary width"):
        generate(LM(target), DraftModelProposer(LM(other, "draft")), PROMPTS, gamma=2)
    with pytest.raises(ValueError, match="proposer"):
        generate(LM(target), None, PROMPTS, gamma=2)
    with pytest.raises(ValueError, match="temperature"):
        generate(LM(target), DraftModelProposer(LM(draft)), PROMPTS, gamma=2, temperature=-1.0)
    # one wrapper in two roles would share one cache: refused, where two wrappers over the same weights decode
    shared = LM(target)
    with pytest.raises(ValueError, match="distinct LM wrappers"):
        generate(shared, DraftModelProposer(shared), PROMPTS, gamma=2)
    amateur = LM(draft, "amateur")
    with pytest.raises(ValueError, match="distinct LM wrappers"):
        generate(LM(target), DraftModelProposer(amateur), PROMPTS, rule=ContrastiveRule(0.5, 0.1), gamma=2,
                 amateur=amateur)
    ar = generate(LM(target), None, PROMPTS, gamma=0, max_new_tokens=8, temperature=0)
    two = generate(LM(target), DraftModelProposer(LM(target, "copy")), PROMPTS, gamma=2, max_new_tokens=8,
                   temperature=0)
    assert two.tokens == ar.tokens and two.acceptance_rate == 1.0


def test_sliding_window_models_are_refused_and_multimodal_configs_read():
    from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3TextConfig

    text = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=2, head_dim=16, sliding_window=8, max_position_embeddings=512)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    mm = Gemma3ForConditionalGeneration(Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                                     image_token_index=299, boi_token_index=297,
                                                     eoi_token_index=298))
    # Gemma 3 as AutoModelForCausalLM loads it: a multimodal config; its sliding layers cannot roll back a draft
    with pytest.raises(ValueError, match="sliding_attention layers"):
        LM(mm.eval())
    full = LM(Gemma3ForCausalLM(Gemma3TextConfig(**text, layer_types=["full_attention"] * 2)).eval())
    assert (full.hidden_size, full.max_positions) == (32, 512)


def test_tokenizer_mismatch_names_the_difference():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    def tok(vocab):
        t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="</s>")

    a = tok({"<unk>": 0, "</s>": 1, "a": 2, "b": 3})
    b = tok({"<unk>": 0, "</s>": 1, "a": 3, "b": 2})
    check_tokenizers_match({"target": a, "draft": a})
    with pytest.raises(TokenizerMismatchError, match="'a': 2 vs 3"):
        check_tokenizers_match({"target": a, "draft": b})
    c = tok({"<unk>": 0, "</s>": 1, "a": 2, "b": 3, "c": 4})
    with pytest.raises(TokenizerMismatchError, match="vocabulary size 4 .target. vs 5 .draft."):
        check_tokenizers_match({"target": a, "draft": c})
