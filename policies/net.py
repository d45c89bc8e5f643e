"""Masked actor-critic networks: the MLP of CleanRL's ``ppo.py``, a small
residual convolutional net (AlphaZero's torso), and a user's own module.

Every network is a :class:`PolicyNet`: a module whose ``forward(obs, mask)``
returns masked logits (B, A) and values (B,); sampling, probabilities and the
PPO loss inputs come from the base class, so a user's module only has to
provide ``forward`` (``net: "package.module:factory"``, docs/envs_policies.md).
Illegal actions get a logit of ``ILLEGAL_LOGIT`` before the softmax, which
makes their probability exactly 0.0 in float32 (exp underflows), while a row
with no legal action at all (a seat that does not move) stays a finite uniform
distribution instead of NaN.

Observations are flat (B, obs_size) float32 everywhere (rollouts, the wire, the
store); a net that wants the game's layout reshapes them to ``spec.obs_shape``.

The numpy paths (``probs``, ``act``, ``stacked_probs``) run where the network's parameters are
(``model_device``): their inputs go to that device in one copy each and their results come back
as numpy, so an opponents replica given a GPU (``serve.num_gpus``) evaluates its snapshots there.
On the CPU those moves are no-ops.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

ILLEGAL_LOGIT = -1e9

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}
SHIPPED_NETS = ("mlp", "conv")


class PolicyNetError(ValueError):
    """A network spec that cannot be built; ``key`` names the ``policy.*`` config key at fault."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True)
class PolicySpec:
    """Which network and of what shape; plain types only, so it travels in a
    snapshot blob and rebuilds the same network anywhere.

    ``net`` is ``"mlp"`` (``hidden``, ``activation``), ``"conv"`` (``channels``,
    ``blocks``) or ``"package.module:factory"`` (called with the spec; ``args``
    are its extra keyword arguments). ``obs_shape`` is the layout of one flat
    observation (``obs.reshape(B, *obs_shape)`` is exact), ``(obs_size,)`` for a
    flat game; ``channels_last`` says a 3-D shape is (H, W, C) rather than (C, H, W).
    ``search_value`` (mlp and conv) adds a second value head, trained on the learner's games
    against itself only: the value that play-time search (``evaluation.search``) reads.
    """

    obs_size: int
    num_actions: int
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "tanh"
    net: str = "mlp"
    obs_shape: tuple[int, ...] = ()
    channels_last: bool = False
    channels: int = 32
    blocks: int = 2
    args: dict[str, Any] = field(default_factory=dict)
    search_value: bool = False

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        shape = tuple(int(s) for s in self.obs_shape) or (int(self.obs_size),)
        object.__setattr__(self, "obs_shape", shape)
        object.__setattr__(self, "args", dict(self.args or {}))
        if int(self.obs_size) < 1 or int(self.num_actions) < 1:
            raise ValueError(f"obs_size and num_actions must be >= 1, got {self.obs_size}, {self.num_actions}")
        if any(s < 1 for s in shape) or math.prod(shape) != int(self.obs_size):
            raise ValueError(f"obs_shape {shape} does not hold obs_size={self.obs_size} numbers")
        if any(h < 1 for h in self.hidden):
            raise PolicyNetError("policy.hidden", f"hidden sizes must be >= 1, got {self.hidden}")
        if self.activation not in _ACTIVATIONS:
            raise PolicyNetError("policy.activation", f"must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")
        if not isinstance(self.net, str) or not (self.net in SHIPPED_NETS or _factory_path(self.net)):
            raise PolicyNetError("policy.net", f"must be mlp, conv or 'package.module:factory', got {self.net!r}")
        if int(self.channels) < 1 or int(self.blocks) < 0:
            raise PolicyNetError("policy.channels", f"conv needs channels >= 1 and blocks >= 0, got "
                                                    f"{self.channels}, {self.blocks}")
        if self.search_value and self.net not in SHIPPED_NETS:
            raise PolicyNetError("policy.search_value", f"a second value head needs net mlp or conv, not {self.net!r}")

    def __hash__(self) -> int:  # args is a dict: hash the plain-data form, once (Serve hashes per batch)
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(json.dumps(self.to_dict(), sort_keys=True))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:  # a string's hash differs between processes: never ship it
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        d["obs_shape"] = list(self.obs_shape)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpec":
        """Inverse of :meth:`to_dict`; a dict without ``net`` (a blob written before there was a
        choice of network) is the MLP it always was."""
        return cls(
            obs_size=int(d["obs_size"]),
            num_actions=int(d["num_actions"]),
            hidden=tuple(d.get("hidden", (128, 128))),
            activation=str(d.get("activation", "tanh")),
            net=str(d.get("net", "mlp")),
            obs_shape=tuple(d.get("obs_shape", ())),
            channels_last=bool(d.get("channels_last", False)),
            channels=int(d.get("channels", 32)),
            blocks=int(d.get("blocks", 2)),
            args=dict(d.get("args") or {}),
            search_value=bool(d.get("search_value", False)),
        )


