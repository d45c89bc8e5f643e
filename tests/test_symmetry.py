"""A board game's symmetries (envs.symmetry) and the search learner trained under them."""

from pathlib import Path

import numpy as np
import pyspiel
import pytest
import torch

from envs import NO_ACTION, make_game
from envs.symmetry import Symmetries, board, game_symmetries
from league.config import SearchLearnerConfig, load_config
from policies.expert import Replay, expert_update, make_optimizer
from policies.net import build_policy, policy_spec


@pytest.mark.parametrize("name, count", [("connect_four", 2), ("tic_tac_toe", 8)])
def test_each_symmetry_maps_a_played_game_to_an_equivalent_one(name, count):
    """Play a random game and, beside it, its image under each symmetry (each move mapped):
    every observation is the gathered one, every legal mask too, and the outcome is the same."""
    sym = game_symmetries(make_game(name, 1, seed=0))
    assert len(sym) == count
    game = pyspiel.load_game(name)
    rng = np.random.default_rng(0)
    for k in range(count):
        image_of = np.argsort(sym.actions[k])  # the move that is action a's image: actions[k][b] == a
        for _ in range(20):
            state, image = game.new_initial_state(), game.new_initial_state()
            while not state.is_terminal():
                obs, obs_image = np.array(state.observation_tensor(0)), np.array(image.observation_tensor(0))
                np.testing.assert_array_equal(obs[sym.obs[k]], obs_image)
                mask = np.array(state.legal_actions_mask(), bool)
                np.testing.assert_array_equal(mask[sym.actions[k]], np.array(image.legal_actions_mask(), bool))
                action = int(rng.choice(state.legal_actions()))
                state.apply_action(action)
                image.apply_action(int(image_of[action]))
            assert state.returns() == image.returns()


def test_games_without_known_symmetries_declare_none():
    assert game_symmetries(make_game("kuhn_poker", 1, seed=0)) is None
    assert game_symmetries(make_game("rps", 1, seed=0)) is None


@pytest.mark.parametrize("obs, actions, why", [
    ([[0, 1, 2], [0, 0, 2]], [[0, 1], [1, 0]], "permutation"),
    ([[1, 0, 2]], [[0, 1]], "identity"),
    ([[0, 1, 2]], [[0, 1], [1, 0]], "same S"),
])
def test_malformed_symmetries_are_refused_naming_why(obs, actions, why):
    with pytest.raises(ValueError, match=why):
        Symmetries(np.array(obs), np.array(actions))


def test_a_games_symmetries_must_fit_its_sizes():
    class Game:
        obs_size, num_actions = 5, 2
        symmetries = (np.array([[0, 1, 2], [2, 1, 0]]), np.array([[0, 1], [1, 0]]))

    with pytest.raises(ValueError, match="3 observations and 2 actions, the game has 5 and 2"):
        game_symmetries(Game())
    Game.obs_size = 3
    assert len(game_symmetries(Game())) == 2


def test_a_board_group_the_board_does_not_have_is_refused():
    with pytest.raises(ValueError, match="square"):
        board((1, 2, 3), "cells", "square")


def test_training_under_the_mirror_teaches_the_mirrored_position_its_mirrored_target():
    """One Connect Four position (the first stone in the leftmost column) and its target, never
    its mirror image: trained under the game's symmetries, the network plays the target on the
    position and the reversed target on its image (the first stone in the rightmost column)."""
    sym = game_symmetries(make_game("connect_four", 1, seed=0))
    game = pyspiel.load_game("connect_four")

    def after(column):
        state = game.new_initial_state()
        state.apply_action(column)
        return (np.array([state.observation_tensor(1)], np.float32),
                np.array([state.legal_actions_mask()], bool))

    obs, mask = after(0)
    image_obs, image_mask = after(6)
    target = np.array([[0.6, 0.3, 0.1, 0.0, 0.0, 0.0, 0.0]], np.float32)
    torch.manual_seed(0)
    model = build_policy(policy_spec(load_config(None).policy, obs.shape[1], 7))
    cfg = SearchLearnerConfig(lr=3e-3, minibatch_size=64, reuse=100, weight_decay=0.0)
    n = 64
    replay = Replay(1000, obs.shape[1], 7)
    replay.add_rows(np.tile(obs, (n, 1)), np.tile(mask, (n, 1)), np.tile(target, (n, 1)), np.zeros(n, np.float32))
    expert_update(model, make_optimizer(model, cfg), replay, n, cfg, generator=torch.Generator().manual_seed(0),
                  symmetries=sym)
    np.testing.assert_allclose(model.probs(obs, mask)[0], target[0], atol=0.05)
    np.testing.assert_allclose(model.probs(image_obs, image_mask)[0], target[0][::-1], atol=0.05)
    # without the symmetries the image is never trained: it stays far from the reversed target
    torch.manual_seed(0)
    plain = build_policy(policy_spec(load_config(None).policy, obs.shape[1], 7))
    expert_update(plain, make_optimizer(plain, cfg), replay, n, cfg, generator=torch.Generator().manual_seed(0))
    assert np.abs(plain.probs(image_obs, image_mask)[0] - target[0][::-1]).max() > 0.2


