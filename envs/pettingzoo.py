"""PettingZoo AEC games (classic environments, with action masks) behind the
vectorized two-player protocol of ``envs.base``.

``make_game("pettingzoo:texas_holdem_v4", E)`` steps E copies of
``pettingzoo.classic.texas_holdem_v4.raw_env()``. A name without a dot is looked
up in ``pettingzoo.classic``, then as a top-level module of that name; a dotted
name (``"pettingzoo:mypkg.mygame"``) imports that module, so any AEC environment
that exposes ``raw_env`` or ``env`` works; ``"pettingzoo:MODULE:FACTORY"``
names the constructor (``"pettingzoo:mygame:env"``,
``"pettingzoo:mypkg.mygame:raw_env"``). Game parameters go to that constructor
(``pettingzoo:go_v5`` with ``board_size=7``). A user's environment may declare
``utility_range = (lo, hi)``, its smallest and largest return (default (-1, 1)).

Seats are the environment's ``possible_agents`` in order (it must have exactly
two). Turn-based: the seat to move is ``agent_selection``. A seat's observation
is its ``observe(agent)["observation"]`` flattened to float32; the legal mask is
``observe(agent)["action_mask"]`` (or ``infos[agent]["action_mask"]``).

Returns follow the AEC convention: an agent's episode return is the sum of the
cumulative rewards it would read from ``last()`` at each of its turns, its
final (dead) turn included. The episode ends as soon as the agent to move is
terminated or truncated (two-player games end for both at once); the
environment is then reset, without the dead steps, which change nothing.

Search and exact enumeration (``envs.states``): an environment opts in by declaring
``perfect_information = True`` on the raw environment (deterministic, the two agents taking
turns); ``PettingZooStates`` keeps a deep copy of the environment per position (``deep_copy``:
``copy.deepcopy``'s result, in half its time for plain Python environments), and reads a
position's state past PettingZoo's own wrappers, which only forward it (``_view``). Its key
of a position is the environment's own ``state_key()`` where it has one, else the agent to move,
every agent's observation and the rewards so far.

Without a seed, every environment draws fresh entropy on its first reset and
then continues its own random stream; with one, environment e is reseeded from
``(seed, e)`` through numpy's ``SeedSequence``.
"""

from __future__ import annotations

import copy
import functools
import importlib
import warnings
from typing import Any

import numpy as np
from gymnasium.spaces import Space

from envs.base import NO_ACTION, StepResult, VectorGame
from envs.custom import import_attribute
from envs.states import TERMINAL, NotSearchable, Positions

PREFIX = "pettingzoo:"

# Smallest and largest return of a seat, where the environment's rewards are not
# in [-1, 1]: RLCard's limit hold'em pays chips / big blind, at most 4 bets of
# 1 big blind (pre-flop, flop) and of 2 (turn, river) per player: 24.
UTILITY_RANGES = {
    "texas_holdem_v4": (-24.0, 24.0),
}


