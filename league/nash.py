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
  the LP, wrapped in a double oracle (McMahan, Gordon & Blum 2003) so that a
  game whose equilibrium has a small support -- the usual league, mostly
  transitive -- is solved on a small restricted game and only *checked*
  against the full matrix. Restricted games are solved by HiGHS (dual
  simplex, through ``scipy.optimize.linprog``) while small, and by a dense
  interior point with an exact crossover once large (see :func:`_solve_ipm`),
  with HiGHS as its fallback.
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
# Its defaults (1e-7) would leave deviation gains of that order; 1e-10 keeps
# them below the double oracle's floor.
_LP_TOL = 1e-10
# Below this a deviation gain is LP round-off, not a missing strategy: the
# double oracle never asks for more accuracy than the LP can deliver.
_GAIN_FLOOR = 1e-9
# Restricted games larger than this (per side) go to the dense interior point.
_IPM_MIN_SIZE = 96
# Weights below this fraction of the largest do not seed a warm start.
_SUPPORT_CUT = 1e-6
# Games this small are solved whole: the double oracle's bookkeeping would cost
# more than the LP it saves.
_SMALL_GAME = 32


@dataclass(frozen=True)
class NashSolution:
    """An equilibrium ``(row, col)`` of a zero-sum game and its value.

    ``row`` maximises and ``col`` minimises ``row @ payoff @ col``; ``value`` is
    that product at equilibrium. ``method`` says which solver produced it:
    ``"lp"`` (exact LP, cold), ``"lp-warm"`` (exact LP inside a double oracle
    seeded with a previous support) or ``"regret-matching"`` (fallback,
    approximate).
    ``iterations`` counts the restricted games solved (double-oracle rounds);
    ``nash_conv`` is the measured :func:`nash_conv` of the result on the full
    matrix; ``backend`` names the LP engines used: ``"highs"``, ``"ipm"``
    (dense interior point).
    """

    row: np.ndarray
    col: np.ndarray
    value: float
    method: str
    iterations: int = 1
    nash_conv: float = 0.0
    backend: str = "highs"


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
    return float(-(nz * np.log(nz)).sum()) + 0.0  # + 0.0 turns -0.0 (a pure mixture) into 0.0


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
    from scipy.optimize import linprog  # here: a process that never solves does not load scipy's solvers

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


