"""evaluation.search: PUCT with a network's prior and value, and MCTS-Solver's proofs, against
exact minimax (OpenSpiel's alpha-beta) on positions small enough to solve."""

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python.algorithms.minimax import alpha_beta_search

from envs.openspiel import state_tensor
from policies.net import PolicySpec, build_policy
from evaluation.search import PUCT, SearchSpec, check_searchable


def position(game_name: str, moves: list[int]):
    game = pyspiel.load_game(game_name)
    state = game.new_initial_state()
    for a in moves:
        state.apply_action(a)
    return game, state


def network(game, seed: int = 0):
    torch.manual_seed(seed)
    obs = len(state_tensor(game)(game.new_initial_state(), 0))
    return build_policy(PolicySpec(obs_size=obs, num_actions=game.num_distinct_actions(), hidden=(32,)))


def child_values(game, state) -> dict[int, float]:
    """Exact minimax value of each legal move for the player to move."""
    player = state.current_player()
    out = {}
    for a in state.legal_actions():
        child = state.clone()
        child.apply_action(a)
        out[a] = child.returns()[player] if child.is_terminal() else alpha_beta_search(
            game, state=child, maximizing_player_id=player)[0]
    return out


@pytest.mark.parametrize("game_name, moves", [
    ("tic_tac_toe", [0, 1]), ("tic_tac_toe", [0, 4, 8]), ("tic_tac_toe", [4, 0, 8, 2]), ("tic_tac_toe", [1, 4, 0]),
    ("tic_tac_toe", [0, 1, 3, 4]), ("tic_tac_toe", [4, 2, 6, 0]),
    # a completed box gives its player the next move too: the same player moves twice
    ("dots_and_boxes(num_rows=1,num_cols=2)", [0, 5]), ("dots_and_boxes(num_rows=1,num_cols=2)", [2, 3]),
])
@pytest.mark.parametrize("model_seed", [None, 0])
def test_solved_positions_play_a_minimax_move(game_name, moves, model_seed):
    # 3,000 simulations prove the root of these small positions: its proven value is the exact minimax
    # value (OpenSpiel's alpha-beta), and the move played has it, whatever the prior (uniform or an
    # untrained network); each position has moves of different values, so a wrong one is seen
    game, state = position(game_name, moves)
    model = None if model_seed is None else network(game, model_seed)
    values = child_values(game, state)
    assert len(set(values.values())) > 1, values
    for batch in (1, 8):
        search = PUCT(game, model, SearchSpec(simulations=3000, batch=batch), np.random.default_rng(1))
        action = search.step(state)
        assert search.proven == max(values.values()), (moves, batch, search.proven, values)
        assert values[action] == max(values.values()), (moves, batch, action, values)


def test_statistics_stay_consistent_while_nothing_is_proven():
    # Connect Four's opening: 100 simulations prove nothing and reach no end of game, so each is a
    # visit of the root and one leaf scored by the network (fewer where a batch met a leaf twice);
    # with the virtual losses removed every edge's mean value lies in the game's utility range
    game, state = position("connect_four", [])
    model = network(game, 2)
    for batch in (1, 8):
        search = PUCT(game, model, SearchSpec(simulations=100, batch=batch), np.random.default_rng(0))
        counts = search.search(state)
        assert counts.sum() == 100 and search.proven is None
        assert search.evaluations == 101 if batch == 1 else search.evaluations <= 101

        def walk(node):
            seen = node.N > 0
            mean = node.W[seen] / node.N[seen]
            assert np.all(mean >= -1 - 1e-9) and np.all(mean <= 1 + 1e-9)
            for child, n in zip(node.children, node.N):
                if child is not None and child.children is not None:
                    # a child's own visits: its edge's, less the visit that expanded it
                    assert child.N.sum() == n - 1 if batch == 1 else child.N.sum() <= n - 1
                    walk(child)
        walk(search.root)


def test_takes_a_win_and_blocks_a_threat_on_connect_four():
    rng = np.random.default_rng(0)
    # player 0 has three in column 3 (player 1 in column 0): playing column 3 wins at once
    game, state = position("connect_four", [3, 0, 3, 0, 3, 1])
    model = network(game)
    assert PUCT(game, model, SearchSpec(simulations=64), rng).step(state) == 3
    # player 1 to move against that threat: every move but column 3 loses on the next move
    game, state = position("connect_four", [3, 0, 3, 0, 3])
    for batch in (1, 8):
        assert PUCT(game, model, SearchSpec(simulations=200, batch=batch), rng).step(state) == 3


def test_search_is_stronger_than_its_network():
    # the same untrained network against the uniform anchor, 60 tic-tac-toe games seats
    # alternating, played as the anchor judge plays them (evaluation.anchors.play_game): with 200
    # simulations the search sees every immediate win and threat (two plies) and loses far less
    # often than the network alone, which plays near-uniformly
    from evaluation.anchors import UniformBot, play_game

    game = pyspiel.load_game("tic_tac_toe")
    model = network(game)

    def losses(search: SearchSpec | None) -> int:
        rng, bot = np.random.default_rng(1), UniformBot(2)
        search_rng = np.random.default_rng(3)
        return sum(play_game(game, model, bot, i % 2, rng, search, search_rng) < 0 for i in range(60))

    alone, searched = losses(None), losses(SearchSpec(simulations=200))
    assert alone >= 10 and searched <= alone / 3, (alone, searched)


def test_bad_specs_and_games_are_refused():
    for bad in ({"simulations": -1}, {"simulations": 1.5}, {"c_puct": 0.0}, {"c_puct": float("nan")},
                {"rollout_weight": 1.5}, {"prior_temperature": 0.0}, {"batch": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SearchSpec(**bad)
    game = pyspiel.load_game("tic_tac_toe")
    with pytest.raises(ValueError, match="simulations"):
        PUCT(game, None, SearchSpec(simulations=0), np.random.default_rng(0))
    for name in ("kuhn_poker", "matrix_rps"):
        with pytest.raises(ValueError, match="perfect-information"):
            check_searchable(pyspiel.load_game(name))
