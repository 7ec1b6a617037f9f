"""specdec.hf: speculative decoding through `model.generate(..., custom_generate=specdec.hf.generate)` on the micro
trio, and SpeculativeGenerator over already-loaded models."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import specdec.hf
from specdec import SpeculativeGenerator
from specdec.head import EnsembleHead, HeadConfig, HeadFormatError
from specdec.loading import Models
from specdec.provenance import tokenizer_hash
from specdec.targets import PAIR_FEATURES
from specdec.testing import pooled_chisquare_pvalue, random_llama

PROMPTS = ["Question: Tom has 3 apples and buys 4 more.", "Q: 12 + 7 =", "Summarise: the cat sat on the mat."]


@pytest.fixture(scope="module")
def hf(micro_trio):
    tok = AutoTokenizer.from_pretrained(str(micro_trio / "tokenizer"))
    target = AutoModelForCausalLM.from_pretrained(str(micro_trio / "target")).eval()
    draft = AutoModelForCausalLM.from_pretrained(str(micro_trio / "draft")).eval()
    return tok, target, draft


@pytest.fixture(scope="module")
def head_dir(micro_trio, tmp_path_factory):
    """A head whose w varies with its inputs, exported for the micro pair (tokenizer hash and weights fingerprints)."""
    models = Models({"dir": str(micro_trio), "device": "cpu"})
    torch.manual_seed(0)
    head = EnsembleHead(HeadConfig(hidden_q=models.draft.hidden_size, hidden_p=models.target.hidden_size,
                                   num_features=len(PAIR_FEATURES), arch="mlp", init_w=0.6))
    torch.nn.init.normal_(head.out.weight, std=1.0)
    return head.save_pretrained(tmp_path_factory.mktemp("heads") / "head", meta={
        "tokenizer_hash": tokenizer_hash(models.tokenizer), "target": {"kind": "ensemble"},
        "model_fingerprints": models.fingerprints(("target", "draft"))})


def _inputs(tok, prompts=PROMPTS):
    return tok(prompts, return_tensors="pt", padding=True, padding_side="left")


def _new_tokens(seqs, enc, eos, pad):
    """Each row's new tokens (the right padding after an EOS dropped)."""
    out = []
    for row in seqs[:, enc["input_ids"].shape[1]:].tolist():
        if eos in row:
            row = row[: row.index(eos) + 1]
        out.append(row)
    return out


def test_greedy_equals_target_generate_and_the_api(hf, micro_trio):
    tok, target, draft = hf
    enc = _inputs(tok)
    ref = target.generate(**enc, max_new_tokens=24, do_sample=False)
    out = target.generate(**enc, assistant_model=draft, custom_generate=specdec.hf.generate, max_new_tokens=24,
                          do_sample=False)
    assert out.dtype == torch.long and torch.equal(out, ref)  # prompt + new tokens, padded like HF pads
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, device="cpu")
    comps = sg.generate(PROMPTS, max_new_tokens=24, temperature=0.0)
    assert [c.token_ids for c in comps] == _new_tokens(out, enc, tok.eos_token_id, tok.pad_token_id)
    # a draft= keyword instead of assistant_model, and an explicit method of the registry: the same tokens
    again = target.generate(**enc, custom_generate=specdec.hf.generate, draft=draft, method="sd", gamma=2,
                            max_new_tokens=24, do_sample=False)
    assert torch.equal(again, ref)
    # max_length instead of max_new_tokens, and one unpadded row (no attention mask padding)
    one = tok(PROMPTS[:1], return_tensors="pt")
    a = target.generate(**one, max_length=one["input_ids"].shape[1] + 7, do_sample=False)
    b = target.generate(**one, assistant_model=draft, custom_generate=specdec.hf.generate,
                        max_length=one["input_ids"].shape[1] + 7, do_sample=False)
    assert torch.equal(a, b) and b.shape[1] == one["input_ids"].shape[1] + 7


def test_head_and_static_through_generate_match_the_api(hf, micro_trio, head_dir):
    """A trained head (and a static weight) from model.generate decode exactly as SpeculativeGenerator does, with
    the same random stream; return_dict_in_generate carries the acceptance statistics."""
    tok, target, draft = hf
    enc = _inputs(tok)
    for api_kw, hf_kw in (({"head": head_dir}, {"ensemble_head": str(head_dir)}),
                          ({"rule": "static", "w": 0.3}, {"method": "static", "w": 0.3}),
                          ({"rule": "cascade", "threshold": 0.2}, {"method": "cascade", "threshold": 0.2})):
        sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, device="cpu", gamma=3, **api_kw)
        comps = sg.generate(PROMPTS, max_new_tokens=20, temperature=1.0, seed=7)
        out = target.generate(**enc, assistant_model=draft, custom_generate=specdec.hf.generate, gamma=3,
                              max_new_tokens=20, do_sample=True, generator=torch.Generator().manual_seed(7),
                              return_dict_in_generate=True, **hf_kw)
        assert [c.token_ids for c in comps] == _new_tokens(out.sequences, enc, tok.eos_token_id, tok.pad_token_id)
        assert out.accepted_per_round == [c.accepted_per_round for c in comps]
        assert out.acceptance_rate == [c.stats["acceptance_rate"] for c in comps]
        assert out.method == sg.label and out.gamma == 3 and out.finish_reason == [c.finish_reason for c in comps]


