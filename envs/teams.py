"""PettingZoo parallel games of two teams behind the team view of ``envs.base``.

``make_game("pettingzoo-parallel:MODULE:FACTORY", E, teams={...}, **params)``
steps E copies of ``FACTORY(**params)``, a PettingZoo ``ParallelEnv`` (e.g.
``pettingzoo-parallel:magent2.environments.battle_v4:parallel_env`` with
``map_size=12``), all together. ``teams`` (the config's ``game.teams``) says
how the environment's agents form the two sides:

- ``prefix: [P0, P1]``: side s is every agent of ``possible_agents`` whose
  name starts with ``Ps``, in ``possible_agents`` order; its position in that
  list is the agent's index k in the team. Every agent belongs to exactly one
  side, and all agents have the same observation shape and the same
  ``Discrete`` action space (both sides' policies are league members that
  may play either side). Omitted for an environment of exactly two agents:
  each is a team of one.
- ``score``: how a side's score of an episode is decided: ``sum`` (the
  default), the sum of the rewards its agents received over the episode;
  ``survivors``, its agents left standing at the end: those not terminated on
  the last step (being cut off by the time limit is not death). MAgent2's
  environments terminate every agent when a side is wiped out, the winners
  too, so for them the count is MAgent2's own number of live agents in each
  group (``GridWorld.get_num``). The game's result is decided by the
  comparison: 1 to side 0 when its score is higher, 0.5 on a tie.
- ``max_cycles``: an episode ends after this many steps even if the
  environment would go on (default: none; the environment's own limit).
- ``dense_rewards``: true to pass each agent's per-step reward from the
  environment on in ``StepResult.rewards`` (E, 2, N), for learners to add to
  the agent's trajectory (MAgent2's rewards for hits and kills); the score of
  a game is unchanged. Default false.

``team_size`` is the larger side's number of agents. ``alive()[e, s, k]`` is
whether agent k of side s is in environment e's ``agents``: an agent that is
terminated or truncated leaves the batch on the step after, one that joins
(enters ``agents``) enters it. An episode ends when the environment has no
agents left (all done) or at ``max_cycles``; the environment is then reset,
inside ``step_team``, and the ``StepResult`` of that step carries each side's
score. A side's observation row is the agent's observation flattened to
float32 (the space's array in C order, so ``obs_shape`` is the space's shape,
(H, W, C) for MAgent2's 13x13x5 planes); its legal mask is
``obs["action_mask"]`` or ``infos[agent]["action_mask"]`` where the
environment gives one, else every action.

A bad ``teams`` value, or agents or spaces that do not fit it, raises
``TeamError``: one line naming the config key (``game.teams.prefix``, ...).

Seeding follows ``envs.pettingzoo``: with a seed, environment e is reset with
``env_seed(seed, e)`` and then continues its own random stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.base import NO_ACTION, SideBatch, StepResult, VectorGame, outcome_from_returns
from envs.custom import import_attribute

PREFIX = "pettingzoo-parallel:"
SCORES = ("sum", "survivors")
TEAM_KEYS = ("prefix", "score", "max_cycles", "dense_rewards")


class TeamError(ValueError):
    """A ``game.teams`` value, or a game whose agents or spaces do not fit it; ``key`` names the
    config key at fault."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def is_parallel_game(name: object) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def env_seed(seed: int, e: int) -> int:
    """The seed environment ``e`` of a vector seeded with ``seed`` is reset with."""
    return int(np.random.SeedSequence([int(seed), e]).generate_state(1)[0])


def _factory(name: str):
    spec = name[len(PREFIX):]
    try:
        return import_attribute(spec, "PettingZoo parallel environment")
    except ValueError as exc:
        raise TeamError("game.name", f"{name!r}: {str(exc).split(': ', 1)[1]}") from None


def _names(agents: list[str]) -> str:
    return ", ".join(agents[:6]) + (f", ... ({len(agents)} agents)" if len(agents) > 6 else "")