def is_pettingzoo_game(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def _constructor(name: str):
    """(short name, constructor, whether PettingZoo ships it) of a ``pettingzoo:...`` name."""
    module_name = name[len(PREFIX):]
    if not module_name:
        raise ValueError(f"game {name!r}: name a PettingZoo environment after {PREFIX!r}, e.g. pettingzoo:texas_holdem_v4")
    if ":" in module_name:  # module:factory, the factory named
        try:
            make = import_attribute(module_name, "PettingZoo environment")
        except ValueError as exc:
            raise ValueError(f"game {name!r}: {str(exc).split(': ', 1)[1]}") from None
        return module_name.split(":")[0].rsplit(".", 1)[-1], make, False
    shipped = "." not in module_name
    path = f"pettingzoo.classic.{module_name}" if shipped else module_name
    try:
        if shipped:  # through the package, whose lookup names the current version of a deprecated one
            with warnings.catch_warnings():  # its notice about PettingZoo's own registry plans
                warnings.simplefilter("ignore", DeprecationWarning)
                module = getattr(importlib.import_module("pettingzoo.classic"), module_name, None)
            if module is None:  # not one of PettingZoo's: a top-level module of the user's
                shipped, path = False, module_name
                module = importlib.import_module(module_name)
        else:
            module = importlib.import_module(path)
    except (ImportError, AttributeError) as exc:
        hint = f" (neither pettingzoo.classic.{module_name} nor a module of that name)" if "." not in module_name else ""
        raise ValueError(f"game {name!r}: cannot import {path}{hint} ({exc})") from None
    make = getattr(module, "raw_env", None) or getattr(module, "env", None)
    if make is None:
        raise ValueError(f"game {name!r}: {path} has no raw_env() or env(); name the factory: "
                         f"pettingzoo:{module_name}:FACTORY")
    return module_name.rsplit(".", 1)[-1], make, shipped


def is_shipped(name: str) -> bool:
    """A PettingZoo game that PettingZoo itself ships (``pettingzoo:connect_four_v3``), not one a user brings."""
    return _constructor(name)[2]


def _observation(raw: Any, info: dict) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(raw, dict) and "observation" in raw:
        mask = raw.get("action_mask")
        raw = raw["observation"]
    else:
        mask = None
    if mask is None:
        mask = info.get("action_mask") if isinstance(info, dict) else None
    return np.asarray(raw, dtype=np.float32).reshape(-1), None if mask is None else np.asarray(mask).astype(bool)


def _play_turn(env: Any, agents: list[str], seat: int, action: int, totals: np.ndarray, view: Any = None) -> bool:
    """``env.step(action)`` by the agent in ``seat``, adding to ``totals`` (each seat's return so far,
    changed in place) what the agents read from ``last()``; whether the episode ended (module docstring).
    The game's state is read from ``view`` (``_view``), by default ``env`` itself."""
    view = env if view is None else view
    # what the mover reads from last() at its turn is its share of the return so far
    totals[seat] += view._cumulative_rewards[agents[seat]]
    env.step(action)
    mover = view.agent_selection
    if view.terminations.get(mover, True) or view.truncations.get(mover, True):
        for s, agent in enumerate(agents):  # each agent's final last() before its dead step
            totals[s] += view._cumulative_rewards.get(agent, 0.0)
        return True
    return False


@functools.cache
def _wrapper_base() -> type:
    from pettingzoo.utils.wrappers import BaseWrapper

    return BaseWrapper


# what a search reads of a position: the AEC state and observe()
_READS = frozenset(("agent_selection", "infos", "_cumulative_rewards", "terminations", "truncations", "observe"))
_TRANSPARENT: dict[type, bool] = {}


def _transparent(cls: type) -> bool:
    """Whether a wrapper of class ``cls`` (a PettingZoo ``BaseWrapper``) hands every read of ``_READS``
    to the environment it wraps unchanged: PettingZoo's own forwarding (``OrderEnforcingWrapper``'s
    check before reset aside), none of those names defined by the class or a base of its own."""
    from pettingzoo.utils.wrappers import BaseWrapper, OrderEnforcingWrapper

    forwarding = {BaseWrapper.__getattr__, OrderEnforcingWrapper.__getattr__, BaseWrapper.observe,
                  OrderEnforcingWrapper.observe}
    mro = cls.__mro__[:cls.__mro__.index(BaseWrapper) + 1]
    return all(value in forwarding for k in mro for name, value in vars(k).items()
               if name in _READS or name == "__getattr__")


def _view(env: Any) -> Any:
    """What to read a position's state from (``_READS``): the raw environment where every wrapper
    around it is a ``_transparent`` PettingZoo wrapper holding none of those names itself, so that a
    read skips the wrappers' ``__getattr__``; else ``env`` itself."""
    inner = env
    while isinstance(inner, _wrapper_base()):
        cls = type(inner)
        known = _TRANSPARENT.get(cls)
        if known is None:
            known = _TRANSPARENT[cls] = _transparent(cls)
        fields = vars(inner)
        if not known or not _READS.isdisjoint(fields) or "env" not in fields:
            return env
        inner = fields["env"]
    return inner


class PettingZooGame(VectorGame):
    """A vector of ``num_envs`` copies of a two-player zero-sum PettingZoo AEC game."""

    simultaneous = False

    def __init__(self, name: str, num_envs: int, params: dict | None = None, seed: int | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        short, make, shipped = _constructor(name)
        self.name = name
        self.num_envs = int(num_envs)
        params = dict(params or {})
        try:
            self.envs = [make(**params) for _ in range(self.num_envs)]
        except TypeError as exc:
            raise ValueError(f"game {name!r}: bad parameters {sorted(params)} ({exc})") from None
        except ImportError as exc:  # PettingZoo's DeprecatedEnv names the current version
            raise ValueError(f"game {name!r}: {exc}") from None
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        if len(self.agents) != 2:
            raise ValueError(f"game {name!r} has {len(self.agents)} agents; the league plays two-player games")
        spaces = [first.action_space(a) for a in self.agents]
        if any(not hasattr(s, "n") for s in spaces) or spaces[0].n != spaces[1].n:
            raise ValueError(f"game {name!r}: both agents need the same Discrete action space, got {spaces}")
        self.num_actions = int(spaces[0].n)
        # a user's environment may declare its range (``utility_range = (lo, hi)``), as VectorGames may
        declared = getattr(getattr(first, "unwrapped", first), "utility_range", None)
        self.utility_range = UTILITY_RANGES.get(short, (-1.0, 1.0)) if shipped or declared is None else declared
        # and its board's symmetries (envs.symmetry), for the search learner
        self.symmetries = getattr(getattr(first, "unwrapped", first), "symmetries", None)
        self.seed = seed
        self._seeded = False
        self.reset(seed)
        self.obs_size = int(self._obs.shape[1])
        # The flat observation is the space's array in C order, so its shape is the space's:
        # (H, W, C) for board games (connect_four_v3: rows, columns, own / opponent planes).
        space = first.observation_space(self.agents[0])
        shape = getattr(space["observation"] if hasattr(space, "spaces") and "observation" in space.spaces
                        else space, "shape", None)
        if shape and int(np.prod(shape)) == self.obs_size:
            self.obs_shape = tuple(shape)
            self.channels_last = len(shape) == 3

    # ------------------------------------------------------------------ reset
    def _env_seed(self, seed: int, e: int) -> int:
        return int(np.random.SeedSequence([int(seed), e]).generate_state(1)[0])

    def reset(self, seed: int | None = None) -> None:
        """Restart every environment (see the module docstring for seeding)."""
        E = self.num_envs
        fresh = seed is None and not self._seeded
        if seed is not None:
            self.seed = seed
        for e, env in enumerate(self.envs):
            if seed is not None:
                env.reset(seed=self._env_seed(seed, e))
            elif fresh:
                env.reset(seed=int(np.random.SeedSequence().generate_state(1)[0]))
            else:
                env.reset()
        self._seeded = True
        self._totals = np.zeros((E, 2), dtype=np.float64)
        self._cur = np.zeros(E, dtype=np.int64)
        self._cur_mask = np.zeros((E, self.num_actions), dtype=bool)
        first = self._observe(0, self._mover(0))[0]
        self._obs = np.zeros((E, first.size), dtype=np.float32)
        for e in range(E):
            self._refresh(e)

    def _mover(self, e: int) -> int:
        return self.agents.index(self.envs[e].agent_selection)

    def _observe(self, e: int, seat: int) -> tuple[np.ndarray, np.ndarray | None]:
        env, agent = self.envs[e], self.agents[seat]
        return _observation(env.observe(agent), env.infos.get(agent, {}))

    def _refresh(self, e: int) -> None:
        """The mover of env e, with its observation and legal mask."""
        seat = self._mover(e)
        obs, mask = self._observe(e, seat)
        if mask is None:
            raise ValueError(f"game {self.name!r} gives no action mask (observation['action_mask'] or "
                             "infos[agent]['action_mask'])")
        self._cur[e] = seat
        self._obs[e] = obs
        self._cur_mask[e] = mask
        if not mask.any():
            raise ValueError(f"game {self.name!r}: agent {self.agents[seat]} must move with no legal action")

    # ---------------------------------------------------------------- queries
    def movers(self) -> np.ndarray:
        movers = np.zeros((self.num_envs, 2), dtype=bool)
        movers[np.arange(self.num_envs), self._cur] = True
        return movers

    def observe(self, seat: int, envs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._observed_envs(seat, envs)
        obs = self._obs[idx].copy()
        moving = self._cur[idx] == seat
        for i in np.flatnonzero(~moving).tolist():  # the seat waiting for its turn
            obs[i] = self._observe(int(idx[i]), seat)[0]
        return obs, self._cur_mask[idx] & moving[:, None]

    # ------------------------------------------------------------------- text
    def render_text(self, env: int) -> str:
        """Environment ``env`` as text: the environment's own ``render_text`` where it has one, its
        ANSI rendering when it was built
        with ``render_mode="ansi"`` (a game parameter); for RLCard's card games (hold'em, Leduc)
        what the agent to move sees, its hand, the public cards and the chips each agent has
        put in; else the protocol's default (the mover's observation)."""
        e = self.envs[env]
        own = getattr(e.unwrapped, "render_text", None)
        if callable(own):  # a user's environment that renders itself as text (render_text(env))
            return str(own(0))
        if getattr(e, "render_mode", None) == "ansi":
            text = e.render()
            if isinstance(text, str):
                return text
        engine = getattr(e, "env", None)  # RLCardBase keeps RLCard's environment here
        if engine is not None and hasattr(engine, "get_state"):
            seat = self._mover(env)
            raw = engine.get_state(seat).get("raw_obs")
            if isinstance(raw, dict) and "hand" in raw:
                return _card_table(self.agents, seat, raw)
        return super().render_text(env)

    def action_name(self, env: int, action: int) -> str:
        """The action's name where the game has one (the environment's own ``action_name``;
        RLCard's games list theirs: hold'em's are Call, Raise, Fold, Check), else its index."""
        own = getattr(self.envs[env].unwrapped, "action_name", None)
        if callable(own):  # a user's environment that names its actions (action_name(env, action))
            return str(own(0, int(action)))
        names = getattr(getattr(self.envs[env], "env", None), "actions", None)
        if isinstance(names, (list, tuple)) and 0 <= action < len(names) and isinstance(names[action], str):
            return names[action].capitalize()
        return str(action)

    # ------------------------------------------------------------------- step
    def _validate(self, actions) -> np.ndarray:
        acts = self._integer_actions(actions)
        E = self.num_envs
        rows = np.arange(E)
        idle = acts[rows, 1 - self._cur]
        if (idle != NO_ACTION).any():
            e = int(np.flatnonzero(idle != NO_ACTION)[0])
            raise ValueError(f"{self.name}: seat {1 - self._cur[e]} does not act in env {e} but got action "
                             f"{idle[e]} (use NO_ACTION={NO_ACTION})")
        chosen = acts[rows, self._cur]
        ok = (chosen >= 0) & (chosen < self.num_actions)
        ok[ok] = self._cur_mask[rows[ok], chosen[ok]]
        if not ok.all():
            e = int(np.flatnonzero(~ok)[0])
            raise ValueError(f"{self.name}: illegal action {chosen[e]} for seat {self._cur[e]} in env {e} "
                             f"(legal: {np.flatnonzero(self._cur_mask[e]).tolist()})")
        return chosen

    def step(self, actions: np.ndarray) -> StepResult:
        chosen = self._validate(actions).tolist()
        E = self.num_envs
        done = np.zeros(E, dtype=bool)
        returns = np.zeros((E, 2), dtype=np.float64)
        for e, a in enumerate(chosen):
            env = self.envs[e]
            if _play_turn(env, self.agents, int(self._cur[e]), a, self._totals[e]):
                returns[e] = self._totals[e]
                done[e] = True
                self._totals[e] = 0.0
                env.reset()
            self._refresh(e)
        return StepResult(done=done, returns=returns)


_SUITS = {"S": "\u2660", "H": "\u2665", "D": "\u2666", "C": "\u2663"}


def _card(code: str) -> str:
    """RLCard's card code (suit then rank: "HT") as rank and suit symbol ("10\u2665")."""
    if len(code) != 2 or code[0] not in _SUITS:
        return code
    return ("10" if code[1] == "T" else code[1]) + _SUITS[code[0]]


def _card_table(agents: list[str], seat: int, raw: dict) -> str:
    """What RLCard's card-game state ``raw`` shows the agent in ``seat``, as text."""
    public = [_card(c) for c in raw.get("public_cards") or []]
    lines = [f"{agents[seat]} to move",
             f"hand: {' '.join(_card(c) for c in raw['hand'])}",
             f"public cards: {' '.join(public) if public else '(none yet)'}"]
    chips = raw.get("all_chips")
    if chips is not None and len(chips) == len(agents):
        lines.append("chips in the pot: " + ", ".join(f"{a} {c:g}" for a, c in zip(agents, chips)))
    return "\n".join(lines)


def pettingzoo_info(name: str, **params) -> tuple[int, int, tuple[int, ...], bool]:
    """(obs_size, num_actions, obs_shape, channels_last) of a PettingZoo game (builds one environment)."""
    game = PettingZooGame(name, 1, params=params or None, seed=0)
    return game.obs_size, game.num_actions, game.obs_shape, game.channels_last


def declares_perfect_information(game: PettingZooGame) -> bool:
    """Whether ``game``'s (raw) environment declares ``perfect_information = True`` (module docstring)."""
    first = game.envs[0]
    return getattr(getattr(first, "unwrapped", first), "perfect_information", False) is True


def _spaces_of(env: Any) -> list:
    """The gymnasium spaces that ``env`` and the environments it wraps hold (one space, or a dict of
    them per agent): what a game never changes while it plays, shared by its copies."""
    found = []
    while env is not None:
        for value in vars(env).values():
            if isinstance(value, Space) or (isinstance(value, dict) and value
                                            and all(isinstance(v, Space) for v in value.values())):
                found.append(value)
        env = getattr(env, "env", None) if hasattr(env, "unwrapped") and env is not env.unwrapped else None
    return found


# immutable, shared by copies: these exact types (as copy.deepcopy has them: a subclass may hold state)
# and numpy's scalars
_ATOMS = frozenset((type(None), bool, int, float, complex, str, bytes, range))


def _plain(cls: type) -> bool:
    """Whether ``copy.deepcopy`` copies an instance of ``cls`` as ``object.__new__(cls)`` with a deep copy
    of its ``__dict__``: no hook of its own (``__deepcopy__``, ``__reduce__``, ``__getstate__``,
    ``__setstate__``, ``__new__`` and its arguments: a subclass of a built-in type has them) and no
    slots (``typing.Generic``'s empty ones aside)."""
    return (getattr(cls, "__deepcopy__", None) is None and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__new__ is object.__new__ and not hasattr(cls, "__getnewargs_ex__")
            and not hasattr(cls, "__getnewargs__")
            and cls.__reduce__ is object.__reduce__ and getattr(cls, "__getstate__", None) is getattr(
                object, "__getstate__", None) and not hasattr(cls, "__setstate__")
            and "__dict__" in dir(cls) and not any(vars(k).get("__slots__") for k in cls.__mro__))


_PLAIN: dict[type, bool] = {}


def deep_copy(obj: Any, memo: dict) -> Any:
    """``copy.deepcopy(obj, memo)``, faster for what a game's environment holds: immutable values
    are shared, dicts, lists, tuples, numeric arrays and plain objects (``_plain``) are copied here,
    anything else by ``copy.deepcopy`` with the same ``memo`` (objects met twice are copied once,
    and the objects ``memo`` holds are kept, as there)."""
    cls = type(obj)
    if cls in _ATOMS or isinstance(obj, np.generic):
        return obj
    found = memo.get(id(obj), memo)
    if found is not memo:
        return found
    if cls is dict:
        new = memo[id(obj)] = {}
        for k, v in obj.items():  # atoms inline: most of what a game's dicts hold
            new[k if type(k) in _ATOMS else deep_copy(k, memo)] = v if type(v) in _ATOMS else deep_copy(v, memo)
        return new
    if cls is list:
        new = memo[id(obj)] = []
        new.extend([v if type(v) in _ATOMS else deep_copy(v, memo) for v in obj])
        return new
    if cls is tuple:
        items = [deep_copy(v, memo) for v in obj]
        new = obj if all(a is b for a, b in zip(items, obj)) else tuple(items)
        memo[id(obj)] = new
        return new
    if cls is np.ndarray and obj.dtype != object:
        new = memo[id(obj)] = obj.copy()
        return new
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = _plain(cls)
    if not plain:
        return copy.deepcopy(obj, memo)
    new = memo[id(obj)] = object.__new__(cls)
    new.__dict__.update({k: v if type(v) in _ATOMS else deep_copy(v, memo) for k, v in obj.__dict__.items()})
    return new


class PettingZooStates:
    """``envs.states.StateStore`` of a PettingZoo AEC game that declares ``perfect_information``:
    per slot a deep copy (``deep_copy``) of the environment (None where the game ended) and each seat's
    return so far (the adapter's ``_totals``); ``expand`` copies the parent and steps the copy
    as ``PettingZooGame.step`` steps its environments. The copies share the environment's
    observation and action spaces, which most of a copy's work would otherwise go to."""

    def __init__(self, game: PettingZooGame, capacity: int):
        if not declares_perfect_information(game):
            raise NotSearchable(f"{game.name}: search and exact enumeration need a game that declares "
                                "perfect_information = True and copies its positions (docs/custom-games.md)")
        self.name = game.name
        self.agents = list(game.agents)
        self.capacity = int(capacity)
        self.num_actions = int(game.num_actions)
        self.obs_size = int(game.obs_size)
        self.envs: list = [None] * self.capacity
        self.views: list = [None] * self.capacity  # what each slot's state is read from (_view)
        self.seen: list = [None] * self.capacity  # each slot's mover's observation, as bytes (for keys)
        self.totals = np.zeros((self.capacity, 2), dtype=np.float64)
        self._spaces = _spaces_of(game.envs[0])
        self._shared = {id(x): x for x in self._spaces}  # id of a space -> the one every copy holds
        self._held: list = []  # the spaces whose ids are keys of _shared
        self._initial = self._copy(game.envs[0])
        self._initial.reset(seed=0)

    def _share_spaces(self, env: Any) -> None:
        """Copies of ``env`` (another environment of the game) hold the first environment's spaces."""
        own = _spaces_of(env)
        if len(own) == len(self._spaces):
            for space, one in zip(own, self._spaces):
                if id(space) not in self._shared and type(space) is type(one):
                    self._shared[id(space)] = one
                    self._held.append(space)

    def _copy(self, env: Any) -> Any:
        """A deep copy of ``env`` holding the shared spaces."""
        return deep_copy(env, dict(self._shared))

    def _fill(self, slot: int, env: Any, view: Any = None) -> None:
        self.envs[slot] = env
        self.views[slot] = None if env is None else view if view is not None else _view(env)

    def _positions(self, slots: list[int]) -> Positions:
        n = len(slots)
        player = np.full(n, TERMINAL, dtype=np.int64)
        returns = np.zeros((n, 2), dtype=np.float64)
        obs = np.zeros((n, self.obs_size), dtype=np.float32)
        masks = np.zeros((n, self.num_actions), dtype=bool)
        for i, slot in enumerate(slots):
            env = self.views[slot]
            if env is None:
                returns[i] = self.totals[slot]
                continue
            agent = env.agent_selection
            player[i] = self.agents.index(agent)
            obs[i], mask = _observation(env.observe(agent), env.infos.get(agent, {}))
            self.seen[slot] = obs[i].tobytes()
            if mask is None:
                raise ValueError(f"game {self.name!r} gives no action mask (observation['action_mask'] or "
                                 "infos[agent]['action_mask'])")
            masks[i] = mask
        return Positions(player, returns, obs, masks)

    def set_roots(self, slots, game, envs):
        slots, envs = np.asarray(slots).tolist(), np.asarray(envs).tolist()
        for slot, e in zip(slots, envs, strict=True):
            self._share_spaces(game.envs[e])
            self._fill(slot, self._copy(game.envs[e]))
            self.totals[slot] = game._totals[e]
        return self._positions(slots)

    def set_initial(self, slots):
        slots = np.asarray(slots).tolist()
        for slot in slots:
            self._fill(slot, self._copy(self._initial))
            self.totals[slot] = 0.0
        return self._positions(slots)

    def expand(self, parents, actions, children):
        parents, actions, children = (np.asarray(x).tolist() for x in (parents, actions, children))
        for parent, action, child in zip(parents, actions, children, strict=True):
            env = self.envs[parent]
            if env is None:
                raise ValueError(f"{self.name}: slot {parent} holds a position where the game ended")
            env = self._copy(env)
            view = _view(env)
            totals = self.totals[parent].copy()
            ended = _play_turn(env, self.agents, self.agents.index(view.agent_selection), int(action), totals, view)
            self._fill(child, None if ended else env, view)
            self.totals[child] = totals
        return self._positions(children)

    def keys(self, slots):
        out = []
        for slot in np.asarray(slots).tolist():
            env = self.views[slot]
            if env is None:
                out.append(("ended", tuple(self.totals[slot].tolist())))
                continue
            own = getattr(self.envs[slot].unwrapped, "state_key", None)
            if callable(own):
                out.append(own())
                continue
            mover = self.agents.index(env.agent_selection)
            # the mover's observation as _positions saw it when the slot was filled; the other's now
            seen = tuple(self.seen[slot] if s == mover else
                         _observation(env.observe(a), env.infos.get(a, {}))[0].tobytes()
                         for s, a in enumerate(self.agents))
            rewards = tuple(float(env._cumulative_rewards.get(a, 0.0)) for a in self.agents)
            out.append((mover, seen, tuple(self.totals[slot].tolist()), rewards))
        return out
