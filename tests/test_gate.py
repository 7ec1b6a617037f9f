"""train/gate.py: a bang-bang head from mined swap harms, exported as an ordinary linear EnsembleHead."""

import json
import sys

import pytest
import torch

from train.gate import fit_gate, gate_head

HQ, HP, NF = 6, 10, 5


def _mined(n_prompts: int, per: int, seed: int) -> dict[str, torch.Tensor]:
    """Mismatches whose harm follows one hidden direction of the target and the second pair feature, plus noise
    (SD 0.5); a prompt's mismatches share a random offset, so folds must split by prompt."""
    g = torch.Generator().manual_seed(seed)
    n = n_prompts * per
    d = {"h_q": torch.randn(n, HQ, generator=g).double(), "h_p": torch.randn(n, HP, generator=g).double(),
         "feats": torch.rand(n, NF, generator=g).double(),
         "groups": torch.arange(n_prompts).repeat_interleave(per)}
    offset = 0.3 * torch.randn(n_prompts, generator=g).double()[d["groups"]]
    hp = torch.nn.functional.layer_norm(d["h_p"], (HP,))
    d["y"] = 1.5 + hp[:, 0] + 2.0 * d["feats"][:, 1] + offset + 0.5 * torch.randn(n, generator=g).double()
    return d


def test_gate_relaxes_the_predicted_least_harmful_share_and_is_bang_bang():
    """Fit on 60 prompts x 6 mismatches, judged on 2,000 fresh ones (fixed seeds): w is 0 or 1 (within 0.01) at
    >= 90% of them, it relaxes (w < 0.5) the asked share within 0.1, and what it relaxes is less harmful than what it
    keeps by > 1 (the true gap between the lowest 30% and the rest of the signal is ~2)."""
    fit = fit_gate(_mined(60, 6, 0), 0.3)
    assert fit["oof_r2"] > 0.3 and fit["mean_harm_relaxed_oof"] < fit["mean_harm_kept_oof"]
    head = gate_head(fit["model"], fit["theta"], 50.0, HQ, HP, NF)
    new = _mined(400, 5, 1)
    with torch.no_grad():
        w = head(new["h_q"].float(), new["h_p"].float(), new["feats"].float()).double()
    assert float(((w < 0.01) | (w > 0.99)).double().mean()) >= 0.9
    relaxed = w < 0.5
    assert abs(float(relaxed.double().mean()) - 0.3) < 0.1
    assert float(new["y"][~relaxed].mean() - new["y"][relaxed].mean()) > 1.0


def test_quantile_ends_relax_nothing_or_everything_and_bad_quantiles_are_refused():
    d = _mined(30, 6, 2)
    for q, share in ((0.0, 0.0), (1.0, 1.0)):
        fit = fit_gate(d, q)
        head = gate_head(fit["model"], fit["theta"] + (0.5 if q == 1.0 else -0.5), 50.0, HQ, HP, NF)
        with torch.no_grad():
            w = head(d["h_q"].float(), d["h_p"].float(), d["feats"].float())
        assert abs(float((w < 0.5).double().mean()) - share) < 0.05
    with pytest.raises(ValueError, match="quantile"):
        fit_gate(d, 1.5)


def test_cli_exports_a_head_the_registry_verifies_against_the_typical_truncated_target(tmp_path, monkeypatch):
    """main(): reads mined.pt and the judge's identity, exports a head whose logits are the fit's, whose target is
    the typical-truncated one, and that load_head / head_rule read back; a run dir without its judge is refused."""
    from heads import load_head
    from specdec.registry import head_rule
    from train import gate

    d = _mined(40, 6, 3)
    run = tmp_path / "mining"
    (run / "head").mkdir(parents=True)
    torch.save({"h_q": d["h_q"].float(), "h_p": d["h_p"].float(), "feats": d["feats"].float(), "gap": d["y"].float(),
                "label": (d["y"] > 2).float(), "prompt": d["groups"],
                "signature": {"mine": {"label": "selfjudge"}}}, run / "mined.pt")
    ident = {"models": {"target": "t", "draft": "q"}, "model_fingerprints": {"target": "sha256:aa", "draft": "sha256:bb"},
             "tokenizer_hash": "sha256:cc", "task": "mbpp"}
    (run / "head" / "config.json").write_text(json.dumps(ident))
    out = tmp_path / "gate"
    monkeypatch.setattr(sys, "argv", ["gate.py", str(run), "--quantile", "0.4", "--typical-epsilon", "0.03",
                                      "--out", str(out)])
    gate.main()
    head, meta = load_head(out, expect={"hidden_q": HQ, "hidden_p": HP})
    assert meta["target"] == {"kind": "ensemble", "typical_epsilon": 0.03, "typical_end": "relaxed",
                              "relaxed_epsilon": 0.0}
    assert all(meta[k] == v for k, v in ident.items())
    assert meta["gate"]["label"] == "selfjudge" and meta["gate"]["max_logit_error"] < 1e-2
    assert head_rule(head, meta["target"]).typical_epsilon == 0.03
    report = json.loads((tmp_path / "gate.json").read_text())
    assert report["quantile"] == 0.4 and 0.2 < report["relaxed_in_sample"] < 0.7

    # the strict end with the hidden states alone: a head without pair features, typical acceptance at w = 1
    monkeypatch.setattr(sys, "argv", ["gate.py", str(run), "--quantile", "0.4", "--typical-epsilon", "0.3",
                                      "--typical-end", "strict", "--inputs", "hidden", "--out", str(tmp_path / "s")])
    gate.main()
    head, meta = load_head(tmp_path / "s", expect={"hidden_q": HQ, "hidden_p": HP})
    assert meta["arch"]["num_features"] == 0 and meta["gate"]["inputs"] == "hidden"
    assert head_rule(head, meta["target"]).typical_end == "strict"
    bad = ["gate.py", str(run), "--quantile", "0.4", "--typical-epsilon", "0.3", "--relaxed-epsilon", "0.03",
           "--out", str(tmp_path / "bad")]
    monkeypatch.setattr(sys, "argv", bad)  # a looser w = 0 end needs the strict end: refused, nothing exported
    with pytest.raises(ValueError, match="relaxed_epsilon"):
        gate.main()
    assert not (tmp_path / "bad").exists()

    (run / "head" / "config.json").unlink()
    with pytest.raises(SystemExit, match="head/config.json"):
        gate.main()
