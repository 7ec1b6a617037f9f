"""REINFORCE++ (as in OpenRLHF) for the ensemble head, plus plain REINFORCE with a moving baseline.

The policy is the verification target itself: the emitted tokens of relaxed speculative decoding are exactly
nu-distributed, nu_t = w_t * p_t + (1 - w_t) * q_t, so a trajectory's log-probability is
    sum_t log nu_t(x_t) = sum_t log(w_t * p_t(x_t) + (1 - w_t) * q_t(x_t)),
recomputed with gradient from the stored hidden states (w_t = head(h^q_t, h^p_t, feats_t)); p_t(x_t) and
q_t(x_t) are constants (frozen models).

Objective: maximise E[R(x_1:T) + lambda * (1/T) sum_t (1 - TV(q_t, nu_t))], and 1 - TV(q_t, nu_t) =
1 - w_t * TV(q_t, p_t) is the expected acceptance at t. lambda is *per token*: the acceptance term is the mean over
the trajectory, so lambda means the same for short and long outputs (lambda = 0.1: ten points of mean acceptance
are worth one point of task reward). The per-token derivative of the objective is Delta_t - (lambda/T) TV_t (see
train/forks.py). The lambda term enters in one of two legitimate ways (algo.lambda_mode):
- "differentiable" (default): its exact pathwise gradient lambda * d/dtheta mean_t (1 - w_t * tv_t) on the sampled
  trajectories, added to the loss. Low variance and exact given the visited contexts; it ignores how w changes
  which contexts are visited (that part is left to the task reward's score-function term).
- "reward": lambda * (1 - w_t * tv_t) / T is added as a per-token reward before the returns, so it goes through the
  same score-function estimator (and advantage normalisation) as the task reward. Unbiased for the full
  objective, but noisier.

REINFORCE++: per-token rewards r_t = -kl_coef * KL_t (to the initial head) [+ lambda term] and the task reward
at the last token; token-level returns G_t = sum_{s>=t} r_s; advantages = G normalised over every valid token of
the global batch (all ranks); a PPO-style clipped ratio over several updates per rollout batch; no critic.
The group-baseline variant subtracts the mean task reward of the samples of the same prompt first.

Where the per-token advantages come from (algo.advantage): "returns" (the above: one terminal reward shared by every
token of a trajectory) or "forks" (train/forks.py: Delta_t from two continuations after the coupled residual
tokens, trained with branch_clipped_loss, the same clipped ratio over the mixture's latent p/q branch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

EPS = 1e-8
FLAT_REWARD_MODES = ("normalise", "unit_scale")  # algo.flat_reward (compute_advantages)
STD_MIN = 1e-6  # returns with a smaller global std are constant: nothing to normalise


def log_nu(w: torch.Tensor, p_tok: torch.Tensor, q_tok: torch.Tensor) -> torch.Tensor:
    """log nu_t(x_t) = log(w p(x) + (1 - w) q(x)); floored so a masked (padding) position stays finite. For a
    truncating head pass nu's two ends at x_t (its base and its w = 0 end, `RolloutBatch.r_tok`) as p_tok, q_tok."""
    return torch.log((w * p_tok + (1 - w) * q_tok).clamp_min(1e-30))


def expected_accept(w: torch.Tensor, tv_pq: torch.Tensor, tv_r: torch.Tensor | float = 0.0) -> torch.Tensor:
    """The probability that a draft from q is accepted against nu = w p + (1 - w) r, r nu's w = 0 end:
    1 - TV(q, nu) = 1 - w * TV(q, p) when r = q (tv_r = 0). Otherwise (a truncating head, r typical's nu) the chord
    1 - w * TV(q, p) - (1 - w) * TV(q, r): TV(q, nu) is convex in w, so the chord is a lower bound that is exact at
    w in {0, 1}, where the per-token optimum of an objective linear in nu lies."""
    return 1 - w * tv_pq - (1 - w) * tv_r


def comm_device(x: torch.Tensor) -> torch.device:
    """Where a collective over x must run: NCCL (multi-GPU training) reduces CUDA tensors only, and step metrics
    or fork returns are built on the CPU."""
    if x.device.type == "cpu" and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return x.device


