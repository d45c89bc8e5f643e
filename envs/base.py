"""The one vectorized two-sided protocol every game implements.

E environments are stepped at once. Sides (seats) are 0 and 1. In every
environment either one seat acts (turn-based games) or both do
(simultaneous-move games); ``movers()`` says which. Actions are passed as an
(E, 2) integer array with ``NO_ACTION`` (-1) where a seat does not act.
Finished environments reset themselves inside ``step``; the returns of the
episode that just ended are reported in the ``StepResult`` of that step.

Teams. A side may be a team of ``team_size`` agents (N) that share the side's
policy (docs/teams.md). Every game answers the team view, which is the path
the callers that support teams use:

- ``alive()``: (E, 2, N) bool, agent k of side s acts in environment e on the
  next step (it is in the game and, in a turn-based game, it is its turn);
  agents that die mid-episode, or have not joined yet, are False;
- ``observe_side(s)``: a ``SideBatch`` with one row per True entry of
  ``alive()[:, s]``, in (env, agent) order: ``env`` and ``agent`` (n,) int64
  name the rows, ``obs`` (n, obs_size) float32, ``mask`` (n, num_actions) bool;
- ``step_team(actions)``: (E, 2, N) integer actions, ``NO_ACTION`` where an
  agent does not act; returns the ``StepResult`` whose ``returns`` are each
  side's score of the episode that ended (the game defines it);
- ``score(returns)``: seat 0's result in [0, 1] of finished episodes from
  their (n, 2) returns: the one number per game the league records.

A game of two single agents has ``team_size`` 1 and needs none of these: the
defaults below are its ``movers``/``observe``/``step`` seen with a trailing
agent axis of length 1 (``observe``'s own arrays; the actions a view), so a
two-player game takes the same path at the same speed. A team game (``envs.teams``)
implements the team view itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

NO_ACTION = -1


@dataclass(frozen=True)
class StepResult:
    """What one vector step produced.

    done:    (E,) bool, the episode in that environment ended on this step (and
             the environment has already been reset).
    returns: (E, 2) float64, each seat's total return of the episode that ended;
             zero where ``done`` is False.
    rewards: None, or (E, 2, team_size) float64: each agent's own reward for the
             actions of this step, from a team game that passes its environment's
             per-step rewards on (``envs.teams``, ``dense_rewards``); learners may
             add them to the agent's trajectory (the game's own shaping). The
             league's score of a game comes from ``returns`` alone.
    """

    done: np.ndarray
    returns: np.ndarray
    rewards: np.ndarray | None = None


class SideBatch(NamedTuple):
    """One side's acting agents on the next step, one row each, in (env, agent) order."""

    env: np.ndarray  # (n,) int64 environment of each row
    agent: np.ndarray  # (n,) int64 agent index in the side's team, in [0, team_size)
    obs: np.ndarray  # (n, obs_size) float32
    mask: np.ndarray  # (n, num_actions) bool, legal actions


def outcome_from_returns(returns: np.ndarray) -> np.ndarray:
    """Seat-0 score of finished episodes: 1 win, 0.5 draw, 0 loss."""
    diff = np.asarray(returns)[..., 0] - np.asarray(returns)[..., 1]
    return np.where(diff > 0, 1.0, np.where(diff < 0, 0.0, 0.5))


