"""Benchmark of the Nash solvers: ``python -m bench.nash``.

For pools of 50, 200, 500 and 1000 agents and two workloads -- a realistic
league (mostly transitive, logistic win rates, a small cyclic core at the top)
and a worst-case dense random antisymmetric game -- it times, in one process:

- ``cold``: ``compute_nash_distribution`` on the matrix;
- ``warm``: ``NashSolver.solve`` after a small update (3 agents appended and
  5 entries changed) of a matrix it has already solved;
- ``ref``: the textbook LP (``max v s.t. A^T x >= v, 1^T x = 1``) solved by
  ``scipy.optimize.linprog(method="highs-ipm")`` -- the reference baseline;
- ``openspiel``: OpenSpiel's ``lp_solver.solve_zero_sum_matrix_game`` (cvxpy
  + ECOS) where it is installed, up to 200 agents (it builds the LP entry by
  entry in Python, hopeless beyond).

and prints one JSON line at the end with the figures and their ratios.

BLAS threads: Ray runs actors (the coordinator solves there) with
``OMP_NUM_THREADS=1``, and on a busy machine with few cores multi-threaded
OpenBLAS thrashes, so this sets one thread unless
``OPENBLAS_NUM_THREADS`` is already set.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", os.environ["OPENBLAS_NUM_THREADS"])

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from scipy.optimize import linprog  # noqa: E402

from league.nash import NashSolver, compute_nash_distribution, meta_exploitability  # noqa: E402

SIZES = (50, 200, 500, 1000)
UPDATE_NEW_AGENTS = 3
UPDATE_CHANGED_ENTRIES = 5


def league_payoff(n: int, rng: np.random.Generator, top: int = 8) -> np.ndarray:
    """Win rates of a mostly transitive league with a small cyclic core at the top."""
    strength = np.sort(np.linspace(0.0, 8.0, n) + 0.3 * rng.standard_normal(n))
    d = strength[:, None] - strength[None, :]
    k = min(top, n)
    cyc = np.triu(rng.standard_normal((k, k)), 1)
    d[-k:, -k:] += 1.5 * (cyc - cyc.T)
    w = 1.0 / (1.0 + np.exp(-d))
    np.fill_diagonal(w, 0.5)
    return w


def random_payoff(n: int, rng: np.random.Generator) -> np.ndarray:
    """Dense random antisymmetric game: equilibrium support near N/2."""
    g = np.triu(rng.standard_normal((n, n)), 1)
    return g - g.T


def perturb(a: np.ndarray, rng: np.random.Generator, constant: float) -> np.ndarray:
    """A few results arrive: change some entries, keeping ``a + a.T`` constant."""
    b = a.copy()
    n = b.shape[0]
    for _ in range(UPDATE_CHANGED_ENTRIES):
        i, j = rng.choice(n, 2, replace=False)
        b[i, j] += 0.05 * rng.standard_normal()
        if constant:
            b[i, j] = np.clip(b[i, j], 0.0, 1.0)
        b[j, i] = constant - b[i, j]
    return b


def reference_lp(a: np.ndarray) -> np.ndarray:
    n, m = a.shape
    c = np.zeros(n + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-a.T, np.ones((m, 1))])
    a_eq = np.ones((1, n + 1))
    a_eq[0, -1] = 0.0
    res = linprog(
        c, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=[1.0],
        bounds=[(0, None)] * n + [(None, None)], method="highs-ipm",
    )
    return np.clip(res.x[:n], 0.0, None) / np.clip(res.x[:n], 0.0, None).sum()


def openspiel_solver():
    try:
        import ecos  # noqa: F401
        import pyspiel
        from open_spiel.python.algorithms import lp_solver
    except ImportError:
        return None

    def solve(a: np.ndarray) -> np.ndarray:
        game = pyspiel.create_matrix_game(a.tolist(), (-a).tolist())
        p0, _, _, _ = lp_solver.solve_zero_sum_matrix_game(game)
        p = np.clip(np.asarray(p0, dtype=float).ravel(), 0.0, None)
        return p / p.sum()

    return solve


def timed(fn, *args, repeat: int = 1):
    """Best wall time, the CPU time of that run, and the result.

    CPU time (one BLAS thread) is what the solve costs; wall time also counts
    waiting for a core, which on a shared machine with few cores can be most of it.
    """
    best, out = (math.inf, math.inf), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args)
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best, out


def run_case(kind: str, n: int, os_solve, rng: np.random.Generator) -> dict:
    constant = 1.0 if kind == "league" else 0.0
    make = league_payoff if kind == "league" else random_payoff
    full = make(n + UPDATE_NEW_AGENTS, rng)
    before, after_ids = full[:n, :n], list(range(n + UPDATE_NEW_AGENTS))
    after = perturb(full, rng, constant)
    heavy = kind == "random" and n >= 500
    rep = 1 if heavy else 3

    (cold_s, cold_cpu), p = timed(compute_nash_distribution, after, repeat=rep)

    warm_times, warm_expl = [], []
    for _ in range(1 if heavy else 3):
        solver = NashSolver()
        solver.solve(before, ids=list(range(n)))
        t, sol = timed(solver.solve, after, after_ids)
        warm_times.append(t)
        warm_expl.append(meta_exploitability(after, sol.row))
    warm_s, warm_cpu = sorted(warm_times)[len(warm_times) // 2]

    (ref_s, ref_cpu), p_ref = timed(reference_lp, after)
    row = {
        "cold_s": cold_s,
        "warm_s": warm_s,
        "ref_s": ref_s,
        "cold_cpu_s": cold_cpu,
        "warm_cpu_s": warm_cpu,
        "ref_cpu_s": ref_cpu,
        "ref_over_cold": ref_s / cold_s,
        "ref_over_warm": ref_s / warm_s,
        "exploitability": {
            "cold": meta_exploitability(after, p),
            "warm": max(warm_expl),
            "ref": meta_exploitability(after, p_ref),
        },
        "support": int((p > 1e-9).sum()),
        "warm_method": sol.method,
        "warm_backend": sol.backend,
        "warm_rounds": sol.iterations,
    }
    if os_solve is not None and n <= 200:
        (os_s, _), p_os = timed(os_solve, after)
        row["openspiel_s"] = os_s
        row["openspiel_over_cold"] = os_s / cold_s
        row["exploitability"]["openspiel"] = meta_exploitability(after, p_os)
    return row


def _ms(r: dict, key: str) -> str:
    return f"{1e3 * r[key + '_s']:8.1f} [{1e3 * r[key + '_cpu_s']:6.1f}]"


def main() -> None:
    rng = np.random.default_rng(20240601)
    os_solve = openspiel_solver()
    t_start = time.perf_counter()
    print(f"BLAS threads: OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    print("reference: scipy linprog(method='highs-ipm') on the textbook LP"
          + ("; OpenSpiel lp_solver (cvxpy+ECOS) up to 200 agents" if os_solve else "; OpenSpiel lp_solver unavailable"))
    print("times are wall ms (CPU ms in brackets); ratios are of wall times")
    header = (f"{'workload':8} {'N':>5} {'cold ms':>17} {'warm ms':>17} {'ref ms':>17} {'ref/cold':>9} "
              f"{'ref/warm':>9} {'OS ms':>9} {'support':>7} {'max expl':>9}")
    print(header)
    results: dict = {}
    for kind in ("league", "random"):
        results[kind] = {}
        for n in SIZES:
            r = run_case(kind, n, os_solve, rng)
            results[kind][str(n)] = r
            os_ms = f"{1e3 * r['openspiel_s']:9.1f}" if "openspiel_s" in r else f"{'-':>9}"
            print(
                f"{kind:8} {n:5d} {_ms(r, 'cold')} {_ms(r, 'warm')} {_ms(r, 'ref')} "
                f"{r['ref_over_cold']:9.1f} {r['ref_over_warm']:9.1f} {os_ms} {r['support']:7d} "
                f"{max(r['exploitability'].values()):9.1e}",
                flush=True,
            )
    summary = {
        "bench": "nash",
        "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "reference": "scipy-highs-ipm",
        "openspiel": os_solve is not None,
        "league_1000_warm_ms": 1e3 * results["league"]["1000"]["warm_s"],
        "league_1000_warm_cpu_ms": 1e3 * results["league"]["1000"]["warm_cpu_s"],
        "random_1000_cold_s": results["random"]["1000"]["cold_s"],
        "random_1000_cold_cpu_s": results["random"]["1000"]["cold_cpu_s"],
        "random_1000_warm_s": results["random"]["1000"]["warm_s"],
        "random_1000_ref_over_cold": results["random"]["1000"]["ref_over_cold"],
        "total_s": time.perf_counter() - t_start,
        "results": {
            k: {n: {f: (round(v, 6) if isinstance(v, float) else v) for f, v in row.items() if f != "exploitability"}
                | {"max_exploitability": max(row["exploitability"].values())}
                for n, row in rows.items()}
            for k, rows in results.items()
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