def _solve_ipm(a: np.ndarray, tol: float, max_iter: int = 60) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Both optimal mixtures of ``a`` (entries in [-1, 1]) by a dense interior point.

    Mehrotra's predictor-corrector (1992) on the same LP as :func:`_solve_lp`,
    written as ``min -1^T w  s.t.  B w + s = 1,  w, s >= 0`` whose dual
    multipliers are ``-u``. Why not HiGHS here: a meta-game is a *dense*
    matrix, and HiGHS' sparse factorisations take ~6-10 s on 1000 x 1000
    where one dense Cholesky of the N x N normal matrix costs ~20 ms, and an
    interior point needs ~15-25 of them whatever N is.

    Interior points stop near, not at, a vertex; the exact answer comes from
    the supports they reveal (strict complementarity: ``u_i`` vs the slack
    ``s_i``, ``w_j`` vs ``z_j``), solved as the square linear system
    "every supported strategy earns the value". It is accepted only if the
    result's NashConv on ``a`` is <= ``tol``; ``None`` sends the caller to HiGHS.
    """
    from scipy.linalg import cho_solve

    n, m = a.shape
    b = a + 2.0
    bt = np.ascontiguousarray(b.T)
    total = n + m
    w, s = np.full(m, 0.5 / m), np.full(n, 0.5)
    lam, zw, zs = np.full(n, -0.5 / n), np.full(m, 0.5), np.full(n, 0.5)
    for _ in range(max_iter):
        rp = 1.0 - b @ w - s
        rdw = -1.0 - bt @ lam - zw
        rds = -lam - zs
        mu = (w @ zw + s @ zs) / total
        if mu < 1e-8:
            cand = _crossover(a, -lam > s, w > zw, tol)
            if cand is None and mu < 1e-10:
                # A near-degenerate strategy (weight and gain both ~0) can keep
                # the crossover from settling; the interior point itself is then
                # within tol once its tiny weights are dropped.
                cand = _trimmed_pair(-lam, w, a, tol)
            if cand is not None:
                return cand
            if mu < 1e-13 or max(abs(rp).max(), abs(rdw).max()) > 1e-6:
                # Past this, round-off in the normal equations dominates.
                break
        # Clipping keeps the normal matrix factorisable (and free of denormals)
        # once variables are 1e-15 from their bounds.
        dw = np.clip(w / zw, 1e-14, 1e14)
        ds = np.clip(s / zs, 1e-14, 1e14)
        k = (b * dw) @ bt
        k[np.diag_indices(n)] += ds
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            return None
        base = rp + b @ (dw * rdw) + ds * rds

        def direction(rcw, rcs):
            # Newton step of the KKT system reduced to the normal equations,
            # with one round of iterative refinement: near the optimum the
            # normal matrix is ill-conditioned, and without it the primal
            # residual stalls around 1e-9 -- too coarse to read supports off.
            rhs = base - b @ (rcw / zw) - rcs / zs
            dlam = cho_solve((chol, True), rhs, check_finite=False)
            dlam += cho_solve((chol, True), rhs - (b @ (dw * (bt @ dlam)) + ds * dlam), check_finite=False)
            dzw = rdw - bt @ dlam
            dzs = rds - dlam
            return (rcw - w * dzw) / zw, (rcs - s * dzs) / zs, dlam, dzw, dzs

        aw, as_, al, azw, azs = direction(-w * zw, -s * zs)
        ap = min(_max_step(w, aw), _max_step(s, as_))
        ad = min(_max_step(zw, azw), _max_step(zs, azs))
        mu_aff = ((w + ap * aw) @ (zw + ad * azw) + (s + ap * as_) @ (zs + ad * azs)) / total
        sigma = (mu_aff / mu) ** 3
        cw, cs, cl, czw, czs = direction(-w * zw - aw * azw + sigma * mu, -s * zs - as_ * azs + sigma * mu)
        ap = min(1.0, 0.995 * min(_max_step(w, cw), _max_step(s, cs)))
        ad = min(1.0, 0.995 * min(_max_step(zw, czw), _max_step(zs, czs)))
        w, s = w + ap * cw, s + ap * cs
        lam, zw, zs = lam + ad * cl, zw + ad * czw, zs + ad * czs
    return None


def _max_step(v: np.ndarray, dv: np.ndarray) -> float:
    neg = dv < 0
    return min(1.0, float((-v[neg] / dv[neg]).min())) if neg.any() else 1.0


def _normalised_pair(u, w, a) -> tuple[np.ndarray, np.ndarray, float] | None:
    x, y = np.clip(u, 0.0, None), np.clip(w, 0.0, None)
    if not (x.sum() > 0 and y.sum() > 0):
        return None
    x, y = x / x.sum(), y / y.sum()
    return x, y, float(x @ a @ y)


def _crossover(a: np.ndarray, in_r: np.ndarray, in_c: np.ndarray, tol: float, rounds: int = 3):
    """From supports guessed by an interior point to an exact vertex.

    Solve on the guessed supports; drop strategies that get negative weight,
    add those that beat the value by more than ``tol``; repeat a few times.
    Near the optimum the guess is wrong only on strategies with near-zero
    weight or gain (a handful in a random 1000 x 1000 game), so this settles
    in one or two rounds. ``None`` when it does not settle.
    """
    in_r, in_c = in_r.copy(), in_c.copy()
    for _ in range(rounds):
        res = _support_solve(a, np.flatnonzero(in_r), np.flatnonzero(in_c), clip=False)
        if res is None:
            return None
        x, y, v = res
        row_gain = a @ y - v
        col_gain = v - x @ a
        out_r, out_c = x < 0, y < 0
        add_r, add_c = (row_gain > tol) & ~in_r, (col_gain > tol) & ~in_c
        if not (out_r.any() or out_c.any() or add_r.any() or add_c.any()):
            return _normalised_pair(x, y, a)
        in_r = _pivot(in_r, out_r, add_r, x, row_gain)
        in_c = _pivot(in_c, out_c, add_c, y, col_gain)
    return None


def _pivot(support: np.ndarray, out: np.ndarray, add: np.ndarray, weight: np.ndarray, gain: np.ndarray) -> np.ndarray:
    # A nondegenerate equilibrium has supports of equal size on both sides
    # (odd size in a symmetric game), so when a strategy must leave and another
    # enter, swap the worst of each -- a simplex-like pivot -- rather than
    # change the support's size.
    support = support.copy()
    if out.any() and add.any():
        support[np.flatnonzero(out)[np.argmin(weight[out])]] = False
        support[np.flatnonzero(add)[np.argmax(gain[add])]] = True
    else:
        support[out] = False
        support[add] = True
    return support


def _trimmed_pair(u, w, a, tol: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    pair = _normalised_pair(u, w, a)
    if pair is None:
        return None
    for cut in (1e-9, 1e-11, 0.0):
        x = np.where(pair[0] > cut * pair[0].max(), pair[0], 0.0)
        y = np.where(pair[1] > cut * pair[1].max(), pair[1], 0.0)
        x, y = x / x.sum(), y / y.sum()
        if (a @ y).max() - (x @ a).min() <= tol:
            return x, y, float(x @ a @ y)
    return None


def _support_solve(
    a: np.ndarray, rows: np.ndarray, cols: np.ndarray, clip: bool = True
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The equilibrium with supports ``rows`` x ``cols``, if it exists and is unique.

    On its support each player's mixture makes the other indifferent (every
    supported pure strategy earns the value ``v``): ``A_RC y = v 1, 1^T y = 1``
    and ``x^T A_RC = v 1^T, 1^T x = 1``. That is the support-enumeration step
    of e.g. Nisan et al., Algorithmic Game Theory (2007), ch. 3, given the
    supports instead of enumerating them.
    """
    k = rows.size
    if k == 0 or k != cols.size:
        return None
    sub = a[np.ix_(rows, cols)]
    sys_ = np.empty((k + 1, k + 1))
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    try:
        sys_[:k, :k] = sub
        sys_[:k, k] = -1.0
        sys_[k, :k] = 1.0
        sys_[k, k] = 0.0
        yv = np.linalg.solve(sys_, rhs)
        sys_[:k, :k] = sub.T
        xv = np.linalg.solve(sys_, rhs)
    except np.linalg.LinAlgError:
        return None
    if not (np.isfinite(xv).all() and np.isfinite(yv).all()):
        return None
    x, y = np.zeros(a.shape[0]), np.zeros(a.shape[1])
    x[rows], y[cols] = xv[:k], yv[:k]
    if not clip:
        return x, y, float(yv[k])
    if (x < -1e-12).any() or (y < -1e-12).any():
        return None
    return _normalised_pair(x, y, a)


