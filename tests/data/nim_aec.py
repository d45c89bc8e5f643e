"""Nim with a pile of 5 stones, a user's own PettingZoo AEC game for the tests.

Loaded the way the league loads a user's AEC game, by module path:
``game: {name: "pettingzoo:tests.data.nim_aec", params: {render_mode: ansi}}``. The two
players take turns taking 1 stone (action 0) or 2 stones (action 1); whoever takes the last
stone wins (+1, the other -1). With 5 stones the first player wins by taking 2 and then
leaving a multiple of 3. It names no actions, so the league page labels them by index and
shows the game's ANSI rendering.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv


class raw_env(AECEnv):
    metadata = {"name": "nim_aec", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, stones: int = 5, render_mode: str | None = None):
        super().__init__()
        if int(stones) < 1:
            raise ValueError(f"stones must be >= 1, got {stones}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.start_stones = int(stones)
        self.render_mode = render_mode
        self.possible_agents = ["player_0", "player_1"]
        self.action_spaces = {a: spaces.Discrete(2) for a in self.possible_agents}
        self.observation_spaces = {a: spaces.Dict({
            "observation": spaces.Box(0, 1, (self.start_stones + 1,), np.int8),  # one-hot: stones left
            "action_mask": spaces.Box(0, 1, (2,), np.int8)}) for a in self.possible_agents}

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
        obs = np.zeros(self.start_stones + 1, dtype=np.int8)
        obs[self.stones] = 1
        to_move = agent == self.agent_selection and not self.terminations[agent]
        mask = np.array([to_move and self.stones >= 1, to_move and self.stones >= 2], dtype=np.int8)
        return {"observation": obs, "action_mask": mask}

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if action not in (0, 1) or action + 1 > self.stones:
            raise ValueError(f"illegal action {action} with {self.stones} stones left")
        other = self.agents[1 - self.agents.index(agent)]
        self._cumulative_rewards[agent] = 0.0
        self.stones -= action + 1
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
                f"{self.agent_selection} takes 1 (action 0) or 2 (action 1); who takes the last stone wins")
