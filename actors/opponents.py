"""Opponent inference for rollout workers, behind one interface.

``submit(agent_ids, codes, obs, mask)`` takes every frozen-opponent decision of
one vector step (row ``i`` is played by ``agent_ids[codes[i]]``) and returns a
handle; ``result(handle)`` returns one action per row. The worker steps another lane of
environments between the two calls, so served inference overlaps with stepping.
``InProcessOpponents`` runs the frozen policies in the worker's own process
from a ``SnapshotCache`` of snapshots fetched by id; it is the baseline that the Serve
implementation (serve/) is measured against in bench/.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np

from monitoring.metrics import LeagueMetrics
from policies.net import ActorCritic
from policies.snapshot import SnapshotCache
from serve.batching import act_known, run_grouped

log = logging.getLogger(__name__)


class InProcessOpponents:
    def __init__(self, fetch_snapshot: Callable[[str], bytes], capacity: int, seed=None, max_bytes: int | None = None,
                 idle_seconds: float | None = None):
        self.metrics = LeagueMetrics()
        kind = "rollout_worker"
        self.cache = SnapshotCache(capacity, fetch_snapshot, max_bytes,
                                   on_load=lambda: self.metrics.inc("snapshot_loads", process=kind),
                                   on_bytes=lambda b: self.metrics.set("snapshot_cache_bytes", b, process=kind),
                                   idle_seconds=idle_seconds)
        self.rng = np.random.default_rng(seed)

    def model(self, agent_id: str) -> ActorCritic:
        return self.cache.get(agent_id)

    def submit(self, agent_ids: list[str], codes: np.ndarray, obs: np.ndarray, mask: np.ndarray):
        """In process there is nothing to wait for: the actions are the handle."""
        return run_grouped([(agent_ids, codes, obs, mask)], self._forward)[0]

    def result(self, pending) -> np.ndarray:
        return pending

    def _forward(self, agent_ids: list[str], obs: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
        """The same stacked pass as the Serve deployment, so bench/ compares transport, not kernels."""
        start = time.perf_counter()
        models = {}
        for agent_id in agent_ids:
            try:
                models[agent_id] = self.model(agent_id)
            except Exception as exc:  # evicted meanwhile: the coordinator no longer has it
                log.warning("opponent %s unavailable (%s); its rows play uniformly", agent_id, type(exc).__name__)
        actions = act_known(models, agent_ids, obs, masks, self.rng)
        self.metrics.observe("inference_seconds", time.perf_counter() - start)
        self.metrics.observe("batch_size", sum(len(o) for o in obs))
        return actions
