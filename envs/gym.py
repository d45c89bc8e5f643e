"""A single-environment gymnasium view of a game against a fixed opponent.

The agent plays one seat (fixed, or drawn per episode); the opponent callable
``(obs (n, D), mask (n, A)) -> actions (n,)`` plays the other. Observations are
the seat's float32 tensor; the legal mask is in ``info["action_mask"]``. The
reward is the agent's episode return, given on the terminating step. For
simultaneous games the opponent is asked for its action at the same state,
without seeing the agent's.
"""

from __future__ import annotations

from typing import Callable

import gymnasium
import numpy as np
from gymnasium import spaces

from envs import make_game
from envs.base import NO_ACTION, uniform_legal


def uniform_opponent(rng: np.random.Generator | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """An opponent callable playing uniformly among legal actions."""
    rng = rng or np.random.default_rng()

    def act(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return uniform_legal(rng, mask)

    return act


class SingleSeatEnv(gymnasium.Env):
    """``gymnasium.Env`` where the agent holds ``seat`` (0, 1, or None for a
    random seat each episode) of ``game_name`` against ``opponent``."""

    metadata = {"render_modes": []}

    def __init__(self, game_name: str, opponent: Callable | None = None, seat: int | None = 0,
                 seed: int | None = None, **params):
        if seat not in (0, 1, None):
            raise ValueError(f"seat must be 0, 1 or None, got {seat!r}")
        self.game = make_game(game_name, 1, seed=seed, **params)
        self.opponent = opponent or uniform_opponent(np.random.default_rng(seed))
        self.fixed_seat = seat
        self.seat = 0 if seat is None else seat
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(self.game.obs_size,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.game.num_actions)
        self._seat_rng = np.random.default_rng(seed)

    def _observation(self):
        obs, mask = self.game.observe(self.seat)
        return obs[0], {"action_mask": mask[0], "seat": self.seat}

    def _play_opponent(self, my_action: int | None):
        """Step until the agent must act (returns None) or the episode ends
        (returns the agent's return). ``my_action`` is used at the first step."""
        while True:
            movers = self.game.movers()[0]
            if movers[self.seat] and my_action is None:
                return None
            actions = np.full((1, 2), NO_ACTION, dtype=np.int64)
            if movers[self.seat]:
                actions[0, self.seat] = my_action
                my_action = None
            other = 1 - self.seat
            if movers[other]:
                obs, mask = self.game.observe(other, np.array([0]))
                actions[0, other] = int(np.asarray(self.opponent(obs, mask)).reshape(-1)[0])
            result = self.game.step(actions)
            if result.done[0]:
                return float(result.returns[0, self.seat])

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seat_rng = np.random.default_rng(seed)
        self.game.reset(seed)
        if self.fixed_seat is None:
            self.seat = int(self._seat_rng.integers(2))
        ret = self._play_opponent(None)
        while ret is not None:  # the opponent finished the episode alone; start another
            ret = self._play_opponent(None)
        return self._observation()

    def step(self, action):
        mask = self.game.observe(self.seat)[1][0]
        a = int(action)
        if not (0 <= a < self.game.num_actions) or not mask[a]:
            raise ValueError(f"illegal action {action} (legal: {np.flatnonzero(mask).tolist()})")
        ret = self._play_opponent(a)
        if ret is None:
            obs, info = self._observation()
            return obs, 0.0, False, False, info
        obs = np.zeros(self.game.obs_size, dtype=np.float32)
        return obs, ret, True, False, {"action_mask": np.zeros(self.game.num_actions, dtype=bool), "seat": self.seat}
