"""specdec.slim_draft: an int8 / reduced-vocabulary draft changes q only, and SD with it stays lossless."""

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec import LM, DraftModelProposer, generate
from specdec import slim_draft as slim_draft_module
from specdec.slim_draft import (
    KERNEL_ROWS,
    DynamicInt8Linear,
    Int8Linear,
    SubsetHead,
    frequent_ids,
    has_dynamic_kernel,
    has_int_mm,
    int8_mode,
    quantize_rows,
    slim_draft,
    token_counts,
)
from specdec.testing import exact_two_token_target, noisy_copy, random_llama
from tests.two_token import two_token_fit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_int8_linear_is_the_dequantized_linear_within_rounding(dtype):
    """The int8 matmul (aten's CPU kernel for float32/bf16, the dequantizing fallback for float64) computes
    x·(q·s)ᵀ + b, and that is x·Wᵀ + b up to the rounding bound Σ_k |x_k|·s_n/2 per output n."""
    g = torch.Generator().manual_seed(0)
    W, b = torch.randn(48, 64, generator=g), torch.randn(48, generator=g)
    x = torch.randn(3, 5, 64, generator=g)
    lin = Int8Linear(W.to(dtype), b.to(dtype))
    assert lin.fast == (dtype != torch.float64) and not Int8Linear(W[:, :40].to(dtype)).fast
    assert lin.qweight.dtype == torch.int8 and lin.qweight.abs().max() == 127
    y = lin(x.to(dtype)).double()
    deq = torch.nn.functional.linear(x.double(), lin.dequantized().double()) + b.double()
    exact = torch.nn.functional.linear(x.double(), W.double()) + b.double()
    tol = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 0.1}[dtype]  # bf16: its own 8-bit mantissa
    assert y.shape == (3, 5, 48) and (y - deq).abs().max() < tol * deq.abs().max()
    bound = x.double().abs().sum(-1, keepdim=True) * lin.scale.double() / 2
    assert ((exact - deq).abs() <= bound + 1e-6).all()
    assert (exact - deq).abs().max() > 0  # it is a real quantisation, not a copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dynamic_int8_linear_quantizes_each_token_on_its_own(dtype, monkeypatch):
    """int8="dynamic": a one-row input goes through fbgemm's int8 x int8 kernel and equals the same per-row uint8
    quantization written in float ops (the path of other devices); a row's output does not
    depend on the other rows of its call, even next to a row with a huge activation; and it is a real
    quantization of the input (it differs from the weight-only linear). Calls of more than KERNEL_ROWS rows
    (prefills) take torch's int8 matmul on the CPU (the same integer sums), and the float emulation where that is
    missing."""
    g = torch.Generator().manual_seed(1)
    W, b = torch.randn(48, 64, generator=g), torch.randn(48, generator=g)
    x = torch.randn(4, 64, generator=g)
    x[2, 5] = 500.0  # a "massive activation" on one token
    dyn, weight_only = DynamicInt8Linear(W.to(dtype), b.to(dtype)), Int8Linear(W.to(dtype), b.to(dtype))
    xd = x.to(dtype)
    emulated = torch.nn.functional.linear(quantize_rows(xd).double(), dyn.dequantized().double()) + b.to(dtype).double()
    with torch.profiler.profile() as prof:
        rows = torch.cat([dyn(xd[i:i + 1]) for i in range(4)]).double()
    if has_dynamic_kernel():  # x86 / fbgemm (this project's CPUs): one-row calls run the int8 x int8 kernel
        assert sum(e.name == "quantized::linear_dynamic" for e in prof.events()) == 4
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2}[dtype]
    scale = emulated.abs().amax(1, keepdim=True)
    assert ((rows - emulated).abs() <= tol * scale).all()  # the kernel, row by row
    assert KERNEL_ROWS < 12
    with torch.profiler.profile() as prof:  # one call of 12 rows: torch's int8 matmul
        together = dyn(xd.repeat(3, 1).view(2, 6, 64)).double().view(12, 48)[:4]
    if has_int_mm():
        assert any(e.name == "aten::_int_mm" for e in prof.events())
    assert ((together - emulated).abs() <= tol * scale).all()
    with monkeypatch.context() as m:  # a CPU without it: the float emulation
        m.setattr(slim_draft_module, "_INT_MM", False)
        emulated_path = dyn(xd.repeat(3, 1)).double()[:4]
    assert ((emulated_path - emulated).abs() <= tol * scale).all()
    assert ((together - rows).abs() <= 2 * tol * scale).all()  # row 2's outlier did not coarsen rows 0, 1, 3
    assert ((dyn(xd).double() - rows).abs() <= tol * scale).all()  # one call of 4 rows: a kernel call per row
    gap = (weight_only(xd).double() - rows).abs().amax(1) / scale[:, 0]
    assert (gap[[0, 1, 3]] > 1e-3).all()  # the activations were rounded, not passed through
    grid = quantize_rows(x)
    assert all(grid[i].unique().numel() <= 256 for i in range(4))  # one uint8 grid per row
    assert (grid - x).abs().amax(1).le((x.amax(1).clamp(min=0) - x.amin(1).clamp(max=0)) / 255).all()


