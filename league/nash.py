"""Nash equilibria of the league's meta-game.

The league's meta-game is the two-player zero-sum matrix game whose pure
strategies are the frozen agents of the pool and whose payoff ``W[i, j]`` is the
win rate of agent ``i`` against agent ``j`` (draws counting one half), so that
``W + W.T == 1``: a symmetric constant-sum game. Its Nash mixture is the
distribution over agents that no single agent of the pool beats on average, the
"Nash over the pool" of AlphaStar (Vinyals et al. 2019) and the meta-strategy
of PSRO (Lanctot et al. 2017).

By von Neumann's minimax theorem (1928) every finite zero-sum game has a value
``v`` and optimal mixtures ``x``, ``y`` with ``min_j (x^T A)_j = v =
max_i (A y)_i``; ``x`` solves the linear programme

    maximise v  subject to  A^T x >= v 1,  1^T x = 1,  x >= 0,

and ``y`` is its dual (Dantzig 1951). Adding a constant to every entry or
scaling by a positive factor leaves the optimal mixtures unchanged, so win-rate
matrices and their antisymmetric shift ``W - 0.5`` have the same equilibria.

Solvers here:

- :func:`solve_zero_sum` / :func:`compute_nash_distribution`: exact, via
  HiGHS through ``scipy.optimize.linprog``, wrapped in a double oracle
  (McMahan, Gordon & Blum 2003) so that a game whose equilibrium has a small
  support -- the usual league, mostly transitive -- is solved on a small
  restricted game and only *checked* against the full matrix.
- :class:`NashSolver`: the same, warm-started from the previous solution's
  support, for a league that re-solves as results arrive.
- Regret matching (Hart & Mas-Colell 2000) in its "plus" form (Tammelin 2014),
  only as a fallback when the LP solver reports failure.

Every result is verified against the full matrix: the best pure deviation of
either player gains at most ``tol`` (see :func:`nash_conv`).
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import numpy as np
from scipy.optimize import linprog

__all__ = [
    "NashSolution",
    "NashSolver",
    "build_payoff_matrix",
    "compute_nash_distribution",
    "meta_exploitability",
    "nash_conv",
    "nash_entropy",
    "solve_zero_sum",
]

logger = logging.getLogger(__name__)

# HiGHS' feasibility tolerances on the normalised game (entries in [-1, 1]).
# Its defaults (1e-7) would leave deviation gains of that order; 1e-10 is the
# tightest it accepts reliably, and costs few extra iterations.
_LP_TOL = 1e-10
# Below this a deviation gain is LP round-off, not a missing strategy: the
# double oracle never asks for more accuracy than the LP can deliver.
_GAIN_FLOOR = 1e-9


@dataclass(frozen=True)
class NashSolution:
    """An equilibrium ``(row, col)`` of a zero-sum game and its value.

    ``row`` maximises and ``col`` minimises ``row @ payoff @ col``; ``value`` is
    that product at equilibrium. ``method`` says which solver produced it:
    ``"lp"`` (HiGHS, cold), ``"lp-warm"`` (HiGHS inside a double oracle seeded
    with a previous support) or ``"regret-matching"`` (fallback, approximate).
    ``iterations`` counts the restricted games solved; ``nash_conv`` is the
    measured :func:`nash_conv` of the result on the full matrix.
    """

    row: np.ndarray
    col: np.ndarray
    value: float
    method: str
    iterations: int = 1
    nash_conv: float = 0.0


# --------------------------------------------------------------------------
# Validation


def _as_matrix(payoff, name: str = "payoff", *, square: bool = False) -> np.ndarray:
    try:
        a = np.asarray(payoff, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 2-D array of numbers: {exc}") from None
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got an array with shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape}); a game needs at least one strategy per player")
    if square and a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be square (one row and one column per agent), got shape {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite entries (NaN or inf), first at [{i}, {j}] = {a[i, j]}"
        )
    return a


def _as_mixture(probs, n: int | None, name: str = "probs") -> np.ndarray:
    try:
        p = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of probabilities: {exc}") from None
    if p.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector, got shape {p.shape}")
    if p.size == 0:
        raise ValueError(f"{name} is empty")
    if n is not None and p.size != n:
        raise ValueError(f"{name} has {p.size} entries but the payoff matrix has {n} strategies on that side")
    if not np.isfinite(p).all():
        raise ValueError(f"{name} contains NaN or inf")
    if (p < -1e-9).any():
        raise ValueError(f"{name} has negative entries (min {p.min():.3g}); it must be a probability vector")
    total = p.sum()
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1, sums to {total:.9g}")
    # Round-off from a solver may leave -1e-17 or a sum of 1 - 1e-12.
    p = np.clip(p, 0.0, None)
    return p / p.sum()


# --------------------------------------------------------------------------
# Payoff matrix and measures


def build_payoff_matrix(
    agent_ids: Sequence[Hashable], win_rate_fn: Callable[[Hashable, Hashable], float]
) -> np.ndarray:
    """The meta-game payoff ``W[i, j] = win_rate_fn(agent_ids[i], agent_ids[j])``.

    ``win_rate_fn(a, b)`` is the fraction of games ``a`` won against ``b``, in
    ``[0, 1]``; for the symmetric constant-sum game the league assumes it counts
    draws as half a win, so ``W + W.T == 1``. An agent against itself is a coin
    flip: the diagonal is 0.5 and ``win_rate_fn`` is not called for it.
    """
    ids = list(agent_ids)
    if not ids:
        raise ValueError("agent_ids is empty: the payoff matrix needs at least one agent")
    if len(set(ids)) != len(ids):
        seen, dups = set(), []
        for a in ids:
            if a in seen:
                dups.append(a)
            seen.add(a)
        raise ValueError(f"agent_ids has duplicates: {dups[:5]!r}")
    n = len(ids)
    w = np.full((n, n), 0.5)
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if i == j:
                continue
            r = win_rate_fn(a, b)
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Real):
                raise ValueError(f"win_rate_fn({a!r}, {b!r}) returned {r!r}, not a number")
            r = float(r)
            if math.isnan(r) or not 0.0 <= r <= 1.0:
                raise ValueError(f"win_rate_fn({a!r}, {b!r}) returned {r!r}; a win rate must be a number in [0, 1]")
            w[i, j] = r
    return w


def nash_entropy(probs) -> float:
    """Shannon entropy ``-sum p log p`` of a mixture, in nats (``0 log 0 = 0``).

    ``log n`` for the uniform mixture over ``n`` agents, 0 for a pure one.
    """
    p = _as_mixture(probs, None)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def meta_exploitability(payoff, probs) -> float:
    """What the best pure deviation gains against ``probs`` in a symmetric game.

    ``max_i (P p)_i - p^T P p`` with ``P = payoff`` (square): how much better
    than the mixture itself the best agent of the pool does against the
    mixture. It is 0 exactly at a symmetric Nash equilibrium and is the
    meta-game exploitability (NashConv / 2) of PSRO (Lanctot et al. 2017). A
    constant added to ``P`` cancels, so win rates and ``W - 0.5`` agree.
    """
    a = _as_matrix(payoff, square=True)
    p = _as_mixture(probs, a.shape[0])
    ap = a @ p
    return float(ap.max() - p @ ap)


def nash_conv(payoff, row, col) -> float:
    """NashConv of ``(row, col)`` in the zero-sum game ``payoff`` (row maximises).

    ``max_i (A y)_i - min_j (x^T A)_j``: the sum of what each player gains by
    switching to a best response. Nonnegative; 0 exactly at an equilibrium.
    """
    a = _as_matrix(payoff)
    x = _as_mixture(row, a.shape[0], "row")
    y = _as_mixture(col, a.shape[1], "col")
    return float((a @ y).max() - (x @ a).min())


# --------------------------------------------------------------------------
# Restricted-game solvers (on the normalised matrix)


def _normalise(a: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(a - shift) / scale`` with entries in [-1, 1], and ``(shift, scale)``.

    Equilibria are invariant to this, and HiGHS' absolute tolerances then mean
    the same thing for win rates in [0, 1] as for payoffs in the thousands.
    """
    lo, hi = float(a.min()), float(a.max())
    shift = 0.5 * (lo + hi)
    scale = 0.5 * (hi - lo)
    if scale == 0.0:
        return np.zeros_like(a), shift, 1.0
    return (a - shift) / scale, shift, scale


