"""policies.tree_search: batched Gumbel AlphaZero search, checked against exact minimax (OpenSpiel's
alpha-beta, or a recursion for a toy game) on positions the search can solve, and against the
definitions of Danihelka et al. 2022 for its policy target."""

import numpy as np
import pytest
from open_spiel.python.algorithms.minimax import alpha_beta_search

from envs import make_game
from envs.states import TERMINAL, Positions, StateStore, state_store
from policies.tree_search import BatchedSearch, SearchSettings, halving_schedule


def uniform(obs, mask):
    """A network that knows nothing: uniform logits, value 0."""
    return np.zeros(mask.shape, dtype=np.float32), np.zeros(len(obs), dtype=np.float32)


def positions(name: str, lines: list[list[int]]):
    """``name``'s vector game with environment e played along ``lines[e]`` (all of one length)."""
    game = make_game(name, len(lines), seed=0)
    for t in range(len(lines[0])):
        acts = np.full((len(lines), 2), -1, dtype=np.int64)
        movers = game.movers()
        for e, line in enumerate(lines):
            acts[e, int(np.flatnonzero(movers[e])[0])] = line[t]
        game.step(acts)
    return game


def search(game, settings: SearchSettings, seed: int = 0, max_roots: int | None = None):
    return BatchedSearch(lambda capacity: state_store(game, capacity), max_roots or game.num_envs, settings,
                         np.random.default_rng(seed))


def exact_values(game, e: int) -> dict[int, float]:
    """Minimax value of each legal move of environment e for its mover."""
    state = game._states[e]
    player = state.current_player()
    out = {}
    for a in state.legal_actions():
        child = state.child(a)
        out[a] = child.returns()[player] if child.is_terminal() else alpha_beta_search(
            game.game, state=child, maximizing_player_id=player)[0]
    return out


def test_forced_win_in_one_tic_tac_toe():
    # x x . / o o . / . . .  x to move: 2 wins at once (o threatens 5)
    game = positions("tic_tac_toe", [[0, 3, 1, 4]])
    wins = [a for a, v in exact_values(game, 0).items() if v == 1.0 and game._states[0].child(a).is_terminal()]
    assert wins == [2]
    for seed in range(5):
        res = search(game, SearchSettings(simulations=16), seed).run(uniform, game, [0])
        assert res.action[0] == 2
        assert res.proven[0] == 1
        assert res.value[0] == pytest.approx(1.0)
        assert res.policy[0, 2] > 0.5


def test_only_the_block_is_played():
    # o x o / . o x / x . .  x to move: 8 blocks o's diagonal, 3 and 7 lose at once. The tree under
    # three empty squares has at most 3 + 6 + 6 = 15 nodes and every simulation adds one: 16 solve it.
    game = positions("tic_tac_toe", [[1, 0, 5, 2, 6, 4]])
    values = exact_values(game, 0)
    assert values == {3: -1.0, 7: -1.0, 8: 0.0}
    for seed in range(5):
        res = search(game, SearchSettings(simulations=16), seed).run(uniform, game, [0])
        assert res.action[0] == 8
        assert res.proven[0] == 0 and res.value[0] == pytest.approx(0.0)


def test_an_open_root_never_plays_a_proven_loss():
    # x . o / . o . / . . x  x to move, o threatens 6. The network loves 1 (a loss) and, for o, 6: the
    # sixth simulation goes down 1 again and proves it lost, with the root still open.
    game = positions("tic_tac_toe", [[0, 4, 8, 2]])
    assert exact_values(game, 0)[1] == -1.0
    pref = np.zeros(9, dtype=np.float32)
    pref[1], pref[6] = 10.0, 9.0

    def net(obs, mask):
        return np.tile(pref, (len(obs), 1)), np.zeros(len(obs), dtype=np.float32)

    bs = search(game, SearchSettings(simulations=6, gumbel_scale=0.0))
    res = bs.run(net, game, [0])
    slot = bs.children[0, 0, 1]  # root 0: slots are its node numbers
    assert bs.proven[0, slot] and bs.exact[0, slot] == 1.0  # for o
    assert res.proven[0] == 2
    assert res.action[0] != 1
    assert res.action[0] == 6  # the prior's next best, all else equal


