"""REINFORCE++ math against direct (loop / numpy) computations on hand-built batches."""

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from train.reinforce import (
    clipped_pg_loss,
    compute_advantages,
    group_baseline,
    is_flat,
    log_nu,
    masked_global_mean_std,
    policy_loss,
    token_returns,
)

# 3 trajectories of lengths 3, 1, 4 (left-aligned, padded to T=4)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
R = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)


def test_returns_and_global_normalisation_match_direct_computation():
    g = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    logp_ref = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    lam_tok = torch.rand(3, 4, generator=g, dtype=torch.float64)
    kl_coef = 0.3
    adv, scale = compute_advantages(
        algo="reinforce_pp", task_reward=R, mask=MASK, group=None, logp_old=logp_old, logp_ref=logp_ref,
        kl_coef=kl_coef, lam_per_token=lam_tok,
    )
    # direct: r_t = -kl_coef*(logp_old - logp_ref) + lam_t, plus R at the last token; G_t = sum_{s>=t} r_s
    m = MASK.numpy()
    kl = (logp_old - logp_ref).numpy()
    G = np.zeros((3, 4))
    for i in range(3):
        n = m[i].sum()
        r = [-kl_coef * kl[i, t] + lam_tok[i, t].item() for t in range(n)]
        r[-1] += R[i].item()
        for t in range(n):
            G[i, t] = sum(r[t:])
    vals = G[m]
    want = np.where(m, (G - vals.mean()) / (vals.std() + 1e-8), 0.0)
    np.testing.assert_allclose(adv.numpy(), want, rtol=1e-10, atol=1e-12)
    assert scale == pytest.approx(vals.std(), rel=1e-6)
    assert abs(adv[MASK].mean().item()) < 1e-12 and abs(adv[MASK].std(unbiased=False).item() - 1) < 1e-6


def test_constant_returns_give_zero_advantages_at_scale_one():
    """Every rollout scoring the same at step 0 (KL to the initial head exactly 0): no task signal, and the scale
    that policy_loss divides λ by stays 1 instead of 1e-8."""
    zeros = torch.zeros(3, 4, dtype=torch.float64)
    adv, scale = compute_advantages(algo="reinforce_pp", task_reward=torch.zeros(3, dtype=torch.float64), mask=MASK,
                                    group=None, logp_old=zeros, logp_ref=zeros, kl_coef=0.1, lam_per_token=None)
    assert scale == 1.0 and torch.equal(adv, zeros)


def _kl_only_batch(task_reward, group=None, flat_reward="normalise"):
    g = torch.Generator().manual_seed(3)
    logp_old = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    logp_ref = logp_old - 0.05 * torch.rand(3, 4, generator=g, dtype=torch.float64)  # a small KL, as after a step
    return compute_advantages(algo="reinforce_pp", task_reward=task_reward, mask=MASK, group=group,
                              logp_old=logp_old, logp_ref=logp_ref, kl_coef=0.01, lam_per_token=None,
                              group_baseline_on=group is not None, flat_reward=flat_reward)


def test_flat_task_reward_normalises_by_the_kl_alone_by_default_and_unit_scale_keeps_scale_one():
    """All task rewards equal: the returns vary only by the KL penalty. The default divides by that tiny std (so
    policy_loss's lam / scale is inflated); unit_scale returns G - mean at scale 1."""
    flat = torch.full((3,), 1.0, dtype=torch.float64)
    adv_n, scale_n = _kl_only_batch(flat)
    assert scale_n < 1e-2 and abs(adv_n[MASK].std(unbiased=False).item() - 1) < 1e-3  # EPS 1e-8 vs std ~3e-4
    adv_u, scale_u = _kl_only_batch(flat, flat_reward="unit_scale")
    assert scale_u == 1.0
    # unit_scale is the default's advantages times its scale: the same direction, unnormalised
    torch.testing.assert_close(adv_u, adv_n * scale_n, rtol=1e-6, atol=1e-12)
    assert adv_u[MASK].abs().max().item() < 1e-2


def test_unit_scale_changes_nothing_when_task_rewards_vary():
    adv_n, scale_n = _kl_only_batch(R)
    adv_u, scale_u = _kl_only_batch(R, flat_reward="unit_scale")
    assert scale_u == scale_n and torch.equal(adv_u, adv_n)