def _factory_path(net: str) -> bool:
    module, sep, attr = net.partition(":")
    return bool(sep and module and attr)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias (CleanRL; Engstrom et al. 2020 found
    this matters for PPO)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def _as_tensor(x, dtype, device: torch.device | None = None) -> torch.Tensor:
    """``x`` (a tensor, array or nested list) as a tensor of ``dtype`` on ``device`` (None: where a
    tensor already is, the CPU for anything else); no copy where it already is one."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s parameters (or, without any, its buffers) are; the CPU for a module of neither.
    A shipped net answers from its policy head: walking ``parameters()`` costs more per call than a
    small batch's pass on the CPU gains from nothing."""
    head = model.__dict__["_modules"].get("policy_head")
    if isinstance(head, nn.Linear):
        return head.weight.device
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


ARCHITECTURE = ("net", "hidden", "activation", "channels", "blocks", "args")  # what a resumed network keeps


def architecture_changes(saved: PolicySpec, wanted: PolicySpec) -> list[str]:
    """How ``saved`` (a checkpoint's network) differs in shape or kind from ``wanted`` (the config's),
    as ``"activation tanh, not relu"``; empty when a resumed network is the one the config builds."""
    return [f"{name} {getattr(saved, name)}, not {getattr(wanted, name)}" for name in ARCHITECTURE
            if getattr(saved, name) != getattr(wanted, name)]


def follow(follower: nn.Module, model: nn.Module, rate: float) -> None:
    """Move ``follower`` (a network of ``model``'s shape) a fraction ``rate`` towards ``model``:
    an exponential moving average of its parameters and floating buffers; other buffers are copied."""
    with torch.no_grad():
        for f, m in zip(follower.parameters(), model.parameters()):
            f.lerp_(m, rate)
        for f, m in zip(follower.buffers(), model.buffers()):
            if f.is_floating_point():
                f.lerp_(m, rate)
            else:
                f.copy_(m)


def average_rate(keep: float, steps: int) -> float:
    """The share of the model an average takes after ``steps`` gradient steps, keeping ``keep``
    of itself at each (``policy.snapshot_average``)."""
    return 1.0 - float(keep) ** max(int(steps), 0)