def test_every_move_loses():
    # x . . / . o o / o x x  x to move: o threatens 2 and 3 at once
    game = positions("tic_tac_toe", [[0, 5, 7, 6, 8, 4]])
    assert set(exact_values(game, 0).values()) == {-1.0}
    res = search(game, SearchSettings(simulations=16)).run(uniform, game, [0])
    assert res.proven[0] == -1
    assert res.value[0] == pytest.approx(-1.0)
    assert game._states[0].legal_actions_mask()[res.action[0]]
    # every move is optimal: the target of a proven root is the prior over them (uniform here)
    legal = np.array(game._states[0].legal_actions_mask(), dtype=bool)
    assert np.allclose(res.policy[0, legal], 1.0 / legal.sum()) and not res.policy[0, ~legal].any()


def test_connect_four_immediate_wins_in_one_batch():
    lines = [[0, 6, 0, 6, 0, 5],  # a column: 0 wins
             [3, 0, 4, 0, 5, 6],  # a row: 2 wins (6's bottom is taken)
             [6, 0, 6, 1, 6, 0],  # a column: 6 wins
             [1, 6, 1, 6, 1, 5]]  # a column: 1 wins
    game = positions("connect_four", lines)
    wins = []
    for e in range(len(lines)):
        state = game._states[e]
        wins.append([a for a in state.legal_actions() if state.child(a).is_terminal()
                     and state.child(a).returns()[state.current_player()] > 0])
    assert wins == [[0], [2], [6], [1]]
    settings = SearchSettings(simulations=16)
    res = search(game, settings).run(uniform, game, np.arange(4))
    assert res.action.tolist() == [0, 2, 6, 1]
    assert res.proven.tolist() == [1, 1, 1, 1]
    for e in range(4):
        assert res.policy[e, wins[e][0]] > 0.5
    # the trees are independent: each root searched alone answers the same
    for e in range(4):
        alone = search(game, settings).run(uniform, game, [e])
        assert alone.action[0] == res.action[e] and alone.proven[0] == 1


def test_improved_policy_is_a_distribution_over_legal_moves():
    for lines in ([[]], [[4, 0]]):
        game = positions("tic_tac_toe", lines) if lines[0] else make_game("tic_tac_toe", 1, seed=0)
        res = search(game, SearchSettings(simulations=32)).run(uniform, game, [0])
        legal = np.array(game._states[0].legal_actions_mask(), dtype=bool)
        assert res.policy.dtype == np.float32 and res.policy.shape == (1, 9)
        assert res.policy[0].sum() == pytest.approx(1.0, abs=1e-6)
        assert (res.policy[0] >= 0).all() and not res.policy[0, ~legal].any() and (res.policy[0, legal] > 0).all()
        assert legal[res.action[0]] and res.proven[0] == 2 and -1.0 <= res.value[0] <= 1.0


def test_policy_target_is_softmax_of_logits_and_sigma_of_completed_q():
    # one simulation from the empty board: one child visited (value v for its mover, -v for the root's),
    # the others completed by the mixed value (raw + 1 * q) / 2 (Danihelka et al. 2022, Appendix D)
    v = 0.6
    logits = np.linspace(-1.0, 1.0, 9).astype(np.float32)

    def net(obs, mask):
        return np.tile(logits, (len(obs), 1)), np.full(len(obs), v, dtype=np.float32)

    game = make_game("tic_tac_toe", 1, seed=0)
    s = SearchSettings(simulations=1, gumbel_scale=0.0)
    res = search(game, s).run(net, game, [0])
    assert res.action[0] == 8  # the prior's best, the only one visited
    q = np.full(9, (v + -v) / 2)
    q[8] = -v
    unit = (q - q.min()) / (q.max() - q.min())  # min-max over the legal moves (mctx's rescale_values)
    sigma = (s.c_visit + 1) * s.c_scale * unit
    z = logits + sigma
    want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    assert np.allclose(res.policy[0], want, atol=1e-6)
    assert res.value[0] == pytest.approx((v - v) / 2)


