"""Policy and learner-state blobs for the league's SQLite store.

A blob is ``torch.save`` of a dict of plain types and tensors: the network's
:class:`~policies.net.PolicySpec` as data (``mlp``, ``conv`` or a factory's
``"package.module:factory"`` path, with its arguments) and its state dict, and is read back
with ``torch.load(..., weights_only=True)``: loading never runs pickle on
untrusted bytes. Every blob carries a ``format`` tag and a version, so a foreign
or corrupt blob is refused with a ValueError instead of half-loading.
"""

from __future__ import annotations

import io
import time
from collections import OrderedDict
from typing import Callable

import torch

from league.config import SNAPSHOT_PLAYS
from policies.net import GreedyPolicy, PolicyNet, PolicySpec, build_policy
from policies.optim import Adam

POLICY_FORMAT = "nash-league/policy"
LEARNER_FORMAT = "nash-league/learner"
VERSION = 1


def _cpu(obj):
    """Tensors (nested in dicts, lists, tuples) detached and on the CPU: a blob written by a GPU learner
    must load on CPU-only workers and replicas."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def _save(payload: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def _load(blob: bytes, expected_format: str) -> dict:
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise ValueError(f"expected a bytes blob, got {type(blob).__name__}")
    try:
        payload = torch.load(io.BytesIO(bytes(blob)), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"not a readable {expected_format} blob ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(payload, dict) or payload.get("format") != expected_format:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"blob is not a {expected_format} blob (found format {found!r})")
    if payload.get("version") != VERSION:
        raise ValueError(f"{expected_format} blob has version {payload.get('version')!r}; this code reads {VERSION}")
    return payload


def _model_from(payload: dict, what: str) -> PolicyNet:
    """The network a blob names (``spec``: kind, factory path, arguments, shapes), rebuilt from
    that data and loaded with its state dict; no code travels in the blob."""
    try:
        spec = PolicySpec.from_dict(payload["spec"])
        model = build_policy(spec)
        model.load_state_dict(payload["state_dict"], strict=True)
    except Exception as exc:
        raise ValueError(f"{what} blob does not describe a network this process can build: {str(exc)[:300]}") from None
    model.eval()
    return model


def policy_to_bytes(model: PolicyNet, play: str = "sample") -> bytes:
    """Parameters and the :class:`PolicySpec` (plain types) of ``model``, and how it plays when
    loaded (``play``, one of ``SNAPSHOT_PLAYS``: sampled from its probabilities, or its most
    probable legal move, ``GreedyPolicy``; a snapshot of ``policy.snapshot_play: greedy`` is
    ``greedy``; the live weights rollout workers pull always sample)."""
    if play not in SNAPSHOT_PLAYS:
        raise ValueError(f"play must be one of {SNAPSHOT_PLAYS}, got {play!r}")
    return _save({
        "format": POLICY_FORMAT,
        "version": VERSION,
        "spec": model.spec.to_dict(),
        "state_dict": _cpu(model.state_dict()),
        "play": play,
    })


def snapshot_spec(blob: bytes) -> PolicySpec:
    """The :class:`PolicySpec` a policy blob records, read without building the network (nothing is
    imported): what a loader checks before trusting a file from elsewhere to name a factory."""
    try:
        return PolicySpec.from_dict(_load(blob, POLICY_FORMAT)["spec"])
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"{POLICY_FORMAT} blob has no valid spec: {str(exc)[:300]}") from None


def policy_from_bytes(blob: bytes, as_played: bool = True) -> PolicyNet:
    """Rebuild the network of a :func:`policy_to_bytes` blob (in eval mode): as it plays (a
    ``greedy`` blob's network wrapped in ``GreedyPolicy``), or with ``as_played=False`` the bare
    network (its parameters, to train from). Raises ValueError on a corrupt or foreign blob."""
    payload = _load(blob, POLICY_FORMAT)
    play = payload.get("play", "sample")  # a blob written before there was a choice samples
    if play not in SNAPSHOT_PLAYS:
        raise ValueError(f"{POLICY_FORMAT} blob plays {play!r}; this code knows {', '.join(SNAPSHOT_PLAYS)}")
    model = _model_from(payload, POLICY_FORMAT)
    return GreedyPolicy(model).eval() if as_played and play == "greedy" else model


def learner_state_to_bytes(model: PolicyNet, optimizer: Adam | None = None,
                           extra: dict | None = None, magnet: PolicyNet | None = None,
                           average: PolicyNet | None = None) -> bytes:
    """A learner checkpoint: parameters, spec, optimizer state, the magnet's
    parameters (magnet-regularised PPO, ``policies.ppo``), the average's (the network its
    snapshots are taken from, ``policy.snapshot_average``) and ``extra`` (plain
    types: ints, floats, strings, lists, dicts, e.g. version and step counters)."""
    return _save({
        "format": LEARNER_FORMAT,
        "version": VERSION,
        "spec": model.spec.to_dict(),
        "state_dict": _cpu(model.state_dict()),
        "optimizer": _cpu(optimizer.state_dict()) if optimizer is not None else None,
        "magnet": _cpu(magnet.state_dict()) if magnet is not None else None,
        "average": _cpu(average.state_dict()) if average is not None else None,
        "extra": dict(extra or {}),
    })


def _follower_from_bytes(blob: bytes, key: str) -> PolicyNet | None:
    payload = _load(blob, LEARNER_FORMAT)
    if payload.get(key) is None:
        return None
    return _model_from({"spec": payload["spec"], "state_dict": payload[key]}, f"{LEARNER_FORMAT} {key}")


def learner_magnet_from_bytes(blob: bytes) -> PolicyNet | None:
    """The magnet saved in a learner checkpoint, or None when it has none."""
    return _follower_from_bytes(blob, "magnet")


def learner_average_from_bytes(blob: bytes) -> PolicyNet | None:
    """The average saved in a learner checkpoint (``policy.snapshot_average``), or None when it has none."""
    return _follower_from_bytes(blob, "average")


def learner_state_from_bytes(blob: bytes, optimizer_factory=None):
    """Inverse of :func:`learner_state_to_bytes`: ``(model, optimizer, extra)``.

    With ``optimizer_factory(model) -> Adam`` (e.g.
    ``lambda m: policies.ppo.make_optimizer(m, cfg)``) the optimizer is rebuilt
    and its saved state loaded into it; without one, ``optimizer`` is the raw
    saved state dict (or None). Raises ValueError on a corrupt or foreign blob.
    """
    payload = _load(blob, LEARNER_FORMAT)
    model = _model_from(payload, LEARNER_FORMAT)
    opt_state = payload.get("optimizer")
    optimizer = opt_state
    if optimizer_factory is not None:
        optimizer = optimizer_factory(model)
        if opt_state is not None:
            try:
                optimizer.load_state_dict(opt_state)
            except Exception as exc:
                raise ValueError(f"optimizer state in the blob does not fit: {str(exc)[:300]}") from None
    return model, optimizer, payload.get("extra") or {}


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of a network's parameters and buffers (what a snapshot cache counts)."""
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def drop_idle(entries: OrderedDict, now: float, idle_seconds: float | None) -> list:
    """Drop from the front of ``entries`` (least recently used first; each value a tuple whose last
    item is the time of its last use) every entry unused since ``now - idle_seconds``; returns the
    dropped values. ``idle_seconds`` None drops nothing. The idle bound of ``SnapshotCache`` and of
    the exact evaluator's profiles."""
    dropped = []
    while idle_seconds is not None and entries:
        agent_id, value = next(iter(entries.items()))
        if now - value[-1] <= idle_seconds:
            break
        dropped.append(entries.pop(agent_id))
    return dropped


