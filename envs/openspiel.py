"""Any two-player zero-sum (or constant-sum) OpenSpiel game as a ``VectorGame``.

Per-environment Python work is the throughput bottleneck of the whole league
(raw pyspiel steps far faster than the Python around it), so the step loop is
kept lean: one pass over the environments calling ``apply_action`` directly,
legal masks built from one ``legal_actions_mask`` list per environment and
converted to numpy in one call, and observations written lazily (only for the
seats and environments someone asks about) through OpenSpiel's observer API,
which fills a preallocated buffer instead of building a Python list.

Chance
------
Chance nodes are resolved inside the adapter, never by the caller. Environment
``e`` of a vector built (or reset) with integer ``seed`` owns the uniform stream
``numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(e,)))``
(see :func:`chance_rng`), and at every chance node it draws one uniform ``u``
from that stream and takes the first outcome ``i`` (in the order of
``state.chance_outcomes()``) with ``u < p_0 + ... + p_i`` (the last outcome if
rounding leaves ``u`` above the total; see :func:`sample_chance`). The stream
is consumed only by chance nodes and continues across the episodes of that
environment. A plain single-environment pyspiel loop using these two functions
reproduces environment ``e`` exactly, whatever the other environments do.
"""

from __future__ import annotations

import numpy as np
import pyspiel

from envs.base import NO_ACTION, StepResult, VectorGame
from envs.symmetry import openspiel_symmetries

_ALLOWED_UTILITY = (pyspiel.GameType.Utility.ZERO_SUM, pyspiel.GameType.Utility.CONSTANT_SUM)
_ALLOWED_DYNAMICS = (pyspiel.GameType.Dynamics.SEQUENTIAL, pyspiel.GameType.Dynamics.SIMULTANEOUS)
_UNIFORM_BLOCK = 256  # uniforms drawn per refill; block draws give the same stream as single draws


def load_two_player_zero_sum(game_name: str, params: dict | None = None) -> pyspiel.Game:
    """Load an OpenSpiel game and check it fits the league: 2 players, zero- or
    constant-sum, sequential or simultaneous, explicit (or no) chance, and a
    tensor observation. Raises ValueError naming what is wrong."""
    try:
        # "name(key=value,...)" strings carry their own parameters
        game = pyspiel.load_game(game_name, dict(params)) if params else pyspiel.load_game(game_name)
    except Exception as exc:  # pyspiel raises its own SpielError / RuntimeError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cannot load OpenSpiel game {game_name!r} with params {params or {}}: {reason}") from None
    gtype = game.get_type()
    problems = []
    if game.num_players() != 2:
        problems.append(f"it has {game.num_players()} players, not 2")
    if gtype.utility not in _ALLOWED_UTILITY:
        problems.append(f"its utility is {gtype.utility.name}, not ZERO_SUM or CONSTANT_SUM")
    if gtype.dynamics not in _ALLOWED_DYNAMICS:
        problems.append(f"its dynamics are {gtype.dynamics.name}, not SEQUENTIAL or SIMULTANEOUS")
    if gtype.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        problems.append("its chance is SAMPLED_STOCHASTIC (outcomes cannot be drawn from our seeded RNG)")
    if not (gtype.provides_information_state_tensor or gtype.provides_observation_tensor):
        problems.append("it provides neither an information-state nor an observation tensor")
    if problems:
        raise ValueError(f"OpenSpiel game {game_name!r} cannot be used: " + "; ".join(problems))
    return game


EXACT_MAX_HISTORIES = 10_000_000


def supports_exact(game: pyspiel.Game, params: dict | None = None) -> bool:
    """Whether exact evaluation (evaluation.exploitability: enumerating every
    information state and terminal history) is affordable and defined: a
    sequential perfect-recall game (information-state tensors) whose tree has
    at most ``EXACT_MAX_HISTORIES`` histories by the bound
    ``chance_outcomes ** chance_nodes * actions ** length`` (Kuhn 72, Leduc
    1.4M, Liar's Dice 10^16). Exact evaluation loads the game by name, so a
    game built with extra parameters is not covered."""
    gtype = game.get_type()
    if params or gtype.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL or not gtype.provides_information_state_tensor:
        return False
    bound = (max(1, game.max_chance_outcomes()) ** game.max_chance_nodes_in_history()
             * game.num_distinct_actions() ** game.max_game_length())
    return bound <= EXACT_MAX_HISTORIES


