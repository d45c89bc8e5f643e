"""Today's ``policies.expert.expert_update`` before issue 49 (device-friendly, replica groups), kept
verbatim as the reference the tests compare the new update with (to 1e-6 on a fixed replay and seed)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from league.config import SearchLearnerConfig
from policies.expert import Replay


def expert_update(model, optimizer: torch.optim.Optimizer, replay: Replay, new: int, cfg: SearchLearnerConfig,
                  *, generator: torch.Generator | None = None) -> dict:
    """Gradient steps on ``replay`` after ``new`` positions arrived: ``ceil(reuse * new / minibatch)``
    minibatches drawn uniformly from the replay. Returns mean statistics: policy_loss (the cross
    entropy), value_loss, entropy (of the network's policy), target_entropy, grad_norm,
    num_transitions, num_minibatches."""
    if len(replay) == 0:
        raise ValueError("expert_update: the replay is empty")
    device = next(model.parameters()).device
    mb = min(cfg.minibatch_size, len(replay))
    steps = max(1, int(np.ceil(cfg.reuse * new / mb)))
    stats = {"policy_loss": [], "value_loss": [], "entropy": [], "target_entropy": [], "grad_norm": []}
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(replay), (mb,), generator=generator).numpy()
        obs, mask, target, value = (torch.from_numpy(x[idx]).to(device)
                                    for x in (replay.obs, replay.mask, replay.target, replay.value))
        logits, v = model(obs, mask)
        logp = torch.log_softmax(logits, dim=-1)
        # illegal actions have target 0 and a finite masked logit: their terms vanish
        policy_loss = -(target * logp.masked_fill(~mask, 0.0)).sum(-1).mean()
        value_loss = ((v - value) ** 2).mean()
        loss = policy_loss + cfg.value_coef * value_loss
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            p = logp.exp()
            stats["entropy"].append(float(-(p * logp.masked_fill(~mask, 0.0)).sum(-1).mean()))
            t = target.clamp_min(1e-12)
            stats["target_entropy"].append(float(-(target * t.log()).sum(-1).mean()))
        stats["policy_loss"].append(policy_loss.item())
        stats["value_loss"].append(value_loss.item())
        stats["grad_norm"].append(float(grad_norm))
    model.eval()
    out = {k: float(np.mean(v)) for k, v in stats.items()}
    out.update(num_transitions=int(new), num_minibatches=steps)
    return out