@pytest.mark.skipif(not has_int_mm(), reason="torch's CPU int8 matmul is missing")
def test_the_int8_matmul_path_is_the_kernels_integer_arithmetic():
    """Many rows: Σ_k (u_k − z)·W_nk in exact integers, times the two scales, to float32 rounding (where the float
    emulation would round u − z to the input's dtype first)."""
    g = torch.Generator().manual_seed(2)
    W, x = torch.randn(40, 96, generator=g), torch.randn(9, 96, generator=g) * 3
    dyn = DynamicInt8Linear(W)
    u, sx, z = slim_draft_module.row_grid(x)
    exact = ((u - z).double() @ dyn.qweight.double().t()) * sx.double() * dyn.scale.double()
    assert ((dyn(x).double() - exact).abs() <= 1e-6 * exact.abs().amax()).all()


def test_a_dynamic_draft_prefill_computes_what_decoding_would():
    """One call over a prompt (the int8 matmul path) and the same prompt fed a token at a time (the kernel) give the
    same next-token distributions, to the rounding of the model's dtype."""
    torch.manual_seed(0)
    lm = LM(random_llama(vocab_size=96, hidden=64, layers=2, heads=4, seed=3, init_std=0.2), "draft")
    slim_draft(lm, int8="dynamic")
    prompt = torch.randint(0, 96, (1, 12), generator=torch.Generator().manual_seed(4))
    lm.reset(1)
    together = lm.feed(prompt)[0][0]
    lm.reset(1)
    one_by_one = torch.cat([lm.feed(prompt[:, i:i + 1])[0][0] for i in range(12)])
    assert 12 > KERNEL_ROWS
    tv = 0.5 * (together.exp() - one_by_one.exp()).abs().sum(-1)
    assert tv.max() < 1e-3, tv


def test_int8_modes_are_named_or_refused():
    assert [int8_mode(v) for v in (False, None, "false", True, "weight", "true", "dynamic", "Dynamic")] == [
        None, None, None, "weight", "weight", "weight", "dynamic", "dynamic"]
    with pytest.raises(ValueError, match="weight, or dynamic"):
        int8_mode("int4")


def test_frequent_ids_rank_by_count_then_id_and_keep_the_special_tokens():
    counts = torch.tensor([0, 5, 0, 9, 5, 0, 1, 0])
    assert frequent_ids(3, 8, counts).tolist() == [1, 3, 4]
    assert frequent_ids(4, 8, counts, always=[7]).tolist() == [1, 3, 4, 7]
    assert frequent_ids(5, 8, counts).tolist() == [0, 1, 3, 4, 6]  # 6 (one count), then the first uncounted id
    assert frequent_ids(3, 8).tolist() == [0, 1, 2]  # no counts: merge (id) order
    assert frequent_ids(8, 8, counts).tolist() == list(range(8))
    assert token_counts([[1, 3, 3], [3, 9]], 8).tolist() == [0, 1, 0, 3, 0, 0, 0, 0]  # ids past the vocabulary skipped
    with pytest.raises(ValueError, match="draft vocabulary"):
        frequent_ids(0, 8)
    with pytest.raises(ValueError, match="special tokens"):
        frequent_ids(1, 8, always=[2, 5])


def _tied_llama(vocab: int = 32, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True, initializer_range=0.5)
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def test_a_reduced_vocabulary_draft_is_q_renormalised_on_the_kept_ids():
    """vocab=k (no int8): the draft's next-token distribution is its full softmax restricted to the kept ids and
    renormalised, exactly zero elsewhere; hidden states and the input embedding (tied to the old head) unchanged."""
    full, slim = LM(_tied_llama()), LM(_tied_llama())
    counts = torch.arange(32).flip(0)  # id 0 most frequent: keeps 0..9, then 31 (a "special" token)
    done = slim_draft(slim, vocab=11, counts=counts, always=[31])
    assert done["vocab"] == 11 and done["bytes_after"] < done["bytes_before"]
    assert isinstance(slim.model.get_output_embeddings(), SubsetHead)
    kept = torch.tensor(list(range(10)) + [31])
    prompts = [[1, 2, 3, 4], [5, 6]]
    full.reset(2)
    slim.reset(2)
    lp_full, h_full = full.feed(*_padded(prompts))
    lp_slim, h_slim = slim.feed(*_padded(prompts))
    assert torch.equal(h_full, h_slim)
    out = torch.ones(32, dtype=torch.bool)
    out[kept] = False
    assert torch.isinf(lp_slim[..., out]).all() and (lp_slim[..., out] < 0).all()
    expect = torch.log_softmax(lp_full[..., kept], -1)
    assert torch.allclose(lp_slim[..., kept], expect, atol=1e-5)
    assert torch.allclose(lp_slim.exp().sum(-1), torch.ones(2, 4))


