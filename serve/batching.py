"""Batching logic of the opponents deployment, as plain functions.

``@serve.batch`` hands the deployment a list of requests from many rollout
workers; each request carries a whole vector of observations for one frozen
agent. ``run_grouped`` concatenates the requests of each agent id and runs one
forward pass per id, then splits the actions back per request. Kept free of
Ray so it is unit-tested directly (``@serve.batch`` does not run under Serve's
local testing mode).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Forward = Callable[[str, np.ndarray, np.ndarray], np.ndarray]


def validate_request(req: dict, obs_size: int | None = None, num_actions: int | None = None) -> tuple[str, np.ndarray, np.ndarray]:
    """(agent_id, obs float32 (n, D), mask bool (n, A)) from a request dict; ValueError if malformed."""
    if not isinstance(req, dict):
        raise ValueError(f"a request must be a dict, got {type(req).__name__}")
    agent_id = req.get("agent_id")
    if not isinstance(agent_id, str) or not agent_id:
        raise ValueError("request needs a non-empty string agent_id")
    obs = np.asarray(req.get("obs"), dtype=np.float32)
    mask = np.asarray(req.get("mask"), dtype=bool)
    if obs.ndim != 2 or mask.ndim != 2 or len(obs) != len(mask) or len(obs) == 0:
        raise ValueError(f"obs and mask must be non-empty 2-D arrays with the same rows, got {obs.shape} and {mask.shape}")
    if obs_size is not None and obs.shape[1] != obs_size:
        raise ValueError(f"observations have {obs.shape[1]} features, the game has {obs_size}")
    if num_actions is not None and mask.shape[1] != num_actions:
        raise ValueError(f"masks have {mask.shape[1]} actions, the game has {num_actions}")
    if not np.all(np.isfinite(obs)):
        raise ValueError("observations contain NaN or inf")
    if not mask.any(axis=1).all():
        raise ValueError("every mask needs at least one legal action")
    return agent_id, obs, mask


def run_grouped(requests: Sequence[tuple[str, np.ndarray, np.ndarray]], forward: Forward) -> list[np.ndarray]:
    """Actions for each request, with one ``forward(agent_id, obs, mask)`` per distinct id."""
    by_id: dict[str, list[int]] = {}
    for i, (agent_id, _, _) in enumerate(requests):
        by_id.setdefault(agent_id, []).append(i)
    out: list[np.ndarray | None] = [None] * len(requests)
    for agent_id, idx in by_id.items():
        obs = np.concatenate([requests[i][1] for i in idx])
        mask = np.concatenate([requests[i][2] for i in idx])
        actions = np.asarray(forward(agent_id, obs, mask))
        start = 0
        for i in idx:
            n = len(requests[i][1])
            out[i] = actions[start:start + n]
            start += n
    return out  # type: ignore[return-value]
