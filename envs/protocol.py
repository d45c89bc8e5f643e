"""Does a game keep the protocol of ``envs.base``? Checked before a league starts.

``check_game(game)`` plays random legal actions in every environment of a
``VectorGame`` until each has finished ``episodes`` episodes, checking on every
step what envs/base.py states, and raises ``ValueError`` with one line naming
the first thing that is wrong:

- the attributes: ``num_envs``, ``num_actions``, ``obs_size`` positive ints,
  ``simultaneous`` a bool, ``obs_shape`` (where declared) a tuple of positive
  ints whose product is ``obs_size``;
- ``movers()``: an (E, 2) bool array; in every environment exactly one seat
  moves (turn-based games) or at least one does (simultaneous-move games);
- ``observe(seat, envs)``: observations (n, obs_size) float32 and finite, legal
  masks (n, num_actions) bool, all False for a seat that does not move and with
  at least one legal action for a seat that must;
- ``step``: raises ValueError on an action out of range; returns ``done`` (E,)
  bool and ``returns`` (E, 2) finite floats, zero where ``done`` is False and
  summing to zero where it is True (two-player zero-sum), within the game's
  ``utility_range`` where it declares one;
- episodes end: none lasts more than ``max_episode_steps`` steps.

A team game (one that implements ``step_team``: ``envs.teams``) is checked
through the team view instead:

- ``team_size`` a positive int; ``alive()`` an (E, 2, team_size) bool array
  with a live agent in every environment;
- ``observe_side(side)``: one row per live agent of the side, in (env, agent)
  order, observations (n, obs_size) float32 and finite, masks (n, num_actions)
  bool with at least one legal action per row;
- ``step_team``: raises ValueError on an action out of range; ``done`` (E,)
  bool and ``returns`` (E, 2) finite floats, zero where ``done`` is False (a
  side's score need not be zero-sum); ``rewards`` None or (E, 2, team_size)
  finite floats; ``score(returns)`` in [0, 1].

Any exception the game raises on the way is reported the same way, naming the
call that raised it. The check is pure (numpy only) and plays a few hundred
steps: it runs in the launcher's load path, before Ray starts.
"""

from __future__ import annotations

import numpy as np

from envs.base import NO_ACTION, VectorGame, uniform_legal

__all__ = ["check_game", "is_team_game"]


def _fail(game, message: str) -> None:
    name = getattr(game, "name", type(game).__name__)
    raise ValueError(f"{name} breaks the game protocol (envs/base.py): {message}")


def _call(game, what: str, fn, *args):
    """``fn(*args)``; an exception from the game becomes a one-line ValueError naming ``what``."""
    try:
        return fn(*args)
    except Exception as exc:  # the game's own code failed: say where
        text = str(exc).splitlines()[0] if str(exc) else ""
        _fail(game, f"{what} raised {type(exc).__name__}: {text}".rstrip(": "))


def _check_attributes(game) -> None:
    for attr in ("num_envs", "num_actions", "obs_size"):
        value = getattr(game, attr, None)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
            _fail(game, f"{attr} must be a positive int, got {value!r}")
    if not isinstance(getattr(game, "simultaneous", None), (bool, np.bool_)):
        _fail(game, f"simultaneous must be True or False, got {getattr(game, 'simultaneous', None)!r}")
    shape = getattr(game, "obs_shape", None)
    if shape is not None:
        if (not isinstance(shape, tuple) or not shape
                or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape)):
            _fail(game, f"obs_shape must be a tuple of positive ints, got {shape!r}")
        if int(np.prod(shape)) != game.obs_size:
            _fail(game, f"obs_shape {shape} holds {int(np.prod(shape))} values, obs_size is {game.obs_size}")


def _check_movers(game) -> np.ndarray:
    movers = _call(game, "movers()", game.movers)
    E = game.num_envs
    if not isinstance(movers, np.ndarray) or movers.shape != (E, 2) or movers.dtype != np.bool_:
        _fail(game, f"movers() must be an ({E}, 2) bool array, got {_describe(movers)}")
    count = movers.sum(axis=1)
    bad = count == 0 if game.simultaneous else count != 1
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        kind = "simultaneous-move game at least one seat" if game.simultaneous else "turn-based game exactly one seat"
        _fail(game, f"movers() of env {e} is {movers[e].tolist()}; in a {kind} must move")
    return movers


