"""Games users bring by module path: ``game: {name: "pkg.module:factory", params: {...}}``.

The factory is any callable (a function or a ``VectorGame`` subclass) found as
attribute ``factory`` of the importable module ``pkg.module`` (top level or
dotted). The league calls it with keywords only::

    factory(num_envs=E, seed=S, **params) -> VectorGame

``num_envs`` is the number of environments the vector steps at once (>= 1);
``seed`` is an int, or None for fresh entropy; ``params`` are the config's
``game.params``. It returns a ``VectorGame`` (envs/base.py) with exactly
``num_envs`` environments. ``envs.protocol.check_game`` checks the rest before
a league starts. Exact evaluation (``supports_exact``) is for OpenSpiel and
matrix games, so a game brought this way must not declare it.

The module is imported the way Python imports anything: from ``sys.path``. The
launcher puts the current directory and the config file's folder on it, for
itself and for every Ray worker (``actors.launch``).

Search and exact enumeration (``envs.states``): a game opts in by declaring
``perfect_information = True`` (deterministic, the two seats taking turns) and two methods,
``copy_state(e)``, the position of environment e as any object the game can restore (a copy the
game will not change later), and ``restore_state(e, state)``, which puts that position back into
environment e, copying from ``state`` (one state is restored many times). A game may also offer
``state_key(state)``, a hashable key equal exactly when two states are the same position; without
it the key is the state's contents (arrays by dtype, shape and bytes). ``VectorGameStates`` keeps
one state per slot and steps a scratch vector of the same game to expand them.
"""

from __future__ import annotations

import copy
import importlib
import re
from typing import Callable

import numpy as np

from envs.base import NO_ACTION, VectorGame
from envs.states import TERMINAL, NotSearchable, Positions

_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_SPEC = re.compile(rf"^(?P<module>{_MODULE}):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")


def is_custom_game(name: object) -> bool:
    """A ``module:factory`` name (``pettingzoo:...`` and ``pettingzoo-parallel:...`` names are
    PettingZoo's; see envs.pettingzoo, envs.teams)."""
    return (isinstance(name, str) and ":" in name and not name.startswith("pettingzoo:")
            and not name.startswith("pettingzoo-parallel:"))