def _team_options(teams: dict | None) -> tuple[list[str] | None, str, int | None, bool]:
    teams = {} if teams is None else teams
    if not isinstance(teams, dict):
        raise TeamError("game.teams", f"must be a mapping (prefix, score, max_cycles), got {teams!r}")
    unknown = sorted(set(teams) - set(TEAM_KEYS))
    if unknown:
        raise TeamError(f"game.teams.{unknown[0]}", f"unknown key (known: {', '.join(TEAM_KEYS)})")
    prefix = teams.get("prefix")
    if prefix is not None and (not isinstance(prefix, (list, tuple)) or len(prefix) != 2
                               or not all(isinstance(p, str) and p for p in prefix)):
        raise TeamError("game.teams.prefix", f"must be two non-empty strings, one per side, got {prefix!r}")
    score = teams.get("score", "sum")
    if score not in SCORES:
        raise TeamError("game.teams.score", f"must be one of {', '.join(SCORES)}, got {score!r}")
    max_cycles = teams.get("max_cycles")
    if max_cycles is not None and (isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1):
        raise TeamError("game.teams.max_cycles", f"must be a positive int, got {max_cycles!r}")
    dense = teams.get("dense_rewards", False)
    if not isinstance(dense, bool):
        raise TeamError("game.teams.dense_rewards", f"must be true or false, got {dense!r}")
    return (list(prefix) if prefix is not None else None), score, max_cycles, dense


def team_members(agents: list[str], prefix: list[str] | None) -> tuple[list[str], list[str]]:
    """Each side's agents (``possible_agents`` order) under the declared prefixes; TeamError when
    they do not fit (module docstring)."""
    if prefix is None:
        if len(agents) != 2:
            raise TeamError("game.teams.prefix", f"the game has {len(agents)} agents ({_names(agents)}); "
                                                 "declare the two sides, e.g. prefix: [red_, blue_]")
        return [agents[0]], [agents[1]]
    sides = ([a for a in agents if a.startswith(prefix[0])], [a for a in agents if a.startswith(prefix[1])])
    for s in (0, 1):
        if not sides[s]:
            raise TeamError("game.teams.prefix", f"{prefix[s]!r} matches no agent (agents: {_names(agents)})")
    both = sorted(set(sides[0]) & set(sides[1]))
    if both:
        raise TeamError("game.teams.prefix", f"agent {both[0]!r} matches both {prefix[0]!r} and {prefix[1]!r}")
    neither = [a for a in agents if not a.startswith(prefix[0]) and not a.startswith(prefix[1])]
    if neither:
        which = f"agent {neither[0]} matches" if len(neither) == 1 else f"agents {_names(neither)} match"
        raise TeamError("game.teams.prefix", f"{which} neither {prefix[0]!r} nor {prefix[1]!r}")
    return sides


def _spaces(env, sides: tuple[list[str], list[str]]) -> tuple[int, tuple[int, ...]]:
    """(num_actions, observation shape) every agent shares; TeamError otherwise."""
    first = sides[0][0]
    act, shape = env.action_space(first), _obs_shape(env.observation_space(first))
    if not hasattr(act, "n"):
        raise TeamError("game.name", f"agent {first!r} has action space {act}; teams need Discrete actions")
    for side in sides:
        for agent in side:
            a, o = env.action_space(agent), _obs_shape(env.observation_space(agent))
            if getattr(a, "n", None) != act.n or o != shape:
                raise TeamError("game.teams.prefix", f"agents {first!r} and {agent!r} have different spaces "
                                                     f"(actions {act} vs {a}, observations {shape} vs {o}); "
                                                     "both sides must share one observation and action space")
    return int(act.n), shape


def _obs_shape(space) -> tuple[int, ...]:
    if hasattr(space, "spaces") and "observation" in space.spaces:
        space = space["observation"]
    shape = getattr(space, "shape", None)
    return tuple(int(d) for d in shape) if shape else (1,)