def test_terminal_leaves_never_reach_the_network():
    game = positions("tic_tac_toe", [[1, 0, 5, 2, 6, 4], [0, 3, 1, 4, 8, 2]])  # three empty squares each
    assert all(len(game._states[e].legal_actions()) == 3 for e in (0, 1))
    calls = []

    def net(obs, mask):
        calls.append(mask.copy())
        return uniform(obs, mask)

    search(game, SearchSettings(simulations=16)).run(net, game, [0, 1])

    def open_descendants(state) -> int:
        """Positions below ``state`` (a tree: no transpositions merged) where the game goes on."""
        return sum((not c.is_terminal()) + open_descendants(c) for c in (state.child(a) for a in state.legal_actions())
                   if not c.is_terminal())

    # at most the two roots and the open positions below them: none of the many ended leaves was evaluated
    assert sum(len(m) for m in calls) <= 2 + sum(open_descendants(game._states[e]) for e in (0, 1))
    assert all(m.any(axis=1).all() for m in calls)


def deterministic_net(num_actions: int, obs_size: int):
    """A fixed random network whose answer for a row depends on that row alone."""
    rng = np.random.default_rng(7)
    w = rng.normal(size=(obs_size, num_actions))
    u = rng.normal(size=obs_size)

    def net(obs, mask):
        o = obs.astype(np.float64)
        logits = (o[:, :, None] * w[None]).sum(axis=1)
        return logits.astype(np.float32), np.tanh((o * u).sum(axis=1) / 3).astype(np.float32)

    return net


def test_results_do_not_depend_on_the_batch():
    lines = [[4, 0], [0, 1], [8, 4], [2, 6]]
    game = positions("tic_tac_toe", lines)
    net = deterministic_net(9, state_store(game, 1).obs_size)
    s = SearchSettings(simulations=24, considered=4, gumbel_scale=0.0)
    batch = search(game, s).run(net, game, np.arange(4))
    for e in range(4):
        alone = search(game, s, max_roots=1).run(net, game, [e])
        assert alone.action[0] == batch.action[e]
        assert np.array_equal(alone.policy[0], batch.policy[e])
        assert alone.value[0] == batch.value[e] and alone.proven[0] == batch.proven[e]