def test_sampled_tokens_follow_nu(hf):
    """do_sample=True, temperature T, static w: the first new token is distributed as ν = w·p_T + (1-w)·q_T at
    the prompt, the second as ν's two-step marginal Σ_x ν(x)·ν(·|x); the same counts reject ν at T = 1 and p_T."""
    tok, target, draft = hf
    w, T, n = 0.4, 1.5, 16000
    enc = tok(["Q: 12 + 7 ="] * n, return_tensors="pt")
    torch.manual_seed(3)
    seqs = target.generate(**enc, assistant_model=draft, custom_generate=specdec.hf.generate, method="static",
                           w=w, gamma=2, max_new_tokens=2, do_sample=True, temperature=T, eos_token_id=[])
    L = enc["input_ids"].shape[1]
    assert seqs.shape == (n, L + 2)

    def nu(ids, temp, weight=w):
        with torch.no_grad():
            p = (target(ids).logits[:, -1].double() / temp).softmax(-1)
            q = (draft(ids).logits[:, -1].double() / temp).softmax(-1)
        return weight * p + (1 - weight) * q

    prompt = enc["input_ids"][:1]
    V = target.config.vocab_size
    first = torch.bincount(seqs[:, L], minlength=V).double()
    second = torch.bincount(seqs[:, L + 1], minlength=V).double()
    every = torch.cat([prompt.expand(V, -1), torch.arange(V)[:, None]], 1)  # the prompt + each first token

    def expected(temp, weight=w):
        nu0 = nu(prompt, temp, weight)[0]
        return nu0, nu0 @ nu(every, temp, weight)

    nu0, nu1 = expected(T)
    assert pooled_chisquare_pvalue(first, nu0) > 1e-4 and pooled_chisquare_pvalue(second, nu1) > 1e-4
    for wrong in (expected(1.0), expected(T, weight=1.0)):  # temperature ignored; the draft never mixed in
        assert pooled_chisquare_pvalue(first, wrong[0]) < 1e-6 or pooled_chisquare_pvalue(second, wrong[1]) < 1e-6


def test_refuses_what_it_cannot_honour(hf, micro_trio, head_dir, tmp_path):
    tok, target, draft = hf
    enc = _inputs(tok)
    kw = {"assistant_model": draft, "custom_generate": specdec.hf.generate, "max_new_tokens": 4}
    with pytest.raises(ValueError, match="beam search"):
        target.generate(**enc, num_beams=2, **kw)
    with pytest.raises(ValueError, match="cannot honour TopPLogitsWarper"):
        target.generate(**enc, do_sample=True, top_p=0.9, **kw)
    with pytest.raises(ValueError, match="left-pad"):
        target.generate(**tok(PROMPTS, return_tensors="pt", padding=True, padding_side="right"), **kw)
    with pytest.raises(ValueError, match="needs ensemble_head|drafts with a draft model"):
        target.generate(**enc, custom_generate=specdec.hf.generate, max_new_tokens=4)
    other = random_llama(target.config.vocab_size + 3, hidden=16, layers=1, heads=2, seed=1)
    with pytest.raises(ValueError, match="vocabulary"):
        target.generate(**enc, custom_generate=specdec.hf.generate, draft=other, max_new_tokens=4)
    import copy

    grown = copy.deepcopy(tok)
    grown.add_tokens(["<extra>"])
    with pytest.raises(ValueError, match="do not share a tokenizer"):  # given both tokenizers, they are compared
        target.generate(**enc, target_tokenizer=tok, draft_tokenizer=grown, **kw)
    # a head exported for other weights: load_head's checks, as everywhere else
    import json
    import shutil

    moved = tmp_path / "other_weights"
    shutil.copytree(head_dir, moved)
    cfg = json.loads((moved / "config.json").read_text())
    cfg["model_fingerprints"] = {**cfg["model_fingerprints"], "draft": "0" * 16}
    (moved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HeadFormatError, match="other model weights"):
        target.generate(**enc, ensemble_head=str(moved), **kw)
    with pytest.raises(HeadFormatError, match="another tokenizer"):  # given the tokenizer, its hash is checked too
        bad = tmp_path / "other_tok"
        shutil.copytree(head_dir, bad)
        c = json.loads((bad / "config.json").read_text())
        (bad / "config.json").write_text(json.dumps({**c, "tokenizer_hash": "sha256:0000"}))
        target.generate(**enc, ensemble_head=str(bad), target_tokenizer=tok, **kw)


