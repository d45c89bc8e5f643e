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
from league.league import League, NashState, Result
from league.nash import meta_exploitability, nash_entropy
from league.store import LeagueStore

log = logging.getLogger(__name__)


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
            pool_version = self.league.pool_version
            start = time.perf_counter()
            solution = await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.league.solver.solve(matrix - 0.5, ids=ids))
            seconds = time.perf_counter() - start
            w = np.clip(solution.row, 0.0, None)
            w = w / w.sum()
            state = NashState(ids=ids, weights=w.tolist(), entropy=nash_entropy(w),
                              meta_exploitability=float(meta_exploitability(matrix - 0.5, w)), solved_at=time.time(),
                              pool_version=pool_version, solve_seconds=seconds, method=solution.method)
            self.league.set_nash(state)
            return self._nash_dict(state)
        finally:
            self._solving = False

    # -- rollout workers -------------------------------------------------------
    async def next_matches(self, learner_id: str, n: int) -> list[tuple[str, bool, str]]:
        self._ensure_loop()
        return [(m.opponent_id, m.live, m.branch) for m in self.league.next_matches(learner_id, n)]

    async def report_results(self, source: str, seq: int, results: list[tuple[str, str, float]], env_steps: int) -> bool:
        """Commit a batch of (a, b, score) results; True once stored (also when a retry)."""
        self._ensure_loop()
        batch = []
        for item in results:
            a, b, score = item
            batch.append(Result(str(a), str(b), float(score)))
        self.league.report_results(str(source), int(seq), batch, int(env_steps))
        return True

    async def get_snapshot(self, agent_id: str) -> bytes:
        return self.store.snapshot_blob(agent_id)

    # -- learners ----------------------------------------------------------------
    async def learner_progress(self, learner_id: str, version: int, step: int) -> dict[str, Any]:
        self._ensure_loop()
        return self.league.learner_progress(learner_id, version, step)

    async def add_snapshot(self, learner_id: str, blob: bytes, step: int, metadata: dict | None = None) -> dict[str, Any]:
        record, reset = self.league.add_snapshot(learner_id, blob, step, metadata)
        reset_to = self.cfg.role(record.agent_type).reset_to if reset else None
        return {"agent_id": record.agent_id, "reset": reset, "reset_to": reset_to}

    async def save_checkpoint(self, learner_id: str, version: int, step: int, state: bytes) -> bool:
        self.league.save_checkpoint(learner_id, version, step, state)
        return True

    async def load_checkpoint(self, learner_id: str) -> dict[str, Any] | None:
        return self.league.load_checkpoint(learner_id)

    # -- evaluators -----------------------------------------------------------
    async def evaluation_pairs(self, n: int) -> list[tuple[str, str]]:
        return self.league.evaluation_pairs(n)

    async def record_exact(self, pairs: list[tuple[str, str, float]]) -> bool:
        for a, b, score in pairs:
            self.league.record_exact(a, b, float(score))
        return True

    # -- reading -------------------------------------------------------------------
    async def status(self) -> dict[str, Any]:
        self._ensure_loop()
        s = self.league.status()
        s["uptime_s"] = time.time() - self.started
        s["game"] = self.cfg.game.name
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
