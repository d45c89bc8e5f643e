"""envs/: matrix games, the OpenSpiel adapter, make_game/game_info, bad input."""

from __future__ import annotations

import numpy as np
import pyspiel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs import NO_ACTION, GameInfo, MatrixGame, game_info, make_game, outcome_from_returns
from envs.gym import SingleSeatEnv
from envs.matrix import KNOWN_GAMES
from envs.openspiel import chance_rng, sample_chance

OPENSPIEL_GAMES = ["kuhn_poker", "leduc_poker", "tic_tac_toe", "connect_four"]


def random_legal_actions(game, rng):
    movers = game.movers()
    actions = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
    for seat in (0, 1):
        envs = np.flatnonzero(movers[:, seat])
        if envs.size:
            _, mask = game.observe(seat, envs)
            actions[envs, seat] = (rng.random(mask.shape) * mask).argmax(axis=1)
    return actions


# --------------------------------------------------------------------- matrix
def test_matrix_returns_equal_payoff_entries_for_every_action_pair():
    payoff = np.array([[3.0, -1.0, 0.5], [-2.0, 4.0, 1.5]])  # non-square: 2 rows, 3 columns
    pairs = np.array([(i, j) for i in range(2) for j in range(3)])
    game = make_game("matrix", len(pairs), payoff=payoff.tolist())
    result = game.step(pairs)
    assert result.done.all()
    np.testing.assert_array_equal(result.returns[:, 0], payoff[pairs[:, 0], pairs[:, 1]])
    np.testing.assert_array_equal(result.returns[:, 1], -payoff[pairs[:, 0], pairs[:, 1]])


def test_non_square_matrix_pads_actions_with_illegal_masks_per_seat():
    game = MatrixGame([[1, 2, 3], [4, 5, 6]], num_envs=3)
    assert game.num_actions == 3
    _, m0 = game.observe(0)
    _, m1 = game.observe(1)
    np.testing.assert_array_equal(m0, [[True, True, False]] * 3)
    np.testing.assert_array_equal(m1, [[True, True, True]] * 3)
    with pytest.raises(ValueError, match="illegal action 2 for seat 0"):
        game.step(np.array([[0, 0], [2, 1], [1, 2]]))


@pytest.mark.parametrize("name", sorted(KNOWN_GAMES))
def test_known_matrix_nash_is_an_equilibrium_with_the_stated_value(name):
    game = make_game(name, 1)
    A = np.asarray(KNOWN_GAMES[name][0], dtype=float)
    x, y, v = np.array(game.known_nash.row), np.array(game.known_nash.col), game.known_nash.value
    assert x.sum() == pytest.approx(1) and y.sum() == pytest.approx(1)
    assert x @ A @ y == pytest.approx(v, abs=1e-12)
    assert (A @ y).max() == pytest.approx(v, abs=1e-12)  # no row deviation gains
    assert (x @ A).min() == pytest.approx(v, abs=1e-12)  # no column deviation gains


def test_biased_rps_nash_is_one_quarter_one_half_one_quarter():
    game = make_game("biased_rps", 1)
    assert game.known_nash.row == (0.25, 0.5, 0.25)
    np.testing.assert_array_equal(game.payoff, [[0, -1, 2], [1, 0, -1], [-2, 1, 0]])


def test_matrix_best_response_to_a_mixture_comes_from_the_matrix():
    game = make_game("biased_rps", 1)
    # vs (0.25, 0.25, 0.5): row payoffs (0.75, -0.25, -0.25) -> rock; the column player likewise rock
    assert game.best_response([0.25, 0.25, 0.5], seat=0).tolist() == [0]
    assert game.best_response([0.25, 0.25, 0.5], seat=1).tolist() == [0]
    # vs (0.5, 0.25, 0.25) rock and paper tie at 0.25
    assert game.best_response([0.5, 0.25, 0.25], seat=0).tolist() == [0, 1]


def test_matrix_observation_is_the_seat_one_hot():
    game = make_game("rps", 4)
    obs0, _ = game.observe(0)
    obs1, _ = game.observe(1, np.array([1, 3]))
    np.testing.assert_array_equal(obs0, [[1, 0]] * 4)
    np.testing.assert_array_equal(obs1, [[0, 1]] * 2)
    assert game.movers().all()


