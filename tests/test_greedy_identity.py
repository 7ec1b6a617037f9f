"""Issue 38, defect 6: greedy-identity checks in the benches report a flip at a near tie (summation order, bf16)
separately from a real mismatch; bench.greedy_identity is the one classifier they all use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from bench.greedy_identity import (
    classify_divergence,
    compare_greedy,
    first_divergence,
    near_tie_tolerance,
    next_token_logprobs,
)

ROOT = Path(__file__).resolve().parents[1]


def _logprobs(logits: list[float]) -> torch.Tensor:
    return torch.log_softmax(torch.tensor(logits), -1)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 7]) == 2
    assert first_divergence([], []) is None


def test_tolerance_follows_the_dtype():
    assert near_tie_tolerance(torch.bfloat16) == near_tie_tolerance("bfloat16") == 1e-2
    assert near_tie_tolerance("float32") == 1e-4
    with pytest.raises(ValueError, match="no near-tie tolerance"):
        near_tie_tolerance(torch.int64)


def test_a_flip_between_the_top_two_at_a_near_tie_is_classified_as_such():
    lp = _logprobs([5.0, 5.004, 1.0, -2.0])  # tokens 0 and 1 within 4e-3 nats
    kind, margin = classify_divergence(lp, 1, 0, near_tie_tolerance("bfloat16"))
    assert kind == "near_tie" and margin == pytest.approx(0.004, abs=1e-5)
    # the same flip is a real mismatch at float32's tolerance
    assert classify_divergence(lp, 1, 0, near_tie_tolerance("float32"))[0] == "mismatch"


def test_a_real_mismatch_is_not_excused():
    lp = _logprobs([5.0, 3.0, 4.999, -2.0])
    # the runs chose tokens 0 and 1: 2 nats apart, though token 2 ties with the top
    kind, margin = classify_divergence(lp, 0, 1, near_tie_tolerance("bfloat16"))
    assert kind == "mismatch" and margin == pytest.approx(2.0, abs=1e-5)
    # both far from the top (a wrong token in both runs' argmax sense) and -inf scores: mismatches
    assert classify_divergence(lp, 3, 1, 1e-2)[0] == "mismatch"
    cd = torch.tensor([0.0, float("-inf"), -0.001])
    assert classify_divergence(cd, 0, 1, 1e-2) == ("mismatch", float("inf"))
    assert classify_divergence(torch.tensor([float("nan"), 0.0]), 0, 1, 1e-2)[0] == "mismatch"


def test_one_run_ending_early_is_judged_on_the_top_two_margin():
    tied = _logprobs([3.0, 3.001, 0.0])  # token 1 = eos, say: one run stopped, the other emitted token 0
    assert classify_divergence(tied, 0, None, 1e-2)[0] == "near_tie"
    assert classify_divergence(_logprobs([3.0, 1.0, 0.0]), 0, None, 1e-2)[0] == "mismatch"
    # the run that went on chose a token far from the top: not excused by a tie elsewhere
    assert classify_divergence(_logprobs([3.0, 3.001, 0.0]), 2, None, 1e-2)[0] == "mismatch"


def test_compare_greedy_sorts_rows_and_asks_for_scores_only_at_divergences():
    ref = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1]]
    other = [[1, 2, 3], [4, 0, 2], [7, 8, 2], [1, 1]]
    asked = []

    def scores_at(row: int, prefix: list[int]) -> torch.Tensor:
        asked.append((row, prefix))
        if row == 1:  # ref's 5 and other's 0 nearly tied
            return _logprobs([4.0, 0, 0, 0, 0, 4.003, 0, 0, 0, 0])
        return _logprobs([0, 0, 1.0, 0, 0, 0, 0, 0, 0, 3.0])  # ref's 9 over other's 2 by 2 nats

    res = compare_greedy(ref, other, scores_at, tol=1e-2)
    assert asked == [(1, [4]), (2, [7, 8])]
    assert res.identical == [0, 3]
    assert [(d["row"], d["position"]) for d in res.near_ties] == [(1, 1)]
    assert [(d["row"], d["position"]) for d in res.mismatches] == [(2, 2)]
    assert not res.ok and "2/4 identical, 1 flipped at a near tie" in res.summary()
    total = type(res)(tol=1e-2)
    total.merge(res, method="sd")
    assert total.mismatches[0]["method"] == "sd" and total.to_dict()["ok"] is False
    with pytest.raises(ValueError, match="rows"):
        compare_greedy(ref, other[:2], scores_at, tol=1e-2)


def test_next_token_logprobs_of_a_model():
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(6, 6)

        def forward(self, input_ids):
            return type("Out", (), {"logits": self.emb(input_ids)})

    m = Tiny()
    lp = next_token_logprobs(m, [1, 3], vocab_size=5)
    assert lp.shape == (5,) and torch.allclose(lp, torch.log_softmax(m.emb.weight[3, :5].detach(), -1))


def test_every_greedy_identity_check_uses_the_one_classifier():
    """The benches' greedy comparisons go through bench.greedy_identity.compare_greedy, with no copy of their own."""
    checks = [ROOT / "bench" / "feature_drafter.py", ROOT / "bench" / "contrastive_speed.py",
              ROOT / "docs" / "results" / "real" / "greedy_check.py"]
    for path in checks:
        tree = ast.parse(path.read_text())
        imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "bench.greedy_identity" in imports, f"{path.name} compares greedy outputs without bench.greedy_identity"
        calls = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)
                 for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert calls & {"compare_greedy", "greedy_comparison"}, path.name  # (Trio.greedy_comparison wraps it)
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not defs & {"classify_divergence", "first_divergence", "compare_greedy"}, path.name


def test_bench_scores_are_what_greedy_decoding_took_and_a_forced_flip_is_classified(micro_trio):
    """Trio.greedy_scores (used by contrastive_speed and feature_drafter) at each prefix of a greedy run has that
    run's next token as its argmax, for target-only greedy and for vanilla CD; a run forced onto the second-best
    token is a real mismatch at the dtype's tolerance and a near tie at a tolerance above its margin."""
    from bench.contrastive_speed import Trio

    trio = Trio(micro_trio, "cpu", "float32")
    prompt = trio.tok.encode("Question: Tom has 3 apples and buys 4 more. How many?")
    for method, alpha in (("cd", None), ("cd", 0.5)):  # CD at α = 0 (alpha None) is the target's own greedy
        out = trio.run(method, [prompt], alpha=alpha or 0.0, beta=0.1, gamma=0, temperature=0.0,
                       max_new_tokens=8, seed=0).tokens[0]
        for d in range(len(out)):
            assert int(trio.greedy_scores(prompt, out[:d], alpha, 0.1).argmax()) == out[d], (alpha, d)
        d = 2
        s = trio.greedy_scores(prompt, out[:d], alpha, 0.1)
        second = int(torch.topk(s, 2).indices[1])
        forced = [out[:d] + [second]]
        margin = float(s.max() - s[second])
        res = trio.greedy_comparison([out], forced, [prompt], alpha, 0.1)
        assert [(m["row"], m["position"]) for m in res.mismatches] == [(0, d)] and margin > trio.greedy_tol(alpha)
        assert res.mismatches[0]["margin"] == pytest.approx(margin, abs=1e-5)
        loose = compare_greedy([out], forced, lambda i, pre, a=alpha: trio.greedy_scores(prompt, pre, a, 0.1),
                               tol=margin * 1.01)
        assert [(m["row"], m["position"]) for m in loose.near_ties] == [(0, d)] and loose.ok
