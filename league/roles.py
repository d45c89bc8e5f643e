"""When a learner snapshots itself into the pool and when it resets.

AlphaStar (Vinyals et al. 2019, Methods, "League composition"):
- main agents snapshot every N steps and never reset;
- main exploiters snapshot once they beat every current main agent more than
  70% of the time, or after N steps, and then always reset;
- league exploiters snapshot once they beat every player of the pool more
  than 70% of the time, or after N steps, and then reset with probability 0.25.
Thresholds and budgets come from ``RoleConfig``. Pure functions: the caller
passes win rates and game counts; randomness comes from the caller's RNG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from league.config import RoleConfig
from league.pool import AgentType


@dataclass(frozen=True)
class SnapshotDecision:
    snapshot: bool
    reason: str


def snapshot_targets(role: AgentType, pool_ids: Sequence[str], main_learners: Sequence[str], own_ids: Sequence[str]) -> list[str]:
    """The opponents whose defeat earns an exploiter its early snapshot."""
    if role == AgentType.MAIN_EXPLOITER:
        return list(main_learners)
    if role == AgentType.LEAGUE_EXPLOITER:
        own = set(own_ids)
        return [a for a in pool_ids if a not in own]
    return []


def should_snapshot(
    role: AgentType,
    cfg: RoleConfig,
    steps_since_snapshot: int,
    target_win_rates: Sequence[float] = (),
    target_games: Sequence[float] = (),
) -> SnapshotDecision:
    if steps_since_snapshot >= cfg.snapshot_every_steps:
        return SnapshotDecision(True, "steps")
    if role == AgentType.MAIN_AGENT or steps_since_snapshot < cfg.min_steps_before_snapshot:
        return SnapshotDecision(False, "")
    rates = np.asarray(target_win_rates, dtype=float)
    games = np.asarray(target_games, dtype=float)
    if rates.size == 0 or games.size != rates.size:
        return SnapshotDecision(False, "")
    if np.all(games >= cfg.min_games_for_snapshot) and np.all(rates > cfg.snapshot_win_rate):
        return SnapshotDecision(True, "win_rate")
    return SnapshotDecision(False, "")


def should_reset(cfg: RoleConfig, rng: np.random.Generator) -> bool:
    """After a snapshot: main exploiters always (p=1), league exploiters with
    probability 0.25, main agents never (p=0)."""
    p = cfg.reset_probability
    return p >= 1.0 or (p > 0.0 and rng.random() < p)
