"""Copies of single positions (envs.states): every store kind shows the same positions the game's
VectorGame adapter shows, merges transposed positions, and the games that cannot be searched are
refused in one line naming the game and why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from envs import NO_ACTION, make_game
from envs.custom import VectorGameStates, state_key
from envs.states import TERMINAL, NotSearchable, state_store

pytest.importorskip("pettingzoo")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dots_and_boxes"  # the user's own folder: not an installed package
TAKEAWAY = "pettingzoo:tests.data.takeaway:env"

# (game name, params, random moves played, store kind)
GAMES = [
    ("tic_tac_toe", {}, 40, "OpenSpielStates"),
    ("connect_four", {}, 120, "ConnectFourStates"),
    ("connect_four", {"rows": 5}, 120, "OpenSpielStates"),  # not the standard board: no bitboards
    ("boxes.vector:DotsAndBoxes", {"rows": 2, "cols": 2}, 40, "VectorGameStates"),
    ("pettingzoo:boxes.aec:env", {"rows": 2, "cols": 2}, 40, "PettingZooStates"),
    (TAKEAWAY, {}, 60, "PettingZooStates"),
]


@pytest.fixture(autouse=True)
def example_folder(monkeypatch):
    """The example's folder on sys.path, as the launcher puts a config's folder there."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def assert_shows_the_game(pos, rows, game, envs) -> None:
    """Rows ``rows`` of ``pos`` are the positions of ``game``'s environments ``envs``: the mover, its
    observation and mask, no returns."""
    movers = np.argmax(game.movers()[envs], axis=1)
    np.testing.assert_array_equal(pos.player[rows], movers)
    np.testing.assert_array_equal(pos.returns[rows], 0.0)
    for row, e, seat in zip(rows.tolist(), envs.tolist(), movers.tolist()):
        obs, mask = game.observe(seat, np.array([e]))
        np.testing.assert_array_equal(pos.obs[row], obs[0])
        np.testing.assert_array_equal(pos.mask[row], mask[0])


def play_both_ways(game, store, moves: int, seed: int) -> int:
    """Random games played by ``game.step`` and by ``store.expand`` side by side; every position the
    store fills equals the adapter's. The number of episodes that ended."""
    E = game.num_envs
    rng = np.random.default_rng(seed)
    envs = np.arange(E)
    banks = [np.arange(E), np.arange(E, 2 * E)]  # parents in one, children in the other
    pos = store.set_roots(banks[0], game, envs)
    assert pos.player.dtype == np.int64 and pos.obs.dtype == np.float32 and pos.mask.dtype == bool
    assert pos.obs.shape == (E, store.obs_size) and pos.mask.shape == (E, store.num_actions)
    assert_shows_the_game(pos, envs, game, envs)
    ended = 0
    for t in range(moves):
        parents, children = banks[t % 2], banks[(t + 1) % 2]
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in pos.mask])
        before = store.keys(parents)
        child = store.expand(parents, actions, children)
        assert store.keys(parents) == before  # the parents are left as they were
        acts = np.full((E, 2), NO_ACTION, dtype=np.int64)
        acts[envs, pos.player] = actions
        result = game.step(acts)
        done = np.asarray(result.done)
        np.testing.assert_array_equal(child.player == TERMINAL, done)
        np.testing.assert_array_equal(child.returns[done], result.returns[done])
        assert not child.mask[done].any() and not child.obs[done].any()
        live = np.flatnonzero(~done)
        assert_shows_the_game(child, live, game, live)
        # where an episode ended the adapter started the next one: the store starts it too,
        # alternately from the game's start and from the adapter's fresh environment
        over = np.flatnonzero(done)
        if over.size:
            restart = store.set_initial(children[over]) if t % 2 else store.set_roots(children[over], game, over)
            assert_shows_the_game(restart, np.arange(over.size), game, over)
            child.player[over], child.obs[over], child.mask[over] = restart.player, restart.obs, restart.mask
        ended += int(done.sum())
        pos = child
    return ended


@pytest.mark.parametrize("name,params,moves,kind", GAMES, ids=[f"{g[0]}{g[1] or ''}" for g in GAMES])
def test_the_store_shows_the_positions_the_adapter_shows(name, params, moves, kind):
    game = make_game(name, 4, seed=3, **params)
    store = state_store(game, 8)
    assert type(store).__name__ == kind and store.capacity == 8
    assert (store.num_actions, store.obs_size) == (game.num_actions, game.obs_size)
    assert play_both_ways(game, store, moves, seed=5) >= 4


