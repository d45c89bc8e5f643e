"""evaluation/game_tree.py against OpenSpiel's nash_conv, the theory of take-away, and known counts."""

from __future__ import annotations

import numpy as np
import pyspiel
import pytest
import torch
from open_spiel.python import policy as os_policy

from envs import make_game
from envs.openspiel import position_key
from test_exploitability import random_models
from envs.states import TERMINAL, NotSearchable, Positions, StateStore
from evaluation import exploitability as ex
from evaluation.game_tree import (
    PositionGraph,
    TooLarge,
    best_response_value,
    nash_conv,
    position_graph,
    table,
    uniform_table,
    value,
    value_matrix,
)
from policies.net import ActorCritic, PolicySpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TakeAway(StateStore):
    """Pile of ``n`` stones, the mover takes 1..k (action a takes a + 1), whoever takes the last stone
    wins (+1, the other -1). A position is (stones, seat to move); the observation is the mover's
    one-hot of the stones left."""

    def __init__(self, n: int, k: int, capacity: int):
        self.n, self.k, self.capacity = n, k, capacity
        self.num_actions, self.obs_size = k, n + 1
        self.slots = [None] * capacity

    def _positions(self, slots) -> Positions:
        m = len(slots)
        player = np.full(m, TERMINAL, dtype=np.int64)
        returns = np.zeros((m, 2))
        obs = np.zeros((m, self.obs_size), dtype=np.float32)
        mask = np.zeros((m, self.num_actions), dtype=bool)
        for i, s in enumerate(np.asarray(slots).tolist()):
            stones, mover = self.slots[s]
            if stones == 0:  # the other seat took the last stone
                returns[i, 1 - mover], returns[i, mover] = 1.0, -1.0
                continue
            player[i] = mover
            obs[i, stones] = 1.0
            mask[i, :min(self.k, stones)] = True
        return Positions(player, returns, obs, mask)

    def set_initial(self, slots):
        for s in np.asarray(slots).tolist():
            self.slots[s] = (self.n, 0)
        return self._positions(slots)

    def expand(self, parents, actions, children):
        for p, a, c in zip(np.asarray(parents).tolist(), np.asarray(actions).tolist(), np.asarray(children).tolist()):
            stones, mover = self.slots[p]
            self.slots[c] = (stones - a - 1, 1 - mover)
        return self._positions(children)

    def keys(self, slots):
        return [self.slots[s] for s in np.asarray(slots).tolist()]


def take_away(n, k) -> PositionGraph:
    return PositionGraph.build(lambda capacity: TakeAway(n, k, capacity), name="take_away")


def stones_of(graph) -> np.ndarray:
    return np.array([key[0] for key in graph.keys])


def minimax_table(graph, k, spoil_start=False) -> np.ndarray:
    """Take ``stones mod (k + 1)`` when nonzero, else 1; ``spoil_start``: take 1 at the start instead
    of the winning move."""
    out = np.zeros(graph.mask.shape)
    for v, (stones, _) in enumerate(graph.keys):
        if stones:
            take = stones % (k + 1) or 1
            if spoil_start and v == 0:
                take = 1 if take != 1 else 2
            out[v, take - 1] = 1.0
    return out


def test_take_away_enumerates_each_pile_and_mover_once():
    g = take_away(10, 3)
    assert sorted(g.keys) == sorted({(s, p) for s in range(11) for p in (0, 1)} - {(10, 1), (9, 0)})  # one move from the start cannot leave seat 0 at 9
    assert (g.height[g.player == TERMINAL] == 0).all()
    rank = np.empty(g.num_positions, dtype=np.int64)
    rank[g.order] = np.arange(g.num_positions)
    src, act = np.nonzero(g.child >= 0)
    assert (rank[src] < rank[g.child[src, act]]).all()  # parents before children


@pytest.mark.parametrize("n, k", [(10, 3), (9, 2), (12, 3)])
def test_minimax_take_away_has_no_nash_conv(n, k):
    g = take_away(n, k)
    t = minimax_table(g, k)
    game_value = -1.0 if n % (k + 1) == 0 else 1.0  # the first mover wins unless the pile is a multiple of k + 1
    assert value(g, t, t) == game_value
    assert nash_conv(g, t[None], [1.0])["nash_conv"] == pytest.approx(0.0, abs=1e-12)


def test_a_policy_that_misses_the_winning_first_move_has_nash_conv_two():
    # n = 10, k = 3: seat 0 should take 2. The spoiled policy takes 1 and then, as seat 1 would, plays
    # minimax: self-play is a loss for seat 0 (u0 = -1, u1 = +1). A best responder in seat 0 wins
    # (+1: the policy in seat 1 never sees the start) and one in seat 1 wins too (+1), so
    # NashConv = (1 - (-1)) + (1 - 1) = 2.
    g = take_away(10, 3)
    t = minimax_table(g, 3, spoil_start=True)
    assert value(g, t, t) == -1.0
    out = nash_conv(g, t[None], [1.0])
    assert out["player_improvements"] == pytest.approx([2.0, 0.0], abs=1e-12)
    assert out["nash_conv"] == pytest.approx(2.0, abs=1e-12)