# ------------------------------------------------------------------- openspiel
def reference_run(game_name, seed, env_index, actions_per_step, check):
    """A plain single-environment pyspiel loop that samples chance as the
    adapter documents; ``check(step, state)`` sees its state before each step."""
    game = pyspiel.load_game(game_name)
    rng = chance_rng(seed, env_index)

    def resolve(state):
        while state.is_chance_node():
            state.apply_action(sample_chance(state.chance_outcomes(), rng.random()))
        return state

    state = resolve(game.new_initial_state())
    returns = []
    for t, acts in enumerate(actions_per_step):
        check(t, state)
        p = state.current_player()
        state.apply_action(int(acts[p]))
        resolve(state)
        if state.is_terminal():
            returns.append((t, state.returns()))
            state = resolve(game.new_initial_state())
    return state, returns


@pytest.mark.parametrize("game_name", OPENSPIEL_GAMES)
def test_vector_adapter_matches_plain_openspiel_loop_with_chance(game_name):
    E, seed, steps = 5, 1234, 60
    game = make_game(game_name, E, seed=seed)
    rng = np.random.default_rng(7)
    tensor_name = "information_state_tensor" if game_name in ("kuhn_poker", "leduc_poker") else "observation_tensor"
    log_actions, log_obs, log_masks, log_done, log_returns = [], [], [], [], []
    for _ in range(steps):
        log_obs.append([game.observe(s)[0] for s in (0, 1)])
        log_masks.append([game.observe(s)[1] for s in (0, 1)])
        actions = random_legal_actions(game, rng)
        log_actions.append(actions)
        result = game.step(actions)
        log_done.append(result.done)
        log_returns.append(result.returns)
    assert np.concatenate(log_done).any(), "the test should cover episode ends and resets"

    for e in range(E):
        def check(t, state):
            for seat in (0, 1):
                expected = np.asarray(getattr(state, tensor_name)(seat), dtype=np.float32)
                np.testing.assert_array_equal(log_obs[t][seat][e], expected)
                mask = np.zeros(game.num_actions, dtype=bool)
                if state.current_player() == seat:
                    mask[state.legal_actions(seat)] = True
                np.testing.assert_array_equal(log_masks[t][seat][e], mask)

        final_state, ref_returns = reference_run(game_name, seed, e, [a[e] for a in log_actions], check)
        done_steps = [t for t in range(steps) if log_done[t][e]]
        assert done_steps == [t for t, _ in ref_returns]
        for t, ret in ref_returns:
            np.testing.assert_array_equal(log_returns[t][e], ret)
        assert game.history(e) == final_state.history()


def test_chance_streams_are_per_environment_and_reset_with_the_seed():
    a = make_game("leduc_poker", 4, seed=3)
    b = make_game("leduc_poker", 1, seed=3)
    assert a.history(0) == b.history(0)  # env 0 deals the same cards whatever the vector size
    deals = [a.history(e) for e in range(4)]
    assert len({tuple(d) for d in deals}) > 1
    a.step(random_legal_actions(a, np.random.default_rng(0)))
    a.reset(seed=3)
    assert [a.history(e) for e in range(4)] == deals


def test_simultaneous_openspiel_game_moves_both_seats():
    game = make_game("goofspiel", 3, seed=0, num_cards=4, imp_info=True)
    assert game.simultaneous and game.movers().all()
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(20):
        result = game.step(random_legal_actions(game, rng))
        finished += result.done.sum()
        np.testing.assert_allclose(result.returns.sum(axis=1), 0.0)
    # 4 cards: 3 simultaneous bids (the last card is forced), so 20 steps = 6 episodes per env
    assert finished == 3 * 6


@pytest.mark.parametrize("name", ["rps", "biased_rps", "matching_pennies", *OPENSPIEL_GAMES])
def test_game_info_matches_the_built_game(name):
    game = make_game(name, 2, seed=0)
    info = game_info(name)
    assert info == GameInfo(game.obs_size, game.num_actions, game.supports_exact, game.obs_shape, game.channels_last)
    obs, mask = game.observe(0)
    assert obs.shape == (2, info.obs_size) and obs.dtype == np.float32
    assert mask.shape == (2, info.num_actions) and mask.dtype == bool


@pytest.mark.parametrize("name, exact", [("rps", True), ("biased_rps", True), ("kuhn_poker", True),
                                         ("leduc_poker", True), ("tic_tac_toe", False), ("connect_four", False),
                                         ("liars_dice", False)])
def test_games_declare_exact_evaluation(name, exact):
    """Matrix games and sequential perfect-recall games with at most 10^7 histories by the
    bound chance^nodes * actions^length (Kuhn 72, Leduc ~1.4M; Liar's Dice ~10^16;
    tic-tac-toe has no information-state tensor)."""
    assert make_game(name, 1).supports_exact is exact
    assert game_info(name).supports_exact is exact


def test_outcome_from_returns_scores_seat_zero():
    np.testing.assert_array_equal(outcome_from_returns(np.array([[1, -1], [0, 0], [-2, 2]])), [1.0, 0.5, 0.0])


