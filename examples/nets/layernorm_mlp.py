"""A user's own network for the league: ``policy: {net: "examples.nets.layernorm_mlp:build",
args: {width: 64}}``.

The factory gets the network's spec (``spec.obs_size``, ``spec.obs_shape``,
``spec.num_actions``) and the config's ``policy.args`` as keyword arguments, and
returns a ``torch.nn.Module`` whose ``forward(obs, mask)`` gives ``(logits (B, A),
values (B,))``. The league masks the logits and derives sampling, probabilities
and the PPO loss from them (``policies.net.PolicyNet``). Snapshots record the
path ``"examples.nets.layernorm_mlp:build"`` and ``args``, never code: every
process that loads one (Serve replicas, the HTTP API, evaluators) must be able
to import this module, so keep it on their ``PYTHONPATH``.

This one is an MLP with layer normalization (Ba et al. 2016, "Layer
Normalization") after each hidden layer.
"""

from __future__ import annotations

import torch
from torch import nn


class LayerNormMLP(nn.Module):
    def __init__(self, obs_size: int, num_actions: int, width: int, depth: int):
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_size
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.LayerNorm(width), nn.ReLU()]
            d = width
        self.trunk = nn.Sequential(*layers)
        self.logits = nn.Linear(d, num_actions)
        self.value = nn.Linear(d, 1)
        with torch.no_grad():  # a near-uniform initial policy, as PPO likes
            self.logits.weight.mul_(0.01)

    def forward(self, obs: torch.Tensor, mask: torch.Tensor):
        z = self.trunk(obs)
        return self.logits(z), self.value(z).squeeze(-1)


def build(spec, width: int = 64, depth: int = 2) -> nn.Module:
    if width < 1 or depth < 1:
        raise ValueError(f"width and depth must be >= 1, got {width}, {depth}")
    return LayerNormMLP(spec.obs_size, spec.num_actions, int(width), int(depth))