def all_reduce(x: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """The all-rank reduction of x (a new tensor on x's device); x itself when there is one rank."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return x
    y = x.to(comm_device(x), copy=True)
    dist.all_reduce(y, op=op)
    return y.to(x.device)


def masked_global_mean_std(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (population) std of x over the valid entries of every rank's batch."""
    m = mask.to(torch.float64)
    xd = x.to(torch.float64)
    s = all_reduce(torch.stack([(xd * m).sum(), (xd * xd * m).sum(), m.sum()]))
    n = s[2].clamp_min(1.0)
    mean = s[0] / n
    var = (s[1] / n - mean * mean).clamp_min(0.0)
    return mean.to(x.dtype), var.sqrt().to(x.dtype)


def is_flat(reward: torch.Tensor) -> bool:
    """Whether every rollout of every rank's batch has the same (task) reward: no task signal in the batch."""
    r = reward.to(torch.float64)
    neg_lo, hi = all_reduce(torch.stack([-r.min(), r.max()]), op=dist.ReduceOp.MAX)  # one collective
    return bool((hi + neg_lo).abs().item() <= 1e-12)


def group_baseline(reward: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """reward minus the mean reward of its group (the samples of one prompt; groups live on one rank)."""
    uniq, inv = torch.unique(group, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=reward.dtype, device=reward.device).index_add_(0, inv, reward)
    counts = torch.zeros(len(uniq), dtype=reward.dtype, device=reward.device).index_add_(
        0, inv, torch.ones_like(reward)
    )
    return reward - (sums / counts)[inv]


def token_rewards(
    seq_reward: torch.Tensor,
    mask: torch.Tensor,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    per_token: torch.Tensor | None = None,
) -> torch.Tensor:
    """[N, T] rewards: -kl_coef * kl_t (+ per_token_t) at every valid token, seq_reward at the last valid token."""
    maskf = mask.to(seq_reward.dtype)
    r = torch.zeros_like(maskf)
    if kl is not None and kl_coef:
        r = r - kl_coef * kl * maskf
    if per_token is not None:
        r = r + per_token * maskf
    lengths = mask.sum(1)
    rows = torch.nonzero(lengths > 0).squeeze(1)
    r[rows, lengths[rows] - 1] += seq_reward[rows]  # rows are left-aligned: tokens 0..len-1 are valid
    return r


def token_returns(r: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """G_t = sum_{s>=t} gamma^(s-t) r_s over valid tokens (zero at padding)."""
    maskf = mask.to(r.dtype)
    g = torch.zeros_like(r)
    running = torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    for t in range(r.shape[1] - 1, -1, -1):
        running = (r[:, t] + gamma * running) * maskf[:, t]  # padding only follows a row's last token
        g[:, t] = running
    return g


def normalize_advantages(returns: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """REINFORCE++'s global normalisation: (G - mean) / std over all valid tokens of all ranks; also the std.

    Returns that do not vary (std < STD_MIN: every rollout scored the same at the first step, where the KL to the
    initial head is exactly 0) carry no task signal: the advantages are 0 and the scale 1. Dividing by std + EPS
    there would multiply the λ term (which policy_loss divides by the same scale) by up to 1/EPS = 1e8."""
    mean, std = masked_global_mean_std(returns, mask)
    if float(std) < STD_MIN:
        return torch.zeros_like(returns), 1.0
    return (returns - mean) / (std + EPS) * mask.to(returns.dtype), float(std) + EPS


@dataclass
class LossOut:
    loss: torch.Tensor
    pg_loss: torch.Tensor
    lam_term: torch.Tensor  # mean expected acceptance 1 - w*tv over valid tokens (with gradient)
    clip_frac: torch.Tensor
    approx_kl: torch.Tensor  # mean (logp_old - logp) over valid tokens: how far the update moved


def clipped_pg_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-style clipped surrogate, token mean: -mean(min(ratio*A, clip(ratio, 1-eps, 1+eps)*A)); clip fraction."""
    maskf = mask.to(logp.dtype)
    n = maskf.sum().clamp_min(1.0)
    ratio = torch.exp(logp - logp_old)
    surr1 = ratio * adv
    surr2 = ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv
    loss = -(torch.minimum(surr1, surr2) * maskf).sum() / n
    clipped = ((surr2 < surr1).to(logp.dtype) * maskf).sum() / n
    return loss, clipped


def policy_loss(
    w: torch.Tensor,
    p_tok: torch.Tensor,
    q_tok: torch.Tensor,
    tv_pq: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    lam: float,
    lambda_mode: str,
    clip_eps: float | None,
    lam_weight: torch.Tensor | None = None,
    tv_r: torch.Tensor | float = 0.0,
) -> LossOut:
    """The head's loss on a minibatch, from its current w: the policy-gradient part (clipped ratio when clip_eps
    is set, plain -A*log nu otherwise) minus lam * mean_t(1 - w_t tv_t) in 'differentiable' mode (q_tok and tv_r:
    nu's w = 0 end, see log_nu and expected_accept).
    Pass lam = lambda / advantage scale (compute_advantages) so both parts keep the objective's proportions, and
    lam_weight = 1 / T_i per token of row i (lambda is per token: the objective's acceptance term is a mean over
    each trajectory); None weighs every token 1 (the sum over the trajectory)."""
    maskf = mask.to(w.dtype)
    n = maskf.sum().clamp_min(1.0)
    logp = log_nu(w, p_tok, q_tok)
    if clip_eps is None:
        pg = -(logp * adv * maskf).sum() / n
        clip_frac = torch.zeros((), dtype=w.dtype)
    else:
        pg, clip_frac = clipped_pg_loss(logp, logp_old, adv, mask, clip_eps)
    acc_tok = expected_accept(w, tv_pq, tv_r) * maskf
    acc = acc_tok.sum() / n
    lam_acc = acc if lam_weight is None else (acc_tok * lam_weight).sum() / n
    loss = pg - lam * lam_acc if lambda_mode == "differentiable" else pg
    approx_kl = ((logp_old - logp.detach()) * maskf).sum() / n
    return LossOut(loss=loss, pg_loss=pg.detach(), lam_term=acc.detach(), clip_frac=clip_frac.detach(),
                   approx_kl=approx_kl)


def compute_advantages(
    *,
    algo: str,
    task_reward: torch.Tensor,
    mask: torch.Tensor,
    group: torch.Tensor | None,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    kl_coef: float,
    lam_per_token: torch.Tensor | None,
    gamma: float = 1.0,
    group_baseline_on: bool = False,
    moving_baseline: float | None = None,
    flat_reward: str = "normalise",
) -> tuple[torch.Tensor, float]:
    """[N, T] advantages for algo 'reinforce_pp' (global normalisation) or 'reinforce' (return minus a moving
    baseline, no normalisation), and the scale they were divided by (the returns' std, or 1).
    lam_per_token: lambda*(1 - w tv) in 'reward' mode, else None.

    The scale matters for lambda_mode='differentiable': normalising advantages multiplies the task-reward part
    of the gradient by 1/scale, so the lambda term must be divided by the same scale for the update to follow
    the stated objective E[R + lambda * sum_t (1 - w_t tv_t)] (see policy_loss's lam argument).

    flat_reward (reinforce_pp only): what to do when every rollout of the global batch has the same task reward
    (after the group baseline), so the batch carries no task signal. "normalise" (the default, as before): the
    returns still vary by the KL penalty, and normalising them divides by that std alone (0.012 measured on the
    real pair against 0.23-0.39 in steps with a correct rollout), which multiplies the lambda term by ~25 and
    makes the update a full-size step toward the draft. "unit_scale": returns minus their mean, scale 1, as for
    returns that do not vary at all: such a batch moves the head by the lambda term at its plain size. Adam
    divides by the running size of past gradients, so this makes the step small only next to the steps with a
    task signal that came before it; a run whose batches are all flat still moves at Adam's full step."""
    seq_r = task_reward
    if group_baseline_on:
        if group is None:
            raise ValueError("group baseline needs group ids (several samples per prompt)")
        seq_r = group_baseline(seq_r, group)
    kl = logp_old - logp_ref  # k1 estimator of KL(pi || pi_ref) at the sampled token, as in OpenRLHF
    r = token_rewards(seq_r, mask, kl=kl, kl_coef=kl_coef, per_token=lam_per_token)
    g = token_returns(r, mask, gamma)
    if algo == "reinforce_pp":
        if flat_reward not in FLAT_REWARD_MODES:
            raise ValueError(f"algo.flat_reward must be one of {FLAT_REWARD_MODES}, got {flat_reward!r}")
        if flat_reward == "unit_scale" and is_flat(seq_r):
            mean, _ = masked_global_mean_std(g, mask)
            return (g - mean) * mask.to(g.dtype), 1.0
        return normalize_advantages(g, mask)
    if algo == "reinforce":
        b = 0.0 if moving_baseline is None else moving_baseline
        return (g - b) * mask.to(g.dtype), 1.0
    raise ValueError(f"unknown algo {algo!r}: use reinforce_pp or reinforce")


# ---------------------------------------------------------------------- fork advantages (algo.advantage=forks)
def bernoulli_kl(w: torch.Tensor, w_ref: torch.Tensor) -> torch.Tensor:
    """KL(Bern(w) || Bern(w_ref)) elementwise: the head's drift from its initial copy, per token."""
    w = w.clamp(1e-6, 1 - 1e-6)
    w_ref = w_ref.clamp(1e-6, 1 - 1e-6)
    return w * torch.log(w / w_ref) + (1 - w) * torch.log((1 - w) / (1 - w_ref))


def branch_clipped_loss(w: torch.Tensor, w_old: torch.Tensor, adv: torch.Tensor,
                        clip_eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++'s clipped surrogate over the mixture's latent branch, with both branches evaluated (forks).

    nu_t = w_t p_t + (1 - w_t) q_t samples "branch p" with probability w_t and "branch q" otherwise. A fork gives
    the per-token advantage adv = Delta_t - lam_t TV_t of choosing p over q, so the two branches' advantages
    against the old policy's value are (1 - w_old) adv and -w_old adv. Summing both branches' clipped ratio terms,
    weighted by their old probabilities, has gradient exactly adv at w = w_old (the all-action policy gradient),
    and the clip keeps each update within a ratio of 1 ± eps of the old branch probabilities.
    Returns (mean loss over forks, clip fraction)."""
    w_old = w_old.clamp(1e-6, 1 - 1e-6)
    terms, clipped = [], []
    for prob, prob_old, a in ((w, w_old, (1 - w_old) * adv), (1 - w, 1 - w_old, -w_old * adv)):
        ratio = prob / prob_old
        s1 = ratio * a
        if clip_eps is None:
            terms.append(prob_old * s1)
            clipped.append(torch.zeros_like(s1))
        else:
            s2 = ratio.clamp(1 - clip_eps, 1 + clip_eps) * a
            terms.append(prob_old * torch.minimum(s1, s2))
            clipped.append((s2 < s1).to(s1.dtype))
    loss = -(terms[0] + terms[1]).mean()
    frac = ((clipped[0] + clipped[1]) / 2).mean()
    return loss, frac


def fork_advantages(delta: torch.Tensor, tv: torch.Tensor, length: torch.Tensor,
                    lam: float) -> tuple[torch.Tensor, float]:
    """Per-fork advantages Delta_t - (lambda / T) TV_t, divided by their global std (all ranks).

    The mean is *not* subtracted: both branches' advantages are already centred on the old policy's value
    (branch_clipped_loss), and a shift would move every w in the same direction. Scale: their global root mean
    square."""
    adv = delta - lam * tv / length.clamp_min(1).to(tv.dtype)
    mean, std = masked_global_mean_std(adv, torch.ones_like(adv, dtype=torch.bool))
    # the root mean square (not the centred std), so a batch of equal advantages keeps its sign and scale
    scale = float(torch.sqrt(mean * mean + std * std)) + EPS
    return adv / scale, scale
