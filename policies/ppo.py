"""Proximal Policy Optimization, the one update every learner role uses.

Schulman, Wolski, Dhariwal, Radford, Klimov (2017), "Proximal Policy
Optimization Algorithms", arXiv:1707.06347: clipped surrogate objective (eq. 7)
plus a value loss and an entropy bonus (eq. 9). Advantages by GAE, Schulman et
al. (2016), "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", arXiv:1506.02438. The implementation details (Adam eps 1e-5,
per-minibatch advantage normalization, clipped value loss, global gradient
clipping) follow CleanRL's ``ppo.py`` (Huang et al. 2022, "The 37
Implementation Details of Proximal Policy Optimization").

Optionally regularised towards a magnet policy, as in magnetic mirror descent
(Sokota, D'Orazio, Kolter, Loizou, Lanctot, Mitliagkas, Brown, Kroer 2023, "A
Unified Approach to Reinforcement Learning, Quantal Response Equilibria, and
Two-Player Zero-Sum Games", ICLR): the loss adds ``magnet_coef * KL(pi || magnet)``
over the batch's states, and the magnet follows the policy by a parameter-space
moving average (``magnet_rate`` per update, :func:`pull_magnet`). In self-play
this makes the last iterate converge (to a regularised equilibrium whose magnet
moves towards the Nash) where plain policy gradient cycles.

A net with a second value head (``spec.search_value``) trains it too: on the rollout's
decisions against the learner itself (``Rollout.self_play``) only, towards their Monte Carlo
return, with the value loss's weight. Play-time search reads that head: the value of a position
when both sides play this policy, where the value head learns it against the whole opponent mix.

A group of learner replicas (``policies.replica_group``) runs the same update data parallel: each
replica holds part of the batch, and together they make the update one learner makes on all of it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from league.config import PPOConfig
from policies.net import follow
from policies.optim import Adam
from policies.replica_group import ReplicaGroup
from policies.rollout import Rollout


def make_optimizer(model: nn.Module, cfg: PPOConfig) -> Adam:
    return Adam(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)


def scheduled_lr(cfg: PPOConfig, steps: int) -> float:
    """The learning rate after ``steps`` trained-on transitions: ``cfg.lr``, or with
    ``cfg.lr_decay_steps`` the inverse square-root decay ``lr / sqrt(1 + steps / lr_decay_steps)``
    (no horizon: a league has no last update)."""
    if cfg.lr_decay_steps <= 0:
        return cfg.lr
    return cfg.lr / float(np.sqrt(1.0 + steps / cfg.lr_decay_steps))


def set_lr(optimizer: Adam, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def compute_gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, gamma: float, lam: float):
    """Advantages and returns (advantage + value) by GAE over concatenated
    complete episodes: the value after an episode's last step is 0."""
    n = len(rewards)
    adv = np.zeros(n, dtype=np.float32)
    last = 0.0
    for t in range(n - 1, -1, -1):
        nonterminal = 0.0 if dones[t] else 1.0
        next_value = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + values.astype(np.float32)


def pull_magnet(magnet: nn.Module, model: nn.Module, rate: float) -> None:
    """Move the magnet's parameters a fraction ``rate`` towards the policy's."""
    follow(magnet, model, rate)


def _epoch_rows(perm: torch.Tensor, offset: int, n: int, mb: int) -> tuple[torch.Tensor, list[int], list[int]]:
    """For one epoch's global shuffle ``perm``: this replica's rows (``offset .. offset + n`` of the
    global batch) in shuffle order, as local indices; where each global minibatch's share of them
    starts (one more entry: the end); and each global minibatch's row count."""
    total = len(perm)
    sizes = [min(mb, total - start) for start in range(0, total, mb)]
    if offset == 0 and n == total:  # the group of one: every row is this replica's
        return perm, list(range(0, total, mb)) + [total], sizes
    local = perm - offset
    keep = (local >= 0) & (local < n)
    counts = keep.cumsum(0).tolist()
    bounds = [0] + [counts[min(start + mb, total) - 1] for start in range(0, total, mb)]
    return local[keep], bounds, sizes