def _check_observe(game, seat: int, movers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    E, D, A = game.num_envs, game.obs_size, game.num_actions
    out = _call(game, f"observe({seat})", game.observe, seat, None)
    if not isinstance(out, tuple) or len(out) != 2:
        _fail(game, f"observe({seat}) must return (observations, masks), got {_describe(out)}")
    obs, mask = out
    if not isinstance(obs, np.ndarray) or obs.shape != (E, D) or obs.dtype != np.float32:
        _fail(game, f"observe({seat}) observations must be ({E}, {D}) float32 (num_envs, obs_size), "
                    f"got {_describe(obs)}")
    if not np.isfinite(obs).all():
        _fail(game, f"observe({seat}) gave a non-finite observation in env {int(np.flatnonzero(~np.isfinite(obs).all(axis=1))[0])}")
    if not isinstance(mask, np.ndarray) or mask.shape != (E, A) or mask.dtype != np.bool_:
        _fail(game, f"observe({seat}) masks must be ({E}, {A}) bool (num_envs, num_actions), got {_describe(mask)}")
    moving = movers[:, seat]
    if (mask[~moving]).any():
        e = int(np.flatnonzero(~moving & mask.any(axis=1))[0])
        _fail(game, f"observe({seat}) gives legal actions in env {e}, where seat {seat} does not move "
                    "(its mask must be all False)")
    stuck = moving & ~mask.any(axis=1)
    if stuck.any():
        _fail(game, f"seat {seat} must move in env {int(np.flatnonzero(stuck)[0])} but has no legal action")
    # a subset of environments, in another order, gives those rows
    idx = np.arange(E)[::-1][: max(1, E // 2)]
    sub = _call(game, f"observe({seat}, envs)", game.observe, seat, idx)
    if (not isinstance(sub, tuple) or len(sub) != 2 or np.shape(sub[0]) != (len(idx), D)
            or np.shape(sub[1]) != (len(idx), A)):
        _fail(game, f"observe({seat}, envs) with {len(idx)} env indices must give {len(idx)} rows, "
                    f"got {_describe(sub[0] if isinstance(sub, tuple) and sub else sub)}")
    if not np.array_equal(np.asarray(sub[1]), mask[idx]):
        _fail(game, f"observe({seat}, envs={idx.tolist()}) masks differ from rows {idx.tolist()} of observe({seat})")
    return obs, mask


def _check_rejects_out_of_range(game, movers: np.ndarray, rng: np.random.Generator) -> None:
    """An action id out of range for a seat that moves must raise ValueError (and change nothing)."""
    actions = _call(game, "observe()", _random_actions, game, movers, rng)
    e = 0
    s = int(np.flatnonzero(movers[e])[0])
    actions[e, s] = game.num_actions
    try:
        game.step(actions)
    except ValueError:
        return
    except Exception as exc:
        _fail(game, f"step() with action {game.num_actions} (out of range) raised {type(exc).__name__}, "
                    "not ValueError")
    _fail(game, f"step() accepted action {game.num_actions} (num_actions is {game.num_actions}); "
                "an illegal action must raise ValueError")


def _random_actions(game, movers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    actions = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
    for s in (0, 1):
        rows = np.flatnonzero(movers[:, s])
        if rows.size:
            _, mask = game.observe(s, rows)
            actions[rows, s] = uniform_legal(rng, mask)
    return actions


def _step_result(game, call: str, result) -> tuple[np.ndarray, np.ndarray]:
    """``result``'s (done, returns), checked as every step's (two-player or team) must be: an (E,)
    bool array, (E, 2) finite floats, zero where the episode did not end."""
    E = game.num_envs
    done, returns = getattr(result, "done", None), getattr(result, "returns", None)
    if not isinstance(done, np.ndarray) or done.shape != (E,) or done.dtype != np.bool_:
        _fail(game, f"{call}.done must be an ({E},) bool array, got {_describe(done)}")
    if not isinstance(returns, np.ndarray) or returns.shape != (E, 2) or returns.dtype.kind != "f":
        _fail(game, f"{call}.returns must be an ({E}, 2) float array, got {_describe(returns)}")
    if not np.isfinite(returns).all():
        _fail(game, f"{call}.returns holds a non-finite value")
    if returns[~done].any():
        e = int(np.flatnonzero(~done & returns.any(axis=1))[0])
        _fail(game, f"{call}.returns is non-zero in env {e}, whose episode did not end")
    rewards = getattr(result, "rewards", None)
    if rewards is not None:
        shape = (E, 2, getattr(game, "team_size", 1))
        if not isinstance(rewards, np.ndarray) or rewards.shape != shape or rewards.dtype.kind != "f":
            _fail(game, f"{call}.rewards must be None or an {shape} float array, got {_describe(rewards)}")
        if not np.isfinite(rewards).all():
            _fail(game, f"{call}.rewards holds a non-finite value")
    return done, returns


def _check_step(game, actions: np.ndarray, lo: float | None, hi: float | None):
    done, returns = _step_result(game, "step()", _call(game, "step()", game.step, actions))
    total = returns[done].sum(axis=1)
    scale = max(1.0, float(np.abs(returns).max(initial=0.0)))
    if (np.abs(total) > 1e-6 * scale).any():
        e = int(np.flatnonzero(done)[np.flatnonzero(np.abs(total) > 1e-6 * scale)[0]])
        _fail(game, f"returns {returns[e].tolist()} of env {e} do not sum to zero (the league plays "
                    "two-player zero-sum games)")
    if lo is not None and done.any() and (returns[done].min() < lo - 1e-9 or returns[done].max() > hi + 1e-9):
        _fail(game, f"returns {returns[done].min():g}..{returns[done].max():g} leave utility_range ({lo:g}, {hi:g})")
    return done


def is_team_game(game) -> bool:
    """Whether ``game`` implements the team view itself (``envs.base``) rather than inheriting it."""
    return isinstance(game, VectorGame) and type(game).step_team is not VectorGame.step_team


def _check_side(game, side: int, alive: np.ndarray):
    E, D, A = game.num_envs, game.obs_size, game.num_actions
    batch = _call(game, f"observe_side({side})", game.observe_side, side)
    env, agent, obs, mask = (getattr(batch, f, None) for f in ("env", "agent", "obs", "mask"))
    want_env, want_agent = np.nonzero(alive[:, side])
    n = len(want_env)
    if (not isinstance(env, np.ndarray) or not isinstance(agent, np.ndarray)
            or not np.array_equal(env, want_env) or not np.array_equal(agent, want_agent)):
        _fail(game, f"observe_side({side}) rows must be the live agents of alive()[:, {side}] in (env, agent) "
                    f"order ({n} rows), got env {_describe(env)}, agent {_describe(agent)}")
    if not isinstance(obs, np.ndarray) or obs.shape != (n, D) or obs.dtype != np.float32:
        _fail(game, f"observe_side({side}) observations must be ({n}, {D}) float32, got {_describe(obs)}")
    if not np.isfinite(obs).all():
        _fail(game, f"observe_side({side}) gave a non-finite observation")
    if not isinstance(mask, np.ndarray) or mask.shape != (n, A) or mask.dtype != np.bool_:
        _fail(game, f"observe_side({side}) masks must be ({n}, {A}) bool, got {_describe(mask)}")
    if n and not mask.any(axis=1).all():
        i = int(np.flatnonzero(~mask.any(axis=1))[0])
        _fail(game, f"agent {agent[i]} of side {side} must act in env {env[i]} but has no legal action")
    return batch


def _team_actions(game, alive: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    actions = np.full(alive.shape, NO_ACTION, dtype=np.int64)
    for s in (0, 1):
        b = _check_side(game, s, alive)
        actions[b.env, s, b.agent] = uniform_legal(rng, b.mask)
    return actions


def _check_alive(game) -> np.ndarray:
    E, N = game.num_envs, game.team_size
    alive = _call(game, "alive()", game.alive)
    if not isinstance(alive, np.ndarray) or alive.shape != (E, 2, N) or alive.dtype != np.bool_:
        _fail(game, f"alive() must be an ({E}, 2, {N}) bool array, got {_describe(alive)}")
    if not alive.any(axis=(1, 2)).all():
        _fail(game, f"no agent is alive in env {int(np.flatnonzero(~alive.any(axis=(1, 2)))[0])}")
    return alive


def _check_team_game(game, episodes: int, max_episode_steps: int, seed: int) -> None:
    N = getattr(game, "team_size", None)
    if isinstance(N, (bool, np.bool_)) or not isinstance(N, (int, np.integer)) or N < 1:
        _fail(game, f"team_size must be a positive int, got {N!r}")
    rng = np.random.default_rng(seed)
    _call(game, "reset(seed)", game.reset, seed)
    alive = _check_alive(game)
    actions = _team_actions(game, alive, rng)
    e, s, k = (int(i[0]) for i in np.nonzero(alive))
    actions[e, s, k] = game.num_actions
    try:
        game.step_team(actions)
    except ValueError:
        pass
    except Exception as exc:
        _fail(game, f"step_team() with action {game.num_actions} (out of range) raised {type(exc).__name__}, "
                    "not ValueError")
    else:
        _fail(game, f"step_team() accepted action {game.num_actions} (num_actions is {game.num_actions}); "
                    "an illegal action must raise ValueError")
    _call(game, "reset(seed)", game.reset, seed)
    E = game.num_envs
    finished = np.zeros(E, dtype=np.int64)
    length = np.zeros(E, dtype=np.int64)
    while finished.min() < episodes:
        alive = _check_alive(game)
        done, returns = _step_result(game, "step_team()",
                                     _call(game, "step_team()", game.step_team, _team_actions(game, alive, rng)))
        if done.any():
            score = np.asarray(_call(game, "score()", game.score, returns[done]), dtype=np.float64)
            if score.shape != (int(done.sum()),) or not ((score >= 0) & (score <= 1)).all():
                _fail(game, f"score() of {int(done.sum())} finished episodes must be that many values in [0, 1], "
                            f"got {_describe(score)}")
        length += 1
        if (length > max_episode_steps).any():
            e = int(np.flatnonzero(length > max_episode_steps)[0])
            _fail(game, f"an episode of env {e} did not end within {max_episode_steps} steps of random legal play")
        finished += done
        length[done] = 0
    _call(game, "reset(seed)", game.reset, seed)


def check_game(game: VectorGame, episodes: int = 2, max_episode_steps: int = 1000, seed: int = 0) -> None:
    """Play random legal actions until every environment of ``game`` finished ``episodes`` episodes,
    checking the protocol on every step (module docstring); ValueError on the first breach. Resets
    the game (with ``seed``) before and after."""
    _check_attributes(game)
    if is_team_game(game):
        _check_team_game(game, episodes, max_episode_steps, seed)
        return
    if getattr(game, "team_size", 1) != 1:
        _fail(game, f"team_size is {game.team_size!r} but the game does not implement the team view "
                    "(alive, observe_side, step_team, score); a game of two single agents has team_size 1")
    rng = np.random.default_rng(seed)
    lo = hi = None
    if hasattr(game, "utility_range"):
        lo, hi = (float(x) for x in game.utility_range)
        if not lo < hi:
            _fail(game, f"utility_range must be (lo, hi) with lo < hi, got {game.utility_range!r}")
    _call(game, "reset(seed)", game.reset, seed)
    movers = _check_movers(game)
    for s in (0, 1):
        _check_observe(game, s, movers)
    _check_rejects_out_of_range(game, movers, rng)
    _call(game, "reset(seed)", game.reset, seed)
    E = game.num_envs
    finished = np.zeros(E, dtype=np.int64)
    length = np.zeros(E, dtype=np.int64)
    while finished.min() < episodes:
        movers = _check_movers(game)
        for s in (0, 1):
            _check_observe(game, s, movers)
        actions = _call(game, "observe()", _random_actions, game, movers, rng)
        done = _check_step(game, actions, lo, hi)
        length += 1
        if (length > max_episode_steps).any():
            e = int(np.flatnonzero(length > max_episode_steps)[0])
            _fail(game, f"an episode of env {e} did not end within {max_episode_steps} steps of random legal play")
        finished += done
        length[done] = 0
    _call(game, "reset(seed)", game.reset, seed)


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"shape {x.shape} dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:80]