def uses_information_state(game: pyspiel.Game) -> bool:
    """True when seats observe the information-state tensor (perfect recall),
    False when they observe the observation tensor (the game has no info state)."""
    return bool(game.get_type().provides_information_state_tensor)


def state_tensor(game: pyspiel.Game):
    """The function ``(state, player) -> list of floats`` that defines a seat's
    observation for this game; exploitability evaluation uses the same one."""
    if uses_information_state(game):
        return lambda state, player: state.information_state_tensor(player)
    return lambda state, player: state.observation_tensor(player)


def state_tensor_shape(game: pyspiel.Game, size: int) -> tuple[int, ...]:
    """The layout OpenSpiel gives the :func:`state_tensor` (channels first, e.g. (3, 6, 7) for
    Connect Four's player 0 / player 1 / empty planes), or ``(size,)`` when it gives none that
    holds ``size`` numbers."""
    try:
        shape = (game.information_state_tensor_shape() if uses_information_state(game)
                 else game.observation_tensor_shape())
    except Exception:  # a game without a declared shape
        return (int(size),)
    shape = tuple(int(s) for s in shape)
    return shape if shape and int(np.prod(shape)) == int(size) else (int(size),)


def _make_observer(game: pyspiel.Game):
    """OpenSpiel observer writing the same tensor as :func:`state_tensor` into a
    reusable buffer (cheaper per call than building a list), or None."""
    try:
        from open_spiel.python.observation import make_observation

        if uses_information_state(game):
            return make_observation(game, pyspiel.IIGObservationType(perfect_recall=True))
        return make_observation(game)
    except Exception:  # some games have no observer; the list path is exact too
        return None