def tic_tac_toe_with_wrong_symmetries(num_envs, seed=None, **params):
    """A user's game (``module:factory``) declaring symmetries of the wrong size."""
    game = make_game("tic_tac_toe", num_envs, seed=seed)
    game.symmetries = (np.arange(5)[None], np.arange(9)[None])
    return game


@pytest.mark.parametrize("game, count", [("tic_tac_toe", 8), ("pettingzoo:tests.data.takeaway:env", None)])
def test_symmetries_on_for_a_game_with_or_without_any_is_runnable(game, count):
    """Tic-tac-toe trains under its eight; the take-away game declares none and trains as it is."""
    from actors.preflight import check_runnable

    check_runnable(load_config("configs/tic_tac_toe.yaml", [f"game.name={game}", "search_learner.symmetries=true"]))
    found = game_symmetries(make_game(game, 1, seed=0))
    assert (None if found is None else len(found)) == count


def test_a_users_game_with_symmetries_that_do_not_fit_is_refused_before_ray_in_one_line():
    from actors.preflight import check_runnable
    from league.config import ConfigError

    cfg = load_config("configs/tic_tac_toe.yaml", ["game.name=tests.test_symmetry:tic_tac_toe_with_wrong_symmetries",
                                                   "search_learner.symmetries=true"])
    with pytest.raises(ConfigError) as err:
        check_runnable(cfg)
    assert err.value.key == "search_learner.symmetries" and "\n" not in str(err.value)
    assert "5 observations and 9 actions, the game has 27 and 9" in str(err.value)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dots_and_boxes"


@pytest.mark.parametrize("name, params, count", [
    ("boxes.vector:DotsAndBoxes", {"rows": 2, "cols": 2}, 8),
    ("boxes.vector:DotsAndBoxes", {"rows": 2, "cols": 3}, 4),
    ("pettingzoo:boxes.aec:env", {"rows": 2, "cols": 2}, 8),
])
def test_a_users_declared_symmetries_map_its_games_to_equivalent_ones(monkeypatch, name, params, count):
    """The example's Dots and Boxes declares its board's symmetries, in both forms: a random game in
    environment 0 and its image in environment 1 (each move mapped) show gathered observations and
    masks to the mover, and end with the same returns."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    game = make_game(name, 2, seed=0, **params)
    sym = game_symmetries(game)
    assert len(sym) == count
    rng = np.random.default_rng(0)
    for k in range(count):
        image_of = np.argsort(sym.actions[k])
        for _ in range(5):
            game.reset()
            done = False
            while not done:
                movers = game.movers()
                np.testing.assert_array_equal(movers[0], movers[1])
                seat = int(np.argmax(movers[0]))
                obs, mask = game.observe(seat, np.array([0, 1]))
                np.testing.assert_array_equal(obs[0][sym.obs[k]], obs[1])
                np.testing.assert_array_equal(mask[0][sym.actions[k]], mask[1])
                action = int(rng.choice(np.flatnonzero(mask[0])))
                actions = np.full((2, 2), NO_ACTION)
                actions[0, seat], actions[1, seat] = action, image_of[action]
                step = game.step(actions)
                assert step.done[0] == step.done[1]
                done = bool(step.done[0])
            np.testing.assert_array_equal(step.returns[0], step.returns[1])
