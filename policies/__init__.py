"""torch side of the league: masked actor-critic nets (MLP, residual conv, a user's
module), the PPO update, two-seat rollouts and lanes, and snapshot blobs."""

from policies.net import ActorCritic, ConvActorCritic, PolicyNet, PolicyNetError, PolicySpec, build_policy
from policies.ppo import PPOConfig, make_optimizer, ppo_update
from policies.rollout import Rollout, collect_rollout
from policies.snapshot import (
    learner_state_from_bytes,
    learner_state_to_bytes,
    policy_from_bytes,
    policy_to_bytes,
)

__all__ = [
    "ActorCritic",
    "ConvActorCritic",
    "PolicyNet",
    "PolicyNetError",
    "PolicySpec",
    "build_policy",
    "PPOConfig",
    "make_optimizer",
    "ppo_update",
    "Rollout",
    "collect_rollout",
    "policy_to_bytes",
    "policy_from_bytes",
    "learner_state_to_bytes",
    "learner_state_from_bytes",
]