class SnapshotCache:
    """Frozen policies by agent id, the least recently used evicted beyond ``capacity``
    policies or ``max_bytes`` of weights, and any not used for ``idle_seconds``.

    The one cache every process that plays snapshots uses (Serve replicas,
    in-process opponents, the HTTP API, evaluators), sized by
    ``snapshots.cache_size`` and ``snapshots.cache_mb`` (an exact evaluator holds
    fewer networks and keeps their profiles instead). The idle bound,
    ``snapshots.cache_idle_seconds``, lets go of agents the pool has evicted (no process
    asks for them again), so a process's memory stops growing once the pool is full
    instead of once the cache is. The newest policy is kept even when it alone is larger
    than ``max_bytes``. ``get`` loads through the ``fetch`` callable; async callers use
    ``lookup`` and ``load``. ``loads`` counts misses, ``expired`` the policies dropped idle.
    ``on_bytes`` is told the weight bytes held whenever they change (a process's gauge).
    ``device`` (None: the CPU) is where loaded policies go: an opponents replica given a GPU
    loads its snapshots onto it (blobs are still read onto the CPU, ``weights_only``, first).
    """

    def __init__(self, capacity: int, fetch: Callable[[str], bytes] | None = None, max_bytes: int | None = None,
                 on_load: Callable[[], None] | None = None, idle_seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic, on_bytes: Callable[[int], None] | None = None,
                 device: torch.device | str | None = None):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if idle_seconds is not None and not idle_seconds > 0:
            raise ValueError(f"idle_seconds must be > 0, got {idle_seconds}")
        self.capacity = int(capacity)
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self.fetch = fetch
        self.on_load = on_load  # called once per load (a process's metric of misses)
        self.on_bytes = on_bytes
        self.clock = clock
        self.device = torch.device(device) if device is not None else None
        # least recently used first: agent id -> (policy, weight bytes, time of last use)
        self._entries: OrderedDict[str, tuple[PolicyNet, int, float]] = OrderedDict()
        self.bytes = 0  # weights held
        self.loads = 0  # snapshots loaded (misses)
        self.expired = 0  # snapshots dropped for being idle

    def __contains__(self, agent_id: str) -> bool:
        return agent_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self, now: float) -> None:
        """Drop the policies not used since ``now - idle_seconds`` (the front of the LRU order)."""
        dropped = drop_idle(self._entries, now, self.idle_seconds)
        for _, size, _ in dropped:
            self.bytes -= size
            self.expired += 1
        if dropped and self.on_bytes is not None:
            self.on_bytes(self.bytes)

    def lookup(self, agent_id: str) -> PolicyNet | None:
        """The cached policy (now the most recently used), or None."""
        now = self.clock()
        self._expire(now)
        entry = self._entries.get(agent_id)
        if entry is None:
            return None
        self._entries[agent_id] = (entry[0], entry[1], now)
        self._entries.move_to_end(agent_id)
        return entry[0]

    def put(self, agent_id: str, model: PolicyNet) -> PolicyNet:
        model.eval()
        now = self.clock()
        self._expire(now)
        if agent_id in self._entries:
            self.bytes -= self._entries.pop(agent_id)[1]
        size = weight_bytes(model)
        self._entries[agent_id] = (model, size, now)
        self.bytes += size
        while len(self._entries) > 1 and (len(self._entries) > self.capacity
                                          or (self.max_bytes is not None and self.bytes > self.max_bytes)):
            self.bytes -= self._entries.popitem(last=False)[1][1]
        if self.on_bytes is not None:
            self.on_bytes(self.bytes)
        return model

    def load(self, agent_id: str, blob: bytes) -> PolicyNet:
        """Load a snapshot blob (``weights_only``; ValueError if it is not one) onto the cache's
        device and cache it."""
        self.loads += 1
        if self.on_load is not None:
            self.on_load()
        model = policy_from_bytes(blob)
        if self.device is not None:
            model.to(self.device)
        return self.put(agent_id, model)

    def get(self, agent_id: str) -> PolicyNet:
        """The policy of ``agent_id``, fetched and loaded on a miss (the fetch's errors propagate)."""
        model = self.lookup(agent_id)
        if model is not None:
            return model
        if self.fetch is None:
            raise KeyError(f"snapshot {agent_id!r} is not cached and this cache has no fetch")
        return self.load(agent_id, self.fetch(agent_id))
