"""Masked actor-critic MLP, in the style of CleanRL's ``ppo.py``.

A shared MLP trunk feeds a policy head (logits over the game's action space)
and a value head. Illegal actions get a logit of ``ILLEGAL_LOGIT`` before the
softmax, which makes their probability exactly 0.0 in float32 (exp underflows),
while a row with no legal action at all (a seat that does not move) stays a
finite uniform distribution instead of NaN.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

ILLEGAL_LOGIT = -1e9

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


@dataclass(frozen=True)
class PolicySpec:
    """Shape of an :class:`ActorCritic`; plain types only, so it travels in a
    snapshot blob and rebuilds the same network anywhere."""

    obs_size: int
    num_actions: int
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "tanh"

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if int(self.obs_size) < 1 or int(self.num_actions) < 1:
            raise ValueError(f"obs_size and num_actions must be >= 1, got {self.obs_size}, {self.num_actions}")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {self.hidden}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpec":
        return cls(
            obs_size=int(d["obs_size"]),
            num_actions=int(d["num_actions"]),
            hidden=tuple(d.get("hidden", (128, 128))),
            activation=str(d.get("activation", "tanh")),
        )


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias (CleanRL; Engstrom et al. 2020 found
    this matters for PPO)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def _as_tensor(x, dtype) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(dtype)
    return torch.as_tensor(np.asarray(x), dtype=dtype)


class ActorCritic(nn.Module):
    """MLP trunk + policy head (std 0.01, so the initial policy is near uniform
    over legal actions) + value head (std 1)."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        act = _ACTIVATIONS[spec.activation]
        layers: list[nn.Module] = []
        width = spec.obs_size
        for h in spec.hidden:
            layers += [nn.Linear(width, h), act()]
            width = h
        self.trunk = nn.Sequential(*layers)
        self.policy_head = nn.Linear(width, spec.num_actions)
        self.value_head = nn.Linear(width, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Fresh orthogonal initialization of every layer (exploiter reset)."""
        for m in self.trunk:
            if isinstance(m, nn.Linear):
                layer_init(m)
        layer_init(self.policy_head, std=0.01)
        layer_init(self.value_head, std=1.0)

    # ----------------------------------------------------------------- torch
    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits (B, A) and values (B,)."""
        z = self.trunk(obs)
        logits = self.policy_head(z).masked_fill(~mask, ILLEGAL_LOGIT)
        return logits, self.value_head(z).squeeze(-1)

    def distribution(self, obs, mask) -> torch.distributions.Categorical:
        logits, _ = self(_as_tensor(obs, torch.float32), _as_tensor(mask, torch.bool))
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    def evaluate_actions(self, obs: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor, all_logp: bool = False):
        """log pi(a|s), entropy, value for a batch (the PPO loss inputs); with
        ``all_logp`` also log pi(.|s) over every action (the magnet KL's input)."""
        logits, value = self(obs, mask)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return (logp, entropy, value, logp_all) if all_logp else (logp, entropy, value)

    # ----------------------------------------------------------------- numpy
    @torch.inference_mode()
    def probs(self, obs, mask) -> np.ndarray:
        """(B, A) float32 action probabilities; exactly 0 on illegal actions."""
        logits, _ = self(_as_tensor(obs, torch.float32), _as_tensor(mask, torch.bool))
        return torch.softmax(logits, dim=-1).numpy()

    @torch.inference_mode()
    def act(self, obs, mask, generator=None, deterministic: bool = False):
        """Sample actions for a batch. Returns numpy ``(actions int64 (B,),
        logp float32 (B,), value float32 (B,))``.

        ``generator`` is a ``torch.Generator`` or a ``numpy.random.Generator``
        (one uniform per row, inverse CDF); either makes sampling reproducible.
        ``deterministic`` takes the most probable legal action.
        """
        logits, value = self(_as_tensor(obs, torch.float32), _as_tensor(mask, torch.bool))
        logp_all = torch.log_softmax(logits, dim=-1)
        if deterministic:
            actions = logits.argmax(-1)
        elif isinstance(generator, np.random.Generator):
            actions = torch.from_numpy(sample_rows(logp_all.exp().numpy(), generator))
        else:
            actions = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return actions.numpy().astype(np.int64), logp.numpy().astype(np.float32), value.numpy().astype(np.float32)


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``probs`` (B, A) by inverse CDF, one uniform per row;
    never an action of probability 0."""
    cdf = probs.cumsum(axis=1)
    u = rng.random(cdf.shape[0]) * cdf[:, -1]
    idx = np.minimum((cdf <= u[:, None]).sum(axis=1), cdf.shape[1] - 1)
    off = probs[np.arange(len(idx)), idx] == 0  # only by rounding at the top of the cdf
    if off.any():
        idx[off] = np.where(probs[off] > 0, np.arange(cdf.shape[1]), -1).max(axis=1)
    return idx.astype(np.int64)


def size_buckets(sizes: list[int], max_waste: float = 2.0) -> list[list[int]]:
    """Indices of ``sizes`` grouped so that padding each bucket to its largest
    costs at most ``max_waste`` times its real rows (largest first)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    buckets: list[list[int]] = []
    for i in order:
        if buckets:
            b = buckets[-1]
            if sizes[b[0]] * (len(b) + 1) <= max_waste * (sum(sizes[j] for j in b) + sizes[i]):
                b.append(i)
                continue
        buckets.append([i])
    return buckets


@torch.inference_mode()
def stacked_probs(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    """Action probabilities of several policies, each on its own batch, in few passes.

    Policies of one spec (every snapshot of a league) are evaluated together:
    their layers are stacked and the batches padded to the longest, so G
    policies cost a few batched matrix products instead of G forward passes.
    Batches of very different sizes go in separate stacks (``size_buckets``),
    so padding never more than doubles the work; policies of different specs
    fall back to one pass each.
    """
    if len(models) == 1 or len({m.spec for m in models}) > 1:
        return [m.probs(o, k) for m, o, k in zip(models, obs, masks)]
    out: list[np.ndarray] = [None] * len(models)  # type: ignore[list-item]
    for bucket in size_buckets([len(o) for o in obs]):
        if len(bucket) == 1:
            i = bucket[0]
            out[i] = models[i].probs(obs[i], masks[i])
            continue
        for i, p in zip(bucket, _stacked([models[i] for i in bucket], [obs[i] for i in bucket],
                                         [masks[i] for i in bucket])):
            out[i] = p
    return out


def _stacked(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    sizes = [len(o) for o in obs]
    G, n = len(models), max(sizes)
    x = torch.zeros((G, n, models[0].spec.obs_size))
    mask = torch.ones((G, n, models[0].spec.num_actions), dtype=torch.bool)
    for g, (o, k) in enumerate(zip(obs, masks)):
        x[g, :sizes[g]] = _as_tensor(o, torch.float32)
        mask[g, :sizes[g]] = _as_tensor(k, torch.bool)
    trunk = models[0].trunk
    for i in range(len(trunk)):
        if isinstance(trunk[i], nn.Linear):
            w = torch.stack([m.trunk[i].weight for m in models])  # (G, out, in)
            b = torch.stack([m.trunk[i].bias for m in models]).unsqueeze(1)  # (G, 1, out)
            x = torch.baddbmm(b, x, w.transpose(1, 2))
        else:
            x = trunk[i](x)  # the activation: no parameters
    w = torch.stack([m.policy_head.weight for m in models])
    b = torch.stack([m.policy_head.bias for m in models]).unsqueeze(1)
    logits = torch.baddbmm(b, x, w.transpose(1, 2)).masked_fill(~mask, ILLEGAL_LOGIT)
    probs = torch.softmax(logits, dim=-1).numpy()
    return [probs[g, :sizes[g]] for g in range(G)]


def stacked_act(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray],
                rng: np.random.Generator) -> list[np.ndarray]:
    """Sampled actions of several policies, each on its own batch (``stacked_probs``)."""
    probs = stacked_probs(models, obs, masks)
    actions = sample_rows(np.concatenate(probs), rng)
    return np.split(actions, np.cumsum([len(p) for p in probs])[:-1])