def _row(raw: Any, info: dict, num_actions: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat float32 observation and legal mask (None: every action) of one agent."""
    mask = None
    if isinstance(raw, dict) and "observation" in raw:
        mask, raw = raw.get("action_mask"), raw["observation"]
    if mask is None and isinstance(info, dict):
        mask = info.get("action_mask")
    return np.asarray(raw, dtype=np.float32).reshape(-1), None if mask is None else np.asarray(mask, dtype=bool)


class ParallelTeamGame(VectorGame):
    """A vector of ``num_envs`` copies of a PettingZoo parallel game of two teams (module docstring)."""

    simultaneous = True

    def __init__(self, name: str, num_envs: int, teams: dict | None = None, params: dict | None = None,
                 seed: int | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        prefix, self.scoring, self.max_cycles, self.dense_rewards = _team_options(teams)
        make = _factory(name)
        self.name = name
        self.num_envs = int(num_envs)
        params = dict(params or {})
        try:
            self.envs = [make(**params) for _ in range(self.num_envs)]
        except (TypeError, AssertionError) as exc:
            raise TeamError("game.params", f"{name!r}: bad parameters {sorted(params)} ({exc})") from None
        first = self.envs[0]
        self.sides = team_members(list(first.possible_agents), prefix)
        self.num_actions, shape = _spaces(first, self.sides)
        self.team_size = max(len(side) for side in self.sides)
        self.obs_size = int(np.prod(shape))
        self.obs_shape = shape
        self.channels_last = len(shape) == 3
        # agent name -> (side, index in the team), the one map from PettingZoo's names to rows
        self.slot = {a: (s, k) for s, side in enumerate(self.sides) for k, a in enumerate(side)}
        self._plain = None
        self.seed = seed
        self._seeded = False
        self.reset(seed)
        self._groups = _magent_groups(first, self.slot) if self.scoring == "survivors" else None

    # ------------------------------------------------------------------ reset
    def reset(self, seed: int | None = None) -> None:
        """Restart every environment (see the module docstring for seeding)."""
        E, N = self.num_envs, self.team_size
        fresh = seed is None and not self._seeded
        if seed is not None:
            self.seed = seed
        # side-major tables (games with masks or dict observations): a side's rows of every
        # environment are one block, so a side whose agents all live is observed with one copy
        self._obs = np.zeros((2, E, N, self.obs_size), dtype=np.float32)
        self._mask = np.full((2, E, N, self.num_actions), bool(self._plain))  # no masks: all legal
        self._alive = np.zeros((2, E, N), dtype=bool)
        self._totals = np.zeros((E, 2), dtype=np.float64)
        self._steps = np.zeros(E, dtype=np.int64)
        self._index = [None] * E
        self._last = [None] * E  # each environment's latest observations
        self._every = (np.repeat(np.arange(E), N), np.tile(np.arange(N), E))  # rows of a full side
        for e, env in enumerate(self.envs):
            if seed is not None:
                s = env_seed(seed, e)
            elif fresh:
                s = int(np.random.SeedSequence().generate_state(1)[0])
            else:
                s = None
            self._begin(e, *env.reset(seed=s))
        self._seeded = True

    def _begin(self, e: int, obs: dict, infos: dict) -> None:
        self._totals[e] = 0.0
        self._steps[e] = 0
        if self._plain is None:  # plain arrays and no masks: rows are stacked as they are (observe_side)
            agents = self.envs[e].agents
            self._plain = all(isinstance(obs[a], np.ndarray) and "action_mask" not in infos.get(a, {})
                              for a in agents)
            if self._plain:
                self._mask[:] = True
        self._load(e, obs, infos)

    def _rows(self, e: int, agents: list[str]) -> tuple[np.ndarray, list]:
        """Where ``agents`` of environment e sit in the flat (2 * E * N) tables, and per side its
        agents and their indices k, in k order; kept while the environment's agents stay the same
        list (they change when one dies or joins, not on most steps)."""
        cached = self._index[e]
        if cached is not None and cached[0] == agents:
            return cached[1], cached[2]
        E, N, slot = self.num_envs, self.team_size, self.slot
        unknown = [a for a in agents if a not in slot]
        if unknown:
            raise ValueError(f"{self.name}: agent {unknown[0]!r} is not one of possible_agents")
        index = np.fromiter(((slot[a][0] * E + e) * N + slot[a][1] for a in agents), dtype=np.int64,
                            count=len(agents))
        parts = []
        for side in (0, 1):
            names = sorted((a for a in agents if slot[a][0] == side), key=lambda a: slot[a][1])  # rows' order
            parts.append((names, np.array([slot[a][1] for a in names], dtype=np.int64)))
        self._index[e] = (list(agents), index, parts)
        return index, parts

    def _load(self, e: int, obs: dict, infos: dict) -> None:
        """The observations, masks and alive flags of environment e's live agents."""
        agents = self.envs[e].agents
        _, parts = self._rows(e, agents)
        self._alive[:, e] = False
        self._last[e] = obs  # plain arrays: observe_side stacks them straight into the batch
        for side, (names, ks) in enumerate(parts):
            if not names:
                continue
            self._alive[side, e, ks] = True
            if self._plain:
                continue
            table, masks = self._obs[side, e], self._mask[side, e]
            for agent, k in zip(names, ks.tolist()):
                table[k], legal = _row(obs[agent], infos.get(agent, {}), self.num_actions)
                masks[k] = True if legal is None else legal

    # ---------------------------------------------------------------- queries
    def alive(self) -> np.ndarray:
        return self._alive.transpose(1, 0, 2).copy()

    def observe_side(self, side: int) -> SideBatch:
        if side not in (0, 1):
            raise ValueError(f"side must be 0 or 1, got {side!r}")
        E, N = self.num_envs, self.team_size
        alive = self._alive[side]
        if self._plain:  # one copy, from the environments' own arrays into the batch
            rows = [obs[a] for obs, index in zip(self._last, self._index) for a in index[2][side][0]]
            full = len(rows) == E * N
            env, agent = (self._every[0].copy(), self._every[1].copy()) if full else np.nonzero(alive)
            n, D = len(rows), self.obs_size
            batch = np.stack(rows).reshape(n, D).astype(np.float32, copy=False) if n else np.zeros((0, D), np.float32)
            return SideBatch(env, agent, batch, np.ones((n, self.num_actions), dtype=bool))
        obs, mask = self._obs[side].reshape(E * N, -1), self._mask[side].reshape(E * N, -1)
        if alive.all():  # one block
            return SideBatch(self._every[0].copy(), self._every[1].copy(), obs.copy(), mask.copy())
        env, agent = np.nonzero(alive)
        rows = env * N + agent
        return SideBatch(env, agent, np.take(obs, rows, axis=0), np.take(mask, rows, axis=0))

    def movers(self) -> np.ndarray:
        """(E, 2) bool: the side has an agent that acts (its rows come from ``observe_side``)."""
        return self._alive.any(axis=2).T.copy()

    def observe(self, seat: int, envs=None):
        raise ValueError(f"{self.name} is a team game: its sides are observed with observe_side")

    def step(self, actions):
        raise ValueError(f"{self.name} is a team game: it is stepped with step_team")

    def score(self, returns: np.ndarray) -> np.ndarray:
        """Seat 0's result of finished episodes: 1 when its side's score is higher, 0.5 on a tie."""
        return outcome_from_returns(returns)

    # ------------------------------------------------------------------- step
    def _validate(self, actions) -> np.ndarray:
        """(E, 2, N) actions checked, as the side-major (2, E, N) array; ValueError naming the first
        agent at fault."""
        acts = np.asarray(actions)
        shape = (self.num_envs, 2, self.team_size)
        if acts.shape != shape:
            raise ValueError(f"{self.name}: team actions must have shape {shape}, got {acts.shape}")
        if acts.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: actions must be integers, got dtype {acts.dtype}")
        acts = acts.transpose(1, 0, 2)
        live = self._alive
        wrong = np.where(live, (acts < 0) | (acts >= self.num_actions), acts != NO_ACTION)
        if self._plain and not wrong.any():  # no masks: in range where live, NO_ACTION elsewhere
            return np.ascontiguousarray(acts).reshape(-1)
        idle = ~live & (acts != NO_ACTION)
        if idle.any():
            s, e, k = (int(i[0]) for i in np.nonzero(idle))
            raise ValueError(f"{self.name}: agent {k} of side {s} does not act in env {e} but got action "
                             f"{acts[s, e, k]} (use NO_ACTION={NO_ACTION})")
        chosen = np.where(live, acts, 0)
        ok = (chosen >= 0) & (chosen < self.num_actions)
        if not self._plain:  # masks only where the game gives them; else every action in range is legal
            ok &= np.take_along_axis(self._mask, np.clip(chosen, 0, self.num_actions - 1)[..., None], axis=3)[..., 0]
        bad = live & ~ok
        if bad.any():
            s, e, k = (int(i[0]) for i in np.nonzero(bad))
            raise ValueError(f"{self.name}: illegal action {acts[s, e, k]} for agent {k} of side {s} in env {e} "
                             f"(legal: {np.flatnonzero(self._mask[s, e, k]).tolist()})")
        return np.ascontiguousarray(acts).reshape(-1)

    def step_team(self, actions: np.ndarray) -> StepResult:
        acts = self._validate(actions)
        E, N = self.num_envs, self.team_size
        done = np.zeros(E, dtype=bool)
        returns = np.zeros((E, 2), dtype=np.float64)
        dense = np.zeros(2 * E * N) if self.dense_rewards else None  # flat (2, E, N), as acts
        slot, survivors = self.slot, self.scoring == "survivors"
        for e, env in enumerate(self.envs):
            agents = env.agents
            rows, _ = self._rows(e, agents)
            sent = dict(zip(agents, acts[rows].tolist()))
            obs, rewards, terms, truncs, infos = env.step(sent)
            totals = self._totals[e]
            if rewards and (dense is not None or not survivors):
                values = np.fromiter(rewards.values(), np.float64, len(rewards))
                where = rows if list(rewards) == agents else np.fromiter(  # the usual order, else by name
                    ((slot[a][0] * E + e) * N + slot[a][1] for a in rewards), np.int64, len(rewards))
                if dense is not None:
                    dense[where] = values
                if not survivors:  # one sum per side
                    totals += np.bincount(where // (E * N), minlength=2, weights=values)
            self._steps[e] += 1
            if not env.agents or (self.max_cycles is not None and self._steps[e] >= self.max_cycles):
                if survivors and self._groups is not None:  # MAgent2 counts its live agents
                    grid = env.unwrapped.env
                    for handle, side in self._groups:
                        totals[side] += grid.get_num(handle)
                elif survivors:  # standing: not terminated on this step (truncation is not death)
                    for agent in sent:
                        if not terms.get(agent, False):
                            totals[slot[agent][0]] += 1
                returns[e] = totals
                done[e] = True
                self._begin(e, *env.reset())
            else:
                self._load(e, obs, infos)
        rewards = None if dense is None else dense.reshape(2, E, N).transpose(1, 0, 2)
        return StepResult(done=done, returns=returns, rewards=rewards)


def _magent_groups(env, slot: dict) -> list[tuple[Any, int]] | None:
    """(group handle, side) of each MAgent2 group when every group's agents lie in one side, else None
    (not a MAgent2 environment). MAgent2 names a group's agents consecutively in ``possible_agents``,
    in the order of its handles, as many as the group holds after a reset."""
    raw = getattr(env, "unwrapped", env)
    grid, handles = getattr(raw, "env", None), getattr(raw, "handles", None)
    if grid is None or handles is None or not hasattr(grid, "get_num"):
        return None
    agents, groups, start = list(env.possible_agents), [], 0
    for handle in handles:
        members = agents[start:start + int(grid.get_num(handle))]
        sides = {slot[a][0] for a in members}
        if len(sides) != 1:
            return None
        groups.append((handle, sides.pop()))
        start += len(members)
    return groups if start == len(agents) else None


def team_info(name: str, teams: dict | None = None, **params) -> tuple[int, int, tuple[int, ...], bool, int]:
    """(obs_size, num_actions, obs_shape, channels_last, team_size) of a team game (one environment)."""
    game = ParallelTeamGame(name, 1, teams=teams, params=params or None, seed=0)
    return game.obs_size, game.num_actions, game.obs_shape, game.channels_last, game.team_size
