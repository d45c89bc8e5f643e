"""Objectives across k opponents (league.objectives), without Ray: config, the worker's groups,
the learner's use of a shaper, the shipped shapers and a shaper's checkpointed state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from envs import make_game
from league.config import ConfigError, ObjectiveConfig, load_config
from league.messages import EpisodeGroups
from league.objectives import (Group, LearnerObjective, ShaperError, apply_shaper, decode_state, diversity,
                               encode_state, groups_of, novelty, resolve_shaper)
from policies.net import ActorCritic, PolicySpec
from policies.ppo import PPOConfig, make_optimizer, ppo_update
from policies.rollout import Rollout, collect_rollout

REPO = Path(__file__).resolve().parents[1]
KEY = "roles.main_agent.objective"


# -- shapers used by the tests (named in config as tests.test_objectives:NAME) -------------------

def identity_shaper(groups, state):
    """The plain returns: training with it must equal training without a shaper."""
    return np.array([g.outcomes for g in groups])


def recording_shaper(groups, state, path):
    """The plain returns; writes down every group it is given (one JSON line each)."""
    import json

    with open(path, "a", encoding="utf-8") as f:
        for g in groups:
            f.write(json.dumps({"id": g.group_id, "source": g.source, "version": g.version, "opponents": g.opponents,
                                "outcomes": g.outcomes.tolist(), "update": state.get("updates", 0), "acted": g.acted.tolist(),
                                "rewards": [None if t is None else t.rewards.tolist() for t in g.trajectories],
                                "episodes": [None if t is None else t.num_episodes for t in g.trajectories]}) + "\n")
    state["updates"] = state.get("updates", 0) + 1
    return np.array([g.outcomes for g in groups])


def raising_shaper(groups, state):
    state["calls"] = state.get("calls", 0) + 1
    raise RuntimeError("shaper failed on purpose")


def wrong_shape_shaper(groups, state):
    return np.zeros(len(groups) + 1)


def nan_shaper(groups, state):
    return np.full((len(groups), groups[0].k), np.nan)


# -- config --------------------------------------------------------------------------------

def test_objective_defaults_to_one_opponent_and_no_shaper():
    cfg = load_config(None, [])
    for role in ("main_agent", "main_exploiter", "league_exploiter"):
        objective = getattr(cfg.roles, role).objective
        assert (objective.k_opponents, objective.shaper, objective.grouped) == (1, None, False)


def test_objective_options_parse_and_a_shaper_alone_groups_by_one():
    cfg = load_config(None, [f"{KEY}.k_opponents=4", f"{KEY}.shaper=novelty", f"{KEY}.params={{weight: 0.5}}",
                             "roles.league_exploiter.objective.shaper=tests.test_objectives:identity_shaper"])
    assert cfg.roles.main_agent.objective == ObjectiveConfig(4, "novelty", {"weight": 0.5})
    assert cfg.roles.main_agent.self_play == 0.35  # the role's other defaults stay
    assert cfg.roles.league_exploiter.objective.grouped and cfg.roles.league_exploiter.objective.k_opponents == 1


@pytest.mark.parametrize("override, key", [
    (f"{KEY}.k_opponents=0", f"{KEY}.k_opponents"),
    (f"{KEY}.shaper=no_such_module_xyz:fn", f"{KEY}.shaper"),
    (f"{KEY}.shaper=league.objectives:no_such_function", f"{KEY}.shaper"),
    (f"{KEY}.shaper=novelty_without_colon", f"{KEY}.shaper"),
    (f"{KEY}.shaper=novelty", None),  # fine alone; with a bad param below
])
def test_bad_objective_values_name_the_key(override, key):
    if key is None:
        load_config(None, [override])
        with pytest.raises(ConfigError) as err:
            load_config(None, [override, f"{KEY}.params={{neighbours: 0}}"])
        assert err.value.key == f"{KEY}.params"
        with pytest.raises(ConfigError) as err:
            load_config(None, [override, f"{KEY}.params={{no_such_param: 1}}"])
        assert err.value.key == f"{KEY}.params"
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert err.value.key == key


def test_launcher_stops_on_a_bad_shaper_path_with_one_line_before_ray_starts():
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml",
                          f"{KEY}.shaper=no_such_module_xyz:fn"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{KEY}.shaper" in lines[0] and "no_such_module_xyz" in lines[0], out.stderr
    assert "ray" not in out.stdout.lower()


def test_episode_groups_reject_malformed_columns():
    ok = dict(source="w", ids=[1], version=[3], opponents=("a", "b"), opponent=[[0, 1]], outcomes=[[1.0, -1.0]],
              played=[[True, True]], acted=[[3, 3]])
    assert EpisodeGroups(**ok).episodes == 2
    for name, value in (("opponent", [[0, 2]]), ("outcomes", [[1.0]]), ("outcomes", [[np.nan, 0.0]]),
                        ("version", [3, 4]), ("source", ""), ("seq", "1"), ("seq", True)):
        with pytest.raises(ValueError):
            EpisodeGroups(**{**ok, name: value})


# -- the learner's side ----------------------------------------------------------------------

def two_groups():
    """Two groups of k = 2 on biased RPS: the learner played in three episodes (one it did not act in)."""
    rollout = Rollout(obs=np.eye(2)[[0, 1, 0]], mask=np.ones((3, 3)), actions=[0, 1, 2], logp=[-1.0] * 3,
                      values=[0.0] * 3, rewards=[2.0, -1.0, 1.0], dones=[True] * 3)
    groups = EpisodeGroups("worker:x", [5, 6], [1, 1], ("a", "b"), [[0, 1], [1, 1]], [[2.0, -1.0], [0.5, 1.0]],
                           [[True, True], [False, True]], [[1, 1], [-1, 1]])
    return rollout, groups


def test_groups_of_gives_each_group_its_k_episodes_trajectories_and_outcomes():
    rollout, groups = two_groups()
    g0, g1 = groups_of(rollout, [groups])
    assert (g0.group_id, g0.source, g0.version, g0.opponents) == (5, "worker:x", 1, ("a", "b"))
    assert [t.actions.tolist() for t in g0.trajectories] == [[0], [1]]
    assert g0.outcomes.tolist() == [2.0, -1.0] and g1.opponents == ("b", "b")
    assert g1.trajectories[0] is None and g1.trajectories[1].rewards.tolist() == [1.0]


def test_a_shaper_that_fails_raises_shaper_error_and_leaves_its_state_alone():
    rollout, groups = two_groups()
    gs = groups_of(rollout, [groups])
    state = {"calls": 5}
    for shaper, text in ((raising_shaper, "failed on purpose"), (wrong_shape_shaper, "shape"),
                         (nan_shaper, "non-finite")):
        with pytest.raises(ShaperError, match=text):
            apply_shaper(shaper, gs, state)
    assert state == {"calls": 5}
    assert apply_shaper(identity_shaper, gs, state).tolist() == [[2.0, -1.0], [0.5, 1.0]]


def test_learner_objective_puts_shaped_rewards_on_the_played_episodes_and_measures_the_gap():
    rollout, groups = two_groups()
    objective = LearnerObjective(ObjectiveConfig(2, "tests.test_objectives:identity_shaper"))
    out = objective.prepare(rollout, [groups])
    assert out.rewards.tolist() == [2.0, -1.0, 1.0] and objective.stats["reward_gap"] == 0.0
    objective = LearnerObjective(ObjectiveConfig(2, "novelty", {"weight": 0.0}))
    out = objective.prepare(rollout, [groups])  # empty archive: novelty 0 for everyone
    assert out.rewards.tolist() == [0.0, 0.0, 0.0] and objective.stats["reward_gap"] == pytest.approx(-2 / 3)
    with pytest.raises(ShaperError):
        LearnerObjective(ObjectiveConfig(2, "tests.test_objectives:raising_shaper")).prepare(rollout, [groups])


def train(rollout, objective=None, parts=()):
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(2, 3, hidden=(8,)))
    cfg = PPOConfig(epochs=2, minibatch_size=64)
    data = objective.prepare(rollout, list(parts)) if objective is not None else rollout
    ppo_update(model, make_optimizer(model, cfg), data, cfg, generator=torch.Generator().manual_seed(1))
    return data, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_k1_without_shaper_trains_exactly_as_plain_ppo_to_the_bit_on_a_matrix_game():
    """Same seed, same rollout of biased RPS: the learner's objective with the defaults hands PPO the
    rollout as it is (the same rewards, bit for bit), and the trained weights are identical."""
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(2, 3, hidden=(8,)))
    rollout, _ = collect_rollout(make_game("biased_rps", 64, seed=0), model, lambda o, m: np.zeros(len(o), dtype=np.int64),
                                 512, np.random.default_rng(3))
    plain, w_plain = train(rollout)
    objective = LearnerObjective(ObjectiveConfig())
    same, w_same = train(rollout, objective)
    assert same is rollout and same.rewards.tobytes() == plain.rewards.tobytes()
    assert w_same.numpy().tobytes() == w_plain.numpy().tobytes()
    assert objective.stats["reward_gap"] == 0.0
    # the identity shaper on groups of one also trains to the same bits (rewards are float32 returns)
    n = rollout.num_episodes
    parts = [EpisodeGroups("w", np.arange(n), np.zeros(n), ("x",), np.zeros((n, 1)),
                           rollout.episode_returns()[:, None], np.ones((n, 1), dtype=bool), np.zeros((n, 1)))]
    shaped, w_shaped = train(rollout, LearnerObjective(ObjectiveConfig(1, "tests.test_objectives:identity_shaper")),
                             parts)
    assert np.array_equal(shaped.rewards, rollout.rewards)  # equal numbers (a draw's -0.0 may come back as 0.0)
    assert w_shaped.numpy().tobytes() == w_plain.numpy().tobytes()


# -- shipped shapers -------------------------------------------------------------------------

def group(outcomes, actions=None, num_actions=3):
    trajectories = [None] * len(outcomes)
    if actions is not None:
        trajectories = [Rollout(obs=np.zeros((len(a), 2)), mask=np.ones((len(a), num_actions)), actions=a,
                                logp=np.zeros(len(a)), values=np.zeros(len(a)), rewards=np.zeros(len(a)),
                                dones=np.arange(len(a)) == len(a) - 1) for a in actions]
    return Group(0, "w", 0, tuple("o" * len(outcomes)), np.asarray(outcomes, dtype=float), trajectories)


def test_novelty_is_the_distance_to_the_nearest_earlier_outcome_vectors_mixed_with_the_return():
    state: dict = {}
    first = novelty([group([0.0, 0.0])], state, weight=0.5, neighbours=2)
    assert first.tolist() == [[0.0, 0.0]]  # empty archive: novelty 0, and 0.5 x return 0
    novelty([group([0.0, 6.0])], state, neighbours=2)  # archive: (0, 0), (0, 6)
    out = novelty([group([4.0, 3.0]), group([0.0, 0.0])], state, weight=0.5, neighbours=2)
    # sorted (3, 4): distances 5 to (0, 0) and sqrt(9 + 4) to (0, 6); (0, 0): 0 and 6
    assert out[0] == pytest.approx([(5 + 13 ** 0.5) / 2 + 2.0, (5 + 13 ** 0.5) / 2 + 1.5])
    assert out[1] == pytest.approx([3.0, 3.0])
    assert state["archive"].shape == (4, 2)
    novelty([group([1.0, 1.0])] * 10, state, archive_size=3)
    assert state["archive"].shape == (3, 2)  # the oldest dropped


def test_diversity_bonus_is_the_cosine_distance_of_behaviour_to_earlier_groups():
    state: dict = {}
    assert diversity([group([1.0, -1.0], [[0, 0], [0]])], state, weight=2.0).tolist() == [[1.0, -1.0]]
    out = diversity([group([1.0, -1.0], [[1], [1, 1]]), group([0.0, 0.0], [[0], [0]])], state, weight=2.0)
    # action 1 only is orthogonal to action 0 only: cosine distance 1; the same behaviour: 0
    assert out.tolist() == [[3.0, 1.0], [0.0, 0.0]]


def test_resolve_shaper_binds_params_and_the_state_survives_a_checkpoint():
    fn = resolve_shaper("novelty", {"weight": 1.0})
    state: dict = {}
    fn([group([1.0, 2.0])], state)
    back = decode_state(encode_state(state))
    assert np.array_equal(back["archive"], state["archive"]) and back["archive"].dtype == np.float64
    with pytest.raises(ShaperError, match="checkpointable"):
        encode_state({"x": object()})