def import_attribute(spec: str, what: str) -> Callable:
    """``module:attr`` -> that attribute; ValueError naming what is wrong otherwise."""
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(f"{what} {spec!r}: want 'module:{'factory' if what == 'game' else 'name'}' "
                         "(a dotted module path, a colon, a name), e.g. 'mygames.dots:make_game'")
    module_name, attr = m.group("module"), m.group("attr")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        itself = exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + "."))
        where = "" if itself else f" (it imports {exc.name!r}, which is missing)"
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r}{where}; run from the folder "
                         "that holds it, or put that folder on PYTHONPATH") from None
    except Exception as exc:  # the user's module failed while importing
        raise ValueError(f"{what} {spec!r}: importing {module_name!r} raised {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    try:
        found = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(found):
        raise ValueError(f"{what} {spec!r}: {module_name}.{attr} is not callable")
    return found


def make_custom_game(name: str, num_envs: int, seed: int | None = None, **params) -> VectorGame:
    """Call the factory ``name`` names (see the module docstring); ValueError on a bad path, bad
    parameters, or something that is not a vector of ``num_envs`` games."""
    factory = import_attribute(name, "game")
    try:
        game = factory(num_envs=int(num_envs), seed=seed, **params)
    except TypeError as exc:
        raise ValueError(f"game {name!r}: calling it as {name.split(':')[1]}(num_envs=..., seed=..., "
                         f"**{sorted(params)}) failed ({exc})") from None
    missing = [a for a in ("num_envs", "num_actions", "obs_size", "simultaneous", "reset", "movers", "observe",
                           "step") if not hasattr(game, a)]
    if missing:
        raise ValueError(f"game {name!r}: the factory returned {type(game).__name__}, not a VectorGame "
                         f"(envs/base.py): it lacks {', '.join(missing)}")
    if game.num_envs != int(num_envs):
        raise ValueError(f"game {name!r}: asked for num_envs={num_envs}, the game has num_envs={game.num_envs}")
    if getattr(game, "supports_exact", False):
        raise ValueError(f"game {name!r} declares supports_exact, which only OpenSpiel and matrix games "
                         "have (evaluation.exploitability); set it False")
    if not isinstance(getattr(game, "name", None), str) or not game.name:
        game.name = name
    try:  # how to build another vector of this game: the scratch of its StateStore (VectorGameStates)
        game.built_as = (name, dict(params))
    except AttributeError:  # a game with __slots__ keeps no record; its store falls back to a copy
        pass
    return game



# ---------------------------------------------------------------------------- positions
STATE_METHODS = ("copy_state", "restore_state")


def missing_state_methods(game: VectorGame) -> list[str]:
    """The methods of ``STATE_METHODS`` that ``game`` lacks (not callable)."""
    return [m for m in STATE_METHODS if not callable(getattr(game, m, None))]


def state_key(state: object) -> object:
    """A hashable key of a ``copy_state`` object, equal exactly when the contents are: arrays by
    dtype, shape and bytes, sequences item by item, mappings by sorted items, anything else as is."""
    if isinstance(state, np.ndarray):
        return ("array", state.dtype.str, state.shape, np.ascontiguousarray(state).tobytes())
    if isinstance(state, np.generic):
        return state.item()
    if isinstance(state, (list, tuple)):
        return tuple(state_key(x) for x in state)
    if isinstance(state, dict):
        return tuple(sorted((k, state_key(v)) for k, v in state.items()))
    return state


class VectorGameStates:
    """``envs.states.StateStore`` of a user's ``VectorGame`` (module docstring): one
    ``copy_state`` object per slot (None where the game ended, with its returns kept).

    ``expand`` restores up to ``width`` parents into a scratch vector of the same game, steps it
    once and copies the children back; an episode that ended on that step is read from the
    ``StepResult`` (before the scratch's auto-reset) as a terminal position. The scratch is built
    as ``make_custom_game`` built the game (``game.built_as``), ``width`` environments wide; a game
    built some other way is copied (``copy.deepcopy``), as many environments wide as it has."""

    def __init__(self, game: VectorGame, capacity: int, width: int = 256):
        missing = missing_state_methods(game)
        if missing:
            raise NotSearchable(f"{game.name}: declares perfect_information = True but has no "
                                f"{' and no '.join(missing)}; search and exact enumeration copy its positions "
                                "with copy_state(e) and restore_state(e, state) (docs/custom-games.md)")
        self.name = game.name
        self.capacity = int(capacity)
        self.num_actions = int(game.num_actions)
        self.obs_size = int(game.obs_size)
        built_as = getattr(game, "built_as", None)
        if built_as is not None:
            spec, params = built_as
            self.scratch = make_custom_game(spec, max(1, min(int(width), self.capacity)), seed=0, **params)
        else:
            try:
                self.scratch = copy.deepcopy(game)
            except Exception as exc:  # a game holding what cannot be copied (a handle, a lock)
                raise NotSearchable(f"{game.name}: its store needs a scratch copy of the game, and copying it "
                                    f"raised {type(exc).__name__}; build it with envs.make_game "
                                    "('module:factory')") from None
        self.width = int(self.scratch.num_envs)
        self.states: list = [None] * self.capacity
        self._returns = np.zeros((self.capacity, 2), dtype=np.float64)
        self._key = getattr(game, "state_key", None) or state_key
        self._initial: object = None

    def _read(self, game: VectorGame, envs: np.ndarray) -> Positions:
        """Positions of ``game``'s environments ``envs`` (none ended): mover, its obs and mask."""
        n = len(envs)
        player = np.argmax(game.movers()[envs], axis=1).astype(np.int64)
        obs = np.zeros((n, self.obs_size), dtype=np.float32)
        mask = np.zeros((n, self.num_actions), dtype=bool)
        for seat in (0, 1):
            rows = np.flatnonzero(player == seat)
            if rows.size:
                obs[rows], mask[rows] = game.observe(seat, envs[rows])
        return Positions(player, np.zeros((n, 2)), obs, mask)

    def set_roots(self, slots, game, envs):
        slots, envs = np.asarray(slots, dtype=np.int64), np.asarray(envs, dtype=np.int64)
        if slots.shape != envs.shape:
            raise ValueError(f"{self.name}: {slots.size} slots for {envs.size} environments")
        for slot, e in zip(slots.tolist(), envs.tolist()):
            self.states[slot] = game.copy_state(e)
            self._returns[slot] = 0.0
        return self._read(game, envs)

    def set_initial(self, slots):
        slots = np.asarray(slots, dtype=np.int64).tolist()
        if self._initial is None:
            self.scratch.reset(seed=0)
            self._initial = (self.scratch.copy_state(0), self._read(self.scratch, np.zeros(1, dtype=np.int64)))
        state, first = self._initial
        for slot in slots:  # one state for all: the store never changes a state, restore_state copies it
            self.states[slot] = state
            self._returns[slot] = 0.0
        n = len(slots)
        return Positions(np.repeat(first.player, n), np.zeros((n, 2)), np.repeat(first.obs, n, axis=0),
                         np.repeat(first.mask, n, axis=0))

    def expand(self, parents, actions, children):
        parents, actions, children = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (parents, actions, children))
        if not parents.shape == actions.shape == children.shape:
            raise ValueError(f"{self.name}: expand needs as many parents, actions and children")
        n = parents.size
        player = np.full(n, TERMINAL, dtype=np.int64)
        returns = np.zeros((n, 2), dtype=np.float64)
        obs = np.zeros((n, self.obs_size), dtype=np.float32)
        mask = np.zeros((n, self.num_actions), dtype=bool)
        for lo in range(0, n, self.width):
            hi = min(n, lo + self.width)
            self._expand_chunk(parents[lo:hi], actions[lo:hi], children[lo:hi], player[lo:hi], returns[lo:hi],
                               obs[lo:hi], mask[lo:hi])
        return Positions(player, returns, obs, mask)

    def _expand_chunk(self, parents, actions, children, player, returns, obs, mask) -> None:
        """``expand`` of at most ``width`` children, written into the given rows."""
        scratch, n = self.scratch, parents.size
        for i, parent in enumerate(parents.tolist()):
            if self.states[parent] is None:
                raise ValueError(f"{self.name}: slot {parent} holds a position where the game ended")
            scratch.restore_state(i, self.states[parent])
        movers = scratch.movers()
        acts = np.full((self.width, 2), NO_ACTION, dtype=np.int64)
        seats = np.argmax(movers, axis=1)
        acts[np.arange(n), seats[:n]] = actions
        idle = np.arange(n, self.width)  # environments not used: a legal action of their own mover
        for seat in (0, 1):
            rows = idle[seats[idle] == seat]
            if rows.size:
                acts[rows, seat] = np.argmax(scratch.observe(seat, rows)[1], axis=1)
        result = scratch.step(acts)
        done = np.asarray(result.done[:n], dtype=bool)
        returns[done] = np.asarray(result.returns)[:n][done]
        live = np.flatnonzero(~done)
        if live.size:
            read = self._read(scratch, live)
            player[live], obs[live], mask[live] = read.player, read.obs, read.mask
        for i, child in enumerate(children.tolist()):
            self.states[child] = None if done[i] else scratch.copy_state(i)
            self._returns[child] = returns[i]

    def keys(self, slots):
        out = []
        for slot in np.asarray(slots, dtype=np.int64).tolist():
            state = self.states[slot]
            out.append(("ended", tuple(self._returns[slot].tolist())) if state is None else self._key(state))
        return out