def ppo_update(model, optimizer: Adam, rollout: Rollout, cfg: PPOConfig,
               *, generator: torch.Generator | None = None, magnet: nn.Module | None = None,
               group: ReplicaGroup | None = None) -> dict:
    """One PPO update of ``model`` on ``rollout`` (complete episodes of one
    learner's side). ``generator`` seeds the minibatch shuffling. With
    ``magnet`` and ``cfg.magnet_coef > 0`` the loss adds the magnet KL term
    (module docstring). Returns mean statistics: policy_loss, value_loss,
    entropy, approx_kl, clipfrac, explained_variance, grad_norm, magnet_kl,
    num_transitions, num_minibatches, and with a second value head search_value_loss (nan when the
    rollout has no self-play decisions).

    The batch goes to the model's device once; the statistics stay there and are read once, at
    the end (and once a minibatch with ``cfg.target_kl``, whose early stop needs the value).

    With a ``group`` of replicas (``policies.replica_group``) this is the update of one learner on
    the concatenation of the replicas' rollouts, in rank order: the same shuffle of all rows on
    every replica (``generator`` seeded alike on each, or one replica 0 seeds), each replica's loss
    terms summed over its rows of a minibatch and divided by the minibatch's row count, the
    advantages normalised by the minibatch's global mean and std, the gradients summed before
    clipping, the statistics and the early stop global; ``num_transitions`` is the group's."""
    group = group or ReplicaGroup.single()
    n = len(rollout)
    if n == 0 and group.size == 1:
        raise ValueError("ppo_update: empty rollout")
    if n and not rollout.dones[-1]:
        raise ValueError("ppo_update: the rollout must end with a complete episode (dones[-1] is False)")
    offset, total = group.rows_before(n)
    if total == 0:
        raise ValueError("ppo_update: empty rollout")
    generator = group.shared_generator(generator)

    # --- GAE (no gradient; values recorded at acting time)
    advantages, returns = compute_gae(rollout.rewards, rollout.values, rollout.dones, cfg.gamma, cfg.gae_lambda)
    device = next(model.parameters()).device  # the learner's (CPU or its GPU)
    # the whole batch moves once; torch.from_numpy shares the rollout's arrays (their dtypes fit)
    obs, mask, actions, old_logp, old_values, adv_t, ret_t = (
        torch.from_numpy(x).to(device) for x in (rollout.obs, rollout.mask, rollout.actions, rollout.logp,
                                                   rollout.values, advantages, returns))

    use_magnet = magnet is not None and cfg.magnet_coef > 0
    has_search_head = bool(getattr(getattr(model, "spec", None), "search_value", False))
    search_head = False
    if has_search_head:  # which of the group's rows are self-play: their count per minibatch divides
        self_play_all = torch.zeros(total, dtype=torch.float32)
        self_play_all[offset:offset + n] = torch.from_numpy(rollout.self_play.astype(np.float32))
        self_play_all = group.sum_(self_play_all).numpy() > 0
        search_head = bool(self_play_all.any())
    if search_head:  # the Monte Carlo return: GAE with lambda 1 against a zero baseline
        self_play = torch.from_numpy(rollout.self_play).to(device)
        mc, _ = compute_gae(rollout.rewards, np.zeros_like(rollout.values), rollout.dones, cfg.gamma, 1.0)
        mc_t = torch.from_numpy(mc).to(device)
    names = ["policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"]
    if use_magnet:
        names.append("magnet_kl")
    if search_head:
        names.append("search_value_loss")
    kl_at = names.index("approx_kl")
    steps: list[torch.Tensor] = []  # per minibatch: the statistics (names), on the device
    grad_norms: list[torch.Tensor] = []
    searched_steps: list[bool] = []  # per minibatch: it had self-play rows (a search_value_loss)
    params = [p for p in model.parameters()]
    mb = min(cfg.minibatch_size, total)
    model.train()
    stop = False
    for _ in range(cfg.epochs):
        perm = torch.randperm(total, generator=generator)
        rows, bounds, sizes = _epoch_rows(perm, offset, n, mb)
        rows = rows.to(device)
        # this epoch's rows in shuffle order, once: each minibatch is then a slice
        e_obs, e_mask, e_actions, e_logp, e_values, e_adv, e_ret = (
            x[rows] for x in (obs, mask, actions, old_logp, old_values, adv_t, ret_t))
        if cfg.normalize_advantages:
            e_adv = _normalize_per_minibatch(e_adv, bounds, sizes, group)
        if search_head:
            e_self_play, e_mc = self_play[rows], mc_t[rows]
            perm_np = perm.numpy()
        for k, size in enumerate(sizes):
            a, b = bounds[k], bounds[k + 1]
            searched = search_head and bool(self_play_all[perm_np[k * mb:k * mb + size]].any())
            optimizer.zero_grad()
            if b > a:  # a replica with no rows in this minibatch adds nothing but still joins the sum
                new_logp, entropy, new_value, logp_all, *search = model.evaluate_actions(
                    e_obs[a:b], e_mask[a:b], e_actions[a:b], all_logp=True, search_value=search_head)
                log_ratio = new_logp - e_logp[a:b]
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).sum() / size  # k3 estimator (Schulman 2020)
                    clipfrac = ((ratio - 1.0).abs() > cfg.clip).float().sum() / size

                mb_adv = e_adv[a:b]
                # clipped surrogate (PPO eq. 7), as a loss to minimize
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).sum() / size

                ret, old_v = e_ret[a:b], e_values[a:b]
                if cfg.clip_value_loss:
                    v_clipped = old_v + (new_value - old_v).clamp(-cfg.clip, cfg.clip)
                    v_loss = 0.5 * torch.max((new_value - ret) ** 2, (v_clipped - ret) ** 2).sum() / size
                else:
                    v_loss = 0.5 * ((new_value - ret) ** 2).sum() / size

                ent = entropy.sum() / size
                loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss  # PPO eq. 9
                terms = [pg_loss, v_loss, ent, approx_kl, clipfrac]
                if use_magnet:
                    with torch.no_grad():
                        magnet_logits, _ = magnet(e_obs[a:b], e_mask[a:b])
                        magnet_logp = torch.log_softmax(magnet_logits, dim=-1)
                    # KL(pi || magnet) over legal actions (illegal ones have probability 0 under both)
                    magnet_kl = (logp_all.exp() * (logp_all - magnet_logp)).masked_fill(
                        ~e_mask[a:b], 0.0).sum(-1).sum() / size
                    loss = loss + cfg.magnet_coef * magnet_kl
                    terms.append(magnet_kl)
                if search_head:
                    sv_loss = torch.zeros((), device=device)
                    if searched:  # the mean over the minibatch's self-play rows, the group's
                        count = int(self_play_all[perm_np[k * mb:k * mb + size]].sum())
                        sp = e_self_play[a:b]
                        sv_loss = 0.5 * torch.where(sp, (search[0] - e_mc[a:b]) ** 2, 0.0).sum() / count
                        loss = loss + cfg.vf_coef * sv_loss
                    terms.append(sv_loss)
                loss.backward()
                local = torch.stack([t.detach() for t in terms])
            else:
                local = torch.zeros(len(names), device=device)
            step_stats = group.sum_gradients_(params, local)
            grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()

            steps.append(step_stats)
            grad_norms.append(grad_norm)
            searched_steps.append(searched)
            if cfg.target_kl is not None and float(step_stats[kl_at]) > cfg.target_kl:
                stop = True
                break
        if stop:
            break
    model.eval()

    # the statistics, read once
    table = torch.stack(steps).double().cpu().numpy()
    norms = torch.stack([g.detach().reshape(()) for g in grad_norms]).double().cpu().numpy()
    out = {name: float(np.mean(table[:, j])) for j, name in enumerate(names[:5])}
    out["grad_norm"] = float(np.mean(norms))
    out["magnet_kl"] = float(np.mean(table[:, names.index("magnet_kl")])) if use_magnet else 0.0
    if search_head and any(searched_steps):
        model.search_value_trained.fill_(True)
    if has_search_head:
        sv = table[np.array(searched_steps, dtype=bool), names.index("search_value_loss")] if search_head else []
        out["search_value_loss"] = float(np.mean(sv)) if len(sv) else float("nan")
    out.update(explained_variance=_explained_variance(returns, rollout.values, total, group),
               num_transitions=total, num_minibatches=len(steps))
    return out