class VectorGame:
    """Interface of a vector of E two-player zero-sum environments.

    Attributes every implementation sets:
      name:         game name, e.g. "kuhn_poker"
      num_envs:     E
      num_actions:  size of the (shared) action space
      obs_size:     length of the flat float32 observation of one seat
      obs_shape:    the layout of that observation: ``obs.reshape(n, *obs_shape)`` is
                    exact (no reordering); ``(obs_size,)`` unless the game declares
                    planes, e.g. (3, 6, 7) for OpenSpiel's Connect Four (``policy.net:
                    conv`` builds on it)
      channels_last: True when a 3-D ``obs_shape`` is (H, W, C) (PettingZoo's image
                    convention) rather than (C, H, W) (OpenSpiel's)
      simultaneous: True when both seats act on every step
      supports_exact: True when policies' expected payoffs and exploitability
                    can be computed exactly (evaluation.exploitability) instead
                    of sampled: the game says so, callers do not guess
      team_size:    agents per side (N), 1 unless the game is a team game
    """

    name: str
    num_envs: int
    num_actions: int
    obs_size: int
    simultaneous: bool
    supports_exact: bool = False
    channels_last: bool = False
    team_size: int = 1

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return getattr(self, "_obs_shape", None) or (int(self.obs_size),)

    @obs_shape.setter
    def obs_shape(self, shape) -> None:
        self._obs_shape = tuple(int(s) for s in shape)

    def reset(self, seed: int | None = None) -> None:
        raise NotImplementedError

    def movers(self) -> np.ndarray:
        """(E, 2) bool: seat s must act in environment e on the next step."""
        raise NotImplementedError

    def observe(self, seat: int, envs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Observations (n, obs_size) float32 and legal masks (n, num_actions) bool
        of ``seat`` in the environments ``envs`` (indices; all when None).
        Rows of environments where the seat does not act are valid observations
        with an all-False mask."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        """Apply (E, 2) actions; ``NO_ACTION`` where a seat does not act.
        Raises ValueError (and changes no environment) on a wrong shape or an
        illegal action."""
        raise NotImplementedError

    # ------------------------------------------------------------- team view
    def alive(self) -> np.ndarray:
        """(E, 2, team_size) bool: agent k of side s acts in environment e on the next step.
        A team of one: ``movers()`` with an agent axis."""
        return self.movers()[:, :, None]

    def observe_side(self, side: int) -> SideBatch:
        """The rows of ``side``'s acting agents (module docstring). A team of one: ``observe`` of
        the environments where the seat moves, agent 0 in each."""
        envs = np.flatnonzero(self.movers()[:, side])
        obs, mask = self.observe(side, envs)
        return SideBatch(envs, np.zeros(envs.size, dtype=np.int64), obs, mask)

    def step_team(self, actions: np.ndarray) -> StepResult:
        """Apply (E, 2, team_size) actions, ``NO_ACTION`` where an agent does not act. A team of
        one: ``step`` of the (E, 2) view."""
        acts = np.asarray(actions)
        if acts.shape != (self.num_envs, 2, 1):
            raise ValueError(f"{self.name}: team actions must have shape ({self.num_envs}, 2, 1), got {acts.shape}")
        return self.step(acts[:, :, 0])

    def score(self, returns: np.ndarray) -> np.ndarray:
        """Seat 0's result in [0, 1] of finished episodes, from their (n, 2) ``returns``: its
        return rescaled from the game's ``utility_range`` (``score_from_returns``)."""
        return score_from_returns(returns, *utility_range(self))

    def render_text(self, env: int) -> str:
        """Environment ``env`` as text a person can read (the league page shows it for games it
        has no drawn board for). Games override it; this default names the seats to move and
        the observation of each, which is all the protocol knows. A turn-based game's text may
        show what the seat to move sees (its private cards too): callers show it to that seat."""
        movers = self.movers()[env]
        lines = []
        for seat in np.flatnonzero(movers).tolist():
            obs = self.observe(seat, np.array([env]))[0][0]
            lines.append(f"seat {seat} to move; its observation: " + " ".join(f"{x:g}" for x in obs.tolist()))
        return "\n".join(lines)

    def action_name(self, env: int, action: int) -> str:
        """The name of ``action`` for the seat to move in environment ``env`` (its label on the
        league page's buttons and in a game's history); the action id where the game names none."""
        return str(action)

    def _observed_envs(self, seat: int, envs) -> np.ndarray:
        """The environment indices ``observe`` was asked for (all when None), checked, with
        ``seat``; ValueError on a bad seat or an index out of range."""
        if seat not in (0, 1):
            raise ValueError(f"seat must be 0 or 1, got {seat!r}")
        idx = np.arange(self.num_envs) if envs is None else np.asarray(envs, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_envs):
            raise ValueError(f"env indices must lie in [0, {self.num_envs}), got {idx.tolist()}")
        return idx

    def _integer_actions(self, actions) -> np.ndarray:
        """``actions`` as an (E, 2) int64 array; ValueError on another shape or a non-integer dtype
        (the check every adapter's ``step`` starts with)."""
        acts = np.asarray(actions)
        E = self.num_envs
        if acts.shape != (E, 2):
            raise ValueError(f"{self.name}: actions must have shape ({E}, 2), got {acts.shape}")
        if acts.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: actions must be integers, got dtype {acts.dtype}")
        return acts.astype(np.int64, copy=False)


def uniform_legal(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """One action per row of ``mask`` (n, A), uniformly among its legal (non-zero) entries."""
    return (rng.random(mask.shape) * np.asarray(mask)).argmax(axis=1)


def utility_range(game: VectorGame) -> tuple[float, float]:
    """Smallest and largest return a seat can get in ``game``."""
    if hasattr(game, "utility_range"):  # declared by the game (a PettingZoo adapter)
        lo, hi = game.utility_range
        return float(lo), float(hi)
    if hasattr(game, "game"):  # an OpenSpiel adapter
        return float(game.game.min_utility()), float(game.game.max_utility())
    if hasattr(game, "payoff"):  # a matrix game
        return float(game.payoff.min()), float(game.payoff.max())
    return -1.0, 1.0


def score_from_returns(returns: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Seat-0 score in [0, 1]: its return rescaled from [lo, hi].

    A league whose payoff holds expected scores of this kind has a meta-game
    that is an affine image of the game's expected returns, so its Nash is the
    Nash of the real (chip-counting, biased-payoff) game, which win/loss
    outcomes alone would not give (biased RPS would look like plain RPS)."""
    r = np.asarray(returns, dtype=np.float64)[..., 0]
    if hi <= lo:
        return outcome_from_returns(returns)
    return np.clip((r - lo) / (hi - lo), 0.0, 1.0)