def test_flat_after_the_group_baseline_counts_as_flat():
    """Each prompt's samples agree (one group all solved, one all failed): no within-prompt signal."""
    _, scale = _kl_only_batch(torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64),
                              group=torch.tensor([0, 0, 1]), flat_reward="unit_scale")
    assert scale == 1.0
    _, scale = _kl_only_batch(torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64),
                              group=torch.tensor([0, 0, 1]), flat_reward="unit_scale")
    assert scale != 1.0


def test_unknown_flat_reward_is_an_error():
    with pytest.raises(ValueError, match="flat_reward"):
        _kl_only_batch(R, flat_reward="skip")


def test_plain_reinforce_uses_moving_baseline_without_normalisation():
    adv, scale = compute_advantages(
        algo="reinforce", task_reward=R, mask=MASK, group=None, logp_old=torch.zeros(3, 4, dtype=torch.float64),
        logp_ref=torch.zeros(3, 4, dtype=torch.float64), kl_coef=0.0, lam_per_token=None, moving_baseline=0.25,
    )
    want = (R[:, None] - 0.25) * MASK
    assert torch.allclose(adv, want.to(adv.dtype)) and scale == 1.0


def test_group_baseline():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0], dtype=torch.float64)
    grp = torch.tensor([0, 0, 1, 1, 7])
    assert torch.allclose(group_baseline(r, grp), torch.tensor([0.5, -0.5, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_token_returns_with_discount():
    r = torch.tensor([[1.0, 2.0, 3.0, 0.0]], dtype=torch.float64)
    m = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    g = token_returns(r, m, gamma=0.5)
    assert torch.allclose(g, torch.tensor([[1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0, 0.0]], dtype=torch.float64))


def test_clipped_update_matches_direct_computation():
    """One clipped-ratio loss + gradient on a hand-built batch: clipped tokens carry no gradient."""
    eps = 0.2
    ratios = torch.tensor([[1.5, 0.5, 1.1, 1.0], [0.7, 1.0, 1.0, 1.0], [1.3, 0.9, 0.6, 1.25]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.0], [1.0, 0.0, 0.0, 0.0], [-1.0, 1.0, -0.5, 0.3]], dtype=torch.float64)
    logp_old = torch.full((3, 4), -1.0, dtype=torch.float64)
    logp = (logp_old + ratios.log()).requires_grad_(True)
    loss, clip_frac = clipped_pg_loss(logp, logp_old, adv, MASK, eps)
    (grad,) = torch.autograd.grad(loss, logp)

    n = MASK.sum().item()
    want_loss, want_grad, clipped = 0.0, torch.zeros(3, 4, dtype=torch.float64), 0
    for i in range(3):
        for t in range(4):
            if not MASK[i, t]:
                continue
            rho, a = ratios[i, t].item(), adv[i, t].item()
            unclipped, clip = rho * a, min(max(rho, 1 - eps), 1 + eps) * a
            want_loss -= min(unclipped, clip) / n
            is_clipped = clip < unclipped
            clipped += is_clipped
            if not is_clipped:  # d(-rho*a)/dlogp = -rho*a
                want_grad[i, t] = -rho * a / n
    assert abs(loss.item() - want_loss) < 1e-12
    assert abs(clip_frac.item() - clipped / n) < 1e-12
    # clipped: (0,0) 1.5 > 1+eps with A>0; (0,1) 0.5 < 1-eps with A<0; (2,2) 0.6 with A<0; (2,3) 1.25 with A>0
    assert clipped == 4
    assert torch.allclose(grad, want_grad)


def test_policy_loss_differentiable_lambda_term():
    """policy_loss = pg - λ·mean(1 - w tv) in differentiable mode; 'reward' mode leaves λ out of the loss."""
    w = torch.tensor([[0.5, 0.9, 0.2, 0.7]] * 3, dtype=torch.float64, requires_grad=True)
    p = torch.full((3, 4), 0.4, dtype=torch.float64)
    q = torch.full((3, 4), 0.1, dtype=torch.float64)
    tv = torch.full((3, 4), 0.6, dtype=torch.float64)
    adv = torch.ones(3, 4, dtype=torch.float64)
    old = log_nu(w.detach(), p, q)
    a = policy_loss(w, p, q, tv, old, adv, MASK, lam=0.5, lambda_mode="differentiable", clip_eps=0.2)
    b = policy_loss(w, p, q, tv, old, adv, MASK, lam=0.5, lambda_mode="reward", clip_eps=0.2)
    acc = ((1 - w * tv) * MASK).sum() / MASK.sum()
    assert torch.allclose(a.loss, b.loss - 0.5 * acc)
    assert a.approx_kl.abs().item() < 1e-15 and a.clip_frac.item() == 0.0
    # differentiable: the λ term's gradient reaches w, d(a - b)/dw = λ·tv/n on masked tokens ('reward' mode: none)
    (ga,) = torch.autograd.grad(a.loss, w)
    (gb,) = torch.autograd.grad(b.loss, w)
    assert torch.allclose(ga - gb, 0.5 * tv * MASK / MASK.sum()) and (ga - gb)[MASK].abs().min() > 0


def test_lambda_is_per_token_a_mean_over_each_trajectory():
    """With lam_weight = 1/T_i the lambda term is sum_i mean_t(1 - w tv) / n_tokens (trainer.per_token_weight):
    a row twice as long carries the same lambda weight in total."""
    from train.trainer import per_token_weight

    w = torch.rand(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    p = torch.full((3, 4), 0.4, dtype=torch.float64)
    q = torch.full((3, 4), 0.1, dtype=torch.float64)
    tv = torch.full((3, 4), 0.6, dtype=torch.float64)
    zero = torch.zeros(3, 4, dtype=torch.float64)
    weight = per_token_weight(MASK).to(torch.float64)
    lengths = MASK.sum(1, keepdim=True).to(torch.float64)
    assert torch.allclose((weight * MASK).sum(1), torch.ones(3, dtype=torch.float64))
    out = policy_loss(w, p, q, tv, log_nu(w.detach(), p, q), zero, MASK, lam=1.0, lambda_mode="differentiable",
                      clip_eps=0.2, lam_weight=weight)
    want = -(((1 - w * tv) * MASK / lengths).sum()) / MASK.sum()
    assert torch.allclose(out.loss, want)


def _worker(rank, port, xs, ms, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mean, std = masked_global_mean_std(xs[rank], ms[rank])
    out[rank] = torch.stack([mean, std])
    # rank 0's rewards are flat on their own; the global batch is flat only when rank 1's agree with them
    out[f"flat{rank}"] = (is_flat(torch.ones(2, dtype=torch.float64)),
                          is_flat(torch.tensor([1.0, 1.0] if rank == 0 else [1.0, 0.0, 1.0], dtype=torch.float64)))
    dist.destroy_process_group()


def test_global_normalisation_spans_ranks():
    """Two gloo ranks: the mean/std used for normalisation is over the union of both ranks' valid tokens, and
    is_flat (algo.flat_reward) looks at both ranks' rewards."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, 5, generator=g, dtype=torch.float64), torch.randn(3, 5, generator=g, dtype=torch.float64)]
    ms = [torch.rand(2, 5, generator=g) > 0.3, torch.rand(3, 5, generator=g) > 0.3]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(_worker, args=(port, xs, ms, out), nprocs=2, join=True)
    allv = torch.cat([xs[0][ms[0]], xs[1][ms[1]]])
    want = torch.stack([allv.mean(), allv.std(unbiased=False)])
    for r in range(2):
        assert torch.allclose(out[r], want, atol=1e-12)
        assert out[f"flat{r}"] == (True, False)  # the same answer on every rank, from the global batch


@pytest.mark.parametrize("bad", ["ppo", ""])
def test_unknown_algo(bad):
    with pytest.raises(ValueError, match="unknown algo"):
        compute_advantages(algo=bad, task_reward=R, mask=MASK, group=None, logp_old=torch.zeros(3, 4),
                           logp_ref=torch.zeros(3, 4), kl_coef=0.0, lam_per_token=None)


def test_collectives_run_on_the_device_the_backend_reduces(monkeypatch):
    """NCCL (multi-GPU training) has no CPU all_reduce, and step metrics and fork returns are CPU tensors: they go
    through the current CUDA device there, and stay where they are under gloo."""
    import torch.distributed as dist

    from train import reinforce

    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    monkeypatch.setattr(dist, "get_backend", lambda *a: "gloo")
    assert reinforce.comm_device(x) == torch.device("cpu")
    monkeypatch.setattr(dist, "get_backend", lambda *a: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert reinforce.comm_device(x) == torch.device("cuda", 3)
    assert reinforce.comm_device(torch.empty(2, device="meta")) == torch.device("meta")  # already on a device

    seen = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(reinforce, "comm_device", lambda t: torch.device("cpu"))

    def two_ranks(t, op=None):  # both ranks hold the same values
        seen.append(t.device)
        t.mul_(2)

    monkeypatch.setattr(dist, "all_reduce", two_ranks)
    y = reinforce.all_reduce(x)
    assert y.tolist() == [2.0, 4.0] and x.tolist() == [1.0, 2.0] and seen == [torch.device("cpu")]
