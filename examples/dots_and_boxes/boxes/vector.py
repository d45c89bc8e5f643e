"""Dots and Boxes as a ``VectorGame`` (envs/base.py): E boards stepped at once with numpy.

Config: ``game: {name: "boxes.vector:DotsAndBoxes", params: {rows: 2, cols: 2}}``. The league
builds it as ``DotsAndBoxes(num_envs=E, seed=S, rows=2, cols=2)``. It opts in to search and exact
enumeration (envs/states.py): no chance, nothing hidden, and ``copy_state``/``restore_state`` copy
one board's arrays.
"""

from __future__ import annotations

import numpy as np

from boxes.rules import Board
from envs.base import NO_ACTION, StepResult, VectorGame


class DotsAndBoxes(VectorGame):
    simultaneous = False  # one seat moves at a time (the same one again after it closes a box)
    perfect_information = True  # no chance, nothing hidden: positions can be searched (envs.states)

    def __init__(self, num_envs: int, seed: int | None = None, rows: int = 2, cols: int = 2):
        self.board = Board(rows, cols)
        self.name = f"dots_and_boxes_{self.board.rows}x{self.board.cols}"
        self.num_envs = int(num_envs)
        self.num_actions = self.board.num_lines
        self.obs_size = self.board.obs_size
        self.obs_shape = (self.obs_size,)
        self.symmetries = self.board.symmetries()  # for search_learner.symmetries (docs/custom-games.md)
        self.seed = seed  # the game has no chance: the seed changes nothing
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        E, b = self.num_envs, self.board
        self.lines = np.zeros((E, b.num_lines), dtype=bool)
        self.owner = np.full((E, b.num_boxes), -1, dtype=np.int64)  # seat owning each box, -1 nobody
        self.turn = np.zeros(E, dtype=np.int64)  # seat 0 draws first

    def movers(self) -> np.ndarray:
        movers = np.zeros((self.num_envs, 2), dtype=bool)
        movers[np.arange(self.num_envs), self.turn] = True
        return movers

    def observe(self, seat: int, envs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._observed_envs(seat, envs)
        obs = self.board.observation(self.lines[idx], self.owner[idx], seat)
        mask = ~self.lines[idx] & (self.turn[idx] == seat)[:, None]
        return obs, mask

    def step(self, actions: np.ndarray) -> StepResult:
        acts = self._integer_actions(actions)
        E, rows = self.num_envs, np.arange(self.num_envs)
        chosen, idle = acts[rows, self.turn], acts[rows, 1 - self.turn]
        bad = (idle != NO_ACTION) | (chosen < 0) | (chosen >= self.num_actions)
        bad[~bad] = self.lines[rows[~bad], chosen[~bad]]  # a line already drawn
        if bad.any():
            e = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{self.name}: illegal actions {acts[e].tolist()} in env {e}, where seat "
                             f"{self.turn[e]} moves (legal: {np.flatnonzero(~self.lines[e]).tolist()})")
        self.lines[rows, chosen] = True
        closed = self.board.completed(self.lines, self.owner)
        self.owner[closed] = np.broadcast_to(self.turn[:, None], closed.shape)[closed]
        self.turn = np.where(closed.any(axis=1), self.turn, 1 - self.turn)  # closing a box earns another line
        done = self.lines.all(axis=1)
        returns = np.zeros((E, 2), dtype=np.float64)
        if done.any():
            margin = (self.owner[done] == 0).sum(axis=1) - (self.owner[done] == 1).sum(axis=1)
            returns[done, 0] = np.sign(margin)
            returns[done, 1] = -returns[done, 0]
            self.lines[done] = False
            self.owner[done] = -1
            self.turn[done] = 0
        return StepResult(done=done, returns=returns)

    # a position of one board, for search (envs.states): everything step reads
    def copy_state(self, e: int) -> tuple[np.ndarray, np.ndarray, int]:
        return self.lines[e].copy(), self.owner[e].copy(), int(self.turn[e])

    def restore_state(self, e: int, state: tuple[np.ndarray, np.ndarray, int]) -> None:
        lines, owner, turn = state
        self.lines[e] = lines  # copies into the vector's arrays: the state stays as it was
        self.owner[e] = owner
        self.turn[e] = turn

    # what the league page shows of any game
    def render_text(self, env: int) -> str:
        return self.board.render(self.lines[env], self.owner[env], int(self.turn[env]))

    def action_name(self, env: int, action: int) -> str:
        return self.board.line_name(int(action))