class _LPFailure(RuntimeError):
    pass


def _solve_lp(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Both optimal mixtures of ``a`` (entries in [-1, 1]) from one HiGHS LP.

    The textbook form for a positive matrix ``B = a + 2 >= 1`` (value >= 1):
    ``min 1^T u  s.t.  B^T u >= 1, u >= 0`` gives ``x = u / 1^T u`` and value
    ``1 / 1^T u``; the LP's duals are ``y / value``. It has no free variable
    and no equality row, which HiGHS' dual simplex handles fastest.
    """
    n, m = a.shape
    b = a + 2.0
    res = linprog(
        np.ones(n),
        A_ub=-b.T,
        b_ub=-np.ones(m),
        bounds=(0, None),
        method="highs-ds",
        options={"primal_feasibility_tolerance": _LP_TOL, "dual_feasibility_tolerance": _LP_TOL},
    )
    if res.status != 0 or res.x is None:
        raise _LPFailure(f"HiGHS status {res.status}: {res.message}")
    u = np.clip(res.x, 0.0, None)
    w = np.clip(-res.ineqlin.marginals, 0.0, None)
    su, sw = u.sum(), w.sum()
    if not (su > 0 and sw > 0):
        raise _LPFailure("HiGHS returned a degenerate solution (zero mixture)")
    x, y = u / su, w / sw
    return x, y, float(x @ a @ y)


def _regret_matching(a: np.ndarray, tol: float, max_iter: int = 20_000) -> tuple[np.ndarray, np.ndarray, int]:
    """Regret matching+ with alternating updates and linear averaging.

    Hart & Mas-Colell (2000); the "plus" clipping and linear averaging are
    Tammelin's CFR+ (2014), which converge far faster in practice. Approximate:
    stops when NashConv <= ``tol`` or after ``max_iter`` iterations.
    """
    n, m = a.shape
    rx, ry = np.zeros(n), np.zeros(m)
    x, y = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    sx, sy = np.zeros(n), np.zeros(m)
    it = 0
    for it in range(1, max_iter + 1):
        u = a @ y
        rx = np.maximum(rx + u - x @ u, 0.0)
        tx = rx.sum()
        x = rx / tx if tx > 0 else np.full(n, 1.0 / n)
        sx += it * x
        c = x @ a
        ry = np.maximum(ry - c + c @ y, 0.0)
        ty = ry.sum()
        y = ry / ty if ty > 0 else np.full(m, 1.0 / m)
        sy += it * y
        if it % 100 == 0:
            ax, ay = sx / sx.sum(), sy / sy.sum()
            if (a @ ay).max() - (ax @ a).min() <= tol:
                break
    return sx / sx.sum(), sy / sy.sum(), it


# --------------------------------------------------------------------------
# Double oracle


def _initial_sets(a: np.ndarray, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    # The strongest agents on average: in a mostly transitive league the
    # equilibrium lives among them, so the first restricted game is already close.
    k_r, k_c = min(k, a.shape[0]), min(k, a.shape[1])
    rows = np.argpartition(-a.mean(axis=1), k_r - 1)[:k_r]
    cols = np.argpartition(a.mean(axis=0), k_c - 1)[:k_c]
    return rows, cols


def _double_oracle(
    a: np.ndarray, rows: np.ndarray, cols: np.ndarray, tol: float, max_add: int | None = None
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Double oracle (McMahan, Gordon & Blum 2003) with exact LP restricted games.

    Solve the game restricted to ``rows x cols``; add every pure strategy whose
    payoff against the restricted equilibrium beats its value by more than
    ``tol`` (up to ``max_add`` per player per round, best first); repeat until
    none does. Sets only grow, so it ends; at the end no pure deviation in the
    full game gains more than ``tol``, i.e. NashConv <= 2 tol.
    """
    n, m = a.shape
    in_r = np.zeros(n, bool)
    in_c = np.zeros(m, bool)
    in_r[rows] = True
    in_c[cols] = True
    it = 0
    while True:
        it += 1
        r_idx, c_idx = np.flatnonzero(in_r), np.flatnonzero(in_c)
        xs, ys, v = _solve_lp(a[np.ix_(r_idx, c_idx)])
        row_payoff = a[:, c_idx] @ ys
        col_payoff = xs @ a[r_idx, :]
        new_r = np.flatnonzero((row_payoff > v + tol) & ~in_r)
        new_c = np.flatnonzero((col_payoff < v - tol) & ~in_c)
        if new_r.size == 0 and new_c.size == 0:
            x, y = np.zeros(n), np.zeros(m)
            x[r_idx], y[c_idx] = xs, ys
            return x, y, v, it
        if max_add is not None:
            if new_r.size > max_add:
                new_r = new_r[np.argpartition(-row_payoff[new_r], max_add - 1)[:max_add]]
            if new_c.size > max_add:
                new_c = new_c[np.argpartition(col_payoff[new_c], max_add - 1)[:max_add]]
        in_r[new_r] = True
        in_c[new_c] = True


def _solve(
    payoff, *, rows0=None, cols0=None, tol: float = 1e-9, warm: bool = False
) -> NashSolution:
    a_raw = _as_matrix(payoff)
    a, shift, scale = _normalise(a_raw)
    n, m = a.shape
    tol_n = max(tol / scale, _GAIN_FLOOR)
    try:
        if rows0 is None or cols0 is None or len(rows0) == 0 or len(cols0) == 0:
            rows0, cols0 = _initial_sets(a)
            warm = False
        x, y, v, it = _double_oracle(a, np.asarray(rows0, int), np.asarray(cols0, int), tol_n)
        method = "lp-warm" if warm else "lp"
    except _LPFailure as exc:
        logger.warning("LP solver failed; falling back to regret matching (%s)", exc)
        x, y, it = _regret_matching(a, tol_n)
        v = float(x @ a @ y)
        method = "regret-matching"
    conv = float((a @ y).max() - (x @ a).min()) * scale
    return NashSolution(row=x, col=y, value=v * scale + shift, method=method, iterations=it, nash_conv=conv)


# --------------------------------------------------------------------------
# Public solvers


def solve_zero_sum(payoff) -> NashSolution:
    """Solve the zero-sum (or constant-sum) matrix game ``payoff`` (N, M) exactly.

    The row player maximises ``x^T A y``. Returns both optimal mixtures and the
    game value (von Neumann's minimax theorem), via the LP formulation solved by
    HiGHS inside a double oracle (see the module docstring).
    """
    return _solve(payoff)


def compute_nash_distribution(payoff, *, warm_start=None, tol: float = 1e-9) -> np.ndarray:
    """The row player's Nash mixture over the pool (sums to 1, nonnegative).

    For the league's symmetric meta-game (``W + W.T == 1``, or ``W - 0.5``
    antisymmetric) this is the Nash distribution over agents. ``warm_start``,
    a previous mixture of the same length, seeds the double oracle with its
    support; the answer is still exact for ``payoff``. ``tol`` bounds what a
    pure deviation may gain against the result, in payoff units.
    """
    a = _as_matrix(payoff)
    rows0 = cols0 = None
    if warm_start is not None:
        p = _as_mixture(warm_start, a.shape[0], "warm_start")
        rows0 = np.flatnonzero(p > 0)
        # A symmetric game's column support is the row support.
        cols0 = rows0 if a.shape[0] == a.shape[1] else None
    sol = _solve(a, rows0=rows0, cols0=cols0, tol=tol, warm=warm_start is not None)
    return sol.row


class NashSolver:
    """Incremental, warm-started exact solver for a league that keeps re-solving.

    Keeps the support of its last solution (by agent id) and seeds the next
    solve's double oracle (McMahan et al. 2003) with it -- the restricted game
    is the previous support plus the best responses to it, grown by every
    violated strategy until none is left, then checked on the full matrix. A
    league's equilibrium moves little between re-solves, so this usually costs
    one or two small LPs plus matrix-vector products, instead of an LP on the
    whole pool. This is PSRO's (Lanctot et al. 2017) meta-solver loop run on
    a payoff matrix that is given rather than grown by training.
    """

    def __init__(self, *, tol: float = 1e-9):
        self.tol = tol
        self._row_ids: list | None = None
        self._col_ids: list | None = None
        self.last: NashSolution | None = None

    def reset(self) -> None:
        self._row_ids = self._col_ids = None
        self.last = None

    def solve(self, payoff, ids: Sequence[Hashable] | None = None, *, col_ids: Sequence[Hashable] | None = None) -> NashSolution:
        """Solve ``payoff`` warm from the previous call's support.

        ``ids`` names the rows (and the columns, for a square matrix unless
        ``col_ids`` is given) so that the previous support is found again after
        agents were added, removed or reordered. Without ids, positions are the
        ids, which is right when agents are only ever appended.
        """
        a = _as_matrix(payoff)
        n, m = a.shape
        r_ids = list(range(n)) if ids is None else list(ids)
        if col_ids is not None:
            c_ids = list(col_ids)
        elif n == m:
            c_ids = r_ids
        else:
            c_ids = list(range(m))
        if len(r_ids) != n or len(c_ids) != m:
            raise ValueError(f"ids name {len(r_ids)} rows and {len(c_ids)} columns, payoff has shape {a.shape}")
        if len(set(r_ids)) != n or len(set(c_ids)) != m:
            raise ValueError("ids must be unique")
        rows0 = cols0 = None
        if self._row_ids is not None:
            r_pos = {k: i for i, k in enumerate(r_ids)}
            c_pos = {k: j for j, k in enumerate(c_ids)}
            rows0 = [r_pos[k] for k in self._row_ids if k in r_pos]
            cols0 = [c_pos[k] for k in self._col_ids if k in c_pos]
        sol = _solve(a, rows0=rows0, cols0=cols0, tol=self.tol, warm=rows0 is not None)
        self._row_ids = [r_ids[i] for i in np.flatnonzero(sol.row > 0)]
        self._col_ids = [c_ids[j] for j in np.flatnonzero(sol.col > 0)]
        self.last = sol
        return sol
