"""The search learner's update (policies.expert): targets, replay, and that it learns them."""

import numpy as np
import pytest
import torch

from league.config import ConfigError, SearchLearnerConfig, load_config
from policies.expert import Replay, expert_update, make_optimizer, outcomes
from policies.net import build_policy, policy_spec
from policies.rollout import EpisodeRecorder, Rollout


def _rollout(n_actions=3, targets=None, rewards=(0, 0, 1, 0, -1), dones=(0, 0, 1, 0, 1)):
    n = len(rewards)
    return Rollout(obs=np.eye(n, 4, dtype=np.float32), mask=np.ones((n, n_actions), bool), actions=np.zeros(n),
                   logp=np.zeros(n), values=np.full(n, 0.5), rewards=rewards, dones=dones, targets=targets)


def test_outcomes_are_each_decisions_return_to_its_episodes_end():
    r = _rollout(rewards=(0.0, 0.25, 1.0, 0.0, -1.0))
    np.testing.assert_allclose(outcomes(r), [1.25, 1.25, 1.0, -1.0, -1.0])


def test_a_rollout_without_targets_has_an_empty_target_column_and_is_not_searched():
    r = _rollout()
    assert r.targets.shape == (5, 0) and not r.searched
    with pytest.raises(ValueError, match="no targets"):
        Replay(10, 4, 3).add(r)


def test_the_replay_keeps_the_newest_positions_and_mixes_the_search_value_in():
    t = np.tile(np.array([[0.2, 0.3, 0.5]], np.float32), (5, 1))
    replay = Replay(4, 4, 3)
    assert replay.add(_rollout(targets=t), value_mix=0.5) == 5
    assert len(replay) == 4 and replay.added == 5
    # the 5th position overwrote the 1st; values are 0.5 * outcome + 0.5 * 0.5
    np.testing.assert_allclose(sorted(replay.value.tolist()), sorted([0.75, 0.75, -0.25, -0.25]))
    assert replay.obs[0, 4 - 1] == 0.0 and replay.obs[0].sum() == 0  # row 4 of eye(5, 4) is zero


def test_the_update_moves_the_network_to_the_search_policy_and_the_outcome():
    torch.manual_seed(0)
    spec = policy_spec(load_config(None).policy, 4, 3)
    model = build_policy(spec)
    cfg = SearchLearnerConfig(lr=3e-3, minibatch_size=64, reuse=50, weight_decay=0.0)
    target = np.array([0.7, 0.0, 0.3], np.float32)
    mask = np.array([True, False, True])
    n = 64
    rollout = Rollout(obs=np.tile([1, 0, 0, 0], (n, 1)), mask=np.tile(mask, (n, 1)), actions=np.zeros(n),
                      logp=np.zeros(n), values=np.zeros(n), rewards=np.where(np.arange(n) % 2, -0.4, 0.0),
                      dones=np.arange(n) % 2 == 1, targets=np.tile(target, (n, 1)))
    replay = Replay(1000, 4, 3)
    stats = expert_update(model, make_optimizer(model, cfg), replay, replay.add(rollout), cfg,
                          generator=torch.Generator().manual_seed(0))
    probs = model.probs(rollout.obs[:1], rollout.mask[:1])[0]
    np.testing.assert_allclose(probs, target, atol=0.03)
    with torch.no_grad():
        _, v = model(torch.from_numpy(rollout.obs[:1]), torch.from_numpy(rollout.mask[:1]))
    assert abs(float(v[0]) - (-0.4)) < 0.05  # every decision's outcome is -0.4
    # the cross entropy's floor is the target's entropy
    assert stats["num_minibatches"] == 50 and stats["target_entropy"] == pytest.approx(0.6109, abs=1e-3)


def test_the_recorder_carries_search_targets_with_their_decisions():
    rec = EpisodeRecorder()
    t = np.array([[1, 0], [0, 1]], np.float32)
    rec.add(np.array([7, 8]), np.zeros((2, 3)), np.ones((2, 2), bool), np.array([0, 1]), np.zeros(2), np.zeros(2),
            targets=t)
    rec.finish(np.array([8]), np.array([1.0]), np.array([1]))
    out = rec.take()
    np.testing.assert_array_equal(out.targets, t[1:])
    rec.finish(np.array([7]), np.array([-1.0]), np.array([1]))
    np.testing.assert_array_equal(rec.take().targets, t[:1])


def test_search_learner_settings_are_checked_and_named():
    with pytest.raises(ConfigError, match="search_learner.considered"):
        load_config(None, ["search_learner.simulations=8", "search_learner.considered=16"])
    with pytest.raises(ConfigError, match="roles.main_agent.learner"):
        load_config(None, ["roles.main_agent.learner=mcts"])


@pytest.mark.parametrize("overrides, key, why", [
    (["game.name=kuhn_poker"], "roles.main_agent.learner", "kuhn_poker: search and exact enumeration need a "
                                                           "deterministic game of perfect information taking turns"),
    (["ppo.magnet_coef=0.1"], "roles.main_agent.learner", "the search learner has no magnet"),
    (["roles.main_agent.objective.k_opponents=2"], "roles.main_agent.objective", "for PPO learners"),
])
def test_a_search_learner_on_what_it_cannot_learn_from_is_refused_before_ray_naming_the_key(overrides, key, why):
    from actors.preflight import check_runnable

    cfg = load_config("configs/tic_tac_toe.yaml", ["evaluator.publish=nash", *overrides])
    with pytest.raises(ConfigError) as err:
        check_runnable(cfg)
    assert err.value.key == key and why in str(err.value) and "\n" not in str(err.value)


def test_greedy_snapshots_of_a_game_with_chance_or_hidden_information_are_refused_before_ray():
    """A pure strategy is no equilibrium of Kuhn poker: ``policy.snapshot_play: greedy`` is refused
    there with one line naming the key and why."""
    from actors.preflight import check_runnable

    check_runnable(load_config("configs/tic_tac_toe.yaml"))  # the shipped greedy config passes
    cfg = load_config("configs/kuhn_poker.yaml", ["policy.snapshot_play=greedy"])
    with pytest.raises(ConfigError) as err:
        check_runnable(cfg)
    assert err.value.key == "policy.snapshot_play" and "\n" not in str(err.value)
    assert "greedy needs a deterministic game of perfect information: kuhn_poker: " in str(err.value)


def test_rollouts_concatenate_past_an_empty_one_without_targets():
    t = np.tile(np.array([[0.5, 0.5, 0.0]], np.float32), (5, 1))
    both = Rollout.concat([Rollout.empty(4, 3), _rollout(targets=t)])
    assert both.searched and len(both) == 5