def chance_rng(seed: int | None, env_index: int) -> np.random.Generator:
    """The RNG whose uniforms environment ``env_index`` spends on chance nodes."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(env_index,)))


def sample_chance(outcomes: list[tuple[int, float]], u: float) -> int:
    """The chance outcome selected by uniform ``u`` (inverse CDF, OpenSpiel order)."""
    acc = 0.0
    for action, prob in outcomes:
        acc += prob
        if u < acc:
            return action
    return outcomes[-1][0]


def _uniform_stream(rng: np.random.Generator):
    while True:
        yield from rng.random(_UNIFORM_BLOCK).tolist()


class _OpeningNode:
    """A node of the chance tree that precedes the first decision of an
    episode (Kuhn: the deal; Leduc: the private cards). New episodes walk this
    cached tree with the env's uniforms and clone the decision state at its
    leaf, instead of rebuilding it with OpenSpiel calls; the outcomes drawn
    are exactly those of the uncached walk."""

    __slots__ = ("state", "outcomes", "children")

    def __init__(self, state: pyspiel.State):
        self.state = state
        self.outcomes = state.chance_outcomes() if state.is_chance_node() else None
        self.children: dict[int, _OpeningNode] = {}


_OPENING_CACHE_LIMIT = 20_000  # nodes; games with bigger opening deals fall back to plain stepping


class OpenSpielGame(VectorGame):
    """A vector of ``num_envs`` copies of a two-player zero-sum OpenSpiel game.

    The observation of a seat is its information-state tensor when the game
    provides one, else its observation tensor. The action space is
    ``game.num_distinct_actions()``; the legal mask comes from
    ``legal_actions_mask(player)``. Chance is sampled as the module docstring
    describes. ``params`` are OpenSpiel game parameters.
    """

    def __init__(self, game_name: str, num_envs: int, params: dict | None = None, seed: int | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.game = load_two_player_zero_sum(game_name, params)
        self.name = game_name
        self.supports_exact = supports_exact(self.game, params)
        self.num_envs = int(num_envs)
        self.num_actions = self.game.num_distinct_actions()
        self._tensor = state_tensor(self.game)
        self.obs_size = len(self._tensor(self._first_decision_state(), 0))
        self.obs_shape = state_tensor_shape(self.game, self.obs_size)
        self.symmetries = openspiel_symmetries(game_name, self.obs_shape, self.num_actions)
        self.simultaneous = self.game.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
        self._observer = _make_observer(self.game)
        # the pybind method itself: one Python frame less per observation
        self._set_from = getattr(getattr(self._observer, "_observation", None), "set_from", None) or (
            self._observer.set_from if self._observer is not None else None
        )
        self._mid_chance = self.game.get_type().chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC
        self._opening = _OpeningNode(self.game.new_initial_state())
        self._opening_size = 1
        self.reset(seed)

    def _first_decision_state(self) -> pyspiel.State:
        state = self.game.new_initial_state()
        while state.is_chance_node():
            state.apply_action(state.chance_outcomes()[0][0])
        return state

    # ------------------------------------------------------------------ reset
    def reset(self, seed: int | None = None) -> None:
        """Restart every environment. With a seed, environment e's chance stream
        restarts as ``chance_rng(seed, e)``; without one, the current streams
        continue (fresh entropy on the very first reset of an unseeded vector)."""
        if seed is not None or not hasattr(self, "_uniforms"):
            self.seed = seed
            self._uniforms = [_uniform_stream(chance_rng(seed, e)) for e in range(self.num_envs)]
        self._states = [self._new_episode(e) for e in range(self.num_envs)]
        self._obs = np.zeros((2, self.num_envs, self.obs_size), dtype=np.float32)
        self._obs_fresh = np.zeros((2, self.num_envs), dtype=bool)
        self._arange = np.arange(self.num_envs)
        self._refresh_decisions()

    def _new_episode(self, e: int) -> pyspiel.State:
        draw = self._uniforms[e]
        node = self._opening
        while node.outcomes is not None:
            action = sample_chance(node.outcomes, next(draw))
            child = node.children.get(action)
            if child is None:
                state = node.state.child(action)
                if self._opening_size >= _OPENING_CACHE_LIMIT:
                    self._resolve_chance(e, state)
                    return state
                child = node.children[action] = _OpeningNode(state)
                self._opening_size += 1
            node = child
        return node.state.clone()

    def _resolve_chance(self, e: int, state: pyspiel.State) -> None:
        draw = self._uniforms[e]
        while state.is_chance_node():
            state.apply_action(sample_chance(state.chance_outcomes(), next(draw)))

    def _refresh_decisions(self, players: list[int] | None = None, masks: list | None = None) -> None:
        """Recompute movers and legal masks after a step; observations go stale.
        Turn-based games may pass the movers and their mask lists, gathered in
        the step loop."""
        E, A = self.num_envs, self.num_actions
        states = self._states
        if not self.simultaneous:
            if players is None:
                players = [s.current_player() for s in states]
                masks = [s.legal_actions_mask(p) for s, p in zip(states, players)]
            self._cur = np.asarray(players, dtype=np.int64)
            self._movers = np.zeros((E, 2), dtype=bool)
            self._movers[self._arange, self._cur] = True
            # one mask row per env: the mover's; other seat's row is all-False
            self._cur_mask = np.asarray(masks, dtype=bool).reshape(E, A)
        else:
            movers = np.zeros((E, 2), dtype=bool)
            masks = np.zeros((2, E, A), dtype=bool)
            for e in range(E):
                s = states[e]
                p = s.current_player()
                seats = (0, 1) if p == pyspiel.PlayerId.SIMULTANEOUS else (p,)
                for seat in seats:
                    movers[e, seat] = True
                    masks[seat, e] = s.legal_actions_mask(seat)
            self._movers = movers
            self._masks = masks
        self._obs_fresh[:] = False

    # ---------------------------------------------------------------- queries
    def movers(self) -> np.ndarray:
        return self._movers.copy()

    def observe(self, seat: int, envs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._observed_envs(seat, envs)
        buf = self._obs[seat]
        fresh = self._obs_fresh[seat]
        stale = idx[~fresh[idx]]
        if stale.size:
            states = self._states
            set_from = self._set_from
            if set_from is not None and self._observer.tensor is not None:
                tensor = self._observer.tensor
                for e in stale.tolist():
                    set_from(states[e], seat)
                    buf[e] = tensor
            else:
                fn = self._tensor
                buf[stale] = np.asarray([fn(states[e], seat) for e in stale.tolist()], dtype=np.float32)
            fresh[stale] = True
        obs = buf[idx]
        if self.simultaneous:
            mask = self._masks[seat][idx]
        else:
            mask = self._cur_mask[idx] & (self._cur[idx] == seat)[:, None]
        return obs, mask

    def legal_mask(self, seat: int) -> np.ndarray:
        """(E, A) legal mask of ``seat`` in every environment (no observation work)."""
        if self.simultaneous:
            return self._masks[seat].copy()
        return self._cur_mask & (self._cur == seat)[:, None]

    def history(self, e: int) -> list[int]:
        """Actions (chance included) of environment e's current episode so far."""
        return list(self._states[e].history())

    def render_text(self, env: int) -> str:
        """OpenSpiel's own text of environment ``env``'s state (``str(state)``): the whole
        state, hidden cards included."""
        return str(self._states[env])

    def action_name(self, env: int, action: int) -> str:
        """OpenSpiel's ``action_to_string`` for the player to move in environment ``env``
        (seat 0 where both seats move at once)."""
        state = self._states[env]
        player = state.current_player()
        return state.action_to_string(player if player >= 0 else 0, int(action))

    # ------------------------------------------------------------------- step
    def _validate(self, actions) -> np.ndarray:
        acts = self._integer_actions(actions)
        movers = self._movers
        wrong_idle = ~movers & (acts != NO_ACTION)
        if wrong_idle.any():
            e, s = np.argwhere(wrong_idle)[0]
            raise ValueError(
                f"{self.name}: seat {s} does not act in env {e} but got action {acts[e, s]} "
                f"(use NO_ACTION={NO_ACTION})"
            )
        in_range = (acts >= 0) & (acts < self.num_actions)
        safe = np.where(in_range, acts, 0)
        if self.simultaneous:
            legal = np.stack([self._masks[s][self._arange, safe[:, s]] for s in (0, 1)], axis=1)
        else:
            row_legal = self._cur_mask[self._arange, safe[self._arange, self._cur]]
            legal = movers & row_legal[:, None]
        bad = movers & ~(in_range & legal)
        if bad.any():
            e, s = np.argwhere(bad)[0]
            raise ValueError(
                f"{self.name}: illegal action {acts[e, s]} for seat {s} in env {e} "
                f"(legal: {np.flatnonzero(self.legal_mask(s)[e]).tolist()})"
            )
        return acts

    def step(self, actions: np.ndarray) -> StepResult:
        acts = self._validate(actions)
        E = self.num_envs
        done = np.zeros(E, dtype=bool)
        returns = np.zeros((E, 2), dtype=np.float64)
        states = self._states
        if not self.simultaneous:
            chosen = acts[self._arange, self._cur].tolist()
            mid_chance = self._mid_chance
            finished, finished_returns, players, masks = [], [], [], []
            for e, s, a in zip(range(E), states, chosen):
                s.apply_action(a)
                if mid_chance and s.is_chance_node():
                    self._resolve_chance(e, s)
                if s.is_terminal():
                    finished.append(e)
                    finished_returns.append(s.returns())
                    s = states[e] = self._new_episode(e)
                p = s.current_player()
                players.append(p)
                masks.append(s.legal_actions_mask(p))
            if finished:
                done[finished] = True
                returns[finished] = finished_returns
            self._refresh_decisions(players, masks)
            return StepResult(done=done, returns=returns)
        rows = acts.tolist()
        for e in range(E):
            s = states[e]
            p = s.current_player()
            if p == pyspiel.PlayerId.SIMULTANEOUS:
                s.apply_actions(rows[e])
            else:
                s.apply_action(rows[e][p])
            self._resolve_chance(e, s)
            if s.is_terminal():
                returns[e] = s.returns()
                done[e] = True
                states[e] = self._new_episode(e)
        self._refresh_decisions()
        return StepResult(done=done, returns=returns)