def _padded(prompts):
    from specdec.models import pad_left

    return pad_left(prompts)


@pytest.mark.parametrize("int8", ["weight", "dynamic"])
def test_sd_with_an_int8_reduced_vocabulary_draft_is_lossless(int8):
    """SD at T = 1 (γ = 3) with a draft cut to int8 (weights, or weights and activations) and 5 of 8 output ids vs
    the target's exact 2-token distribution: chi-square p > 1e-4 and TV < 0.03 with 30k samples over 64 outcomes
    (fixed seed). Tokens the draft can never propose still come out, through the residual, at their target rate."""
    target = random_llama(8, hidden=16, layers=1, heads=2, seed=3, dtype=torch.float32, init_std=0.5)
    draft = LM(noisy_copy(target, noise=0.2, seed=4))
    slim_draft(draft, vocab=5, int8=int8, counts=torch.tensor([9, 8, 7, 6, 5, 0, 0, 0]))
    assert any(isinstance(m, DynamicInt8Linear) for m in draft.model.modules()) == (int8 == "dynamic")
    N, prompt = 30_000, [1, 4, 2]
    out = generate(LM(target), DraftModelProposer(draft), [prompt] * N, gamma=3, max_new_tokens=2,
                   temperature=1.0, generator=torch.Generator().manual_seed(0))
    expected = exact_two_token_target(target, prompt)
    pvalue, tv = two_token_fit(out.tokens, expected, 8)
    assert pvalue > 1e-4 and tv < 0.03, (pvalue, tv)
    assert 0.05 < out.acceptance_rate < 0.98, out.acceptance_rate
    dropped = torch.tensor([t[0] >= 5 for t in out.tokens]).double().mean()
    assert abs(dropped - expected.view(8, 8)[5:].sum()) < 0.01  # ids 5..7: never drafted, emitted at p's rate


def test_the_model_config_slims_the_draft_only(micro_trio):
    """model.draft_int8 / model.draft_vocab cut the draft (target and amateur define ν and π_CD: untouched), and
    the draft's fingerprint names the cut, so a run or export made with the full draft does not pass for it."""
    from specdec.loading import Models

    plain = Models({"dir": str(micro_trio)})
    slim = Models({"dir": str(micro_trio), "draft_int8": True, "draft_vocab": 50})
    head = slim.draft.model.get_output_embeddings()
    assert isinstance(head, SubsetHead) and isinstance(head.head, Int8Linear) and head.ids.numel() == 50
    assert not any(isinstance(m, Int8Linear) for role in ("target", "amateur")
                   for m in slim.lm(role).model.modules())
    eos = slim.tokenizer.eos_token_id
    assert eos in head.ids.tolist()  # the special tokens are always kept
    fp, fp_plain = slim.fingerprints(), plain.fingerprints(("target", "draft", "amateur"))
    assert fp["draft"] == f"{fp_plain['draft']}+slim(int8=1,vocab=50)"
    assert fp["target"] == fp_plain["target"] and fp["amateur"] == fp_plain["amateur"]
    lp, _ = slim.draft.feed(torch.tensor([[eos, 5, 7]]))
    assert torch.isfinite(lp).sum(-1).eq(50).all() and torch.allclose(lp.exp().sum(-1), torch.ones(1, 3), atol=1e-4)
    dynamic = Models({"dir": str(micro_trio), "draft_int8": "dynamic"})
    assert isinstance(dynamic.draft.model.get_output_embeddings(), DynamicInt8Linear)
    vocab = dynamic.draft.vocab_size
    assert dynamic.fingerprints(("draft",))["draft"] == f"{fp_plain['draft']}+slim(int8=dynamic,vocab={vocab})"
    with pytest.raises(ValueError, match="int8 mode"):
        Models({"dir": str(micro_trio), "draft_int8": "int4"}).draft  # noqa: B018


