"""LeagueCoordinator: the one long-lived actor that owns the league.

A thin Ray shell around ``league.league.League``: it adds concurrency (an
async actor whose Nash re-solve runs in a thread so requests keep flowing),
persistence (every change is committed to the SQLite store before the call
returns) and restarts (``max_restarts=-1``; ``__init__`` rebuilds the league
from the store). Bad input raises ``ValueError`` to the caller; it never takes
the actor down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import numpy as np
import ray

from league.config import Config
from league.league import League, NashState, Result, results_from_columns, solve_meta_game
from league.diversity import DiversityTracker, TrajectoryBatch
from league.store import LeagueStore
from monitoring.metrics import LeagueMetrics, result_label

log = logging.getLogger(__name__)


def timed(fn):
    """Record the latency of a coordinator method under its name."""
    name = fn.__name__

    async def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return await fn(self, *args, **kwargs)
        finally:
            self.metrics.observe("request_seconds", time.perf_counter() - start, method=name)

    wrapper.__name__ = name
    wrapper.__doc__ = fn.__doc__
    return wrapper


class LeagueCoordinatorImpl:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.store = LeagueStore(cfg.run.storage)
        game = self.store.get_meta("game")
        if game is None:
            self.store.set_meta("game", cfg.game.name)
            self.store.set_meta("game_params", cfg.game.params)
            self.store.set_meta("config", cfg.to_dict())
        elif game != cfg.game.name:
            raise ValueError(f"storage {cfg.run.storage} holds a {game} league, not {cfg.game.name}")
        self.league = League(cfg, self.store)
        if len(self.league.pool) == 0:
            self._seed_pool(cfg.league.seed_snapshots)
        self.store.add_event("coordinator_start", {"pool_size": len(self.league.pool)})
        self.started = time.time()
        self._solving = False
        self._stopped = False
        self._loop_task = None
        self.metrics = LeagueMetrics()
        self.diversity = DiversityTracker()
        self._weighted: set[str] = set()
        self._export_state()

    def _seed_pool(self, paths: list[str]) -> None:
        from policies.snapshot import policy_from_bytes  # validates the file before it enters the pool

        for i, path in enumerate(paths):
            with open(path, "rb") as f:
                blob = f.read()
            policy_from_bytes(blob)
            self.league.add_seed(f"seed-{i}", blob, {"path": str(path)})

    # -- background ----------------------------------------------------------
    async def _nash_loop(self) -> None:
        while not self._stopped:
            await asyncio.sleep(0.25)
            try:
                if not self._solving and self.league.nash_due(time.time()):
                    await self.solve_nash()
            except Exception:  # the loop must outlive any one bad solve
                log.exception("Nash re-solve failed")

    def _ensure_loop(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._nash_loop())

    async def solve_nash(self) -> dict[str, Any]:
        """Re-solve the Nash over the frozen pool now (off the event loop)."""
        self._solving = True
        try:
            ids, matrix = self.league.payoff_matrix()
            if not ids:
                return self._nash_dict(self.league.nash)
            state = await asyncio.get_running_loop().run_in_executor(
                None, solve_meta_game, self.league.solver, ids, matrix, self.league.pool_version)
            self.league.set_nash(state)
            self.metrics.observe("nash_solve_seconds", state.solve_seconds)
            self._export_state()
            return self._nash_dict(state)
        finally:
            self._solving = False

    # -- rollout workers -------------------------------------------------------
    @timed
    async def next_matches(self, learner_id: str, n: int) -> list[tuple[str, bool, str]]:
        self._ensure_loop()
        return [(m.opponent_id, m.live, m.branch) for m in self.league.next_matches(learner_id, n)]

    @timed
    async def report_results(self, source: str, seq: int, results: list[tuple[str, str, float]], env_steps: int,
                             action_counts: dict[str, list[float]] | None = None) -> bool:
        """Commit a batch of (a, b, score) results; True once stored (also when a retry).

        ``results`` is a list of (a, b, score) or the same as columns
        (``league.league.results_from_columns``). ``action_counts``: per learner,
        a histogram of its actions since the last batch (behaviour embedding for
        the diversity score)."""
        self._ensure_loop()
        if isinstance(results, dict):
            batch = results_from_columns(results)
        else:
            batch = []
            for item in results:
                a, b, score = item
                batch.append(Result(str(a), str(b), float(score)))
        fresh = self.league.report_results(str(source), int(seq), batch, int(env_steps))
        if fresh:
            self._count(batch, int(env_steps))
            for learner_id, counts in (action_counts or {}).items():
                if learner_id in self.league.learners and sum(counts) > 0:
                    actions = np.repeat(np.arange(len(counts)), np.asarray(counts, dtype=np.int64))
                    self.diversity.update(learner_id, TrajectoryBatch(actions=actions, num_actions=len(counts)))
        return True

    def _role(self, agent_id: str) -> str:
        st = self.league.learners.get(agent_id)
        return st.role.value if st is not None else "evaluator"

    def _count(self, batch: list[Result], env_steps: int) -> None:
        counts: dict[tuple[str, str], int] = {}
        for r in batch:
            key = (self._role(r.a), result_label(r.score))
            counts[key] = counts.get(key, 0) + 1
        for (role, result), n in counts.items():
            self.metrics.inc("games", n, role=role, result=result)
        if batch:
            self.metrics.inc("env_steps", env_steps, role=self._role(batch[0].a))

    def _export_state(self) -> None:
        """Gauges that describe the league now (after a Nash solve or a snapshot)."""
        m, league = self.metrics, self.league
        for role, n in league.pool.counts_by_type().items():
            m.set("pool_size", n, role=role)
        support = league.nash.support()
        m.set("nash_entropy", abs(league.nash.entropy))
        m.set("meta_exploitability", league.nash.meta_exploitability)
        m.set("nash_support", len(support))
        for agent in self._weighted - set(support):
            m.set("nash_weight", 0.0, agent=agent)
        for agent, w in support.items():
            m.set("nash_weight", w, agent=agent)
        self._weighted = set(support)
        for learner_id, st in league.learners.items():
            m.set("elo", league.elo.rating(learner_id), learner=learner_id, role=st.role.value)
            m.set("policy_version", st.version, learner=learner_id, role=st.role.value)
            rate = league.win_rate_vs_nash(learner_id)
            if rate is not None:
                m.set("win_rate_vs_nash", rate, learner=learner_id, role=st.role.value)
        if len(self.diversity.agent_ids) >= 2:
            m.set("diversity", self.diversity.diversity_score())

    @timed
    async def get_snapshot(self, agent_id: str) -> bytes:
        return self.store.snapshot_blob(agent_id)

    # -- learners ----------------------------------------------------------------
    @timed
    async def learner_progress(self, learner_id: str, version: int, step: int) -> dict[str, Any]:
        self._ensure_loop()
        return self.league.learner_progress(learner_id, version, step)

    @timed
    async def add_snapshot(self, learner_id: str, blob: bytes, step: int, metadata: dict | None = None) -> dict[str, Any]:
        record, reset = self.league.add_snapshot(learner_id, blob, step, metadata)
        self.metrics.inc("snapshots", role=record.agent_type.value)
        if reset:
            self.metrics.inc("resets", role=record.agent_type.value)
        self._export_state()
        reset_to = self.cfg.role(record.agent_type).reset_to if reset else None
        return {"agent_id": record.agent_id, "reset": reset, "reset_to": reset_to}

    @timed
    async def save_checkpoint(self, learner_id: str, version: int, step: int, state: bytes) -> bool:
        self.league.save_checkpoint(learner_id, version, step, state)
        return True

    async def load_checkpoint(self, learner_id: str) -> dict[str, Any] | None:
        return self.league.load_checkpoint(learner_id)

    # -- evaluators -----------------------------------------------------------
    @timed
    async def evaluation_pairs(self, n: int, unmeasured_only: bool = False) -> list[tuple[str, str]]:
        return self.league.evaluation_pairs(int(n), bool(unmeasured_only))

    @timed
    async def record_exact(self, pairs: list[tuple[str, str, float]]) -> int:
        """Exactly computed payoffs of frozen pairs; stored before the reply. Returns how many were kept."""
        return self.league.record_exact_many([(str(a), str(b), float(s)) for a, b, s in pairs])

    async def record_measurement(self, kind: str, value: float, data: dict | None = None) -> bool:
        """A measurement over time (e.g. the exact NashConv of the Nash mixture)."""
        self.store.add_measurement(str(kind), float(value), data or {})
        return True

    # -- reading -------------------------------------------------------------------
    @timed
    async def status(self) -> dict[str, Any]:
        self._ensure_loop()
        s = self.league.status()
        s["uptime_s"] = time.time() - self.started
        s["game"] = self.cfg.game.name
        s["diversity_score"] = self.diversity.diversity_score() if len(self.diversity.agent_ids) >= 2 else None
        return s

    async def nash(self) -> dict[str, Any]:
        return self._nash_dict(self.league.nash)

    def _nash_dict(self, n: NashState) -> dict[str, Any]:
        support = n.support()
        return {
            "agents": [{"agent_id": a, "weight": w, "role": self.league.pool.get(a).agent_type.value
                        if a in self.league.pool else None, "elo": self.league.elo.rating(a)}
                       for a, w in support.items()],
            "entropy": n.entropy, "meta_exploitability": n.meta_exploitability, "pool_version": n.pool_version,
            "solved_at": n.solved_at, "solve_seconds": n.solve_seconds, "method": n.method,
        }

    async def pool(self) -> list[dict[str, Any]]:
        return [{**r.to_dict(), "elo": self.league.elo.rating(r.agent_id)} for r in self.league.pool.list()]

    async def payoff(self) -> dict[str, Any]:
        ids, matrix = self.league.payoff_matrix()
        return {"ids": ids, "win_rates": matrix.tolist(),
                "games": self.league.payoff.games_matrix(ids).tolist() if ids else []}

    async def flush(self) -> dict[str, Any]:
        """Final Nash solve; everything else is already committed."""
        if len(self.league.pool):
            await self.solve_nash()
        return await self.status()

    async def ping(self) -> bool:
        return True


# Restarts rebuild from the store; retried calls are safe because result
# batches are idempotent per (source, seq).
LeagueCoordinator = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(LeagueCoordinatorImpl)
