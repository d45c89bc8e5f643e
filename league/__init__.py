"""The league's own logic: pure Python, numpy and scipy (no Ray, no torch)."""

from league.config import Config, ConfigError, RoleConfig, load_config
from league.diversity import DiversityTracker, TrajectoryBatch, diversity_score, embed_trajectory, pairwise_cosine_distances
from league.elo import EloTable, expected_score
from league.matchmaking import pfsp_probabilities, pfsp_weights
from league.messages import Match
from league.roles import choose_match
from league.nash import NashSolver, build_payoff_matrix, compute_nash_distribution, meta_exploitability, nash_entropy
from league.payoff import PayoffTable
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore, StoreError
from league.tutorial import AgentPool, LeagueMatchmaker, MatchDatabase

__all__ = [
    "AgentPool", "AgentRecord", "AgentType", "Config", "ConfigError", "DiversityTracker", "EloTable",
    "LeagueMatchmaker", "LeagueStore", "Match", "MatchDatabase", "NashSolver", "PayoffTable", "RoleConfig", "StoreError",
    "TrajectoryBatch", "build_payoff_matrix", "choose_match", "compute_nash_distribution", "diversity_score",
    "embed_trajectory", "expected_score", "load_config", "meta_exploitability", "nash_entropy",
    "pairwise_cosine_distances", "pfsp_probabilities", "pfsp_weights",
]