def test_connect_four_bitboards_end_every_game_as_openspiel_does():
    """256 random games at once, and a game that fills the board without four in a row (a draw,
    found by random play and checked by OpenSpiel): every position, win and draw as ``pyspiel``'s."""
    import pyspiel

    game = make_game("connect_four", 256, seed=11)
    assert play_both_ways(game, state_store(game, 512), 50, seed=12) >= 256
    drawn = [int(c) for c in "555054466351352123041430222100021613443666"]
    state = pyspiel.load_game("connect_four").new_initial_state()
    for a in drawn:
        state.apply_action(a)
    assert state.is_terminal() and state.returns() == [0.0, 0.0]
    store = state_store(make_game("connect_four", 1, seed=0), 2)
    pos = store.set_initial([0])
    for t, a in enumerate(drawn):
        assert not (pos.player == TERMINAL).any() and pos.mask[0, a]
        pos = store.expand([t % 2], [a], [(t + 1) % 2])
    assert pos.player[0] == TERMINAL and pos.returns[0].tolist() == [0.0, 0.0]


def test_a_vector_store_expands_in_chunks_and_from_a_copy_of_a_game_built_directly():
    from boxes.vector import DotsAndBoxes

    game = make_game("boxes.vector:DotsAndBoxes", 7, seed=0)
    narrow = VectorGameStates(game, 14, width=3)  # every expand of 7 steps the scratch three times
    assert narrow.width == 3
    assert play_both_ways(game, narrow, 40, seed=1) >= 7
    direct = DotsAndBoxes(5)  # not built by make_custom_game: the store steps a copy of it
    store = state_store(direct, 10)
    assert store.width == 5 and store.scratch is not direct
    assert play_both_ways(direct, store, 40, seed=2) >= 5


