"""Dots and Boxes as a PettingZoo AEC environment with action masks.

Config: ``game: {name: "pettingzoo:boxes.aec:env", params: {rows: 2, cols: 2}}``. The league
steps E copies of ``env(rows=2, cols=2)`` (envs/pettingzoo.py).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers

from boxes.rules import Board


def env(**kwargs):
    """The environment with PettingZoo's order checks around it (what users of PettingZoo call)."""
    return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))


class raw_env(AECEnv):
    metadata = {"name": "dots_and_boxes_v0", "render_modes": ["ansi"], "is_parallelizable": False}
    perfect_information = True  # no chance, nothing hidden: positions can be searched (envs.states)

    def __init__(self, rows: int = 2, cols: int = 2, render_mode: str | None = None):
        super().__init__()
        self.board = Board(rows, cols)
        self.symmetries = self.board.symmetries()  # for search_learner.symmetries (docs/custom-games.md)
        self.render_mode = render_mode
        self.possible_agents = ["player_0", "player_1"]
        n = self.board.num_lines
        self.action_spaces = {a: spaces.Discrete(n) for a in self.possible_agents}
        self.observation_spaces = {a: spaces.Dict({
            "observation": spaces.Box(0.0, 1.0, (self.board.obs_size,), dtype=np.float32),
            "action_mask": spaces.Box(0, 1, (n,), dtype=np.int8)}) for a in self.possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.lines = np.zeros(self.board.num_lines, dtype=bool)
        self.owner = np.full(self.board.num_boxes, -1, dtype=np.int64)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]

    def observe(self, agent):
        seat = self.possible_agents.index(agent)
        obs = self.board.observation(self.lines[None], self.owner[None], seat)[0]
        moving = agent == self.agent_selection and not self.terminations[agent]
        return {"observation": obs, "action_mask": (~self.lines & moving).astype(np.int8)}

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if not 0 <= int(action) < self.board.num_lines or self.lines[int(action)]:
            raise ValueError(f"illegal line {action} (legal: {np.flatnonzero(~self.lines).tolist()})")
        self._cumulative_rewards[agent] = 0.0
        seat = self.possible_agents.index(agent)
        self.lines[int(action)] = True
        closed = self.board.completed(self.lines[None], self.owner[None])[0]
        self.owner[closed] = seat
        self.rewards = {a: 0.0 for a in self.agents}
        if self.lines.all():
            margin = int((self.owner == 0).sum() - (self.owner == 1).sum())
            self.rewards = {self.agents[0]: float(np.sign(margin)), self.agents[1]: -float(np.sign(margin))}
            self.terminations = {a: True for a in self.agents}
        elif not closed.any():  # closing a box earns another line
            self.agent_selection = self.agents[1 - seat]
        self._accumulate_rewards()

    def render(self):
        if self.render_mode == "ansi":
            return self.render_text(0)
        return None

    # what the league page shows of any game (one environment: ``env`` is 0)
    def render_text(self, env: int = 0) -> str:
        over = all(self.terminations.values())
        return self.board.render(self.lines, self.owner, None if over else self.possible_agents.index(self.agent_selection))

    def action_name(self, env: int, action: int) -> str:
        return self.board.line_name(int(action))
