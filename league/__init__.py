"""The league's own logic: pure Python, numpy and scipy (no Ray, no torch).

The names below are imported on first use (PEP 562), so that a process importing one module of the
league (a rollout worker reading ``league.config``) does not pay for the others (``league.nash``
loads scipy's LP solver)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "league.config": ("Config", "ConfigError", "RoleConfig", "load_config"),
    "league.diversity": ("DiversityTracker", "TrajectoryBatch", "diversity_score", "embed_trajectory",
                         "pairwise_cosine_distances"),
    "league.elo": ("EloTable", "expected_score"),
    "league.matchmaking": ("pfsp_probabilities", "pfsp_weights"),
    "league.messages": ("Match",),
    "league.roles": ("choose_match",),
    "league.nash": ("NashSolver", "build_payoff_matrix", "compute_nash_distribution", "meta_exploitability",
                    "nash_entropy"),
    "league.payoff": ("PayoffTable",),
    "league.pool": ("AgentRecord", "AgentType"),
    "league.store": ("LeagueStore", "StoreError"),
    "league.tutorial": ("AgentPool", "LeagueMatchmaker", "MatchDatabase"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'league' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