# ------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "name, params, message",
    [
        ("no_such_game", {}, "cannot load OpenSpiel game"),
        ("matrix_pd", {}, "GENERAL_SUM"),  # prisoner's dilemma is general-sum
        ("kuhn_poker", {"players": 3}, "3 players"),
        ("matrix", {}, "payoff"),
        ("rps", {"payoff": [[1]]}, "takes no parameters"),
        ("", {}, "non-empty"),
    ],
)
def test_make_game_rejects_bad_games_with_a_clear_message(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_game(name, 2, **params)


def snapshot(game):
    return ([game.history(e) for e in range(game.num_envs)], game.movers(),
            [game.observe(s) for s in (0, 1)])


def assert_same_snapshot(a, b):
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    for (o1, m1), (o2, m2) in zip(a[2], b[2]):
        np.testing.assert_array_equal(o1, o2)
        np.testing.assert_array_equal(m1, m2)


def test_bad_actions_raise_and_leave_every_environment_untouched():
    game = make_game("tic_tac_toe", 4, seed=0)
    game.step(np.array([[4, NO_ACTION]] * 4))  # seat 0 takes the centre everywhere
    before = snapshot(game)
    good = np.array([[NO_ACTION, 0]] * 4)
    cases = {
        "shape": good[:3],
        "flat": good.reshape(-1),
        "dtype": good.astype(np.float64),
        "occupied cell": np.array([[NO_ACTION, 0], [NO_ACTION, 1], [NO_ACTION, 4], [NO_ACTION, 2]]),
        "out of range": np.array([[NO_ACTION, 0], [NO_ACTION, 1], [NO_ACTION, 9], [NO_ACTION, 2]]),
        "not the mover": np.array([[NO_ACTION, 0], [3, 1], [NO_ACTION, 5], [NO_ACTION, 2]]),
        "mover silent": np.array([[NO_ACTION, 0], [NO_ACTION, 1], [NO_ACTION, NO_ACTION], [NO_ACTION, 2]]),
    }
    for what, actions in cases.items():
        with pytest.raises(ValueError):
            game.step(actions)
        assert_same_snapshot(before, snapshot(game))
    game.step(good)  # still usable
    assert [game.history(e)[-1] for e in range(4)] == [0, 0, 0, 0]


def test_matrix_bad_actions_raise_before_any_env_is_scored():
    game = make_game("matching_pennies", 3)
    with pytest.raises(ValueError, match="NO_ACTION"):
        game.step(np.array([[0, 1], [1, NO_ACTION], [0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        game.step(np.array([0, 1, 0]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(-2, 3), st.integers(-2, 3)), min_size=3, max_size=3))
def test_any_action_array_either_steps_or_changes_nothing(rows):
    game = make_game("kuhn_poker", 3, seed=11)
    before = snapshot(game)
    movers = game.movers()
    actions = np.array(rows, dtype=np.int64)
    legal = all(
        (actions[e, s] in (0, 1)) if movers[e, s] else actions[e, s] == NO_ACTION
        for e in range(3) for s in (0, 1)
    )
    if legal:
        game.step(actions)
        assert all(len(game.history(e)) == len(before[0][e]) + 1 for e in range(3))
    else:
        with pytest.raises(ValueError):
            game.step(actions)
        assert_same_snapshot(before, snapshot(game))


# ------------------------------------------------------------------------ gym
def test_gym_view_pays_the_matrix_entry_against_a_fixed_opponent():
    always_heads = lambda obs, mask: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    env = SingleSeatEnv("matching_pennies", opponent=always_heads, seat=0)
    obs, info = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [1, 0])
    assert env.step(0)[1:4] == (1.0, True, False)
    env.reset()
    assert env.step(1)[1:4] == (-1.0, True, False)
    env = SingleSeatEnv("matching_pennies", opponent=always_heads, seat=1)
    env.reset(seed=0)
    assert env.step(0)[1] == -1.0  # the column player loses on a match


def test_gym_view_of_kuhn_reaches_the_agent_turn_and_rejects_illegal_actions():
    env = SingleSeatEnv("kuhn_poker", seat=1, seed=0)
    obs, info = env.reset(seed=0)
    assert obs.shape == (11,) and obs[1] == 1.0  # Kuhn's tensor starts with the player one-hot
    assert info["action_mask"].tolist() == [True, True]
    episodes = 0
    while episodes < 50:
        obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        if terminated:
            assert reward in (-2.0, -1.0, 1.0, 2.0)
            episodes += 1
            obs, info = env.reset()
        else:
            assert reward == 0.0 and obs[1] == 1.0
    with pytest.raises(ValueError, match="illegal action"):
        env.step(5)