def test_copying_a_dots_and_boxes_position_is_honest():
    game = make_game("boxes.vector:DotsAndBoxes", 6, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(7):
        acts = np.full((6, 2), NO_ACTION, dtype=np.int64)
        seat = np.argmax(game.movers(), axis=1)
        for e in range(6):
            acts[e, seat[e]] = rng.choice(np.flatnonzero(game.observe(int(seat[e]), np.array([e]))[1][0]))
        game.step(acts)
    for e in range(6):
        state = game.copy_state(e)
        f = (e + 1) % 6
        game.restore_state(f, state)
        assert state_key(game.copy_state(f)) == state_key(state)
        assert state_key(game.copy_state(e)) == state_key(state)
        assert game.render_text(f) == game.render_text(e)
        game.restore_state(f, state)
        game.lines[f] = ~game.lines[f]  # the env changes, the copied state does not
        assert state_key(game.copy_state(e)) == state_key(state)


def slots_after(store, *lines):
    """Each sequence of ``lines`` played from the game's start into fresh slots: the last slot of each."""
    ends, free = [], 0
    for seq in lines:
        store.set_initial([free])
        for a in seq:
            store.expand([free], [a], [free + 1])
            free += 1
        ends.append(free)
        free += 1
    return ends


@pytest.mark.parametrize("name,params,same,other", [
    ("tic_tac_toe", {}, ([0, 4, 8], [8, 4, 0]), [0, 4, 7]),
    ("connect_four", {}, ([0, 1, 2], [2, 1, 0]), [0, 1, 3]),
    # three lines that close no box, in either order (who drew a line is not part of the position)
    ("boxes.vector:DotsAndBoxes", {}, ([0, 1, 4], [4, 1, 0]), [0, 1, 5]),
    ("pettingzoo:boxes.aec:env", {}, ([0, 1, 4], [4, 1, 0]), [0, 1, 5]),
    (TAKEAWAY, {}, ([0, 1], [1, 0]), [2, 0]),  # 1 then 2 stones, 2 then 1; 3 then 1
], ids=["tic_tac_toe", "connect_four", "dots_and_boxes", "dots_and_boxes_aec", "takeaway"])
def test_transposed_positions_have_one_key(name, params, same, other):
    store = state_store(make_game(name, 1, seed=0, **params), 16)
    a, b, c = slots_after(store, *same, other)
    ka, kb, kc = store.keys([a, b, c])
    assert ka == kb and ka != kc
    hash(ka)


@pytest.mark.parametrize("name", ["boxes.vector:DotsAndBoxes", "pettingzoo:boxes.aec:env"])
def test_a_player_who_closes_a_box_moves_again_in_the_store(name):
    store = state_store(make_game(name, 1, seed=0), 8)
    # box 0 is lines 0 (top), 2 (bottom), 6 (left), 7 (right): seat 1 draws its fourth side
    first = store.set_initial([0])
    assert first.player.tolist() == [0]
    movers = []
    for i, line in enumerate([0, 2, 6, 7]):
        movers.append(int(store.expand([i], [line], [i + 1]).player[0]))
    assert movers == [1, 0, 1, 1]


def test_the_take_away_game_is_won_by_exactly_one_opening_move():
    """Solved through the store alone (expand, keys merging transpositions): taking 120 mod 13 = 3
    stones leaves the opponent a multiple of 13, and no other opening move wins."""
    store = state_store(make_game(TAKEAWAY, 1, seed=0), 4000)
    values: dict = {}
    free = [1]

    def value(slot: int, mover: int, mask: np.ndarray) -> float:
        """The mover's value of the position in ``slot``, with best play by both."""
        key = store.keys([slot])[0]
        if key not in values:
            values[key] = max(move_values(slot, mover, mask).values())
        return values[key]

    def move_values(slot: int, mover: int, mask: np.ndarray) -> dict:
        legal = np.flatnonzero(mask)
        children = np.arange(free[0], free[0] + legal.size)
        free[0] += legal.size
        kids = store.expand(np.full(legal.size, slot), legal, children)
        out = {}
        for i, a in enumerate(legal.tolist()):
            if kids.player[i] == TERMINAL:
                out[a] = float(kids.returns[i, mover])
            else:
                v = value(int(children[i]), int(kids.player[i]), kids.mask[i])
                out[a] = v if kids.player[i] == mover else -v
        return out

    first = store.set_initial([0])
    assert first.player[0] == 0 and first.mask[0].sum() == 12
    opening = move_values(0, 0, first.mask[0])
    assert [a for a, v in opening.items() if v == 1.0] == [2]  # action 2 takes 3 stones
    assert all(v == -1.0 for a, v in opening.items() if a != 2)
    assert len(values) < 2 * 121  # one value per pile and mover: transpositions merged


def one_line(exc: NotSearchable) -> str:
    message = str(exc)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name,params,teams,reason", [
    ("kuhn_poker", {}, None, "it has chance and its players hold hidden information"),
    ("leduc_poker", {}, None, "it has chance and its players hold hidden information"),
    ("pettingzoo:texas_holdem_v4", {}, None, "declares perfect_information = True and copies its positions"),
    ("rps", {}, None, "in a matrix game both move at once"),
])
def test_games_that_cannot_be_searched_are_refused_in_one_line(name, params, teams, reason):
    game = make_game(name, 2, seed=0, **params)
    with pytest.raises(NotSearchable) as caught:
        state_store(game, 4)
    message = one_line(caught.value)
    assert message.startswith(f"{game.name}: search and exact enumeration need") and reason in message


def test_the_battle_team_game_is_refused():
    pytest.importorskip("magent2")
    config = yaml.safe_load((ROOT / "configs" / "battle.yaml").read_text())["game"]
    game = make_game(config["name"], 1, seed=0, teams=config["teams"], **config["params"])
    with pytest.raises(NotSearchable) as caught:
        state_store(game, 4)
    message = one_line(caught.value)
    assert message.startswith(f"{config['name']}: ") and "team game" in message


def test_a_vector_game_that_does_not_opt_in_fully_is_refused_naming_what_it_lacks():
    from boxes.vector import DotsAndBoxes

    class NoRestore(DotsAndBoxes):
        restore_state = None

    class Undeclared(DotsAndBoxes):
        perfect_information = False

    class Simultaneous(DotsAndBoxes):
        simultaneous = True

    for cls, reason in ((NoRestore, "declares perfect_information = True but has no restore_state; "),
                        (Undeclared, "need a game that declares perfect_information = True and copies its positions"),
                        (Simultaneous, "but simultaneous = True")):
        with pytest.raises(NotSearchable) as caught:
            state_store(cls(2), 4)
        message = one_line(caught.value)
        assert message.startswith("dots_and_boxes_2x2: ") and reason in message, message


