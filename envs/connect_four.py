"""Connect Four positions as bitboards: the ``StateStore`` a search of OpenSpiel's ``connect_four`` uses.

A search expands thousands of positions a simulation; one ``pyspiel.State`` a position costs a clone,
a move and an observation tensor in Python each. Here a position is two 64-bit boards (one per
player, bit ``column * 7 + row``, row 0 at the bottom), the columns' heights and the mover, and a
batch of moves is a few numpy operations on all of them at once. A four in a row is found by the
shift-and test of the bitboard idiom: a board ``b`` holds one in direction ``s`` (1 up a column, 7
along a row, 6 and 8 along the diagonals) exactly when ``m = b & (b >> s)`` has ``m & (m >> 2s)``
non-zero; the seventh bit of each column is never set, so no line wraps around an edge.

The positions are OpenSpiel's own: the observation is its tensor (planes: the first player's pieces,
the second's, the empty cells; 6 rows from the bottom by 7 columns, the same for both seats), the
moves its columns, a win worth +1 to the winner and -1 to the loser, a full board a draw
(``tests/test_states.py`` plays them side by side with ``pyspiel``).
"""

from __future__ import annotations

import numpy as np

from envs.states import TERMINAL, Positions

ROWS, COLUMNS = 6, 7
CELLS = ROWS * COLUMNS
# the bit of the cell at (row, column), in the order of OpenSpiel's tensor (row-major from the bottom)
_BIT = np.array([c * (ROWS + 1) + r for r in range(ROWS) for c in range(COLUMNS)], dtype=np.uint64)
_ONE = np.uint64(1)
_LINES = tuple(np.uint64(s) for s in (1, ROWS + 1, ROWS, ROWS + 2))


def four_in_a_row(board: np.ndarray) -> np.ndarray:
    """Which of the bitboards ``board`` (uint64) hold four in a row."""
    won = np.zeros(board.shape, dtype=bool)
    for s in _LINES:
        m = board & (board >> s)
        won |= (m & (m >> (s + s))) != 0
    return won


class ConnectFourStates:
    """``envs.states.StateStore`` of OpenSpiel's standard ``connect_four`` (module docstring)."""

    num_actions = COLUMNS
    obs_size = 3 * CELLS

    def __init__(self, capacity: int):
        self.capacity = n = int(capacity)
        self.boards = np.zeros((n, 2), dtype=np.uint64)  # each player's pieces
        self.heights = np.zeros((n, COLUMNS), dtype=np.int64)
        self.mover = np.zeros(n, dtype=np.int64)  # the player to move, TERMINAL where the game ended
        self.winner = np.full(n, -1, dtype=np.int64)  # where it ended: the winner, -1 a draw

    def _positions(self, slots: np.ndarray) -> Positions:
        n = slots.size
        player = self.mover[slots]
        live = player != TERMINAL
        returns = np.zeros((n, 2))
        winner = self.winner[slots]
        won = np.flatnonzero(~live & (winner >= 0))
        returns[won, winner[won]] = 1.0
        returns[won, 1 - winner[won]] = -1.0
        pieces = (self.boards[slots][:, :, None] >> _BIT[None, None, :]) & _ONE  # (n, 2, 42)
        obs = np.zeros((n, 3, CELLS), dtype=np.float32)
        obs[:, :2] = pieces
        obs[:, 2] = 1.0 - obs[:, 0] - obs[:, 1]
        obs[~live] = 0.0
        mask = (self.heights[slots] < ROWS) & live[:, None]
        return Positions(player, returns, obs.reshape(n, self.obs_size), mask)

    def set_roots(self, slots, game, envs) -> Positions:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        envs = np.asarray(envs, dtype=np.int64).reshape(-1)
        if slots.size != envs.size:
            raise ValueError(f"set_roots: {slots.size} slots for {envs.size} environments")
        states = [game._states[e] for e in envs.tolist()]
        planes = np.array([s.observation_tensor(0) for s in states], dtype=np.float32).reshape(-1, 3, CELLS) > 0.5
        for p in (0, 1):
            self.boards[slots, p] = np.bitwise_or.reduce(np.where(planes[:, p], _ONE << _BIT, np.uint64(0)), axis=1)
        occupied = (planes[:, 0] | planes[:, 1]).reshape(-1, ROWS, COLUMNS)
        self.heights[slots] = occupied.sum(axis=1)
        self._settle(slots, np.array([TERMINAL if s.is_terminal() else s.current_player() for s in states]))
        return self._positions(slots)

    def set_initial(self, slots) -> Positions:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        self.boards[slots] = 0
        self.heights[slots] = 0
        self.mover[slots] = 0
        self.winner[slots] = -1
        return self._positions(slots)

    def expand(self, parents, actions, children) -> Positions:
        parents, actions, children = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (parents, actions, children))
        mover = self.mover[parents]
        boards = self.boards[parents]
        heights = self.heights[parents]
        k = np.arange(parents.size)
        boards[k, mover] |= _ONE << (actions * (ROWS + 1) + heights[k, actions]).astype(np.uint64)
        heights[k, actions] += 1
        self.boards[children] = boards
        self.heights[children] = heights
        self._settle(children, 1 - mover, just_moved=mover)
        return self._positions(children)

    def _settle(self, slots: np.ndarray, to_move: np.ndarray, just_moved: np.ndarray | None = None) -> None:
        """Set the mover and the end of the game of ``slots``: ``to_move`` unless someone has four in
        a row (only ``just_moved`` can, after a move) or the board is full."""
        boards = self.boards[slots]
        if just_moved is None:
            won = four_in_a_row(boards)  # (n, 2)
            winner = np.where(won[:, 0], 0, np.where(won[:, 1], 1, -1))
        else:
            winner = np.where(four_in_a_row(boards[np.arange(slots.size), just_moved]), just_moved, -1)
        full = self.heights[slots].sum(axis=1) == CELLS
        ended = (winner >= 0) | full
        self.winner[slots] = winner
        self.mover[slots] = np.where(ended, TERMINAL, to_move)

    def keys(self, slots) -> list:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        return list(zip(self.mover[slots].tolist(), self.boards[slots, 0].tolist(), self.boards[slots, 1].tolist()))
