"""Tests for league.nash against closed-form equilibria and reference solvers."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import scipy.optimize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from league import nash
from league.nash import (
    NashSolution,
    NashSolver,
    build_payoff_matrix,
    compute_nash_distribution,
    meta_exploitability,
    nash_conv,
    nash_entropy,
    solve_zero_sum,
)

TOL = 1e-6
RPS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
BIASED_RPS = np.array([[0.0, -1.0, 2.0], [1.0, 0.0, -1.0], [-2.0, 1.0, 0.0]])
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_antisymmetric(n: int, seed: int, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "integer":
        # Small integer payoffs: highly degenerate games (ties, many equilibria).
        g = rng.integers(-2, 3, size=(n, n)).astype(float)
    else:
        g = rng.standard_normal((n, n))
    return np.triu(g, 1) - np.triu(g, 1).T


def league_win_rates(n: int, seed: int, top: int = 6) -> np.ndarray:
    """Mostly transitive pool (logistic in strength) with a cyclic top."""
    rng = np.random.default_rng(seed)
    strength = np.sort(np.linspace(0.0, 6.0, n) + 0.3 * rng.standard_normal(n))
    d = strength[:, None] - strength[None, :]
    k = min(top, n)
    cyc = np.triu(rng.standard_normal((k, k)), 1)
    d[-k:, -k:] += 2.0 * (cyc - cyc.T)
    w = 1.0 / (1.0 + np.exp(-d))
    np.fill_diagonal(w, 0.5)
    return w


# ---------------------------------------------------------------- known games


def test_rock_paper_scissors_equilibrium_is_uniform():
    sol = solve_zero_sum(RPS)
    np.testing.assert_allclose(sol.row, [1 / 3] * 3, atol=TOL)
    np.testing.assert_allclose(sol.col, [1 / 3] * 3, atol=TOL)
    assert sol.value == pytest.approx(0.0, abs=TOL)
    np.testing.assert_allclose(compute_nash_distribution(RPS), [1 / 3] * 3, atol=TOL)


def test_biased_rock_paper_scissors_equilibrium_is_quarter_half_quarter():
    np.testing.assert_allclose(compute_nash_distribution(BIASED_RPS), [0.25, 0.5, 0.25], atol=TOL)
    sol = solve_zero_sum(BIASED_RPS)
    np.testing.assert_allclose(sol.col, [0.25, 0.5, 0.25], atol=TOL)
    assert sol.value == pytest.approx(0.0, abs=TOL)


def test_nonsymmetric_2x2_game_has_closed_form_equilibrium():
    sol = solve_zero_sum([[3.0, -1.0], [-2.0, 1.0]])
    assert isinstance(sol, NashSolution)
    np.testing.assert_allclose(sol.row, [3 / 7, 4 / 7], atol=TOL)
    np.testing.assert_allclose(sol.col, [2 / 7, 5 / 7], atol=TOL)
    assert sol.value == pytest.approx(1 / 7, abs=TOL)
    assert sol.method == "lp"


def test_rectangular_game_value_and_strategies():
    # Row 2 is dominated, then column 2; the core is matching pennies scaled by 2.
    a = np.array([[2.0, -2.0, 5.0, 4.0], [-2.0, 2.0, 5.0, 4.0], [-3.0, -3.0, -3.0, -3.0]])
    sol = solve_zero_sum(a)
    assert sol.value == pytest.approx(0.0, abs=TOL)
    np.testing.assert_allclose(sol.row, [0.5, 0.5, 0.0], atol=TOL)
    np.testing.assert_allclose(sol.col, [0.5, 0.5, 0.0, 0.0], atol=TOL)


def test_win_rate_rps_gives_uniform_and_value_one_half():
    w = 0.5 + 0.5 * RPS
    sol = solve_zero_sum(w)
    np.testing.assert_allclose(sol.row, [1 / 3] * 3, atol=TOL)
    assert sol.value == pytest.approx(0.5, abs=TOL)


def test_one_by_one_and_constant_games():
    sol = solve_zero_sum([[0.7]])
    assert sol.row.tolist() == [1.0] and sol.value == pytest.approx(0.7)
    const = np.full((4, 6), 0.5)
    sol = solve_zero_sum(const)
    assert sol.value == pytest.approx(0.5, abs=TOL)
    assert nash_conv(const, sol.row, sol.col) == pytest.approx(0.0, abs=TOL)


def test_transitive_league_puts_all_weight_on_the_strongest_agent():
    s = np.arange(50, dtype=float)
    w = 1.0 / (1.0 + np.exp(-(s[:, None] - s[None, :])))
    np.fill_diagonal(w, 0.5)
    p = compute_nash_distribution(w)
    assert p[-1] == pytest.approx(1.0, abs=TOL)
    assert nash_entropy(p) == pytest.approx(0.0, abs=TOL)


def test_duplicated_agents_still_give_an_equilibrium():
    # Snapshots that play identically make the LP degenerate (the seed docs'
    # "uniform fallback" case); the solver must still return an exact Nash.
    base = 0.5 + 0.5 * BIASED_RPS / 2
    idx = [0, 0, 1, 1, 1, 2]
    w = base[np.ix_(idx, idx)]
    p = compute_nash_distribution(w)
    assert meta_exploitability(w, p) < TOL
    np.testing.assert_allclose([p[:2].sum(), p[2:5].sum(), p[5]], [0.25, 0.5, 0.25], atol=TOL)


# ---------------------------------------------------------------- measures


def test_nash_entropy_closed_forms():
    for n in (1, 2, 7, 300):
        assert nash_entropy(np.full(n, 1.0 / n)) == pytest.approx(math.log(n), abs=1e-12)
    assert nash_entropy([0.0, 1.0, 0.0]) == 0.0
    assert nash_entropy([0.5, 0.5, 0.0]) == pytest.approx(math.log(2))


def test_meta_exploitability_closed_forms():
    # Uniform vs biased RPS: A p = (1/3, 0, -1/3), p^T A p = 0.
    assert meta_exploitability(BIASED_RPS, np.full(3, 1 / 3)) == pytest.approx(1 / 3)
    assert meta_exploitability(BIASED_RPS, [0.25, 0.5, 0.25]) == pytest.approx(0.0, abs=1e-12)
    # Pure rock in RPS: paper gains 1.
    assert meta_exploitability(RPS, [1.0, 0.0, 0.0]) == pytest.approx(1.0)
    # The constant shift of win rates cancels.
    assert meta_exploitability(0.5 + 0.5 * RPS, [1.0, 0.0, 0.0]) == pytest.approx(0.5)


def test_nash_conv_closed_form():
    a = [[3.0, -1.0], [-2.0, 1.0]]
    assert nash_conv(a, [3 / 7, 4 / 7], [2 / 7, 5 / 7]) == pytest.approx(0.0, abs=1e-12)
    # Row pure 0 vs column pure 0: row's best is 3 (no gain), column's best reply to row 0 is -1.
    assert nash_conv(a, [1.0, 0.0], [1.0, 0.0]) == pytest.approx(3.0 - (-1.0))


def test_build_payoff_matrix_fills_entries_and_diagonal():
    rates = {("a", "b"): 0.7, ("b", "a"): 0.3, ("a", "c"): 0.6, ("c", "a"): 0.4, ("b", "c"): 0.55, ("c", "b"): 0.45}
    calls = []

    def win_rate(x, y):
        calls.append((x, y))
        return rates[(x, y)]

    w = build_payoff_matrix(["a", "b", "c"], win_rate)
    np.testing.assert_allclose(w, [[0.5, 0.7, 0.6], [0.3, 0.5, 0.55], [0.4, 0.45, 0.5]])
    assert all(x != y for x, y in calls)
    assert build_payoff_matrix(["a", "b"], lambda x, y: np.float32(0.25)).dtype == np.float64


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "payoff, match",
    [
        ([[0.0, np.nan], [0.0, 0.0]], r"non-finite.*\[0, 1\]"),
        ([[0.0, np.inf], [-np.inf, 0.0]], "non-finite"),
        ([1.0, 2.0], "2-D"),
        (np.zeros((2, 2, 2)), "2-D"),
        (np.zeros((0, 3)), "empty"),
        ([["x", "y"]], "numbers"),
    ],
)
def test_bad_payoff_raises_value_error(payoff, match):
    with pytest.raises(ValueError, match=match):
        solve_zero_sum(payoff)
    with pytest.raises(ValueError, match=match):
        compute_nash_distribution(payoff)


def test_square_required_where_it_must_be():
    with pytest.raises(ValueError, match="square"):
        meta_exploitability(np.zeros((2, 3)), [0.5, 0.5])


@pytest.mark.parametrize(
    "probs, match",
    [([0.5, 0.6, 0.0], "sum to 1"), ([1.5, -0.5, 0.0], "negative"), ([0.5, 0.5], "2 entries"), ([np.nan, 1, 0], "NaN")],
)
def test_bad_mixture_raises_value_error(probs, match):
    with pytest.raises(ValueError, match=match):
        meta_exploitability(RPS, probs)


def test_nash_entropy_rejects_non_distributions():
    with pytest.raises(ValueError, match="sum to 1"):
        nash_entropy([0.2, 0.2])
    with pytest.raises(ValueError, match="empty"):
        nash_entropy([])


def test_build_payoff_matrix_rejects_bad_win_rates_naming_the_pair():
    with pytest.raises(ValueError, match=r"win_rate_fn\('a', 'b'\).*nan"):
        build_payoff_matrix(["a", "b"], lambda x, y: float("nan"))
    with pytest.raises(ValueError, match=r"win_rate_fn\('b', 'a'\).*\[0, 1\]"):
        build_payoff_matrix(["a", "b"], lambda x, y: 0.5 if x == "a" else 1.5)
    with pytest.raises(ValueError, match="not a number"):
        build_payoff_matrix(["a", "b"], lambda x, y: None)
    with pytest.raises(ValueError, match="empty"):
        build_payoff_matrix([], lambda x, y: 0.5)
    with pytest.raises(ValueError, match="duplicates"):
        build_payoff_matrix(["a", "a"], lambda x, y: 0.5)


def test_solver_rejects_ids_of_wrong_length():
    with pytest.raises(ValueError, match="ids"):
        NashSolver().solve(RPS, ids=["a", "b"])


# ---------------------------------------------------------------- fallback


def test_lp_failure_falls_back_to_regret_matching(monkeypatch, caplog):
    class Failed:
        status, message, x = 4, "numerical difficulties", None

    monkeypatch.setattr(scipy.optimize, "linprog", lambda *a, **k: Failed())  # what league.nash calls
    with caplog.at_level(logging.WARNING, logger="league.nash"):
        sol = solve_zero_sum(BIASED_RPS)
    assert "LP solver failed; falling back to regret matching" in caplog.text
    assert sol.method == "regret-matching"
    np.testing.assert_allclose(sol.row, [0.25, 0.5, 0.25], atol=1e-3)
    assert nash_conv(BIASED_RPS, sol.row, sol.col) < 1e-3


# ---------------------------------------------------------------- properties


@SLOW
@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["normal", "integer"]))
def test_random_symmetric_games_give_zero_meta_exploitability(n, seed, kind):
    a = random_antisymmetric(n, seed, kind)
    p = compute_nash_distribution(a)
    assert p.shape == (n,) and (p >= 0).all() and p.sum() == pytest.approx(1.0, abs=1e-12)
    assert meta_exploitability(a, p) < TOL


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), m=st.integers(1, 60), seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_random_zero_sum_games_give_zero_nash_conv(n, m, seed, scale):
    a = scale * np.random.default_rng(seed).uniform(-1, 1, (n, m))
    sol = solve_zero_sum(a)
    assert nash_conv(a, sol.row, sol.col) < TOL * scale
    assert sol.value == pytest.approx(sol.row @ a @ sol.col, abs=TOL * scale)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_large_rectangular_games_through_the_interior_point(seed):
    a = np.random.default_rng(seed).standard_normal((220, 150))
    sol = solve_zero_sum(a)
    assert nash_conv(a, sol.row, sol.col) < TOL


@SLOW
@given(n=st.integers(2, 120), seed=st.integers(0, 2**32 - 1))
def test_win_rates_and_their_antisymmetric_shift_have_the_same_nash(n, seed):
    d = random_antisymmetric(n, seed)
    w = 1.0 / (1.0 + np.exp(-d))  # W + W^T = 1
    p_w = compute_nash_distribution(w)
    p_a = compute_nash_distribution(w - 0.5)
    assert solve_zero_sum(w).value == pytest.approx(0.5, abs=TOL)
    assert meta_exploitability(w, p_w) < TOL
    # A generic symmetric game has a unique equilibrium, so the mixtures agree.
    np.testing.assert_allclose(p_w, p_a, atol=1e-6)


@SLOW
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["league", "random"]))
def test_warm_solver_matches_cold_solves_over_a_changing_league(seed, kind):
    rng = np.random.default_rng(seed)
    n0 = int(rng.integers(20, 140))
    base = league_win_rates(n0 + 12, seed) if kind == "league" else 0.5 + 0.5 * np.tanh(random_antisymmetric(n0 + 12, seed))
    ids = [f"agent{i}" for i in range(n0 + 12)]
    solver = NashSolver()
    alive, next_new = list(range(n0)), n0
    support: tuple[set, set] = (set(), set())  # the previous solve's row and column support, by id
    for step in range(6):
        if step in (1, 3):  # agents join
            alive += list(range(next_new, next_new + 6))
            next_new += 6
        elif step == 2:  # a few results change a payoff entry
            i, j = rng.choice(alive, 2, replace=False)
            delta = float(rng.uniform(-0.2, 0.2))
            base[i, j] = np.clip(base[i, j] + delta, 0, 1)
            base[j, i] = 1.0 - base[i, j]
        elif step == 4:  # an agent leaves and the order is shuffled
            alive.remove(int(rng.choice(alive)))
            rng.shuffle(alive)
        names = [ids[k] for k in alive]
        w = base[np.ix_(alive, alive)]
        warm = solver.solve(w, ids=names)
        cold = solve_zero_sum(w)
        assert warm.value == pytest.approx(cold.value, abs=TOL)
        assert nash_conv(w, warm.row, warm.col) < TOL
        assert meta_exploitability(w, warm.row) < TOL
        # warm whenever part of the previous support is still there (an agent that left may
        # have been the whole support of one side)
        if step > 0 and support[0] & set(names) and support[1] & set(names):
            assert warm.method == "lp-warm"
        support = ({names[i] for i in np.flatnonzero(warm.row > 1e-6 * warm.row.max())},
                   {names[j] for j in np.flatnonzero(warm.col > 1e-6 * warm.col.max())})


def test_warm_start_argument_gives_the_exact_answer():
    w = league_win_rates(200, 3)
    p = compute_nash_distribution(w)
    w2 = w.copy()
    w2[-1, -2], w2[-2, -1] = 0.2, 0.8
    q = compute_nash_distribution(w2, warm_start=p)
    assert meta_exploitability(w2, q) < TOL
    np.testing.assert_allclose(q, compute_nash_distribution(w2), atol=TOL)


def test_tutorial_flow_from_the_seed_docs():
    rates = {("a", "b"): 0.7, ("a", "c"): 0.6, ("b", "c"): 0.55}

    def win_rate(x, y):
        return rates[(x, y)] if (x, y) in rates else 1.0 - rates[(y, x)]

    ids = ["a", "b", "c"]
    probs = compute_nash_distribution(build_payoff_matrix(ids, win_rate))
    assert abs(probs.sum() - 1.0) < 1e-6
    # "a" beats everyone: a pure Nash on it.
    assert dict(zip(ids, probs.tolist()))["a"] == pytest.approx(1.0, abs=TOL)
    assert nash_entropy(probs) == pytest.approx(0.0, abs=TOL)


# ---------------------------------------------------------------- references


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 6), m=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
def test_value_agrees_with_nashpy(n, m, seed):
    nashpy = pytest.importorskip("nashpy")
    a = np.random.default_rng(seed).uniform(-1, 1, (n, m))
    x, y = nashpy.Game(a).linear_program()
    sol = solve_zero_sum(a)
    assert sol.value == pytest.approx(float(x @ a @ y), abs=TOL)
    # A generic game has a unique equilibrium, so the mixtures agree too.
    np.testing.assert_allclose(sol.row, x, atol=TOL)
    np.testing.assert_allclose(sol.col, y, atol=TOL)


@pytest.mark.parametrize("payoff", [RPS, BIASED_RPS, np.array([[3.0, -1.0], [-2.0, 1.0]]), "random"])
def test_value_agrees_with_openspiel_lp_solver(payoff):
    pytest.importorskip("cvxpy", reason="OpenSpiel's lp_solver needs cvxpy")
    pytest.importorskip("ecos", reason="OpenSpiel's lp_solver needs the ECOS solver")
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python.algorithms import lp_solver

    a = np.random.default_rng(0).uniform(-1, 1, (7, 5)) if isinstance(payoff, str) else payoff
    game = pyspiel.create_matrix_game(a.tolist(), (-a).tolist())
    _, _, v0, _ = lp_solver.solve_zero_sum_matrix_game(game)
    assert solve_zero_sum(a).value == pytest.approx(float(v0), abs=1e-5)


# ---------------------------------------------------------------- imports

def test_a_process_that_never_solves_loads_no_scipy_solver():
    """Actor processes import the league's modules (a rollout worker reads ``league.league``); only
    a solve loads scipy's LP and linear algebra, and ``league``'s names still import from it."""
    import subprocess
    import sys

    code = ("import sys\nimport league.league, league.config\n"
            "print(sorted(m for m in ('scipy.optimize', 'scipy.linalg') if m in sys.modules))\n"
            "from league import NashSolver, compute_nash_distribution\n"
            "import numpy as np\ncompute_nash_distribution(np.array([[0.0, 1.0], [-1.0, 0.0]]))\n"
            "print(sorted(m for m in ('scipy.optimize', 'scipy.linalg') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "['scipy.linalg', 'scipy.optimize']"], out.stdout
    import league

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        league.Nope  # noqa: B018
