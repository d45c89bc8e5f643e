"""The rules of Dots and Boxes on a board of ``rows`` x ``cols`` boxes, shared by both forms.

Players take turns drawing a line between two neighbouring dots. A player who
completes the fourth side of a box owns it and draws again. When every line is
drawn, the player owning more boxes wins (+1, the other -1; 0 on a tie).

Actions number the lines: first the horizontal ones row by row
(``(rows + 1) * cols`` of them), then the vertical ones row by row
(``rows * (cols + 1)``). A seat observes, as float32, every line (1 drawn),
then every box it owns, then every box its opponent owns: the same vector in
both forms, so a league trained on either answers the same ``/nash/act`` query.
"""

from __future__ import annotations

import numpy as np


class Board:
    """Line and box numbering of a ``rows`` x ``cols`` board, and its text."""

    def __init__(self, rows: int = 2, cols: int = 2):
        if int(rows) < 1 or int(cols) < 1:
            raise ValueError(f"Dots and Boxes needs at least one box, got rows={rows}, cols={cols}")
        self.rows, self.cols = int(rows), int(cols)
        self.num_horizontal = (self.rows + 1) * self.cols
        self.num_lines = self.num_horizontal + self.rows * (self.cols + 1)
        self.num_boxes = self.rows * self.cols
        self.obs_size = self.num_lines + 2 * self.num_boxes
        # the four lines around each box: top, bottom, left, right
        self.box_lines = np.array([[self.horizontal(r, c), self.horizontal(r + 1, c),
                                    self.vertical(r, c), self.vertical(r, c + 1)]
                                   for r in range(self.rows) for c in range(self.cols)], dtype=np.int64)

    def horizontal(self, r: int, c: int) -> int:
        """The line from dot (r, c) to dot (r, c + 1)."""
        return r * self.cols + c

    def vertical(self, r: int, c: int) -> int:
        """The line from dot (r, c) to dot (r + 1, c)."""
        return self.num_horizontal + r * (self.cols + 1) + c

    def line_name(self, line: int) -> str:
        """``line`` by the two dots it joins, dots named (row, column) from the top left."""
        if not 0 <= line < self.num_lines:
            raise ValueError(f"line {line} is not on a {self.rows}x{self.cols} board (0..{self.num_lines - 1})")
        if line < self.num_horizontal:
            r, c = divmod(line, self.cols)
            return f"({r},{c})-({r},{c + 1})"
        r, c = divmod(line - self.num_horizontal, self.cols + 1)
        return f"({r},{c})-({r + 1},{c})"

    def symmetries(self) -> tuple[np.ndarray, np.ndarray]:
        """The board's symmetries as gathers (docs/custom-games.md): the mirrors and the half turn,
        and on a square board the quarter turns and diagonal mirrors too. Each maps the dots, and
        with them the lines and the boxes; row k of each array reads the image's entries from the
        original's, the identity first."""
        R, C = self.rows, self.cols
        maps = [lambda r, c: (r, c), lambda r, c: (r, C - c), lambda r, c: (R - r, c), lambda r, c: (R - r, C - c)]
        if R == C:
            maps += [lambda r, c: (c, r), lambda r, c: (C - c, r), lambda r, c: (c, R - r), lambda r, c: (C - c, R - r)]
        lines = {}
        for r in range(R + 1):
            for c in range(C):
                lines[frozenset({(r, c), (r, c + 1)})] = self.horizontal(r, c)
        for r in range(R):
            for c in range(C + 1):
                lines[frozenset({(r, c), (r + 1, c)})] = self.vertical(r, c)
        obs, actions = [], []
        for f in maps:
            image = np.empty(self.num_lines, dtype=np.int64)  # image[j]: the line that line j maps to
            for dots, j in lines.items():
                image[j] = lines[frozenset(f(*d) for d in dots)]
            box = np.empty(self.num_boxes, dtype=np.int64)
            for r in range(R):
                for c in range(C):  # a box maps to the box of its corners' images
                    corners = [f(r, c), f(r + 1, c + 1)]
                    box[r * C + c] = min(a for a, _ in corners) * C + min(b for _, b in corners)
            gather_lines, gather_boxes = np.argsort(image), np.argsort(box)
            actions.append(gather_lines)
            obs.append(np.concatenate([gather_lines, self.num_lines + gather_boxes,
                                       self.num_lines + self.num_boxes + gather_boxes]))
        return np.stack(obs), np.stack(actions)

    def completed(self, lines: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """(n, boxes) bool: boxes whose four lines are drawn and that nobody owns yet."""
        return lines[:, self.box_lines].all(axis=2) & (owner < 0)

    def observation(self, lines: np.ndarray, owner: np.ndarray, seat: np.ndarray | int) -> np.ndarray:
        """(n, obs_size) float32: lines drawn, boxes of ``seat``, boxes of its opponent."""
        seat = np.asarray(seat).reshape(-1, 1)
        return np.concatenate([lines, owner == seat, owner == 1 - seat], axis=1).astype(np.float32)

    def render(self, lines: np.ndarray, owner: np.ndarray, to_move: int | None) -> str:
        """One board as text: dots '+', lines '---' and '|', owned boxes by seat number."""
        out = []
        for r in range(self.rows + 1):
            out.append("+" + "+".join("---" if lines[self.horizontal(r, c)] else "   " for c in range(self.cols)) + "+")
            if r < self.rows:
                row = ""
                for c in range(self.cols + 1):
                    row += "|" if lines[self.vertical(r, c)] else " "
                    if c < self.cols:
                        o = int(owner[r * self.cols + c])
                        row += f" {o} " if o >= 0 else "   "
                out.append(row)
        score = [int((owner == s).sum()) for s in (0, 1)]
        status = f"seat {to_move} to move" if to_move is not None else "game over"
        out.append(f"{status}; boxes: seat 0 {score[0]}, seat 1 {score[1]}")
        return "\n".join(out)