def brute_best_response(store_n, k, tables, graph, w, seat) -> float:
    """Best response to the per-episode mixture by a walk over every history (no merging)."""
    index = {key: v for v, key in enumerate(graph.keys)}

    def walk(stones, mover, q):
        v = index[(stones, mover)]
        if stones == 0:
            return q.sum() * graph.returns[v, seat]
        acts = range(min(k, stones))
        if mover == seat:
            return max(walk(stones - a - 1, 1 - mover, q) for a in acts)
        return sum(walk(stones - a - 1, 1 - mover, q * tables[:, v, a]) for a in acts)

    w = np.asarray(w, dtype=np.float64)
    return walk(store_n, 0, w / w.sum())


def random_tables(graph, m, seed, deterministic=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.dirichlet(np.ones(graph.mask.shape[1]), size=(m, graph.num_positions)) * graph.mask
    if deterministic:
        raw = np.eye(graph.mask.shape[1])[np.where(graph.mask, raw, -1).argmax(axis=2)] * graph.mask
    sums = raw.sum(axis=2, keepdims=True)
    return np.divide(raw, sums, out=np.zeros_like(raw), where=sums > 0)


@pytest.mark.parametrize("deterministic", [False, True])
def test_mixture_best_response_equals_a_walk_over_every_history(deterministic):
    g = take_away(9, 3)
    tables = random_tables(g, 3, seed=1, deterministic=deterministic)
    w = [0.5, 0.3, 0.2]
    for seat in (0, 1):
        assert best_response_value(g, tables, w, seat) == pytest.approx(
            brute_best_response(9, 3, tables, g, w, seat), abs=1e-12)


def test_one_member_walk_agrees_with_the_position_programme():
    g = take_away(12, 3)
    t = random_tables(g, 1, seed=2)[0]
    for seat in (0, 1):
        fast = best_response_value(g, t[None], [1.0], seat)
        # the same member twice takes the general walk (the posterior never moves)
        assert best_response_value(g, np.stack([t, t]), [0.4, 0.6], seat) == pytest.approx(fast, abs=1e-12)


def test_the_walk_stops_at_its_cap():
    g = take_away(12, 3)
    with pytest.raises(TooLarge, match="more than 10"):
        best_response_value(g, random_tables(g, 2, seed=3), [0.5, 0.5], 0, max_nodes=10)


# ---------------------------------------------------------------- against OpenSpiel
def openspiel_tabular(game, graph, tables, weights) -> os_policy.TabularPolicy:
    """OpenSpiel's policy over histories equal to the per-episode mixture: at history h the mover
    plays sum_i w_i r_i(h) pi_i(a|h) / sum_i w_i r_i(h), r_i(h) member i's own reach (Kuhn's theorem)."""
    index = {key: v for v, key in enumerate(graph.keys)}
    pol = os_policy.TabularPolicy(game)
    w = np.asarray(weights, dtype=np.float64)
    stack = [(game.new_initial_state(), np.ones((2, len(w))))]
    while stack:
        state, reach = stack.pop()
        if state.is_terminal():
            continue
        p = state.current_player()
        v = index[position_key(state)]
        wr = w * reach[p]
        row = (wr @ tables[:, v]) / wr.sum() if wr.sum() > 0 else w @ tables[:, v]
        pol.policy_for_key(pol._state_key(state, p))[:] = row
        for a in state.legal_actions():
            nr = reach.copy()
            nr[p] = reach[p] * tables[:, v, a]
            stack.append((state.child(a), nr))
    return pol


CASES = [("nim", {"pile_sizes": "2;3;4"}), ("dots_and_boxes", {"num_rows": 1, "num_cols": 2})]


@pytest.mark.parametrize("name, params", CASES)
@pytest.mark.parametrize("members, deterministic", [(0, False), (1, False), (1, True), (3, False), (3, True)])
def test_nash_conv_equals_openspiel(name, params, members, deterministic):
    graph = position_graph(name, params)
    tables = (uniform_table(graph)[None] if members == 0
              else random_tables(graph, members, seed=members, deterministic=deterministic))
    weights = np.array([0.5, 0.3, 0.2][:len(tables)]) if len(tables) > 1 else np.ones(1)
    game = pyspiel.load_game(name, params)
    pol = openspiel_tabular(game, graph, tables, weights)
    reference = pyspiel.nash_conv(game, os_policy.python_policy_to_pyspiel_policy(pol))
    assert nash_conv(graph, tables, weights)["nash_conv"] == pytest.approx(reference, abs=1e-9)


def test_tic_tac_toe_uniform_nash_conv_and_value():
    graph = position_graph("tic_tac_toe")
    u = uniform_table(graph)
    # pyspiel.nash_conv(pyspiel.load_game("tic_tac_toe"), pyspiel.UniformRandomPolicy(game)) gives
    # 1.9196593915343914 (its C++ walk of every history is too slow to run here); in random play X wins
    # 737/1260 and O 363/1260 of the games
    assert nash_conv(graph, u[None], [1.0])["nash_conv"] == pytest.approx(1.9196593915343914, abs=1e-12)
    assert value(graph, u, u) == pytest.approx((737 - 363) / 1260, abs=1e-12)


def test_tic_tac_toe_has_5478_positions():
    graph = position_graph("tic_tac_toe")
    assert graph.num_positions == 5478  # OpenSpiel's count of distinct tic-tac-toe states
    assert graph.keys[0] == position_key(pyspiel.load_game("tic_tac_toe").new_initial_state())
    assert (graph.player == TERMINAL).sum() == 958


def test_connect_four_is_too_large():
    with pytest.raises(TooLarge, match="more than 1000 distinct positions"):
        position_graph("connect_four", max_positions=1000)


def test_games_without_a_store_are_refused():
    with pytest.raises(NotSearchable):
        position_graph("kuhn_poker")


# ---------------------------------------------------------------- networks and the exact path
def test_a_network_table_is_its_probabilities_at_each_position():
    graph = position_graph("tic_tac_toe")
    game = make_game("tic_tac_toe", 1)
    model = random_models("tic_tac_toe", 1, scale=1.0)[0]
    t = table(graph, model)
    dec = graph.decisions
    expected = model.probs(graph.obs[dec], graph.mask[dec]).astype(np.float64)
    np.testing.assert_allclose(t[dec], expected / expected.sum(axis=1, keepdims=True), atol=1e-12)
    assert (t[graph.player == TERMINAL] == 0).all()
    assert table(graph, model) is t  # kept until the parameters change
    with torch.no_grad():
        model.policy_head.weight.mul_(2.0)
    assert table(graph, model) is not t


def test_exact_path_dispatch_for_a_game_of_positions():
    game = make_game("tic_tac_toe", 2)
    assert not game.supports_exact and ex.is_exact(game)
    models = random_models(game.name, 3, scale=5.0)
    graph = position_graph("tic_tac_toe")
    tables = np.stack([table(graph, m) for m in models])
    profiles = [np.stack([ex.seat_profile(game, m, s) for m in models]) for s in (0, 1)]
    for s in (0, 1):  # packing keeps a profile exactly
        for p in profiles[s]:
            np.testing.assert_array_equal(ex.unpack_profile(game, ex.pack_profile(game, p, s), s), p)
    expected = value_matrix(graph, tables, tables)
    for i in range(3):
        for j in range(3):
            assert ex.profile_value(game, profiles[0][i], profiles[1][j]) == pytest.approx(expected[i, j], abs=1e-12)
    w = [0.2, 0.5, 0.3]
    assert ex.exact_nash_conv(game, models, w) == nash_conv(graph, tables, w)
    assert ex.exact_nash_conv(game, [], [])["nash_conv"] == pytest.approx(1.9196593915343914, abs=1e-12)
    pure = [nash_conv(graph, tables[i][None], [1.0])["nash_conv"] for i in range(3)]
    weights, nc = ex.least_exploitable_mixture(game, *profiles)
    np.testing.assert_array_equal(weights, np.eye(3)[int(np.argmin(pure))])
    assert nc == min(pure)
    # a mixture kept only where it is less exploitable than the best member
    mixed = nash_conv(graph, tables, w)["nash_conv"]
    weights, nc = ex.least_exploitable_mixture(game, *profiles, incumbent=[w, [1.0, 0.0, 0.0]])
    assert nc == min(min(pure), mixed)
    np.testing.assert_allclose(weights, w if mixed < min(pure) else np.eye(3)[int(np.argmin(pure))])


def test_exact_path_for_information_state_games_is_unchanged():
    game = make_game("kuhn_poker", 1)
    assert ex.is_exact(game)
    assert ex.exact_nash_conv(game, [], [])["nash_conv"] == pytest.approx(11 / 12, abs=1e-12)


def test_a_game_that_raises_while_its_positions_are_walked_is_not_exact_and_raises_nothing(monkeypatch):
    """A user's game raising in its own step (a flaky game) leaves the evaluator sampling, not dead."""
    from pathlib import Path

    from evaluation.game_tree import graph_of, tree_supports_exact

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples" / "dots_and_boxes"))
    from boxes.vector import DotsAndBoxes

    class Flaky(DotsAndBoxes):
        def step(self, actions):
            raise RuntimeError("the user's bug")

    game = Flaky(4, seed=0)
    assert tree_supports_exact(game) is False
    with pytest.raises(NotSearchable, match="raised RuntimeError: the user's bug"):
        graph_of(game)