def test_bench_times_methods_again_with_the_slim_draft(tmp_path):
    """bench/gpu.py --slim-methods: those methods decode with a slimmed draft copy, in their own rows, modelled with
    the slim draft's own probed step."""
    from bench.gpu import main as bench_main

    res = bench_main(["--device", "cpu", "--smoke", "--methods", "ar_target", "sd", "--slim-methods", "sd", "fsd",
                      "--draft-int8", "--draft-vocab", "40", "--out", str(tmp_path / "b.json")])
    assert res["slim_draft"]["int8"] and res["slim_draft"]["vocab"] == 40
    rows = {(r["method"], r["slim"], r["batch"]): r for r in res["rows"]}
    for b in (1, 4):
        costs = res["step_costs_s"][b]
        assert rows[("sd", True, b)]["c"] == pytest.approx(costs["c_slim"])
        assert rows[("sd", False, b)]["c"] == pytest.approx(costs["c"])
        assert rows[("fsd", True, b)]["vs_ar_target"] is not None and ("fsd", False, b) not in rows


def test_an_evaluation_with_a_slim_draft_records_it_and_resumes_only_with_it(micro_trio, tmp_path):
    """eval/run.py model.draft_int8=true model.draft_vocab=K: the run decodes with the slim draft, run.json records
    the draft's cut in its fingerprint, and resuming the directory with the full draft is refused."""
    import json

    from hydra import compose, initialize_config_dir

    from eval.run import evaluate

    conf = str(Path(__file__).resolve().parents[1] / "conf")

    def cfg(*extra):
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            return compose("eval", overrides=[f"model.dir={micro_trio}", "task=gsm8k", "method=sd",
                                              "eval.num_samples=2", "eval.batch_size=2", "eval.max_new_tokens=8",
                                              "eval.progress=false", *extra])

    out = tmp_path / "eval"
    evaluate(cfg("model.draft_int8=true", "model.draft_vocab=60"), out)
    run = json.loads((out / "run.json").read_text())
    assert run["model_fingerprints"]["draft"].endswith("+slim(int8=1,vocab=60)")
    with pytest.raises(Exception, match="draft"):
        evaluate(cfg("resume=true"), out)


def _mbpp_rows(n: int) -> list[dict]:
    return [{"task_id": i, "prompt": f"Write a function f{i} that adds {i} ({chr(65 + i)}).", "code": f"def f{i}(x):\n    return x + {i}",
             "test_imports": [], "test_list": [f"assert f{i}(1) == {1 + i}"], "source_file": "x"} for i in range(n)]


def test_a_vocabulary_file_counts_only_rows_outside_the_holdout_and_the_config_reads_it(micro_trio, tmp_path):
    """data/draft_vocab.py ranks ids by their counts in the task rows left after the holdout (never the held-out
    problems' text), keeps the special tokens, and model.draft_vocab=FILE cuts the draft to exactly those ids; a
    file that drops a special token or is not a vocabulary file is refused with a clear error."""
    import json

    from data.draft_vocab import main as vocab_main
    from data.loaders import load_examples
    from specdec.loading import Models
    from specdec.slim_draft import special_ids

    rows = _mbpp_rows(12)
    data = tmp_path / "mbpp.json"
    data.write_text(json.dumps(rows))
    out = tmp_path / "vocab.json"
    res = vocab_main(["--task", "mbpp", "--data-path", str(data), "--tokenizer", str(micro_trio / "tokenizer"),
                      "--holdout", "4:3", "--k", "60", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["k"] == 60 and len(saved["ids"]) == 60 and "minus holdout(n=4, seed=3)" in saved["source"]
    plain = Models({"dir": str(micro_trio)})
    tok = plain.tokenizer
    held = load_examples("mbpp", path=data, source="file", n=4, seed=3).rows
    kept_rows = [r for r in rows if r["task_id"] not in {h["task_id"] for h in held}]
    from data.tasks import get_task

    task = get_task("mbpp")
    seen = {t for r in kept_rows for t in tok(task.format_prompt(r, tok) + task.target_text(r))["input_ids"]}
    assert res["counted"] == len(seen)
    held_only = {t for r in held for t in tok(task.format_prompt(r, tok))["input_ids"]} - seen
    assert held_only  # each row names a letter of its own: the held-out rows' ids are not counted
    must = seen | set(special_ids(tok))
    assert len(must) <= 60 and must <= set(saved["ids"])
    assert sorted(set(saved["ids"]) - must) == sorted(set(range(101)) - must)[:60 - len(must)]  # then id order

    slim = Models({"dir": str(micro_trio), "draft_vocab": str(out)})
    assert slim.draft.model.get_output_embeddings().ids.tolist() == sorted(saved["ids"])
    assert "+slim(int8=0,vocab=60:" in slim.fingerprints(("draft",))["draft"]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ids": [i for i in saved["ids"] if i not in special_ids(tok)]}))
    with pytest.raises(ValueError, match="special tokens"):
        Models({"dir": str(micro_trio), "draft_vocab": str(bad)}).draft  # noqa: B018
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not a draft vocabulary file"):
        Models({"dir": str(micro_trio), "draft_vocab": str(bad)}).draft  # noqa: B018
