"""A take-away (subtraction) game, a user's own PettingZoo AEC game for the tests of search.

Loaded by module path: ``game: {name: "pettingzoo:tests.data.takeaway:env", params: {stones: 120}}``.
A pile holds ``stones`` stones (default 120); in turn, the mover takes 1 to ``max_take`` (default
12) of them (action k takes k + 1); whoever takes the last stone wins (+1, the other -1). A pile
that is a multiple of ``max_take + 1`` loses for the mover, so from 120 the first player wins with
exactly one opening move: taking 120 mod 13 = 3 stones (action 2). It declares
``perfect_information``, so the league can search it and enumerate it (envs/states.py). A seat
observes the one-hot of the stones left (stones + 1 entries) and whether it is to move.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers


def env(**kwargs):
    """The environment with PettingZoo's order checks around it."""
    return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))


class raw_env(AECEnv):
    metadata = {"name": "takeaway_v0", "render_modes": ["ansi"], "is_parallelizable": False}
    perfect_information = True  # no chance, nothing hidden
    utility_range = (-1.0, 1.0)

    def __init__(self, stones: int = 120, max_take: int = 12, render_mode: str | None = None):
        super().__init__()
        if int(stones) < 1 or int(max_take) < 1:
            raise ValueError(f"stones and max_take must be >= 1, got {stones}, {max_take}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.start_stones, self.max_take = int(stones), int(max_take)
        self.possible_agents = ["player_0", "player_1"]
        self.action_spaces = {a: spaces.Discrete(self.max_take) for a in self.possible_agents}
        self.observation_spaces = {a: spaces.Dict({
            "observation": spaces.Box(0, 1, (self.start_stones + 2,), np.int8),  # one-hot stones left, to move
            "action_mask": spaces.Box(0, 1, (self.max_take,), np.int8)}) for a in self.possible_agents}

    def action_space(self, agent):
        return self.action_spaces[agent]

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.stones = self.start_stones
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]

    def observe(self, agent):
        to_move = agent == self.agent_selection and not self.terminations[agent]
        obs = np.zeros(self.start_stones + 2, dtype=np.int8)
        obs[self.stones] = 1
        obs[-1] = to_move
        mask = (np.arange(1, self.max_take + 1) <= self.stones) & to_move
        return {"observation": obs, "action_mask": mask.astype(np.int8)}

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        take = int(action) + 1
        if not 1 <= take <= min(self.max_take, self.stones):
            raise ValueError(f"illegal action {action} with {self.stones} stones left")
        other = self.agents[1 - self.agents.index(agent)]
        self._cumulative_rewards[agent] = 0.0
        self.stones -= take
        self.rewards = {agent: 0.0, other: 0.0}
        if self.stones == 0:
            self.rewards = {agent: 1.0, other: -1.0}
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = other
        self._accumulate_rewards()

    def render(self):
        if self.render_mode != "ansi":
            return None
        return (f"{self.stones} stone{'s' if self.stones != 1 else ''} left: {'o ' * self.stones}\n"
                f"{self.agent_selection} takes 1 to {self.max_take} (action k takes k + 1); who takes the last "
                "stone wins")
