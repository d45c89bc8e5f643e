"""The league's published mixture: the meta-game Nash over the frozen pool, or the evaluator's.

Three states: ``meta_nash``, the latest solve of the meta-game (the zero-sum game of measured
win rates - 1/2 between pool agents; Lanctot et al. 2017, PSRO); ``published``, the exact
evaluator's least exploitable mixture when ``evaluator.publish`` asks for it; and ``nash``, the
one that is published (what ``GET /nash``, Nash sampling and measurements use): ``published``
when there is one, else ``meta_nash``. No agent with weight in ``nash`` or ``meta_nash`` is
evicted from the pool.
"""

from __future__ import annotations

import functools
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from league.elo import EloTable
from league.messages import NashMixture
from league.nash import NashSolver, meta_exploitability, nash_entropy
from league.payoff import PayoffTable
from league.pool import AgentPool
from league.store import LeagueStore


def solve_meta_game(solver: NashSolver, ids: list[str], matrix: np.ndarray, pool_version: int) -> NashMixture:
    """The Nash of the win-rate matrix ``matrix`` over ``ids`` (as a zero-sum game,
    win rate - 1/2). Touches only ``solver`` and its arguments, so the coordinator
    can run it in a worker thread on a copy of the matrix."""
    start = time.perf_counter()
    solution = solver.solve(matrix - 0.5, ids=ids)
    seconds = time.perf_counter() - start
    weights = np.clip(solution.row, 0.0, None)
    weights = weights / weights.sum()
    return NashMixture(
        ids=ids, weights=weights, entropy=nash_entropy(weights),
        meta_exploitability=float(meta_exploitability(matrix - 0.5, weights)), solved_at=time.time(),
        pool_version=pool_version, solve_seconds=seconds, method=solution.method,
    )


def lp_candidates(pool: Sequence[str], published: Sequence[str], limit: int) -> list[str]:
    """The snapshots the least exploitable mixture is re-solved over, at most ``limit``: the
    published members still in the pool, then the newest of the other snapshots (``pool`` is
    oldest first). The published mixture stays a feasible point of the LP, so the exact NashConv
    it publishes never rises from one solve to the next while the LP's size, its time and its
    memory stay bounded however large the pool grows."""
    kept = set(pool)
    members = [a for a in dict.fromkeys(published) if a in kept][:limit]
    chosen = set(members)
    newest = [a for a in reversed(pool) if a not in chosen][:limit - len(members)]
    order = {a: i for i, a in enumerate(pool)}
    return sorted(members + newest, key=order.__getitem__)


