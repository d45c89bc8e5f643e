"""Today's ``policies.ppo.ppo_update`` before issue 49 (device-friendly, replica groups), kept verbatim
as the reference the tests compare the new update with (to 1e-6 on a fixed batch and seed)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from league.config import PPOConfig
from policies.ppo import compute_gae
from policies.rollout import Rollout


def ppo_update(model, optimizer: torch.optim.Optimizer, rollout: Rollout, cfg: PPOConfig,
               *, generator: torch.Generator | None = None, magnet: nn.Module | None = None) -> dict:
    """One PPO update of ``model`` on ``rollout`` (complete episodes of one
    learner's side). ``generator`` seeds the minibatch shuffling. With
    ``magnet`` and ``cfg.magnet_coef > 0`` the loss adds the magnet KL term
    (module docstring). Returns mean statistics: policy_loss, value_loss,
    entropy, approx_kl, clipfrac, explained_variance, grad_norm, magnet_kl,
    num_transitions, num_minibatches, and with a second value head search_value_loss (nan when the
    rollout has no self-play decisions)."""
    n = len(rollout)
    if n == 0:
        raise ValueError("ppo_update: empty rollout")
    if not rollout.dones[-1]:
        raise ValueError("ppo_update: the rollout must end with a complete episode (dones[-1] is False)")

    # --- GAE (no gradient; values recorded at acting time)
    advantages, returns = compute_gae(rollout.rewards, rollout.values, rollout.dones, cfg.gamma, cfg.gae_lambda)
    device = next(model.parameters()).device  # the learner's (CPU or its GPU)
    obs, mask, actions, old_logp, old_values, adv_t, ret_t = (
        torch.from_numpy(x).to(device) for x in (rollout.obs, rollout.mask, rollout.actions, rollout.logp,
                                                   rollout.values, advantages, returns))

    use_magnet = magnet is not None and cfg.magnet_coef > 0
    has_search_head = bool(getattr(getattr(model, "spec", None), "search_value", False))
    search_head = has_search_head and bool(rollout.self_play.any())
    if search_head:  # the Monte Carlo return: GAE with lambda 1 against a zero baseline
        self_play = torch.from_numpy(rollout.self_play).to(device)
        mc, _ = compute_gae(rollout.rewards, np.zeros_like(rollout.values), rollout.dones, cfg.gamma, 1.0)
        mc_t = torch.from_numpy(mc).to(device)
    stats = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clipfrac": [], "grad_norm": [],
             "magnet_kl": [], "search_value_loss": []}
    mb = min(cfg.minibatch_size, n)
    model.train()
    stop = False
    for _ in range(cfg.epochs):
        perm = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, mb):
            idx = perm[start:start + mb]
            new_logp, entropy, new_value, logp_all, *search = model.evaluate_actions(
                obs[idx], mask[idx], actions[idx], all_logp=True, search_value=search_head)
            log_ratio = new_logp - old_logp[idx]
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()  # k3 estimator (Schulman 2020)
                clipfrac = ((ratio - 1.0).abs() > cfg.clip).float().mean()

            mb_adv = adv_t[idx]
            if cfg.normalize_advantages and len(idx) > 1:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)

            # clipped surrogate (PPO eq. 7), as a loss to minimize
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)).mean()

            if cfg.clip_value_loss:
                v_clipped = old_values[idx] + (new_value - old_values[idx]).clamp(-cfg.clip, cfg.clip)
                v_loss = 0.5 * torch.max((new_value - ret_t[idx]) ** 2, (v_clipped - ret_t[idx]) ** 2).mean()
            else:
                v_loss = 0.5 * ((new_value - ret_t[idx]) ** 2).mean()

            ent = entropy.mean()
            loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss  # PPO eq. 9
            if search_head:
                rows = self_play[idx]
                if rows.any():
                    sv_loss = 0.5 * ((search[0][rows] - mc_t[idx][rows]) ** 2).mean()
                    loss = loss + cfg.vf_coef * sv_loss
                    stats["search_value_loss"].append(sv_loss.item())
            if use_magnet:
                with torch.no_grad():
                    magnet_logits, _ = magnet(obs[idx], mask[idx])
                    magnet_logp = torch.log_softmax(magnet_logits, dim=-1)
                # KL(pi || magnet) over legal actions (illegal ones have probability 0 under both)
                magnet_kl = (logp_all.exp() * (logp_all - magnet_logp)).masked_fill(~mask[idx], 0.0).sum(-1).mean()
                loss = loss + cfg.magnet_coef * magnet_kl
                stats["magnet_kl"].append(magnet_kl.item())

            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()

            stats["policy_loss"].append(pg_loss.item())
            stats["value_loss"].append(v_loss.item())
            stats["entropy"].append(ent.item())
            stats["approx_kl"].append(approx_kl.item())
            stats["clipfrac"].append(clipfrac.item())
            stats["grad_norm"].append(float(grad_norm))
            if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                stop = True
                break
        if stop:
            break
    model.eval()

    var_ret = float(np.var(returns))
    explained_var = float("nan") if var_ret == 0 else 1.0 - float(np.var(returns - rollout.values)) / var_ret
    search_losses = stats.pop("search_value_loss")
    if search_losses:
        model.search_value_trained.fill_(True)
    out = {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
    if has_search_head:
        out["search_value_loss"] = float(np.mean(search_losses)) if search_losses else float("nan")
    out.update(explained_variance=explained_var, num_transitions=n, num_minibatches=len(stats["policy_loss"]))
    return out