def _normalize_per_minibatch(adv: torch.Tensor, bounds: list[int], sizes: list[int],
                             group: ReplicaGroup) -> torch.Tensor:
    """``adv`` (this replica's rows of an epoch, in shuffle order) less its global minibatch's mean,
    over its std (Bessel's; minibatches of one row are left as they are); the sums over the
    replicas' rows in one collective for the epoch."""
    k = len(sizes)
    device = adv.device
    if group.size == 1:  # one learner: each minibatch's own mean and std, as one learner computes them
        parts = [adv[bounds[j]:bounds[j + 1]] for j in range(k)]
        return torch.cat([(x - x.mean()) / (x.std() + 1e-8) if len(x) > 1 else x for x in parts])
    which = torch.repeat_interleave(torch.arange(k), torch.tensor([bounds[j + 1] - bounds[j] for j in range(k)]))
    which = which.to(device)
    x = adv.double()
    sums = torch.zeros(2 * k, dtype=torch.float64, device=device)
    sums[:k].index_add_(0, which, x)
    sums[k:].index_add_(0, which, x * x)
    group.sum_(sums)
    size = torch.tensor(sizes, dtype=torch.float64, device=device)
    mean = sums[:k] / size
    var = ((sums[k:] - sums[:k] * mean) / (size - 1).clamp_min(1)).clamp_min(0)
    several = size > 1
    mean = torch.where(several, mean, 0.0).float()
    scale = torch.where(several, var.sqrt().float() + 1e-8, 1.0)
    return (adv - mean[which]) / scale[which]


def _explained_variance(returns: np.ndarray, values: np.ndarray, total: int, group: ReplicaGroup) -> float:
    """1 - Var(returns - values) / Var(returns) over the group's rows (nan when the returns do not vary)."""
    ret, res = returns.astype(np.float64), returns.astype(np.float64) - values.astype(np.float64)
    means = group.sum_(torch.tensor([ret.sum(), res.sum()], dtype=torch.float64)).numpy() / total
    squares = group.sum_(torch.tensor([((ret - means[0]) ** 2).sum(), ((res - means[1]) ** 2).sum()],
                                      dtype=torch.float64)).numpy() / total
    return float("nan") if squares[0] == 0 else 1.0 - float(squares[1]) / float(squares[0])