def why_not_searchable(game: pyspiel.Game, name: str) -> str | None:
    """Why ``game`` cannot be searched position by position (``envs.states``), or None."""
    gtype = game.get_type()
    problems = []
    if gtype.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC:
        problems.append("it has chance")
    if gtype.information != pyspiel.GameType.Information.PERFECT_INFORMATION:
        problems.append("its players hold hidden information")
    if gtype.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        problems.append("its players move at the same time")
    if not problems:
        return None
    return (f"{name}: search and exact enumeration need a deterministic game of perfect information "
            f"taking turns; " + " and ".join(problems))


def is_standard_connect_four(game: pyspiel.Game) -> bool:
    """OpenSpiel's ``connect_four`` on its usual board (6 by 7, four in a row, the shared observation):
    the game ``envs.connect_four``'s bitboards play."""
    return game.get_type().short_name == "connect_four" and dict(game.get_parameters()) == {
        "columns": 7, "rows": 6, "x_in_row": 4, "egocentric_obs_tensor": False}


class OpenSpielStates:
    """``envs.states.StateStore`` of an OpenSpiel game: one ``pyspiel.State`` per slot."""

    def __init__(self, game: pyspiel.Game, capacity: int, name: str = ""):
        from envs.states import NotSearchable

        reason = why_not_searchable(game, name or game.get_type().short_name)
        if reason is not None:
            raise NotSearchable(reason)
        self.game = game
        self.capacity = int(capacity)
        self.num_actions = game.num_distinct_actions()
        self._tensor = state_tensor(game)
        self.obs_size = len(self._tensor(game.new_initial_state(), 0))
        observer = _make_observer(game)
        self._set_from = getattr(getattr(observer, "_observation", None), "set_from", None) or (
            observer.set_from if observer is not None else None)
        self._buffer = observer.tensor if observer is not None else None
        self.states: list = [None] * self.capacity

    def _positions(self, slots) -> "Positions":
        from envs.states import TERMINAL, Positions

        n = len(slots)
        player = np.full(n, TERMINAL, dtype=np.int64)
        returns = np.zeros((n, 2))
        obs = np.zeros((n, self.obs_size), dtype=np.float32)
        masks = np.zeros((n, self.num_actions), dtype=bool)
        states, set_from, buf = self.states, self._set_from, self._buffer
        for i, slot in enumerate(slots):
            s = states[slot]
            if s.is_terminal():
                returns[i] = s.returns()
                continue
            p = s.current_player()
            player[i] = p
            masks[i] = s.legal_actions_mask(p)
            if set_from is not None and buf is not None:
                set_from(s, p)
                obs[i] = buf
            else:
                obs[i] = self._tensor(s, p)
        return Positions(player, returns, obs, masks)

    def set_roots(self, slots, game, envs):
        slots, envs = np.asarray(slots).tolist(), np.asarray(envs).tolist()
        for slot, e in zip(slots, envs, strict=True):
            self.states[slot] = game._states[e].clone()
        return self._positions(slots)

    def set_initial(self, slots):
        slots = np.asarray(slots).tolist()
        for slot in slots:
            self.states[slot] = self.game.new_initial_state()
        return self._positions(slots)

    def expand(self, parents, actions, children):
        parents, actions, children = (np.asarray(x).tolist() for x in (parents, actions, children))
        states = self.states
        for parent, action, child in zip(parents, actions, children, strict=True):
            states[child] = states[parent].child(action)
        return self._positions(children)

    def keys(self, slots):
        return [position_key(self.states[slot], self._tensor) for slot in np.asarray(slots).tolist()]


def position_key(state: pyspiel.State, tensor=None) -> tuple:
    """A key equal exactly for equal positions: the text, the mover and the mover's observation (a
    game's text alone may leave out whose turn it is or the score so far, as Dots and Boxes does);
    an ended game's text and returns. ``tensor``: the game's ``state_tensor``."""
    if state.is_terminal():
        return ("ended", str(state), tuple(state.returns()))
    p = state.current_player()
    tensor = tensor or state_tensor(state.get_game())
    return (p, str(state), np.asarray(tensor(state, p), dtype=np.float32).tobytes())