class Publication:
    """The meta-game Nash, the published mixture and their protection from eviction.

    ``learner_roles``: learner id -> role name, for the Elo history written with each publication.
    ``publish``: ``evaluator.publish`` (``least_exploitable``: the evaluator's mixture, once it
    sent one, is published in place of the meta-game Nash)."""

    def __init__(self, pool: AgentPool, payoff: PayoffTable, elo: EloTable, learner_roles: Mapping[str, str],
                 publish: str = "nash", store: LeagueStore | None = None):
        self.pool, self.payoff, self.elo, self.learner_roles = pool, payoff, elo, learner_roles
        self.publish, self.store = publish, store
        self.solver = NashSolver()
        self.nash = NashMixture()
        self.meta_nash = self.nash
        self.published: NashMixture | None = None
        self.results_at_solve = 0  # the intake's frozen results when meta_nash was adopted

    def restore(self, store: LeagueStore) -> None:
        """The last published mixture, protected again."""
        latest = store.latest_nash()
        if latest is None:
            return
        self.nash = NashMixture(**{k: latest[k] for k in ("ids", "weights", "entropy", "meta_exploitability",
                                                       "solved_at", "pool_version", "solve_seconds", "method")})
        self.meta_nash = self.nash
        if self.nash.method == "least_exploitable" and self.publish == "least_exploitable":
            self.published = self.nash  # a meta-game solve does not replace it before the next publication
        self.pool.protect(self.nash.support())

    # -- the meta-game -----------------------------------------------------------
    def due(self, now: float, pool_version: int, frozen_results: int, every_results: int,
            every_seconds: float) -> bool:
        """A re-solve is due: the pool changed, or ``every_results`` frozen results came since the
        last one, or any did and ``every_seconds`` passed."""
        if len(self.pool) == 0:
            return False
        if self.meta_nash.pool_version != pool_version:
            return True
        since = frozen_results - self.results_at_solve
        return since >= every_results or (since > 0 and now - self.meta_nash.solved_at >= every_seconds)

    def measured_ids(self) -> list[str]:
        """The pool agents the meta-game rests on, oldest first: every pair among them has been
        measured. An unmeasured pair would sit at the prior 0.5, and a fresh snapshot at 0.5
        against everyone would look unbeatable to the Nash: the meta-game rests on measured numbers.

        Agents are taken greedily in :meth:`evaluation_order` (the last solve's Nash members,
        heaviest first, then the rest newest first), each kept only if measured against every
        agent kept before it. So a new snapshot enters as soon as it has been measured against the
        Nash's members (the evaluator measures those pairs first), as in PSRO, where each new
        policy joins the restricted game once its payoffs against the population are known
        (Lanctot et al. 2017). Older agents it has not met yet wait outside until measured."""
        ids = self.pool.ids()
        if not ids:
            return []
        measured = self.payoff.games_matrix(ids) > 0
        keep: list[int] = []
        fits = np.ones(len(ids), dtype=bool)  # measured against every agent kept so far
        for i in self.evaluation_order(ids):
            if fits[i]:
                keep.append(i)
                fits &= measured[:, i]
        return [ids[i] for i in sorted(keep)]

    def evaluation_order(self, ids: Sequence[str]) -> list[int]:
        """Indices into ``ids`` (pool order, oldest first): the meta-game Nash's members, heaviest
        first, then every other agent newest first. Before the first solve (no members yet, or
        none left in ``ids``), oldest first: a fresh pool is measured as it grew."""
        support = self.meta_nash.support()
        members = sorted((i for i, a in enumerate(ids) if a in support), key=lambda i: -support[ids[i]])
        if not members:
            return list(range(len(ids)))
        chosen = set(members)
        return members + [i for i in reversed(range(len(ids))) if i not in chosen]

    def payoff_matrix(self) -> tuple[list[str], np.ndarray]:
        ids = self.measured_ids()
        return ids, self.payoff.matrix(ids) if ids else np.zeros((0, 0))

    def job(self, pool_version: int) -> Callable[[], NashMixture] | None:
        """A re-solve of the meta-game as it is now, to run in another thread (it touches only
        copies); None while nothing is measured. Adopt its result with :meth:`adopt`."""
        ids, matrix = self.payoff_matrix()
        if not ids:
            return None
        return functools.partial(solve_meta_game, self.solver, ids, matrix.copy(), pool_version)

    def solve(self, pool_version: int, frozen_results: int) -> NashMixture:
        """Solve the meta-game over the frozen pool now and adopt it."""
        ids, matrix = self.payoff_matrix()
        if not ids:
            return self.nash
        state = solve_meta_game(self.solver, ids, matrix, pool_version)
        self.adopt(state, frozen_results)
        return state

    def adopt(self, state: NashMixture, frozen_results: int) -> None:
        """Adopt a meta-game solve (solved here or in a worker thread; ``frozen_results``: the
        intake's count now): it is published, and persisted, unless the evaluator's least
        exploitable mixture is."""
        self.meta_nash = state
        self.results_at_solve = int(frozen_results)
        if self.published is None:
            self._publish(state)
        else:
            self._protect()

    def publish_least_exploitable(self, ids: Sequence[str], weights: Sequence[float], pool_version: int,
                                  solve_seconds: float = 0.0) -> NashMixture:
        """Publish the exact evaluator's least exploitable mixture of measured snapshots
        (``evaluator.publish: least_exploitable``) in place of the meta-game Nash. Members evicted
        since are dropped and the rest renormalised; its meta-exploitability is measured on the
        meta-game like the Nash's (it may be above 0: the mixture is chosen against every policy
        of the game, not only against the pool's members)."""
        ids, w = list(ids), np.asarray(weights, dtype=np.float64)
        if len(ids) != len(w) or not len(ids) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"a published mixture needs one finite weight >= 0 per agent, got {len(ids)} ids "
                             f"and weights {w.tolist()[:8]}")
        keep = np.array([a in self.pool for a in ids])
        if not (w[keep] > 0).any():
            raise ValueError(f"no member of the published mixture is in the pool (ids {ids[:5]})")
        ids, w = [a for a, k in zip(ids, keep) if k], w[keep] / w[keep].sum()
        matrix = self.payoff.matrix(ids)
        state = NashMixture(ids=ids, weights=w, entropy=nash_entropy(w),
                          meta_exploitability=float(meta_exploitability(matrix - 0.5, w)), solved_at=time.time(),
                          pool_version=int(pool_version), solve_seconds=float(solve_seconds),
                          method="least_exploitable")
        self.published = state
        self._publish(state)
        return state

    def lp_candidates(self, limit: int) -> list[str]:
        """The snapshots the exact evaluator re-solves the least exploitable mixture over
        (:func:`lp_candidates`). From the whole pool, not only the agents the meta-game rests on
        (``measured_ids``): the LP works on each snapshot's exact profiles, not on measured payoffs,
        and an old published member that the newest snapshots have not been measured against yet
        falls out of ``measured_ids`` for a while; dropping it from the LP let the published NashConv
        rise (Leduc, 0.090 to 0.111 in one solve, 45 minutes into an hour's soak)."""
        members = [a for a, w in zip(self.nash.ids, self.nash.weights) if w > 0]
        return lp_candidates(self.pool.ids(), members, limit)

    def _protect(self) -> None:
        """No agent with weight in the published mixture or the meta-game Nash is evicted."""
        self.pool.protect({**self.meta_nash.support(), **self.nash.support()})

    def _publish(self, state: NashMixture) -> None:
        self.nash = state
        self._protect()
        if self.store is not None:
            self.store.save_nash(state.solved_at, state.pool_version, state.ids, state.weights, state.entropy,
                                 state.meta_exploitability, state.solve_seconds, state.method)
            self.store.append_elo_history(state.solved_at, [(a, role, self.elo.rating(a))
                                                           for a, role in self.learner_roles.items()])
