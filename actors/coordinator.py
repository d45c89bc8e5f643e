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
import errno
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import ray

from actors import heap
from league import retention
from league.backup import state_digest
from league.config import Config
from league.imports import import_folders
from league.league import League
from league.matchmaking import MatchPlan
from league.measures import (ANCHORS, ELO, META_NASH_CONV, NASH_CONV, PROBE_QUALITY, QUALITY, SUBJECTS,
                             anchor_elo_kind, anchor_score_kind)
from league.messages import (Checkpoint, ExactScores, MatchAssignments, NashMixture, ProgressDecision, ResultBatch,
                             SnapshotReply)
from league.store import LeagueStore
from monitoring.metrics import HELD, LeagueMetrics

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


# rows (pairs) of result batches applied and committed as one group at most (a batch is never split)
GROUP_ROWS = 8192

# while the store's disk is full: how often a tiny write checks whether space came back
SPACE_PROBE_SECONDS = 2.0


def disk_full(exc: BaseException) -> bool:
    """SQLite's "database or disk is full" (SQLITE_FULL), or ENOSPC / EDQUOT from the file system."""
    if isinstance(exc, sqlite3.OperationalError):
        return "full" in str(exc).lower()
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class LeagueCoordinatorImpl:
    def __init__(self, cfg: Config):
        # every Nash solve and every ranking of evaluation pairs builds and drops pool x pool arrays
        # (8 MB each at 1000 agents): keep them out of a heap glibc would not hand back (actors/heap.py)
        heap.fix_mmap_threshold()
        self.cfg = cfg
        self.store = LeagueStore(cfg.run.storage)
        game = self.store.get_meta("game")
        if game is None:
            self.store.set_meta("game", cfg.game.name)
            self.store.set_meta("game_params", cfg.game.kwargs)
            self.store.set_meta("config", cfg.to_dict())
        elif game != cfg.game.name:
            raise ValueError(f"storage {cfg.run.storage} holds a {game} league, not {cfg.game.name}")
        self.store.set_meta("import_paths", import_folders(cfg))  # where the tools reading the store import from
        self.league = League(cfg, self.store)
        if self.league.pool_size() == 0:
            self._seed_pool(cfg.league.seed_snapshots)
        self.metrics = LeagueMetrics(held=HELD)
        self._disk_full = False  # the store's last write failed for want of space (see _refuse)
        self._full_since = 0.0
        self._refused = 0
        self.metrics.set("store_disk_full", 0.0)
        self.metrics.set("store_refused_writes", 0.0)
        try:
            # the digest of what was restored: a resume (from a backup too) can be checked against its store
            self.store.add_event("coordinator_start", {"pool_size": self.league.pool_size(),
                                                       "state_digest": state_digest(self.league)})
        except sqlite3.OperationalError as exc:  # a start on a full disk: serve, acknowledge nothing until space
            if not disk_full(exc):
                raise
            self._refuse("the start event", exc)
        self.started = time.time()
        self._solving = False
        self._stopped = False
        self._loop_task = None
        self._ingest: list = []  # result batches waiting for the next group commit
        self._ingest_task = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")  # not the Nash's
        # held while a group of results is applied and written: changes that rewrite payoff rows
        # (snapshots that reset a learner, exact payoffs) reach the store in the order they happened
        self._store_order = asyncio.Lock()
        self._league_changed = asyncio.Event()  # set (and replaced) when the pool or the Nash changes
        self._retention_task = None
        self._weighted: set[str] = set()
        self._export_state()
        self._export_quality()

    def _seed_pool(self, paths: list[str]) -> None:
        if not paths:  # torch only in a coordinator given seed snapshots
            return
        from policies.snapshot import policy_from_bytes  # validates each file before it enters the pool

        for i, path in enumerate(paths):
            with open(path, "rb") as f:
                blob = f.read()
            policy_from_bytes(blob)
            self.league.add_seed(f"seed-{i}", blob, {"path": str(path)})

    # -- background ----------------------------------------------------------
    async def _nash_loop(self) -> None:
        last_trim = time.time()
        while not self._stopped:
            await asyncio.sleep(0.25)
            try:
                if not self._solving and not self._disk_full and self.league.nash_due(time.time()):
                    await self.solve_nash()
            except Exception:  # the loop must outlive any one bad solve
                log.exception("Nash re-solve failed")
            if time.time() - last_trim >= heap.TRIM_EVERY_SECONDS:  # solves' freed pages back to the system
                heap.trim()
                last_trim = time.time()

    def _ensure_loop(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._nash_loop())
        if self._retention_task is None and self.cfg.league.compact_every_seconds > 0:
            self._retention_task = asyncio.get_running_loop().create_task(self._retention_loop())

    async def _retention_loop(self) -> None:
        """Keep the store bounded (``league.retention``): compact the result batches the payoff
        checkpoint includes and prune history older than ``league.history_retention_hours``."""
        while not self._stopped:
            await asyncio.sleep(self.cfg.league.compact_every_seconds)
            if self._disk_full:
                continue  # deleting needs room in the WAL too; the probe finds when space returns
            try:
                async with self._store_order:
                    done = await asyncio.get_running_loop().run_in_executor(
                        self._writer, lambda: retention.apply(self.store, self.cfg.league.history_retention_hours,
                                                    self.cfg.league.snapshot_archive,
                                                    self.cfg.league.history_thin_seconds))
                if done["compacted"]["batches"] or any(done["pruned"].values()) or any(done["thinned"].values()):
                    log.info("store retention: %s", done)
            except Exception:  # retention must never take the coordinator down
                log.exception("store retention pass failed")

    # -- a full disk ---------------------------------------------------------------
    def _refuse(self, what: str, exc: BaseException) -> None:
        """A write failed for want of space: from now on nothing is acknowledged (callers wait; their
        outboxes keep what they sent) until ``_await_space`` sees a write succeed again."""
        self._refused += 1
        self.metrics.set("store_refused_writes", float(self._refused))
        if not self._disk_full:
            self._disk_full, self._full_since = True, time.time()
            self.metrics.set("store_disk_full", 1.0)
            log.error("STORE DISK FULL: writing %s to %s failed (%s). Results and snapshots are not acknowledged "
                      "until space returns (senders keep them in their outboxes and wait); free space on that "
                      "file system and the league goes on by itself.", what, self.store.path, exc)

    def _rebuild(self) -> None:
        """The league in memory had applied a change the store refused: rebuild it from the store
        (as a restart does), so that memory holds exactly what was acknowledged."""
        self.league = League(self.cfg, self.store)
        self._wake_plans()

    def _probe_space(self) -> None:
        self.store.set_meta("space_probe", time.time())

    async def _await_space(self) -> None:
        """Return at once unless the disk is full; then when a small write succeeds again."""
        while self._disk_full:
            await asyncio.sleep(SPACE_PROBE_SECONDS)
            if not self._disk_full:
                break
            try:
                await asyncio.get_running_loop().run_in_executor(self._writer, self._probe_space)
            except Exception as exc:
                if not disk_full(exc):
                    log.exception("store probe failed")
                continue
            log.warning("store disk has space again after %.0f s: acknowledging again", time.time() - self._full_since)
            self._disk_full = False
            self.metrics.set("store_disk_full", 0.0)

    async def _durable(self, what: str, write, rebuild: bool = False):
        """``write()`` (a store change), retried until the disk has room; ``rebuild``: ``write``
        changes the league in memory before the store, which a refused write must undo."""
        while True:
            await self._await_space()
            try:
                return write()
            except Exception as exc:
                if not disk_full(exc):
                    raise
                self._refuse(what, exc)
                if rebuild:
                    self._rebuild()

    async def solve_nash(self) -> NashMixture:
        """Re-solve the Nash over the frozen pool now (off the event loop)."""
        self._solving = True
        try:
            job = self.league.nash_job()
            if job is None:
                return self.league.nash_view()
            state = await asyncio.get_running_loop().run_in_executor(None, job)
            self.league.set_nash(state)
            self._wake_plans()
            self.metrics.observe("nash_solve_seconds", state.solve_seconds)
            self._export_state()
            return self.league.nash_view()
        finally:
            self._solving = False

    # -- rollout workers -------------------------------------------------------
    @timed
    async def next_matches(self, learner_id: str, n: int) -> MatchAssignments:
        self._ensure_loop()
        return self.league.next_matches(learner_id, n)

    async def match_plan(self, learner_id: str, known_version: str | None = None,
                         wait_seconds: float = 0.0) -> MatchPlan | None:
        """The learner's opponent distribution for workers to draw matches from themselves (None when
        ``known_version`` is current): ``next_matches`` without a round trip per request.

        A long poll: with ``wait_seconds`` > 0 and ``known_version`` current, the reply waits until
        the pool or the Nash changes (a snapshot, an eviction, a solve) or ``wait_seconds`` passed,
        so a worker that always keeps one request out hears of a new snapshot at once and otherwise
        asks about once per ``league.match_plan_seconds``. (Not in ``request_seconds``: it waits.)"""
        self._ensure_loop()
        wait_seconds = float(wait_seconds)
        plan = self.league.match_plan(learner_id, known_version)
        if plan is None and wait_seconds > 0:
            try:
                await asyncio.wait_for(self._league_changed.wait(), timeout=min(wait_seconds, 60.0))
            except asyncio.TimeoutError:
                pass
            plan = self.league.match_plan(learner_id, known_version)
        return plan

    def _wake_plans(self) -> None:
        """The pool or the Nash changed: answer every waiting ``match_plan``."""
        changed, self._league_changed = self._league_changed, asyncio.Event()
        changed.set()

    @timed
    async def report_results(self, batch: ResultBatch) -> bool:
        """Commit a batch of results (rollout workers and evaluators alike); True once
        stored, also when it is a retry of a batch stored before."""
        self._ensure_loop()
        if not isinstance(batch, ResultBatch):
            raise ValueError(f"report_results takes a league.messages.ResultBatch, got {type(batch).__name__}")
        # Group commit: the reply waits until the batch is committed, together with every batch that
        # arrived meanwhile (one transaction, one fsync for all of them).
        done = asyncio.get_running_loop().create_future()
        self._ingest.append((batch, done))
        if self._ingest_task is None or self._ingest_task.done():
            self._ingest_task = asyncio.get_running_loop().create_task(self._commit_results())
        return await done

    def _take_group(self) -> list:
        """The next group of waiting batches: all of them, up to about GROUP_ROWS rows (pairs), so
        that applying one group blocks the event loop for milliseconds, not seconds."""
        rows, cut = 0, 0
        for batch, _ in self._ingest:
            if cut and rows + len(batch.a) > GROUP_ROWS:
                break
            rows += len(batch.a)
            cut += 1
        group, self._ingest = self._ingest[:cut], self._ingest[cut:]
        return group

    async def _commit_results(self) -> None:
        loop = asyncio.get_running_loop()
        while self._ingest:
            await asyncio.sleep(0)  # requests already delivered join this group
            group = self._take_group()
            try:
                async with self._store_order:
                    # one batch at a time: between two, the event loop serves other requests
                    for step in self.league.apply_results([batch for batch, _ in group]):
                        if step is None:
                            await asyncio.sleep(0)
                    outcomes, write = step
                    # the transaction and its fsync in the writer thread: the event loop serves other
                    # requests meanwhile; the group's callers hear back only after the commit
                    await loop.run_in_executor(self._writer, write)
            except Exception as exc:
                if disk_full(exc):
                    # nothing of the group is stored: undo it in memory, keep it first in line, and
                    # answer no one until the disk has room again (each sender waits with its outbox)
                    self._refuse(f"{len(group)} result batches", exc)
                    async with self._store_order:
                        self._rebuild()
                    self._ingest[:0] = group
                    await self._await_space()
                    continue
                # any other failure: every caller of the group hears it, nothing was acked
                log.exception("committing %d result batches failed", len(group))
                for _, done in group:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for (batch, done), outcome in zip(group, outcomes):
                if isinstance(outcome, Exception):
                    done.set_exception(outcome)
                    continue
                if outcome:
                    self._count(batch)
                done.set_result(True)

    def _count(self, batch: ResultBatch) -> None:
        # games are labelled by the role of the learner that played them; frozen-vs-frozen
        # games (evaluators) are labelled "evaluator", as the dashboards expect
        if not len(batch):
            return
        roles = [self.league.role_of(x) if x in self.league.learners else "evaluator" for x in batch.agents]
        labels = sorted(set(roles))
        row_role = np.array([labels.index(r) for r in roles], dtype=np.int64)[batch.a]
        games, wins, draws = batch.games, batch.wins, batch.draws  # a row stands for games[k] games
        count = lambda x: np.bincount(row_role, weights=x, minlength=len(labels)).tolist()  # noqa: E731
        won, drawn, played = count(wins), count(draws), count(games)
        for role, w, d, g in zip(labels, won, drawn, played):
            for result, n in (("win", w), ("draw", d), ("loss", g - w - d)):
                self.metrics.inc("games", n, role=role, result=result)
        self.metrics.inc("env_steps", batch.env_steps, role=roles[int(batch.a[0])])

    def _export_state(self) -> None:
        """Gauges that describe the league now (after a Nash solve or a snapshot)."""
        m, status = self.metrics, self.league.status()
        m.set("store_bytes", float(sum(p.stat().st_size for p in self.store.path.parent.glob(self.store.path.name + "*")
                                       if p.is_file())))
        for role, n in status["pool_by_role"].items():
            m.set("pool_size", n, role=role)
        nash = self.league.nash_view()
        m.set("nash_entropy", abs(nash.entropy))
        m.set("meta_exploitability", nash.meta_exploitability)
        m.set("nash_support", len(nash.ids))
        support = nash.support()
        for agent in self._weighted - set(support):
            m.set("nash_weight", 0.0, agent=agent)
        for agent, w in support.items():
            m.set("nash_weight", w, agent=agent)
        self._weighted = set(support)
        for learner_id, view in status["learners"].items():
            m.set("elo", view["elo"], learner=learner_id, role=view["role"])
            m.set("policy_version", view["version"], learner=learner_id, role=view["role"])
            if view["win_rate_vs_nash"] is not None:
                m.set("win_rate_vs_nash", view["win_rate_vs_nash"], learner=learner_id, role=view["role"])
        if status["diversity_score"] is not None:
            m.set("diversity", status["diversity_score"])

    @timed
    async def get_snapshot(self, agent_id: str) -> bytes:
        return self.store.snapshot_blob(agent_id)

    # -- learners ----------------------------------------------------------------
    @timed
    async def learner_progress(self, learner_id: str, version: int, step: int) -> ProgressDecision:
        self._ensure_loop()
        return self.league.learner_progress(learner_id, version, step)

    async def final_snapshot_due(self, learner_id: str, step: int) -> bool:
        """At a stop: whether the learner's last weights are to join the pool (a main agent that
        trained since its last snapshot)."""
        self._ensure_loop()
        return self.league.final_snapshot_due(learner_id, step)

    @timed
    async def add_snapshot(self, learner_id: str, blob: bytes, step: int, metadata: dict | None = None,
                           request: int | None = None) -> SnapshotReply:
        """Freeze a learner's weights into the pool. ``request``: the learner's number for this
        snapshot; a repeat (the learner restarted before it saw the reply) gets the first reply."""
        while True:
            await self._await_space()
            async with self._store_order:
                known = self.league.snapshot_for_request(learner_id, request) if request is not None else None
                if known is not None:
                    reset = bool(known.metadata.get("reset"))
                    return SnapshotReply(known.agent_id, reset, known.metadata.get("reset_to") if reset else None)
                try:
                    record, reset = self.league.add_snapshot(learner_id, blob, step, metadata, request=request)
                    break
                except Exception as exc:
                    if not disk_full(exc):
                        raise
                    self._refuse(f"snapshot of {learner_id}", exc)
                    self._rebuild()  # the snapshot may be stored (a repeat then finds it) or not at all
        self._wake_plans()
        if self.cfg.league.snapshot_archive:
            try:
                retention.archive_blob(self.cfg.league.snapshot_archive, record.agent_id, blob)
            except OSError as exc:  # the archive is a copy: its failure must not fail the snapshot
                log.error("archiving snapshot %s to %s failed: %s", record.agent_id, self.cfg.league.snapshot_archive,
                          exc)
        self.metrics.inc("snapshots", role=record.agent_type.value)
        if reset:
            self.metrics.inc("resets", role=record.agent_type.value)
        self._export_state()
        return SnapshotReply(record.agent_id, bool(reset), record.metadata.get("reset_to") if reset else None)

    @timed
    async def save_checkpoint(self, learner_id: str, version: int, step: int, state: bytes) -> bool:
        await self._durable(f"checkpoint of {learner_id}",
                            lambda: self.league.save_checkpoint(learner_id, version, step, state))
        return True

    async def load_checkpoint(self, learner_id: str) -> Checkpoint | None:
        return self.league.load_checkpoint(learner_id)

    async def learner_started(self, learner_id: str, version: int, step: int) -> bool:
        """A learner (re)started at ``version``: an event, so a resume can be checked against its checkpoint."""
        return await self.learner_event(learner_id, "learner_start", {"version": int(version), "step": int(step)})

    async def learner_event(self, learner_id: str, kind: str, data: dict | None = None) -> bool:
        """Something a learner wants on the run's record (e.g. an update its shaper made it skip)."""
        await self._durable(f"event {kind}", lambda: self.store.add_event(str(kind), {"learner_id": str(learner_id),
                                                                                    **(data or {})}))
        return True

    # -- evaluators -----------------------------------------------------------
    @timed
    async def evaluation_pairs(self, n: int, unmeasured_only: bool = False) -> list[tuple[str, str]]:
        return self.league.evaluation_pairs(int(n), bool(unmeasured_only))

    @timed
    async def record_exact(self, scores: ExactScores) -> int:
        """Exactly computed payoffs of frozen pairs; stored before the reply. Returns how many were kept."""
        if not isinstance(scores, ExactScores):
            raise ValueError(f"record_exact takes a league.messages.ExactScores, got {type(scores).__name__}")
        async with self._store_order:
            return await self._durable("exact payoffs", lambda: self.league.record_exact_many(scores.triples()),
                                       rebuild=True)

    async def record_measurement(self, kind: str, value: float, data: dict | None = None) -> bool:
        """A measurement over time (e.g. the exact NashConv of the Nash mixture)."""
        await self._durable(f"measurement {kind}",
                            lambda: self.store.add_measurement(str(kind), float(value), data or {}))
        self._export_quality()
        return True

    def quality(self) -> dict[str, Any]:
        """What measures the published Nash beyond the meta-game: the latest exact NashConv
        (Kuhn, Leduc), the latest best-response probe (any game) and the latest scores against
        the fixed anchors (``anchors``), each with its time."""
        out: dict[str, Any] = {}
        for key, kind in QUALITY.items():
            m = self.store.latest_measurement(kind)
            if m is not None:
                out[key] = m
        anchors = self._anchor_quality()
        if anchors:
            out[ANCHORS] = anchors
        return out

    def _anchor_quality(self) -> dict[str, Any]:
        """The latest score of each subject against each configured anchor and each subject's anchored
        Elo (league.anchors): ``{"published": {anchor: m}, "newest_main": {...}, "elo": {subject: m}}``,
        one indexed store look-up per kind."""
        out: dict[str, Any] = {}
        for subject in SUBJECTS:
            for anchor in self.cfg.anchors:
                m = self.store.latest_measurement(anchor_score_kind(subject, anchor))
                if m is not None:
                    out.setdefault(subject, {})[anchor] = m
            m = self.store.latest_measurement(anchor_elo_kind(subject))
            if m is not None:
                out.setdefault(ELO, {})[subject] = m
        return out

    def _export_quality(self) -> None:
        q = self.quality()
        if NASH_CONV in q:
            self.metrics.set("exact_nash_conv", q[NASH_CONV]["value"])
        if META_NASH_CONV in q:
            self.metrics.set("meta_nash_exact_nash_conv", q[META_NASH_CONV]["value"])
        elif NASH_CONV in q and self.cfg.evaluator.publish == "nash":  # the meta-game Nash is what is published
            self.metrics.set("meta_nash_exact_nash_conv", q[NASH_CONV]["value"])
        if PROBE_QUALITY in q:
            p = q[PROBE_QUALITY]
            self.metrics.set("probe_br_return", p["value"], bound="mean")
            low, high = p.get("ci95", (p["value"], p["value"]))
            self.metrics.set("probe_br_return", low, bound="ci95_low")
            self.metrics.set("probe_br_return", high, bound="ci95_high")
        anchors = q.get(ANCHORS, {})
        for subject, by_anchor in anchors.items():
            if subject == ELO:
                continue
            for anchor, m in by_anchor.items():
                self.metrics.set("anchor_score", m["value"], anchor=anchor, subject=subject)
        for subject, m in anchors.get(ELO, {}).items():
            self.metrics.set("anchor_elo", m["value"], subject=subject)

    # -- reading -------------------------------------------------------------------
    @timed
    async def status(self) -> dict[str, Any]:
        self._ensure_loop()
        s = self.league.status()
        s["uptime_s"] = time.time() - self.started
        s["game"] = self.cfg.game.name
        s["quality"] = self.quality()
        s["store_disk_full"] = self._disk_full
        return s

    async def nash_quality(self) -> dict[str, Any]:
        return self.quality()

    async def nash(self) -> NashMixture:
        return self.league.nash_view()

    async def meta_nash(self) -> NashMixture:
        """The latest meta-game solve (the published Nash unless ``evaluator.publish`` is
        least_exploitable)."""
        return self.league.nash_view(self.league.meta_nash)

    async def publish_candidates(self, limit: int) -> tuple[list[str], int]:
        """The snapshots the least exploitable mixture is re-solved over (at most ``limit``: the
        published members, then the newest; ``Publication.lp_candidates``), and the pool version."""
        return self.league.publish_candidates(int(limit)), self.league.pool_version

    @timed
    async def publish(self, ids: list[str], weights: list[float], pool_version: int,
                      solve_seconds: float = 0.0) -> NashMixture:
        """The exact evaluator's least exploitable mixture of the pool's snapshots, published in place
        of the meta-game Nash (stored before the reply)."""
        self.league.set_published(ids, weights, pool_version, solve_seconds)
        self._wake_plans()
        self._export_state()
        return self.league.nash_view()

    async def pool(self) -> list[dict[str, Any]]:
        return self.league.pool_view()

    async def payoff(self) -> dict[str, Any]:
        return self.league.payoff_view()

    async def flush(self) -> dict[str, Any]:
        """Final Nash solve, and the payoff and Elo tables written out (so the next start has no
        result batches to replay); everything else is already committed."""
        async with self._store_order:
            self.league.checkpoint()
        if self.league.pool_size():
            await self.solve_nash()
        return await self.status()

    async def ping(self) -> bool:
        return True


# Restarts rebuild from the store; retried calls are safe because result
# batches are idempotent per (source, seq).
LeagueCoordinator = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(LeagueCoordinatorImpl)
