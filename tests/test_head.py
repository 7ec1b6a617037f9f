"""The ensemble head: init, gradients (finite differences, float64), export/load validation."""

import json
import os
import stat

import pytest
import torch

from heads import EnsembleHead, HeadConfig, HeadFormatError, export_head, load_head, tokenizer_hash
from train.reinforce import expected_accept, log_nu


def _random_head(arch: str, dtype=torch.float64, seed: int = 0) -> EnsembleHead:
    torch.manual_seed(seed)
    head = EnsembleHead(HeadConfig(hidden_q=6, hidden_p=10, num_features=5, arch=arch, mlp_hidden=7)).to(dtype)
    with torch.no_grad():  # the init zeroes the last layer; randomise so every parameter has a gradient
        for p in head.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    return head


def _inputs(n=3, t=4, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    h_q = torch.randn(n, t, 6, generator=g, dtype=dtype)
    h_p = torch.randn(n, t, 10, generator=g, dtype=dtype)
    feats = torch.rand(n, t, 5, generator=g, dtype=dtype)
    p_tok = torch.rand(n, t, generator=g, dtype=dtype) * 0.9 + 0.05
    q_tok = torch.rand(n, t, generator=g, dtype=dtype) * 0.9 + 0.05
    tv = torch.rand(n, t, generator=g, dtype=dtype)
    adv = torch.randn(n, t, generator=g, dtype=dtype)
    return h_q, h_p, feats, p_tok, q_tok, tv, adv


@pytest.mark.parametrize("init_w", [1.0, 0.95, 0.3])
def test_init_gives_constant_w(init_w):
    head = EnsembleHead(HeadConfig(hidden_q=6, hidden_p=10, num_features=5, arch="mlp", init_w=init_w))
    h_q, h_p, feats, *_ = _inputs(dtype=torch.float32)
    w = head(h_q, h_p, feats)
    assert w.shape == (3, 4)
    assert torch.allclose(w, torch.full_like(w, min(init_w, 1 - 1e-4)), atol=1e-6)


@pytest.mark.parametrize("arch", ["linear", "mlp"])
def test_gradient_through_log_nu_and_lambda_term_matches_finite_differences(arch):
    """d/dθ [Σ_t A_t log ν_t(x_t) + λ Σ_t (1 − w_t tv_t)] from autograd equals central finite differences."""
    head = _random_head(arch)
    h_q, h_p, feats, p_tok, q_tok, tv, adv = _inputs()
    lam = 0.7
    params = list(head.parameters())

    def objective() -> torch.Tensor:
        w = head(h_q, h_p, feats)
        return (adv * log_nu(w, p_tok, q_tok)).sum() + lam * expected_accept(w, tv).sum()

    grads = torch.autograd.grad(objective(), params)
    eps = 1e-6
    with torch.no_grad():
        for p, g in zip(params, grads):
            flat, gflat = p.view(-1), g.reshape(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + eps
                up = objective().item()
                flat[i] = old - eps
                down = objective().item()
                flat[i] = old
                fd = (up - down) / (2 * eps)
                assert abs(fd - gflat[i].item()) <= 1e-6 * max(1.0, abs(fd)), (p.shape, i, fd, gflat[i].item())


def test_lambda_term_gradient_sign():
    """The λ term pushes w down exactly where TV(p, q) > 0: d/dw (1 − w tv) = −tv."""
    w = torch.full((2, 3), 0.5, dtype=torch.float64, requires_grad=True)
    tv = torch.tensor([[0.0, 0.2, 0.9], [0.5, 0.0, 1.0]], dtype=torch.float64)
    (g,) = torch.autograd.grad(expected_accept(w, tv).sum(), w)
    assert torch.equal(g, -tv)


def test_wrong_width_is_a_clear_error():
    head = _random_head("linear", dtype=torch.float32)
    h_q, h_p, feats, *_ = _inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="hidden widths"):
        head(h_p, h_q, feats)


class _Tok:
    def __init__(self, vocab):
        self.vocab = vocab
        self.eos_token = "<eos>"

    def get_vocab(self):
        return dict(self.vocab)


def test_export_load_roundtrip_and_validation(tmp_path):
    head = _random_head("mlp", dtype=torch.float32)
    tok_hash = tokenizer_hash(_Tok({"a": 0, "b": 1}))
    meta = {"models": {"target": "t", "draft": "d"}, "tokenizer_hash": tok_hash, "training": {"lambda": 0.1}}
    out = export_head(head, tmp_path / "head", meta)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "head.safetensors"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["format_version"] == 1 and cfg["hidden_q"] == 6 and cfg["hidden_p"] == 10
    assert cfg["git_revision"] and cfg["training"] == {"lambda": 0.1}

    loaded, _ = load_head(out, device="cpu", expect={"hidden_q": 6, "hidden_p": 10, "tokenizer_hash": tok_hash})
    h_q, h_p, feats, *_ = _inputs(dtype=torch.float32)
    assert torch.equal(loaded(h_q, h_p, feats), head(h_q, h_p, feats))

    # mismatches are refused, naming the field
    with pytest.raises(HeadFormatError, match="hidden_p is 10 in the export but 12"):
        load_head(out, expect={"hidden_p": 12})
    other = tokenizer_hash(_Tok({"a": 0, "c": 1}))
    assert other != tok_hash
    with pytest.raises(HeadFormatError, match="tokenizer_hash"):
        load_head(out, expect={"tokenizer_hash": other})

    # re-export over an existing export replaces it
    export_head(_random_head("linear", dtype=torch.float32, seed=3), out, meta)
    assert load_head(out)[1]["arch"]["arch"] == "linear"
    # an export killed between its two renames left <out>.old behind (and maybe no <out>): later exports still work
    stale = out.with_name(out.name + ".old")
    stale.mkdir()
    (stale / "head.safetensors").write_bytes(b"left over")
    for seed in (4, 5):
        export_head(_random_head("mlp", dtype=torch.float32, seed=seed), out, meta)
        assert load_head(out)[1]["arch"]["arch"] == "mlp" and not stale.exists()
    # the export directory gets the mode any directory the user makes gets (not mkdtemp's 0700)
    umask = os.umask(0o022)
    try:
        export_head(_random_head("mlp", dtype=torch.float32, seed=6), out, meta)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755


def test_corrupt_exports_give_clear_errors(tmp_path):
    head = _random_head("linear", dtype=torch.float32)
    out = export_head(head, tmp_path / "head", {})
    w = out / "head.safetensors"
    data = bytearray(w.read_bytes())
    data[-3] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(HeadFormatError, match="corrupt"):
        load_head(out)

    out2 = export_head(head, tmp_path / "head2", {})
    (out2 / "config.json").write_text("{not json")
    with pytest.raises(HeadFormatError, match="not valid JSON"):
        load_head(out2)
    (out2 / "config.json").write_text("[]")  # valid JSON, not an object
    with pytest.raises(HeadFormatError, match="not a .* config"):
        load_head(out2)

    with pytest.raises(HeadFormatError, match="no exported head"):
        load_head(tmp_path / "missing")


def _one_adam_step_logit_move(scale: str, lr: float) -> float:
    """The largest change of the logit after one AdamW step (w pushed up everywhere) at the real pair's widths."""
    torch.manual_seed(0)
    head = EnsembleHead(HeadConfig(hidden_q=896, hidden_p=1536, num_features=5, hidden_scale=scale))
    # an LM's last hidden states share a large common direction across positions (so Adam's sign step is coherent
    # with every position's input); random per-position parts on top
    h_q, h_p = (3.0 * (torch.randn(d) + 0.5 * torch.randn(4, 8, d)) for d in (896, 1536))
    feats = torch.rand(4, 8, 5)
    before = head.logits(h_q, h_p, feats).detach()
    opt = torch.optim.AdamW(head.parameters(), lr=lr)
    (-torch.log(head(h_q, h_p, feats)).mean()).backward()
    opt.step()
    return float((head.logits(h_q, h_p, feats).detach() - before).abs().max())


def test_fan_in_scale_keeps_one_adam_step_from_saturating_a_real_width_head():
    """At unit scale one step moves the logit by ~lr·Σ|x| (~0.8·lr·2,432 here: w saturates at lr 0.03); fan_in
    divides each block by its width, so the step is ~lr per block plus the features' ~lr·Σf."""
    unit, fan_in = _one_adam_step_logit_move("unit", 0.03), _one_adam_step_logit_move("fan_in", 0.03)
    assert unit > 30.0, unit
    assert fan_in < 0.03 * (0.8 * 2 + 5 + 1) + 0.05, fan_in  # 2 blocks, 5 features in [0, 1], the bias


def test_fan_in_scale_is_the_unit_head_with_weights_divided_by_the_widths(tmp_path):
    unit = _random_head("linear")
    cfg = HeadConfig(**{**unit.cfg.to_dict(), "hidden_scale": "fan_in"})
    fan_in = EnsembleHead(cfg).to(torch.float64)
    with torch.no_grad():
        fan_in.load_state_dict(unit.state_dict())
        fan_in.out.weight[:, :6] *= 6
        fan_in.out.weight[:, 6:16] *= 10
    h_q, h_p, feats, *_ = _inputs()
    assert torch.allclose(fan_in(h_q, h_p, feats), unit(h_q, h_p, feats), atol=1e-12)
    export_head(fan_in.float(), tmp_path / "h", {})
    loaded, _ = load_head(tmp_path / "h")
    assert loaded.cfg.hidden_scale == "fan_in"
    legacy = {k: v for k, v in unit.cfg.to_dict().items() if k != "hidden_scale"}  # exports from before the field
    assert HeadConfig.from_dict(legacy).hidden_scale == "unit"
    with pytest.raises(ValueError, match="hidden_scale must be 'unit' or 'fan_in'"):
        HeadConfig(hidden_q=6, hidden_p=10, hidden_scale="sqrt")


def test_the_head_config_group_sets_hidden_scale():
    from omegaconf import OmegaConf

    from train.trainer import head_config

    group = OmegaConf.load(os.path.join(os.path.dirname(__file__), "..", "conf", "head", "linear.yaml"))
    assert head_config(group, 6, 10).hidden_scale == "unit"  # the default: the trio's published heads unchanged
    group.hidden_scale = "fan_in"
    assert head_config(group, 6, 10).hidden_scale == "fan_in"
