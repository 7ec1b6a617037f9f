"""diagnostics/oracle_head.py: the token-class oracle rule and the critical-class mask."""

import importlib.util
from pathlib import Path

import pytest
import torch

from data.tokenizer import build_tokenizer
from specdec.targets import RoundScores

_spec = importlib.util.spec_from_file_location(
    "oracle_head", Path(__file__).resolve().parents[1] / "diagnostics" / "oracle_head.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)


def test_critical_mask_matches_decoded_tokens():
    tok = build_tokenizer()
    digits = oracle.critical_mask(tok, len(tok) + 3, "digits")
    assert int(digits.sum()) == 10 and not digits[-3:].any()  # ids past the tokenizer are never critical
    ops = oracle.critical_mask(tok, len(tok), "digits+ops")
    assert int(ops.sum()) == 10 + len("+-*/=$%")
    assert int(oracle.critical_mask(tok, len(tok), r"[ab]").sum()) == 2
    with pytest.raises(ValueError, match="no token"):
        oracle.critical_mask(tok, len(tok), "é")


def test_oracle_weight_is_one_where_p_or_q_puts_mass_on_the_class():
    V = 6
    crit = torch.tensor([True, True, False, False, False, False])
    p = torch.tensor([[[0.5, 0.0, 0.5, 0, 0, 0], [0.0, 0.0, 1.0, 0, 0, 0], [0.0, 0.0, 0.0, 1.0, 0, 0]]])
    q = torch.tensor([[[0.0, 0.0, 1.0, 0, 0, 0], [0.0, 0.1, 0.9, 0, 0, 0], [0.0, 0.01, 0.0, 0.0, 0.99, 0]]])
    scores = RoundScores(target_logprobs=p.clamp_min(1e-30).log(), temperature=1.0, q=q)
    nu, w = oracle.TokenClassOracleRule(crit, w0=0.25, threshold=0.05)(scores)
    assert torch.allclose(w, torch.tensor([[1.0, 1.0, 0.25]]))  # p on a digit; q on one; neither (0.01 < 0.05)
    assert torch.allclose(nu[0, 2], 0.25 * p[0, 2] + 0.75 * q[0, 2], atol=1e-6)
    assert torch.allclose(nu.sum(-1), torch.ones(1, 3)) and nu.shape == (1, 3, V)
    with pytest.raises(ValueError, match="needs q"):
        oracle.TokenClassOracleRule(crit, w0=0.5)(RoundScores(p.log(), 1.0, q=q[:, :2]))
    with pytest.raises(ValueError, match="w0"):
        oracle.TokenClassOracleRule(crit, w0=1.5)