def test_speculative_generator_takes_loaded_models(hf, micro_trio, head_dir):
    tok, target, draft = hf
    by_path = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, head=head_dir, device="cpu")
    loaded = SpeculativeGenerator.from_pretrained(target, draft, tokenizer=tok, head=head_dir)
    assert loaded.models.target.model is target and loaded.models.draft.model is draft
    a = by_path.generate(PROMPTS, max_new_tokens=16, temperature=1.0, seed=3)
    b = loaded.generate(PROMPTS, max_new_tokens=16, temperature=1.0, seed=3)
    assert [c.token_ids for c in a] == [c.token_ids for c in b] and [c.text for c in a] == [c.text for c in b]
    with pytest.raises(ValueError, match="tokenizer"):
        SpeculativeGenerator.from_pretrained(target, draft)
    mixed = SpeculativeGenerator.from_pretrained(target, str(micro_trio / "draft"), tokenizer=tok)
    assert [c.token_ids for c in mixed.generate(PROMPTS[:1], max_new_tokens=8, temperature=0.0)] == \
        [c.token_ids for c in by_path.__class__.from_pretrained(models_dir=micro_trio, device="cpu").generate(
            PROMPTS[:1], max_new_tokens=8, temperature=0.0)]


def test_head_save_and_from_pretrained(tmp_path, micro_trio, head_dir):
    """EnsembleHead.save_pretrained / from_pretrained wrap export_head / load_head with their checks."""
    from heads import load_head

    head = EnsembleHead.from_pretrained(head_dir)
    ref, meta = load_head(head_dir)
    assert head.meta == meta and all(torch.equal(a, b) for a, b in zip(head.state_dict().values(),
                                                                      ref.state_dict().values()))
    again = head.save_pretrained(tmp_path / "again", meta={k: meta[k] for k in ("tokenizer_hash", "target")})
    assert EnsembleHead.from_pretrained(again).cfg == head.cfg
    models = Models({"dir": str(micro_trio), "device": "cpu"})
    EnsembleHead.from_pretrained(head_dir, tokenizer=models.tokenizer, fingerprints=models.fingerprints(),
                                 expect={"hidden_p": models.target.hidden_size})
    with pytest.raises(HeadFormatError, match="hidden_p"):
        EnsembleHead.from_pretrained(head_dir, expect={"hidden_p": 7})
    with pytest.raises(HeadFormatError, match="other model weights"):
        EnsembleHead.from_pretrained(head_dir, fingerprints={"target": "0" * 16})
    (again / "head.safetensors").write_bytes((again / "head.safetensors").read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(HeadFormatError, match="corrupt"):
        EnsembleHead.from_pretrained(again)
    cfg = (again / "config.json")
    import json

    c = json.loads(cfg.read_text())
    (again / "head.safetensors").unlink()
    head.save_pretrained(again, meta={})
    c = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**c, "verify_rule_version": c["verify_rule_version"] + 1}))
    with pytest.raises(HeadFormatError, match="verification-rule version"):
        EnsembleHead.from_pretrained(again)


def test_contrastive_and_ngram_methods_through_generate(hf, micro_trio):
    """Registry methods beyond the draft model: dcd_ngram needs no draft; cd needs the amateur (amateur_model=)."""
    tok, target, draft = hf
    amateur = AutoModelForCausalLM.from_pretrained(str(micro_trio / "amateur")).eval()
    enc = _inputs(tok)
    with pytest.raises(ValueError, match="amateur_model"):
        target.generate(**enc, custom_generate=specdec.hf.generate, method="cd", max_new_tokens=4)
    cd = target.generate(**enc, custom_generate=specdec.hf.generate, method="cd", amateur_model=amateur, alpha=0.3,
                         beta=0.1, max_new_tokens=12, do_sample=False)
    dcd = target.generate(**enc, custom_generate=specdec.hf.generate, method="dcd_ngram", amateur_model=amateur,
                          alpha=0.3, beta=0.1, max_new_tokens=12, do_sample=False)
    assert torch.equal(cd, dcd)  # greedy accelerated CD is greedy CD (lossless w.r.t. pi_CD)
    sg = SpeculativeGenerator.from_pretrained(models_dir=micro_trio, device="cpu", rule="cd", alpha=0.3, beta=0.1)
    assert [c.token_ids for c in sg.generate(PROMPTS, max_new_tokens=12, temperature=0.0)] == \
        _new_tokens(cd, enc, tok.eos_token_id, tok.pad_token_id)