class PolicyNet(nn.Module):
    """The actor-critic interface the league uses (learners, rollouts, Serve, the API,
    evaluators, exploitability, export).

    A subclass sets ``self.spec`` and implements ``forward(obs (B, obs_size) float32,
    mask (B, A) bool) -> (logits (B, A) with ILLEGAL_LOGIT on illegal actions,
    values (B,))``; this class derives ``distribution``, ``evaluate_actions``,
    ``probs``, ``act`` and ``reset_parameters`` from it. A net with a second value head
    (``spec.search_value``) also implements ``_body(obs, mask) -> (logits, z)``, the input of
    both value heads, which ``heads`` reads.
    """

    spec: PolicySpec

    def reset_parameters(self) -> None:
        """Fresh initialization (an exploiter's reset): every submodule's own
        ``reset_parameters``."""
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    # ----------------------------------------------------------------- torch
    def distribution(self, obs, mask) -> torch.distributions.Categorical:
        device = model_device(self)
        logits, _ = self(_as_tensor(obs, torch.float32, device), _as_tensor(mask, torch.bool, device))
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    def heads(self, obs: torch.Tensor, mask: torch.Tensor):
        """Masked logits (B, A), values (B,) and the search value head's values (B,), or None
        without one: one pass of the body (``_body``: the logits and the value heads' input)."""
        if not self.spec.search_value:
            return (*self(obs, mask), None)
        logits, z = self._body(obs, mask)
        return logits, self.value_head(z).squeeze(-1), self.search_value_head(z).squeeze(-1)

    def search_values(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits and the value search should read: the second value head's where the net
        has one (``spec.search_value``) and it has been trained (an exploiter, which never plays
        itself, never trains it), else the value head's."""
        logits, value, search = self.heads(obs, mask)
        return logits, value if search is None or not bool(self.search_value_trained) else search

    def _add_search_value_head(self, width: int) -> None:
        """The second value head (``spec.search_value``) and whether any update has trained it
        (a buffer: snapshots carry it)."""
        self.search_value_head = nn.Linear(width, 1)
        self.register_buffer("search_value_trained", torch.zeros((), dtype=torch.bool))

    def _reset_search_value_head(self) -> None:
        if self.spec.search_value:
            layer_init(self.search_value_head, std=1.0)
            self.search_value_trained.fill_(False)

    def evaluate_actions(self, obs: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor, all_logp: bool = False,
                         search_value: bool = False):
        """log pi(a|s), entropy, value for a batch (the PPO loss inputs); with
        ``all_logp`` also log pi(.|s) over every action (the magnet KL's input); with
        ``search_value`` also the second value head's values (last)."""
        logits, value, search = self.heads(obs, mask) if search_value else (*self(obs, mask), None)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        out = (logp, entropy, value, logp_all) if all_logp else (logp, entropy, value)
        return (*out, search) if search_value else out

    # ----------------------------------------------------------------- numpy
    @torch.inference_mode()
    def probs(self, obs, mask) -> np.ndarray:
        """(B, A) float32 action probabilities; exactly 0 on illegal actions. Runs on the network's
        device (``model_device``); the result is on the CPU."""
        device = model_device(self)
        logits, _ = self(_as_tensor(obs, torch.float32, device), _as_tensor(mask, torch.bool, device))
        return torch.softmax(logits, dim=-1).cpu().numpy()

    @torch.inference_mode()
    def evaluate(self, obs, mask) -> tuple[np.ndarray, np.ndarray]:
        """``(logits (B, A), values (B,))`` as float32 arrays on the CPU: a search's leaves, evaluated
        on the network's device (``serve.opponents.ServedPolicy.evaluate`` answers the same)."""
        device = model_device(self)
        logits, values = self(_as_tensor(obs, torch.float32, device), _as_tensor(mask, torch.bool, device))
        return logits.float().cpu().numpy(), values.float().cpu().numpy()

    @torch.inference_mode()
    def act(self, obs, mask, generator=None, deterministic: bool = False):
        """Sample actions for a batch. Returns numpy ``(actions int64 (B,),
        logp float32 (B,), value float32 (B,))``.

        ``generator`` is a ``torch.Generator`` or a ``numpy.random.Generator``
        (one uniform per row, inverse CDF); either makes sampling reproducible.
        ``deterministic`` takes the most probable legal action. Runs on the network's device; a
        ``torch.Generator`` of another device samples there from the probabilities.
        """
        device = model_device(self)
        logits, value = self(_as_tensor(obs, torch.float32, device), _as_tensor(mask, torch.bool, device))
        logp_all = torch.log_softmax(logits, dim=-1)
        if deterministic:
            actions = logits.argmax(-1)
        elif isinstance(generator, np.random.Generator):
            actions = torch.from_numpy(sample_rows(logp_all.exp().cpu().numpy(), generator)).to(device)
        elif generator is not None and generator.device != device:
            actions = torch.multinomial(logp_all.exp().to(generator.device), 1,
                                        generator=generator).squeeze(-1).to(device)
        else:
            actions = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return (actions.cpu().numpy().astype(np.int64), logp.cpu().numpy().astype(np.float32),
                value.cpu().numpy().astype(np.float32))


class ActorCritic(PolicyNet):
    """``net: mlp``: MLP trunk + policy head (std 0.01, so the initial policy is
    near uniform over legal actions) + value head (std 1)."""

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
        if spec.search_value:
            self._add_search_value_head(width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Fresh orthogonal initialization of every layer (exploiter reset)."""
        for m in self.trunk:
            if isinstance(m, nn.Linear):
                layer_init(m)
        layer_init(self.policy_head, std=0.01)
        layer_init(self.value_head, std=1.0)
        self._reset_search_value_head()

    def _body(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits and the trunk's output (the value heads' input)."""
        z = self.trunk(obs)
        return self.policy_head(z).masked_fill(~mask, ILLEGAL_LOGIT), z

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits (B, A) and values (B,)."""
        logits, z = self._body(obs, mask)
        return logits, self.value_head(z).squeeze(-1)


class GreedyPolicy(PolicyNet):
    """A network that plays its most probable legal move (ties shared equally): how a snapshot
    plays with ``policy.snapshot_play: greedy``. ``forward`` gives logits that are 0 on the best
    moves and ``ILLEGAL_LOGIT`` elsewhere, so ``probs``, ``act``, the exact evaluator's tables and
    an exported graph all play the same deterministic policy; ``heads`` and ``search_values``
    are the network's own, so play-time search reads its prior and value unchanged."""

    def __init__(self, net: PolicyNet):
        super().__init__()
        self.net = net
        self.spec = net.spec

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = self.net(obs, mask)
        best = logits >= logits.max(dim=-1, keepdim=True).values
        return torch.where(best, torch.zeros_like(logits), torch.full_like(logits, ILLEGAL_LOGIT)), value

    def heads(self, obs: torch.Tensor, mask: torch.Tensor):
        return self.net.heads(obs, mask)

    def search_values(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net.search_values(obs, mask)

    def reset_parameters(self) -> None:
        self.net.reset_parameters()


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class ConvActorCritic(PolicyNet):
    """``net: conv``: the residual tower of AlphaZero (Silver et al. 2017, "Mastering
    the game of Go without human knowledge"; 2018, "A general reinforcement learning
    algorithm that masters chess, shogi, and Go through self-play"), scaled down: a
    3x3 convolution stem to ``channels``, ``blocks`` residual blocks of two 3x3
    convolutions, then a policy head (1x1 conv to 2 planes, linear to the actions)
    and a value head (1x1 conv to 1 plane, linear, ReLU, linear).

    No batch normalization: rollout workers act with the net in eval mode while the
    learner trains it, and batch statistics would make the two differ, so PPO's
    probability ratio would not start at 1. The value has no tanh: returns are the
    game's, not confined to [-1, 1].
    """

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        shape = spec.obs_shape
        if len(shape) not in (2, 3):
            raise PolicyNetError("policy.net", f"conv needs a game with a 2-D or 3-D observation shape; this game's "
                                               f"is {shape} (flat): use mlp")
        if len(shape) == 2:
            c, h, w = 1, shape[0], shape[1]
        elif spec.channels_last:
            h, w, c = shape
        else:
            c, h, w = shape
        self.planes = (c, h, w)
        ch = spec.channels
        self.stem = nn.Conv2d(c, ch, 3, padding=1)
        self.tower = nn.Sequential(*[_ResidualBlock(ch) for _ in range(spec.blocks)])
        self.policy_conv = nn.Conv2d(ch, 2, 1)
        self.policy_head = nn.Linear(2 * h * w, spec.num_actions)
        self.value_conv = nn.Conv2d(ch, 1, 1)
        self.value_hidden = nn.Linear(h * w, ch)
        self.value_head = nn.Linear(ch, 1)
        if spec.search_value:  # beside the value head, on its hidden layer
            self._add_search_value_head(ch)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.reset_parameters()
        layer_init(self.value_hidden)
        layer_init(self.policy_head, std=0.01)
        layer_init(self.value_head, std=1.0)
        self._reset_search_value_head()

    def planes_of(self, obs: torch.Tensor) -> torch.Tensor:
        """Flat (B, obs_size) observations as (B, C, H, W) planes."""
        x = obs.reshape(obs.shape[0], *self.spec.obs_shape)
        if len(self.spec.obs_shape) == 2:
            return x.unsqueeze(1)
        return x.permute(0, 3, 1, 2) if self.spec.channels_last else x

    def _body(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits and the value heads' hidden layer."""
        z = self.tower(torch.relu(self.stem(self.planes_of(obs))))
        p = torch.relu(self.policy_conv(z)).flatten(1)
        logits = self.policy_head(p).masked_fill(~mask, ILLEGAL_LOGIT)
        return logits, torch.relu(self.value_hidden(torch.relu(self.value_conv(z)).flatten(1)))

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, v = self._body(obs, mask)
        return logits, self.value_head(v).squeeze(-1)


class FactoryNet(PolicyNet):
    """``net: "package.module:factory"``: the module ``factory(spec, **spec.args)``
    returns, behind the :class:`PolicyNet` interface.

    The user's module needs only ``forward(obs (B, obs_size), mask (B, A) bool) ->
    (logits (B, A), values (B,) or (B, 1))``; the logits are masked here again, so
    illegal actions have probability exactly 0 whatever the module does with the mask.
    """

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        factory = resolve_factory(spec.net)
        try:
            inspect.signature(factory).bind(spec, **spec.args)
        except TypeError as exc:
            raise PolicyNetError("policy.args", f"{spec.net} does not take (spec, **{spec.args}) ({exc})") from None
        except ValueError:  # no signature (a builtin): call and see
            pass
        try:
            body = factory(spec, **spec.args)
        except Exception as exc:
            raise PolicyNetError("policy.args" if spec.args else "policy.net",
                                 f"{spec.net}(spec, **{spec.args}) failed ({type(exc).__name__}: {exc})") from None
        if not isinstance(body, nn.Module):
            raise PolicyNetError("policy.net", f"{spec.net} returned a {type(body).__name__}, not a torch.nn.Module")
        self.body = body
        self._check_interface()

    def _check_interface(self) -> None:
        """One forward pass on two rows: wrong shapes fail here, at build time, not in a replica."""
        obs = torch.zeros((2, self.spec.obs_size))
        mask = torch.ones((2, self.spec.num_actions), dtype=torch.bool)
        training = self.body.training
        try:
            self.body.eval()  # the probe must not move a normalization layer's running statistics
            with torch.no_grad():
                logits, value = self.body(obs, mask)
        except Exception as exc:
            raise PolicyNetError("policy.net", f"{self.spec.net}: forward(obs, mask) must return (logits, values); "
                                               f"it failed on a (2, {self.spec.obs_size}) batch "
                                               f"({type(exc).__name__}: {str(exc)[:200]})") from None
        finally:
            self.body.train(training)
        if not (isinstance(logits, torch.Tensor) and logits.shape == (2, self.spec.num_actions)):
            raise PolicyNetError("policy.net", f"{self.spec.net}: logits must have shape (B, {self.spec.num_actions}), "
                                               f"got {getattr(logits, 'shape', type(logits).__name__)}")
        if not (isinstance(value, torch.Tensor) and tuple(value.shape) in ((2,), (2, 1))):
            raise PolicyNetError("policy.net", f"{self.spec.net}: values must have shape (B,) or (B, 1), "
                                               f"got {getattr(value, 'shape', type(value).__name__)}")

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, value = self.body(obs, mask)
        return logits.masked_fill(~mask, ILLEGAL_LOGIT), value.reshape(-1)


def resolve_factory(path: str):
    """The callable that ``"package.module:factory"`` names; PolicyNetError otherwise."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error on import
        raise PolicyNetError("policy.net", f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise PolicyNetError("policy.net", f"{module_name!r} has no callable {attr!r}")
    return factory


def build_policy(spec: PolicySpec) -> PolicyNet:
    """The network ``spec`` describes, freshly initialized (PolicyNetError if it cannot be built)."""
    if spec.net == "mlp":
        return ActorCritic(spec)
    if spec.net == "conv":
        return ConvActorCritic(spec)
    return FactoryNet(spec)


def policy_spec(policy_cfg, obs_size: int, num_actions: int, obs_shape=(), channels_last: bool = False) -> PolicySpec:
    """The :class:`PolicySpec` of a config's ``policy:`` section for a game of this shape."""
    return PolicySpec(obs_size=obs_size, num_actions=num_actions, hidden=tuple(policy_cfg.hidden),
                      activation=policy_cfg.activation, net=policy_cfg.net, obs_shape=tuple(obs_shape or ()),
                      channels_last=bool(channels_last), channels=policy_cfg.channels, blocks=policy_cfg.blocks,
                      args=dict(policy_cfg.args), search_value=bool(policy_cfg.search_value))


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
def stacked_probs(models: list[PolicyNet], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    """Action probabilities of several policies, each on its own batch, in few passes.

    Policies of one spec (every snapshot of a league) are evaluated together.
    Small MLPs have their layers stacked and the batches padded to the longest,
    so G policies cost a few batched matrix products instead of G forward
    passes; batches of very different sizes go in separate stacks
    (``size_buckets``), so padding never more than doubles the work. Wide MLPs
    (more than ``STACK_MAX_WEIGHTS``) run one lean pass each over one
    concatenated batch, since copying their weights into a stack costs more
    than it saves. Policies of different specs fall back to one pass each, and
    so do conv and user nets (``stacked_mlp``). The passes run on the policies' device (one
    device for all of them, as a ``SnapshotCache`` holds them); the results are on the CPU.
    """
    if len(models) == 1 or len({m.spec for m in models}) > 1 or not all(stacked_mlp(m) for m in models):
        return [m.probs(o, k) for m, o, k in zip(models, obs, masks)]
    if mlp_weights(models[0].spec) > STACK_MAX_WEIGHTS:
        return _one_pass_each(models, obs, masks)
    return _stacked_buckets(models, obs, masks)


@torch.inference_mode()
def _stacked_buckets(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
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


def stacked_mlp(model: PolicyNet) -> bool:
    """Whether ``model`` can join a stacked pass: an MLP (its layers stack into batched matrix
    products); a conv or user net runs its own forward."""
    return type(model) is ActorCritic


# Above this many weights a policy's layers are not worth stacking: a stacked pass copies every
# policy's weights into one tensor per call, which for all but the smallest MLPs costs more than
# a lean pass per policy (`python -m bench.nets --stacked` compares the two; docs/results.md).
STACK_MAX_WEIGHTS = 8192


def mlp_weights(spec: PolicySpec) -> int:
    """Weights of an MLP's trunk and policy head (what a stacked pass copies per policy)."""
    widths = (spec.obs_size, *spec.hidden, spec.num_actions)
    return sum(a * b for a, b in zip(widths, widths[1:]))


@torch.inference_mode()
def _one_pass_each(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    """The policies' probabilities with one pass each over their own rows of one concatenated
    batch, the value head skipped, and one masked softmax over all rows."""
    sizes = [len(o) for o in obs]
    device = model_device(models[0])
    x = _as_tensor(np.concatenate(obs), torch.float32, device)
    mask = _as_tensor(np.concatenate(masks), torch.bool, device)
    logits = torch.empty((len(x), models[0].spec.num_actions), device=device)
    start = 0
    for model, n in zip(models, sizes):
        h = x[start:start + n]
        for layer in model.trunk:
            h = torch.addmm(layer.bias, h, layer.weight.t()) if isinstance(layer, nn.Linear) else layer(h)
        torch.addmm(model.policy_head.bias, h, model.policy_head.weight.t(), out=logits[start:start + n])
        start += n
    probs = torch.softmax(logits.masked_fill_(~mask, ILLEGAL_LOGIT), dim=-1).cpu().numpy()
    return np.split(probs, np.cumsum(sizes)[:-1])


def _stacked(models: list[ActorCritic], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    sizes = [len(o) for o in obs]
    G, n = len(models), max(sizes)
    x = torch.zeros((G, n, models[0].spec.obs_size))
    mask = torch.ones((G, n, models[0].spec.num_actions), dtype=torch.bool)
    for g, (o, k) in enumerate(zip(obs, masks)):
        x[g, :sizes[g]] = _as_tensor(o, torch.float32)
        mask[g, :sizes[g]] = _as_tensor(k, torch.bool)
    # padded on the CPU, then one copy each to the policies' device (none on the CPU)
    device = model_device(models[0])
    x, mask = x.to(device), mask.to(device)
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
    probs = torch.softmax(logits, dim=-1).cpu().numpy()
    return [probs[g, :sizes[g]] for g in range(G)]


def stacked_act(models: list[PolicyNet], obs: list[np.ndarray], masks: list[np.ndarray],
                rng: np.random.Generator) -> list[np.ndarray]:
    """Sampled actions of several policies, each on its own batch (``stacked_probs``)."""
    probs = stacked_probs(models, obs, masks)
    actions = sample_rows(np.concatenate(probs), rng)
    return np.split(actions, np.cumsum([len(p) for p in probs])[:-1])