@pytest.mark.parametrize("module, params", [("tests.data.takeaway", {}), ("boxes.aec", {"rows": 2, "cols": 2})])
def test_the_fast_deep_copy_of_an_environment_plays_as_copy_deepcopys_does(module, params, monkeypatch):
    """envs.pettingzoo.deep_copy, which the search's position copies use: at every position of random
    games, its copy and copy.deepcopy's play the same continuation alike, share the same spaces with
    the original, and leave it untouched."""
    import copy
    import importlib

    from envs.pettingzoo import _spaces_of, deep_copy

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples" / "dots_and_boxes"))
    make = importlib.import_module(module).env
    rng = np.random.default_rng(0)

    def legal(env):
        return np.flatnonzero(env.observe(env.agent_selection)["action_mask"])

    def seen(env):
        return ([env.observe(a)["observation"].tolist() for a in env.possible_agents], dict(env._cumulative_rewards),
                dict(env.terminations), env.agent_selection)

    for game in range(3):
        env = make(**params)
        env.reset(seed=game)
        while not any(env.terminations.values()):
            spaces = _spaces_of(env)
            memo = {id(x): x for x in spaces}
            fast, slow, before = deep_copy(env, dict(memo)), copy.deepcopy(env, dict(memo)), seen(env)
            shared = [[a is b for a, b in zip(_spaces_of(c), spaces)] for c in (fast, slow)]
            assert shared[0] == shared[1]  # the spaces copy.deepcopy shares, and only those
            while not any(slow.terminations.values()):
                action = int(rng.choice(legal(slow)))
                fast.step(action)
                slow.step(action)
                assert seen(fast) == seen(slow)
            assert seen(env) == before
            env.step(int(rng.choice(legal(env))))


def test_the_fast_deep_copy_keeps_aliases_and_an_objects_own_copy_hook():
    from envs.pettingzoo import deep_copy

    class Hooked:
        def __init__(self):
            self.copies = 0

        def __deepcopy__(self, memo):
            self.copies += 1
            return Hooked()

    class Plain:
        pass

    shared = [1, [2, 3]]
    obj = Plain()
    obj.a, obj.b, obj.hooked, obj.arr, obj.t = shared, shared, Hooked(), np.arange(3), (1, "x")
    new = deep_copy(obj, {})
    assert new.a is new.b and new.a == shared and new.a is not shared and new.a[1] is not shared[1]
    assert obj.hooked.copies == 1 and isinstance(new.hooked, Hooked)
    new.arr[0] = 9
    assert obj.arr[0] == 0 and new.t is obj.t

    class Tagged(int):  # an int that holds state of its own: copied, as copy.deepcopy copies it
        pass

    tagged = Tagged(3)
    tagged.seen = [1]
    copied = deep_copy(tagged, {})
    assert copied == 3 and copied is not tagged and copied.seen == [1] and copied.seen is not tagged.seen


FLIPPED = '''
from pettingzoo.utils.wrappers import BaseWrapper, OrderEnforcingWrapper

from tests.data.takeaway import raw_env


class Flipped(BaseWrapper):
    """Shows every seat the complement of what the game shows."""

    def observe(self, agent):
        seen = dict(self.env.observe(agent))
        seen["observation"] = 1 - seen["observation"]
        return seen


def env(**kwargs):
    return OrderEnforcingWrapper(Flipped(raw_env(**kwargs)))
'''


def test_positions_are_read_past_pettingzoos_wrappers_and_through_a_users_own(tmp_path, monkeypatch):
    """A store reads a position's state from the raw environment only where every wrapper around it
    merely forwards (PettingZoo's own); a user's wrapper that changes what a seat observes is read
    through, and the store still shows exactly what the adapter shows."""
    from envs.pettingzoo import _view

    plain = make_game(TAKEAWAY, 2, seed=3)
    assert _view(plain.envs[0]) is plain.envs[0].unwrapped
    (tmp_path / "flipped.py").write_text(FLIPPED)
    monkeypatch.syspath_prepend(str(tmp_path))
    game = make_game("pettingzoo:flipped:env", 4, seed=3)
    assert _view(game.envs[0]) is game.envs[0]
    store = state_store(game, 8)
    assert play_both_ways(game, store, 60, seed=5) >= 4
    assert store.obs_size == plain.obs_size
    first = store.set_initial(np.array([0]))
    assert first.obs[0].sum() == store.obs_size - 2  # the complement of the one-hot pile and "to move"
