"""Behavioural diversity of the league.

Each agent's trajectories become an embedding: the action histogram (discrete
actions, or the argmax of action vectors plus their per-dimension mean and
standard deviation) and, where a game has positions, an occupancy heatmap and
position statistics. Diversity is read off pairwise cosine distances
(1 - cosine similarity) between the agents' embeddings: 0 for identical
behaviour, near 1 for disjoint behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

HEATMAP_BINS = 8


@dataclass
class TrajectoryBatch:
    """Actions of one agent over T steps, optionally with positions in [0, 1]^2.

    actions: (T,) integer actions, or (T, action_dim) action vectors.
    positions: (T, 2), normalised to [0, 1].
    num_actions: size of the discrete action space (histogram length);
      defaults to max(action) + 1.
    """

    actions: np.ndarray
    positions: np.ndarray | None = None
    agent_id: str | None = None
    num_actions: int | None = None

    def __post_init__(self):
        self.actions = np.asarray(self.actions)
        if self.actions.ndim not in (1, 2) or len(self.actions) == 0:
            raise ValueError(f"actions must be a non-empty (T,) or (T, action_dim) array, got shape {self.actions.shape}")
        if not np.all(np.isfinite(self.actions)):
            raise ValueError("actions contain NaN or inf")
        if self.positions is not None:
            self.positions = np.asarray(self.positions, dtype=float)
            if self.positions.ndim != 2 or self.positions.shape[1] != 2:
                raise ValueError(f"positions must have shape (T, 2), got {self.positions.shape}")
            if not np.all(np.isfinite(self.positions)):
                raise ValueError("positions contain NaN or inf")


def embed_trajectory(batch: TrajectoryBatch) -> np.ndarray:
    """Behaviour embedding of one batch (see module docstring)."""
    a = batch.actions
    parts = []
    if a.ndim == 1:
        if not np.all(a == np.round(a)) or np.any(a < 0):
            raise ValueError("discrete actions must be non-negative integers")
        n = batch.num_actions or int(a.max()) + 1
        parts.append(np.bincount(a.astype(np.int64), minlength=n)[:n] / len(a))
    else:
        a = a.astype(float)
        parts.append(np.bincount(np.argmax(a, axis=1), minlength=a.shape[1]) / len(a))
        parts.append(a.mean(axis=0))
        parts.append(a.std(axis=0))
    if batch.positions is not None:
        p = np.clip(batch.positions, 0.0, 1.0)
        heat, _, _ = np.histogram2d(p[:, 0], p[:, 1], bins=HEATMAP_BINS, range=[[0, 1], [0, 1]])
        parts.append(heat.ravel() / len(p))
        parts.append(p.mean(axis=0))
        parts.append(p.std(axis=0))
    return np.concatenate(parts)


def pairwise_cosine_distances(embeddings: np.ndarray) -> np.ndarray:
    """(N, N) matrix of 1 - cos(e_i, e_j); a zero embedding is at distance 1."""
    e = np.asarray(embeddings, dtype=float)
    if e.ndim != 2:
        raise ValueError(f"embeddings must be (N, D), got shape {e.shape}")
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    unit = np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    d = 1.0 - unit @ unit.T
    np.fill_diagonal(d, 0.0)
    return np.clip(d, 0.0, 2.0)


def diversity_score(embeddings: np.ndarray, method: str = "mean") -> float:
    """Mean, min or median pairwise cosine distance; 0 with fewer than two agents."""
    if method not in ("mean", "min", "median"):
        raise ValueError(f"method must be mean, min or median, got {method!r}")
    e = np.asarray(embeddings, dtype=float)
    if len(e) < 2:
        return 0.0
    d = pairwise_cosine_distances(e)
    off = d[~np.eye(len(d), dtype=bool)]
    return float({"mean": np.mean, "min": np.min, "median": np.median}[method](off))


class DiversityTracker:
    """Running mean embedding per agent (weighted by steps seen)."""

    def __init__(self):
        self._sum: dict[str, np.ndarray] = {}
        self._steps: dict[str, int] = {}

    def update(self, agent_id: str, batch: TrajectoryBatch) -> None:
        emb = embed_trajectory(batch)
        t = len(batch.actions)
        if agent_id in self._sum and self._sum[agent_id].shape != emb.shape:
            raise ValueError(
                f"embedding of {agent_id!r} changed length ({self._sum[agent_id].shape[0]} -> {emb.shape[0]}); "
                "pass num_actions so histograms have a fixed size"
            )
        self._sum[agent_id] = self._sum.get(agent_id, 0.0) + emb * t
        self._steps[agent_id] = self._steps.get(agent_id, 0) + t

    def state(self, agent_id: str) -> tuple[list[float], int]:
        """An agent's running sum of embeddings (weighted by steps) and its step count: what a store keeps."""
        return self._sum[agent_id].tolist(), self._steps[agent_id]

    def restore(self, agent_id: str, total: Sequence[float], steps: int) -> None:
        """Put back a state saved from :meth:`state` (after a restart)."""
        if steps <= 0:
            raise ValueError(f"steps must be > 0, got {steps}")
        self._sum[agent_id] = np.asarray(total, dtype=float)
        self._steps[agent_id] = int(steps)

    def remove(self, agent_id: str) -> None:
        self._sum.pop(agent_id, None)
        self._steps.pop(agent_id, None)

    @property
    def agent_ids(self) -> list[str]:
        return list(self._sum)

    def embeddings(self, agent_ids: Sequence[str] | None = None) -> np.ndarray:
        ids = list(agent_ids) if agent_ids is not None else self.agent_ids
        if not ids:
            return np.zeros((0, 0))
        lengths = {self._sum[a].shape[0] for a in ids}
        if len(lengths) > 1:
            raise ValueError("agents have embeddings of different lengths; pass num_actions to TrajectoryBatch")
        return np.stack([self._sum[a] / self._steps[a] for a in ids])

    def pairwise_distances(self) -> np.ndarray:
        return pairwise_cosine_distances(self.embeddings())

    def diversity_score(self, method: str = "mean") -> float:
        if len(self._sum) < 2:
            return 0.0
        return diversity_score(self.embeddings(), method)