def _solve_restricted(a: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, float, str]:
    # HiGHS' dual simplex is fastest while the game is small; dense interior
    # point (verified, else HiGHS after all) beyond that.
    if min(a.shape) > _IPM_MIN_SIZE:
        res = _solve_ipm(a, tol)
        if res is not None:
            return (*res, "ipm")
    return (*_solve_lp(a), "highs")


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
    a: np.ndarray, rows: np.ndarray, cols: np.ndarray, tol: float
) -> tuple[np.ndarray, np.ndarray, float, int, str]:
    """Double oracle (McMahan, Gordon & Blum 2003) with exact restricted games.

    Solve the game restricted to ``rows x cols``; add every pure strategy whose
    payoff against the restricted equilibrium beats its value by more than
    ``tol``; repeat until none does. Sets only grow, so it ends; at the end no
    pure deviation in the full game gains more than ``tol`` against the
    restricted equilibrium padded with zeros, so that is an equilibrium of the
    full game (NashConv <= 2 tol).

    Adding all violators rather than one best response each round (as in
    PSRO) keeps the number of rounds small. When a restricted game would grow
    fast past half the full game -- a cold start on a random game, whose
    support is near N/2 -- it is cheaper to solve the full game at once than
    to keep growing it; a warm start that only adds a few strategies to a
    large support keeps going.
    """
    n, m = a.shape
    in_r = np.zeros(n, bool)
    in_c = np.zeros(m, bool)
    in_r[rows] = True
    in_c[cols] = True
    rounds, backends = 0, set()
    while True:
        rounds += 1
        r_idx, c_idx = np.flatnonzero(in_r), np.flatnonzero(in_c)
        xs, ys, v, backend = _solve_restricted(a[np.ix_(r_idx, c_idx)], tol)
        backends.add(backend)
        row_payoff = a[:, c_idx] @ ys
        col_payoff = xs @ a[r_idx, :]
        worst = max(row_payoff.max() - v, v - col_payoff.min())
        if worst <= tol or not ((row_payoff > v + tol) & ~in_r).any() and not ((col_payoff < v - tol) & ~in_c).any():
            new_r = new_c = np.empty(0, int)
        else:
            # Also take strategies that fall short of the value by less than the
            # worst violation: the next equilibrium tends to use them, and each
            # round saved is a restricted solve saved.
            new_r = np.flatnonzero((row_payoff > v - worst) & ~in_r)
            new_c = np.flatnonzero((col_payoff < v + worst) & ~in_c)
        if new_r.size == 0 and new_c.size == 0:
            x, y = np.zeros(n), np.zeros(m)
            x[r_idx], y[c_idx] = xs, ys
            return x, y, v, rounds, "+".join(sorted(backends))
        in_r[new_r] = True
        in_c[new_c] = True
        grew_fast = new_r.size + new_c.size > 0.25 * (r_idx.size + c_idx.size)
        if grew_fast and (2 * in_r.sum() > n or 2 * in_c.sum() > m):
            in_r[:] = True
            in_c[:] = True


