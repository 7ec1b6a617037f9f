"""A head that corrects a training-free rule (HeadConfig.base_rule): w = r + (1 − 2r)·σ(logit), r the rule's {0, 1}
decision. At a small flip probability it is the rule itself; its gradient is alive at every position."""

import json

import pytest
import torch

from heads import EnsembleHead, HeadConfig, export_head, load_head
from specdec.targets import PAIR_FEATURES, cascade_weight, pair_features, total_variation


def _inputs(n: int = 400, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(3 * torch.randn(n, 30, generator=g), -1)
    q = torch.softmax(3 * torch.randn(n, 30, generator=g), -1)
    return p, q, torch.randn(n, 6, generator=g), torch.randn(n, 10, generator=g), pair_features(p, q)


def _flip_head(rule: str = "cascade", knob: float = 0.1, flip: float = 0.02) -> EnsembleHead:
    return EnsembleHead(HeadConfig(hidden_q=6, hidden_p=10, num_features=len(PAIR_FEATURES), init_w=flip,
                                   base_rule=rule, base_knob=knob))


@pytest.mark.parametrize("rule,knob", [("cascade", 0.1), ("fsd_tv", 0.93)])
def test_at_initialisation_the_head_is_its_rule_up_to_the_flip_probability(rule, knob):
    p, q, hq, hp, f = _inputs()
    w = _flip_head(rule, knob, 0.02)(hq, hp, f)
    r = cascade_weight(p, q, knob) if rule == "cascade" else (total_variation(p, q) > knob).float()
    assert 0.2 < float(r.mean()) < 0.8  # both decisions occur, so the check can fail either way
    assert torch.allclose(w, r + (1 - 2 * r) * 0.02, atol=1e-6)


@pytest.mark.parametrize("knob,w0", [(1.0, 0.02), (-1.0, 0.98)])
def test_the_static_line_ends_are_cascades_that_never_change_their_decision(knob, w0):
    # eval/choose_start.py starts a head at w = 0 (the draft alone) as cascade t = 1 and at SD as t = −1
    *_, hq, hp, f = _inputs()
    assert torch.allclose(_flip_head("cascade", knob, 0.02)(hq, hp, f), torch.full((400,), w0), atol=1e-6)


def test_the_flip_gradient_is_alive_where_a_sharp_rule_start_is_flat():
    p, q, hq, hp, f = _inputs()
    flip = _flip_head()
    flip(hq, hp, f).sum().backward()
    sharp = EnsembleHead(HeadConfig(hidden_q=6, hidden_p=10, num_features=len(PAIR_FEATURES)))
    sharp.init_as_rule("cascade", 0.1, 1e4)  # the rule as a sigmoid: its gradient vanishes off the threshold
    sharp(hq, hp, f).sum().backward()
    r = cascade_weight(p, q, 0.1)
    # d w / d bias = (1 − 2r)·σ'(z) = ±0.02·0.98 per position
    assert flip.out.bias.grad.item() == pytest.approx(float(((1 - 2 * r) * 0.02 * 0.98).sum()), rel=1e-4)
    assert abs(flip.out.bias.grad.item()) > 1.0 and abs(sharp.out.bias.grad.item()) < 1e-3


def test_a_flip_head_round_trips_through_the_export_format(tmp_path):
    _, _, hq, hp, f = _inputs(seed=1)
    head = _flip_head("fsd_tv", 0.25)
    with torch.no_grad():
        head.out.weight.normal_(0, 0.1)
    path = export_head(head, tmp_path / "h", {"lambda": 0.1})
    back, cfg = load_head(path)
    assert back.cfg.base_rule == "fsd_tv" and back.cfg.base_knob == 0.25
    assert json.loads((path / "config.json").read_text())["arch"]["base_rule"] == "fsd_tv"
    assert torch.equal(back(hq, hp, f), head(hq, hp, f))


def test_bad_base_rules_are_refused():
    with pytest.raises(ValueError, match="base_rule must be"):
        HeadConfig(hidden_q=4, hidden_p=4, num_features=5, base_rule="typical")
    with pytest.raises(ValueError, match="reads the pair features"):
        HeadConfig(hidden_q=4, hidden_p=4, num_features=0, base_rule="cascade")