def test_same_seed_same_result_and_reuse():
    game = positions("connect_four", [[3, 3], [0, 6], [2, 4]])
    net = deterministic_net(7, state_store(game, 1).obs_size)
    s = SearchSettings(simulations=20, considered=4)
    first = search(game, s, seed=3)
    a = first.run(net, game, np.arange(3))
    b = search(game, s, seed=3).run(net, game, np.arange(3))
    for name in ("action", "policy", "value", "proven"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    # a run on the same object after another (other roots) starts from clean trees
    first.run(net, game, [1])
    first.rng = np.random.default_rng(3)
    c = first.run(net, game, np.arange(3))
    for name in ("action", "policy", "value", "proven"):
        assert np.array_equal(getattr(a, name), getattr(c, name))
    assert set(first.profile) == {"tree", "evaluate", "expand", "proofs"}
    assert all(first.profile[k] > 0 for k in ("tree", "evaluate", "expand"))


def test_connect_fours_bitboards_search_as_its_clones_do():
    """The same searches (proofs remembered) over the bitboard store and over ``pyspiel`` clones: every
    result equal, down to the proven positions remembered."""
    from envs.openspiel import OpenSpielStates

    game = positions("connect_four", [[3, 3, 4, 4, 2, 2], [0, 6, 1, 5, 2, 5], [3, 4, 3, 4, 3, 4], [6, 6, 6, 5, 5, 0]])
    net = deterministic_net(7, state_store(game, 1).obs_size)
    s = SearchSettings(simulations=48, considered=4, proof_table=10_000)
    bits = search(game, s, seed=2)
    clones = BatchedSearch(lambda capacity: OpenSpielStates(game.game, capacity), 4, s, np.random.default_rng(2))
    assert type(bits.store).__name__ == "ConnectFourStates"
    for _ in range(2):  # the second time, from what the first remembered
        a, b = bits.run(net, game, np.arange(4)), clones.run(net, game, np.arange(4))
        for name in ("action", "policy", "value", "proven"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.proven[2] == 1  # three in a column with the fourth cell free: a win in one
    assert len(bits.table) == len(clones.table) > 0 and sorted(bits.table.values()) == sorted(clones.table.values())


def test_halving_schedule_is_mctx():
    # the expected sequences of mctx's seq_halving_test.py (Sequential Halving's visit schedule)
    table = halving_schedule(8, 47)
    assert table[8, :24].tolist() == [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4, 4, 5, 5]
    assert table[8, 24:].tolist() == [6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15,
                                      16, 16, 17]
    assert halving_schedule(8, 24)[8].tolist() == [0] * 8 + [1] * 4 + [2] * 4 + [3, 3, 4, 4, 5, 5, 6, 6]
    assert halving_schedule(8, 13)[8].tolist() == [0] * 8 + [1] * 4 + [2]
    assert halving_schedule(8, 2)[8].tolist() == [0, 0]
    assert halving_schedule(16, 6)[1].tolist() == [0, 1, 2, 3, 4, 5]


class ExtraTurnStore(StateStore):
    """Misère take-away: a heap of stones; the mover takes 1 (the turn passes) or 2 (the same player
    moves again); who takes the last stone loses. A position is (stones, mover, last mover); a root
    ``game`` is a list of (stones, mover)."""

    num_actions = 2
    obs_size = 10

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.states = [None] * capacity

    def _positions(self, slots):
        n = len(slots)
        player = np.full(n, TERMINAL, dtype=np.int64)
        returns = np.zeros((n, 2))
        obs = np.zeros((n, self.obs_size), dtype=np.float32)
        mask = np.zeros((n, 2), dtype=bool)
        for i, slot in enumerate(slots):
            stones, mover, last = self.states[slot]
            if stones == 0:
                returns[i, last], returns[i, 1 - last] = -1.0, 1.0
                continue
            player[i] = mover
            obs[i, stones] = 1.0
            obs[i, 8 + mover] = 1.0
            mask[i] = [True, stones >= 2]
        return Positions(player, returns, obs, mask)

    def set_roots(self, slots, game, envs):
        for slot, e in zip(slots, envs):
            stones, mover = game[e]
            self.states[slot] = (stones, mover, -1)
        return self._positions(list(slots))

    def expand(self, parents, actions, children):
        for p, a, c in zip(parents, actions, children):
            stones, mover, _ = self.states[p]
            self.states[c] = (stones - a - 1, 1 - mover if a == 0 else mover, mover)
        return self._positions(list(children))


def extra_turn_value(stones: int) -> float:
    """Minimax value for the mover, by recursion: taking 1 hands the heap over, taking 2 keeps it."""
    if stones == 1:
        return -1.0
    take1 = -extra_turn_value(stones - 1)
    take2 = -1.0 if stones == 2 else extra_turn_value(stones - 2)
    return max(take1, take2)


def test_a_player_moving_twice_keeps_its_sign():
    roots = [(n, n % 2) for n in range(1, 8)]
    s = SearchSettings(simulations=64, considered=2)
    res = BatchedSearch(ExtraTurnStore, len(roots), s, np.random.default_rng(0)).run(
        uniform, roots, np.arange(len(roots)))
    for i, (n, _) in enumerate(roots):
        v = extra_turn_value(n)
        assert res.proven[i] == int(v) and res.value[i] == v
        moves = [a for a in (0, 1) if a + 1 <= n]
        best = [a for a in moves if (a + 1 == n and -1.0 == v) or (a + 1 < n and (
            -extra_turn_value(n - 1) if a == 0 else extra_turn_value(n - 2)) == v)]
        assert res.action[i] in best


@pytest.mark.parametrize("field,value", [
    ("simulations", 0), ("simulations", 2.5), ("considered", 0), ("c_visit", -1.0), ("c_scale", 0.0),
    ("c_scale", float("nan")), ("value_range", (1.0, -1.0)), ("value_range", (0.0,)), ("gumbel_scale", -0.5),
    ("proof_table", -1), ("proof_table", 1.5),
])
def test_settings_reject_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        SearchSettings(**{field: value})


def test_run_rejects_too_many_roots():
    game = make_game("tic_tac_toe", 3, seed=0)
    with pytest.raises(ValueError, match="at most 2"):
        search(game, SearchSettings(simulations=4), max_roots=2).run(uniform, game, np.arange(3))


class ConstantSum(StateStore):
    """A store whose returns are a zero-sum store's mapped to [0, 1] (each game's two returns sum to 1)."""

    def __init__(self, inner):
        self.inner = inner
        self.num_actions, self.obs_size, self.capacity = inner.num_actions, inner.obs_size, inner.capacity

    def _map(self, pos: Positions) -> Positions:
        ended = (pos.player == TERMINAL)[:, None]
        return pos._replace(returns=np.where(ended, (pos.returns + 1.0) / 2.0, 0.0))

    def set_roots(self, slots, game, envs):
        return self._map(self.inner.set_roots(slots, game, envs))

    def expand(self, parents, actions, children):
        return self._map(self.inner.expand(parents, actions, children))


def test_a_constant_sum_game_is_searched_as_its_zero_sum_image():
    """Returns in [0, 1] summing to 1 (a draw is 0.5, not a win): the same moves, proofs and policy as
    the [-1, 1] game, values mapped back."""
    game = positions("tic_tac_toe", [[0, 3, 1, 4], [0, 4, 8, 2], [4, 0, 8, 2]])
    settings = SearchSettings(simulations=24, gumbel_scale=0.0)
    zero = search(game, settings).run(uniform, game, [0, 1, 2])
    half = lambda obs, mask: (np.zeros(mask.shape, np.float32), np.full(len(obs), 0.5, np.float32))
    shifted = BatchedSearch(lambda capacity: ConstantSum(state_store(game, capacity)), 3,
                            SearchSettings(simulations=24, gumbel_scale=0.0, value_range=(0.0, 1.0)),
                            np.random.default_rng(0)).run(half, game, [0, 1, 2])
    np.testing.assert_array_equal(shifted.action, zero.action)
    np.testing.assert_array_equal(shifted.proven, zero.proven)
    np.testing.assert_allclose(shifted.policy, zero.policy, atol=1e-6)
    np.testing.assert_allclose(shifted.value, (zero.value + 1.0) / 2.0, atol=1e-6)


TAKEAWAY = "pettingzoo:tests.data.takeaway:env"


def takeaway_piles(piles: list[int], moves: int, stones: int = 40):
    """The take-away game (tests/data/takeaway.py) at ``piles``: ``moves`` moves made in each
    environment, taking ``stones - pile`` stones in all (player ``moves % 2`` to move)."""
    game = make_game(TAKEAWAY, len(piles), seed=0, stones=stones)
    takes = []
    for pile in piles:
        total = stones - pile
        assert moves <= total <= 12 * moves
        takes.append([total // moves + (i < total % moves) for i in range(moves)])
    for t in range(moves):
        acts = np.full((len(piles), 2), -1, dtype=np.int64)
        movers = game.movers()
        for e in range(len(piles)):
            acts[e, int(np.flatnonzero(movers[e])[0])] = takes[e][t] - 1
        game.step(acts)
    return game


def test_remembered_proofs_solve_the_take_away_game_layer_by_layer_and_are_exact():
    # a pile that is a multiple of 13 loses for the mover; from any other the mover wins by taking
    # pile mod 13 stones. 16 simulations prove a pile of 13 or more only through remembered proofs:
    # each search proves piles a layer above the positions (of either mover) remembered before it.
    piles = list(range(1, 36))
    games = [takeaway_piles(piles, 4), takeaway_piles(piles, 5)]  # player 0 to move, player 1
    roots = np.arange(len(piles))
    proven = {}
    for table in (0, 100_000):
        searched = search(games[0], SearchSettings(simulations=16, considered=12, proof_table=table))
        for _ in range(6):
            res = [searched.run(uniform, game, roots) for game in games]
        proven[table] = np.concatenate([r.proven for r in res])
        assert len(searched.table) <= table
    assert (proven[0][np.array(piles * 2) >= 26] == 2).all()  # alone, a search sees too few moves ahead
    for game in games:
        res = searched.run(uniform, game, roots)
        for i, pile in enumerate(piles):
            won = pile % 13 != 0
            assert res.proven[i] == (1 if won else -1), pile
            assert res.value[i] == (1.0 if won else -1.0)
            if won:
                assert res.action[i] == pile % 13 - 1 and res.policy[i, pile % 13 - 1] == pytest.approx(1.0)
    assert searched.recalled > 0
    # a table of 10 positions keeps 10
    small = search(games[0], SearchSettings(simulations=16, considered=12, proof_table=10))
    small.run(uniform, games[0], roots)
    assert len(small.table) == 10
