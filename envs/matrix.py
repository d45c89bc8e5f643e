"""One-shot two-player zero-sum matrix games, vectorized in numpy.

Seat 0 is the row player and receives ``payoff[a0, a1]``; seat 1 is the column
player and receives ``-payoff[a0, a1]``. Both seats act on every step and every
step ends every episode. A non-square ``(n, m)`` payoff pads the shared action
space to ``max(n, m)``; the padded actions are illegal for the seat that lacks
them.

The observation of seat s is the one-hot vector of s (``obs_size == 2``): the
game has no state, but a single network that plays both seats of an asymmetric
game must know which one it holds.

Known games carry their equilibrium as data (``known_nash``), so tests and the
league's Nash solver can be checked against closed-form answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.base import NO_ACTION, StepResult, VectorGame


@dataclass(frozen=True)
class MatrixNash:
    """A Nash equilibrium of a matrix game: row mixture, column mixture, and the
    game value to the row player."""

    row: tuple[float, ...]
    col: tuple[float, ...]
    value: float


# name -> (payoff to the row player, its Nash equilibrium)
KNOWN_GAMES: dict[str, tuple[list[list[float]], MatrixNash]] = {
    "rock_paper_scissors": (
        [[0, -1, 1], [1, 0, -1], [-1, 1, 0]],
        MatrixNash((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3), 0.0),
    ),
    # The row for "rock" wins 2 against "scissors"; the Nash shifts to paper.
    "biased_rps": (
        [[0, -1, 2], [1, 0, -1], [-2, 1, 0]],
        MatrixNash((0.25, 0.5, 0.25), (0.25, 0.5, 0.25), 0.0),
    ),
    "matching_pennies": (
        [[1, -1], [-1, 1]],
        MatrixNash((0.5, 0.5), (0.5, 0.5), 0.0),
    ),
}
ALIASES = {"rps": "rock_paper_scissors"}
# the actions of the known games, by name (a user-given matrix has numbered actions)
ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "rock_paper_scissors": ("rock", "paper", "scissors"),
    "biased_rps": ("rock", "paper", "scissors"),
    "matching_pennies": ("heads", "tails"),
}


class MatrixGame(VectorGame):
    """A vector of ``num_envs`` plays of the zero-sum matrix game ``payoff``.

    ``known_nash`` is a :class:`MatrixNash` for the named known games, and
    ``None`` for a user-given matrix unless one is passed.
    """

    simultaneous = True
    supports_exact = True  # expected payoffs are x @ A @ y

    def __init__(
        self,
        payoff,
        num_envs: int,
        name: str = "matrix",
        known_nash: MatrixNash | None = None,
        seed: int | None = None,
    ):
        A = np.asarray(payoff, dtype=np.float64)
        if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
            raise ValueError(f"payoff must be a non-empty 2-D matrix, got shape {A.shape}")
        if not np.all(np.isfinite(A)):
            raise ValueError("payoff must contain only finite numbers")
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.payoff = A
        self.name = name
        self.num_envs = int(num_envs)
        self.num_actions = int(max(A.shape))
        self.obs_size = 2
        self.known_nash = known_nash
        self.seed = seed
        E, n = self.num_envs, self.num_actions
        self._legal = np.zeros((2, n), dtype=bool)
        self._legal[0, : A.shape[0]] = True
        self._legal[1, : A.shape[1]] = True
        self._obs_rows = np.eye(2, dtype=np.float32)
        self._movers = np.ones((E, 2), dtype=bool)

    @classmethod
    def known(cls, name: str, num_envs: int, seed: int | None = None) -> "MatrixGame":
        """One of :data:`KNOWN_GAMES` (or an alias) with its ``known_nash``."""
        key = ALIASES.get(name, name)
        if key not in KNOWN_GAMES:
            raise ValueError(f"unknown matrix game {name!r}; known: {sorted(KNOWN_GAMES) + sorted(ALIASES)}")
        payoff, nash = KNOWN_GAMES[key]
        return cls(payoff, num_envs, name=key, known_nash=nash, seed=seed)

    # ---------------------------------------------------------- game theory
    def expected_payoff(self, row_mix, col_mix) -> float:
        """Row player's expected payoff when the seats play these mixtures."""
        x = np.asarray(row_mix, dtype=np.float64)
        y = np.asarray(col_mix, dtype=np.float64)
        return float(x @ self.payoff @ y)

    def best_response(self, opponent_mix, seat: int) -> np.ndarray:
        """Pure best responses of ``seat`` to the other seat's mixture: the
        (possibly several) actions maximizing ``seat``'s expected payoff."""
        y = np.asarray(opponent_mix, dtype=np.float64)
        values = self.payoff @ y if seat == 0 else -(y @ self.payoff)
        return np.flatnonzero(np.isclose(values, values.max()))

    # ---------------------------------------------------------------- text
    def action_name(self, env: int, action: int) -> str:
        """The action's name in a known game (``ACTION_NAMES``), else its index."""
        names = ACTION_NAMES.get(self.name, ())
        return names[action] if 0 <= action < len(names) else str(action)

    def render_text(self, env: int) -> str:
        """The rules as text: both seats choose at once, and the payoff table to seat 0 (rows)."""
        rows, cols = self.payoff.shape
        head = [""] + [self.action_name(env, j) for j in range(cols)]
        body = [[self.action_name(env, i)] + [f"{v:g}" for v in self.payoff[i]] for i in range(rows)]
        width = max(len(c) for line in [head, *body] for c in line)
        table = "\n".join(" ".join(c.rjust(width) for c in line) for line in [head, *body])
        return (f"{self.name}: both seats choose at once; seat 0 picks a row, seat 1 a column, "
                f"and seat 0 wins what the table says (seat 1 loses it)\n{table}")

    # ---------------------------------------------------------------- protocol
    def reset(self, seed: int | None = None) -> None:
        """Nothing to restart: the game is stateless and has no chance."""
        if seed is not None:
            self.seed = seed

    def movers(self) -> np.ndarray:
        return self._movers.copy()

    def observe(self, seat: int, envs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        if seat not in (0, 1):
            raise ValueError(f"seat must be 0 or 1, got {seat!r}")
        n = self.num_envs if envs is None else len(np.asarray(envs).reshape(-1))
        obs = np.broadcast_to(self._obs_rows[seat], (n, self.obs_size)).copy()
        mask = np.broadcast_to(self._legal[seat], (n, self.num_actions)).copy()
        return obs, mask

    def step(self, actions: np.ndarray) -> StepResult:
        acts = self._integer_actions(actions)
        E = self.num_envs
        for seat in (0, 1):
            col = acts[:, seat]
            bad = (col < 0) | (col >= self.payoff.shape[seat])
            if bad.any():
                e = int(np.flatnonzero(bad)[0])
                what = "no action (NO_ACTION)" if col[e] == NO_ACTION else f"illegal action {col[e]}"
                raise ValueError(
                    f"{self.name}: {what} for seat {seat} in env {e}; both seats act on every step "
                    f"(legal: 0..{self.payoff.shape[seat] - 1})"
                )
        r = self.payoff[acts[:, 0], acts[:, 1]]
        returns = np.stack([r, -r], axis=1)
        return StepResult(done=np.ones(E, dtype=bool), returns=returns)
