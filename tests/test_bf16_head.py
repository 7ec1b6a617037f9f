"""Issue 38, defect 5: the head's w in bf16 must be the same at rollout time (bf16 hidden states from the models)
and at update time (the float32 copies the rollout records), so the importance ratio starts at 1. Before the fix
the two differed by ~1e-3 (a layer norm in bf16 against one in float32); what is left is the GEMM's summation order,
which depends on how many rows are multiplied together (~1e-7 in float32): the tolerance TOL sits between them."""

from __future__ import annotations

import torch

from heads import EnsembleHead
from heads.head import HeadConfig
from specdec.targets import PAIR_FEATURES

TOL = 1e-5


def _random_head(cfg: HeadConfig, seed: int = 0) -> EnsembleHead:
    """A head with non-zero weights (a fresh head's zero last layer outputs init_w whatever its inputs are)."""
    head = EnsembleHead(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return head.eval()


def test_head_gives_identical_w_for_bf16_hidden_states_and_their_float32_copies():
    g = torch.Generator().manual_seed(1)
    for arch in ("linear", "mlp"):
        cfg = HeadConfig(hidden_q=48, hidden_p=64, num_features=len(PAIR_FEATURES), arch=arch)
        head = _random_head(cfg)
        # scaled like real last-layer states (far from unit scale), so the layer norm's rounding matters
        h_q = (torch.randn(4, 5, 48, generator=g) * 7 + 3).to(torch.bfloat16)
        h_p = (torch.randn(4, 5, 64, generator=g) * 11 - 2).to(torch.bfloat16)
        feats = torch.rand(4, 5, len(PAIR_FEATURES), generator=g)
        with torch.no_grad():
            w_bf16 = head(h_q, h_p, feats)
            w_f32 = head(h_q.float(), h_p.float(), feats)
        assert w_bf16.dtype == w_f32.dtype == torch.float32
        assert torch.equal(w_bf16, w_f32), f"{arch}: max |dw| {(w_bf16 - w_f32).abs().max().item():.3g}"


def test_bf16_rollout_w_equals_the_update_paths_recomputed_w(micro_trio):
    """End to end on the micro trio in bf16: the w the head gave while decoding (recorded) equals the w the
    update path recomputes from the recorded features (Trainer.update's w_recompute_gap), up to TOL."""
    from omegaconf import OmegaConf

    from specdec.loading import Models
    from train.rollout import rollout

    models = Models({"dir": str(micro_trio), "dtype": "bfloat16"})
    assert models.target.model.dtype == torch.bfloat16
    tok = models.tokenizer
    prompts = [tok.encode(t) for t in ("Question: 3 + 4 =", "Tom has 5 apples and buys", "x")]
    for arch in ("linear", "mlp"):
        cfg = HeadConfig(hidden_q=models.draft.model.config.hidden_size, arch=arch, mlp_hidden=24,
                         hidden_p=models.target.model.config.hidden_size, num_features=len(PAIR_FEATURES))
        head = _random_head(cfg, seed=3)
        b = rollout(models, head, prompts, target_cfg=OmegaConf.create({"kind": "ensemble"}), gamma=3,
                    max_new_tokens=12, temperature=1.0, generator=torch.Generator().manual_seed(0))
        assert b.mask.sum() > 10
        with torch.no_grad():
            w_now = head(b.h_q, b.h_p, b.feats)  # as Trainer.update recomputes it (w_recompute_gap)
            w_mb = head(b.h_q[1:2], b.h_p[1:2], b.feats[1:2])  # one minibatch row, as the update's loss sees it
        w_spread = b.w[b.mask]
        assert w_spread.max() - w_spread.min() > 1e-3, "the head must vary with its inputs for the check to bite"
        gap = ((w_now - b.w).abs() * b.mask).max().item()
        assert gap <= TOL, f"{arch}: w recomputed from the recorded features differs from the rollout's by {gap:.3g}"
        assert (w_mb[b.mask[1:2]] - b.w[1:2][b.mask[1:2]]).abs().max() <= TOL


def test_head_w_of_a_row_does_not_depend_on_the_rows_beside_it():
    """Decoding runs the head on a few rows per round, the update on whole rollouts: w may change with the batch
    shape only by the GEMM's summation order."""
    g = torch.Generator().manual_seed(2)
    for arch in ("linear", "mlp"):
        cfg = HeadConfig(hidden_q=40, hidden_p=72, num_features=len(PAIR_FEATURES), arch=arch, mlp_hidden=50)
        head = _random_head(cfg, seed=4)
        h_q, h_p = torch.randn(37, 40, generator=g) * 5, torch.randn(37, 72, generator=g) * 9
        feats = torch.rand(37, len(PAIR_FEATURES), generator=g)
        with torch.no_grad():
            whole = head(h_q, h_p, feats)
            alone = torch.cat([head(h_q[i:i + 1], h_p[i:i + 1], feats[i:i + 1]) for i in range(37)])
            batched_3d = head(h_q[:36].view(4, 9, 40), h_p[:36].view(4, 9, 72), feats[:36].view(4, 9, -1))
        assert (whole - alone).abs().max() <= TOL, f"{arch}: max |dw| {(whole - alone).abs().max().item():.3g}"
        assert (whole[:36] - batched_3d.reshape(36)).abs().max() <= TOL
