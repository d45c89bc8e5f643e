"""Opponent inference for rollout workers, behind one interface.

``submit(groups)`` takes ``[(agent_id, obs, mask), ...]`` (one entry per frozen
opponent that must move this vector step) and returns a handle; ``result(handle)``
returns the actions of each group. The worker steps another lane of
environments between the two calls, so served inference overlaps with stepping.
``InProcessOpponents`` runs the frozen policies in the worker's own process
from an LRU of snapshots fetched by id; it is the baseline that the Serve
implementation (serve/) is measured against in bench/.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
import torch

import time

from monitoring.metrics import LeagueMetrics
from policies.net import ActorCritic
from policies.snapshot import policy_from_bytes

Group = tuple[str, np.ndarray, np.ndarray]


class InProcessOpponents:
    def __init__(self, fetch_snapshot: Callable[[str], bytes], capacity: int = 64, seed: int | None = None):
        self.fetch_snapshot = fetch_snapshot
        self.capacity = capacity
        self._models: OrderedDict[str, ActorCritic] = OrderedDict()
        self.rng = np.random.default_rng(seed)
        self.metrics = LeagueMetrics()

    def model(self, agent_id: str) -> ActorCritic:
        model = self._models.get(agent_id)
        if model is None:
            model = policy_from_bytes(self.fetch_snapshot(agent_id))
            model.eval()
            self._models[agent_id] = model
            if len(self._models) > self.capacity:
                self._models.popitem(last=False)
        else:
            self._models.move_to_end(agent_id)
        return model

    def submit(self, groups: Sequence[Group]):
        """In process there is nothing to wait for: the actions are the handle."""
        return self.act(groups)

    def result(self, pending) -> list[np.ndarray]:
        return pending

    def act(self, groups: Sequence[Group]) -> list[np.ndarray]:
        out = []
        with torch.inference_mode():
            for agent_id, obs, mask in groups:
                start = time.perf_counter()
                actions, _, _ = self.model(agent_id).act(obs, mask, generator=self.rng)
                self.metrics.observe("inference_seconds", time.perf_counter() - start)
                self.metrics.observe("batch_size", len(obs))
                out.append(actions)
        return out