def _solve(payoff, *, rows0=None, cols0=None, tol: float = 1e-9) -> NashSolution:
    a_raw = _as_matrix(payoff)
    a, shift, scale = _normalise(a_raw)
    n, m = a.shape
    tol_n = max(tol / scale, _GAIN_FLOOR)
    warm = rows0 is not None and cols0 is not None and len(rows0) > 0 and len(cols0) > 0
    try:
        if max(n, m) <= _SMALL_GAME:
            rows0, cols0 = np.arange(n), np.arange(m)
        elif not warm:
            rows0, cols0 = _initial_sets(a)
        x, y, v, it, backend = _double_oracle(a, np.asarray(rows0, int), np.asarray(cols0, int), tol_n)
        method = "lp-warm" if warm else "lp"
    except _LPFailure as exc:
        logger.warning("LP solver failed; falling back to regret matching (%s)", exc)
        x, y, it = _regret_matching(a, tol_n)
        v = float(x @ a @ y)
        method, backend = "regret-matching", "regret-matching"
    conv = float((a @ y).max() - (x @ a).min()) * scale
    return NashSolution(
        row=x, col=y, value=v * scale + shift, method=method, iterations=it, nash_conv=conv, backend=backend
    )


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
        rows0 = np.flatnonzero(p > _SUPPORT_CUT * p.max())
        # A symmetric game's column support is the row support.
        cols0 = rows0 if a.shape[0] == a.shape[1] else None
    sol = _solve(a, rows0=rows0, cols0=cols0, tol=tol)
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
        sol = _solve(a, rows0=rows0, cols0=cols0, tol=self.tol)
        # An interior-point answer may carry 1e-13 weights on strategies that
        # are not really in the support; seeding with them would only make the
        # next restricted game bigger (the double oracle re-adds any it needs).
        self._row_ids = [r_ids[i] for i in np.flatnonzero(sol.row > _SUPPORT_CUT * sol.row.max())]
        self._col_ids = [c_ids[j] for j in np.flatnonzero(sol.col > _SUPPORT_CUT * sol.col.max())]
        self.last = sol
        return sol
