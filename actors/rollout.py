"""RolloutWorker: steps a vector of environments for one learner, forever.

Each environment plays the learner's current policy (refreshed by version)
in a random seat against an opponent drawn from the coordinator's match plan
for the learner (its opponent distribution; one long-poll request for a newer
plan is always out); when an episode ends the environment takes the
next assignment from a local queue of such draws. The learner's transitions of finished
episodes go to the learner in batches, with at most
``rollout.max_inflight_batches`` unacknowledged (backpressure); outcomes go to
the coordinator in numbered batches of counts per opponent (idempotent on retry).

With ``objective.k_opponents`` > 1 or a reward shaper (league.objectives), the
learner's episodes are played in groups of k: a new episode joins the open
group (k opponents drawn at once, the learner version of that moment) and is
played by that version's policy, kept while any group plays it. A group
goes out only when all k episodes finished, in a *delivery*: the complete
groups' games (a result batch for the coordinator), their transitions and
their ``EpisodeGroups`` (for the learner), staged in the outbox as one message
and re-sent by a restarted worker until both acknowledged it; the coordinator
and the learner each take a delivery once per (worker, seq). A group
unfinished when the loop stops or the worker dies is neither reported nor
sent, so no group arrives in part, and none twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import ray
import torch

from actors.opponents import InProcessOpponents
from actors.outbox import Outbox
from envs import make_game
from league.config import Config
from league.league import learner_ids
from league.matchmaking import MatchSampler
from league.messages import EpisodeGroups, MatchAssignments, ResultBatch, ResultColumns, WeightsReply
from league.objectives import CompletedGroup, GroupBook
from league.seeds import generator, seed_int, seed_sequence
from policies.rollout import Decisions, EpisodeRecorder, Rollout, TwoSeatPlay
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)


class Lane:
    """A sub-vector of environments with its own assignments.

    The worker alternates between lanes: while one lane's opponent requests
    are in flight (served inference), it steps another.
    """

    def __init__(self, game, rng: np.random.Generator):
        E = game.num_envs
        self.game = game
        self.play = TwoSeatPlay(game, rng.integers(0, 2, size=E))  # the learner's seat per env
        self.episode = np.zeros(E, dtype=np.int64)
        self.decisions = np.zeros(E, dtype=np.int64)
        self.opp = np.zeros(E, dtype=np.int64)  # the worker's code of each env's opponent
        self.opp_live = np.zeros(E, dtype=bool)
        self.prepared = False  # actions chosen, opponents' request sent, step not yet taken
        self.mine: Decisions | None = None  # the learner's decisions of the prepared step and its actions
        self.mine_actions = np.zeros(0, dtype=np.int64)
        self.theirs: Decisions | None = None  # the opponents' decisions and the actions known so far
        self.theirs_actions = np.zeros(0, dtype=np.int64)
        self.frozen = np.zeros(0, dtype=np.int64)  # rows of ``theirs`` whose actions the pending request brings
        self.pending = None  # opponent inference in flight
        # grouped play (objective.k_opponents): each env's group, slot in it, the version playing it,
        # and the version that made the running episode's decisions (-1 none yet, -2 mixed)
        self.group = np.zeros(E, dtype=np.int64)
        self.slot = np.zeros(E, dtype=np.int64)
        self.version = np.zeros(E, dtype=np.int64)
        self.acted = np.full(E, -1, dtype=np.int64)


class RolloutWorkerImpl:
    def __init__(self, worker_id: str, learner_id: str, cfg: Config, coordinator, learners: dict[str, Any],
                 opponents=None):
        torch.set_num_threads(1)
        self.worker_id = worker_id
        self.learner_id = learner_id
        self.cfg = cfg
        self.coordinator = coordinator
        self.learners = learners  # learner id -> actor handle (for live opponents)
        # seats, actions and live-weight refreshes: the worker's own stream of run.seed
        self.rng = generator(cfg.run.seed, "worker", worker_id)
        served = cfg.rollout.opponent_inference == "serve"
        n_lanes = cfg.rollout.lanes if served else 1
        per_lane = max(1, cfg.rollout.envs_per_worker // n_lanes)
        self.lanes = [Lane(make_game(cfg.game.name, per_lane, seed=seed_int(cfg.run.seed, "worker", worker_id, "lane", i),
                                     **cfg.game.params), self.rng)
                      for i in range(n_lanes)]
        self.num_actions = self.lanes[0].game.num_actions
        if opponents is not None:
            self.opponents = opponents
        elif served:
            from serve.opponents import ServedOpponents

            self.opponents = ServedOpponents()
        else:
            self.opponents = InProcessOpponents(lambda a: ray.get(coordinator.get_snapshot.remote(a)),
                                                capacity=cfg.snapshots.cache_size,
                                                seed=seed_sequence(cfg.run.seed, "worker", worker_id, "opponents"))
        self.live: dict[str, tuple[int, Any]] = {}  # learner id -> (version, model)
        self._names: list[str] = []  # opponent ids by code: lanes keep small ints, not strings
        self._codes: dict[str, int] = {}
        self._stop = threading.Event()
        # Result batches go out through the outbox: numbered so that no life of this worker
        # reuses a number, and re-sent after a kill until acknowledged.
        self.outbox = Outbox(cfg.run.storage, worker_id)
        # Acknowledged result batches of this life: seqs first_seq+1 .. last_acked_seq, each one the coordinator
        # committed before replying (the node-loss test counts them in the store, exactly).
        first = self.outbox.ledger["seq"]
        self.stats = {"env_steps": 0, "episodes": 0, "submitted": 0, "branches": {}, "first_seq": first,
                      "last_acked_seq": None, "results_acked": 0, "games_acked": 0,
                      "redelivered": 0, "deliveries_rejected": 0, "game_errors": 0}
        self._pending_refresh: list = []
        role = learner_ids(cfg).get(learner_id)
        objective = cfg.role(role).objective if role is not None else None
        self.grouped = objective is not None and objective.grouped
        self.k = objective.k_opponents if self.grouped else 1
        self._held: dict[int, Any] = {}  # learner version -> policy, while a group plays it (grouped play)
        # matches: drawn here from the coordinator's plan, with the worker's own stream of run.seed
        self.matches = MatchSampler(learner_id, generator(cfg.run.seed, "worker", worker_id, "matches"),
                                    cfg.league.match_plan_seconds)

    # -- weights -------------------------------------------------------------
    def _refresh(self, learner_id: str, block: bool) -> None:
        version = self.live.get(learner_id, (-1, None))[0]
        ref = self.learners[learner_id].get_weights.remote(version)
        if not block:
            self._pending_refresh.append((learner_id, ref))
            return
        self._apply_weights(learner_id, ray.get(ref))

    def _apply_weights(self, learner_id: str, reply: WeightsReply) -> None:
        if reply.blob is not None:
            model = policy_from_bytes(reply.blob)
            model.eval()
            self.live[learner_id] = (reply.version, model)

    def _poll_refreshes(self) -> None:
        still = []
        for learner_id, ref in self._pending_refresh:
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                try:
                    self._apply_weights(learner_id, ray.get(ref))
                except ray.exceptions.RayError:
                    log.warning("%s: could not refresh weights of %s", self.worker_id, learner_id)
            else:
                still.append((learner_id, ref))
        self._pending_refresh = still

    def stop(self) -> None:
        self._stop.set()

    def get_stats(self) -> dict[str, Any]:
        """Env steps, episodes, transitions submitted, matches taken per matchmaking branch and
        result batches (games) acknowledged, in this life; ``games_acked_all_lives`` from the outbox ledger."""
        return {**self.stats, "branches": dict(self.stats["branches"]), "games_acked_all_lives": self.outbox.items}

    # -- assignments -------------------------------------------------------------
    def _next_matches(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` assignments: opponent codes and whether each opponent is live, drawn here
        from the coordinator's plan for the learner (``league.matchmaking.MatchSampler``)."""
        taken: list[tuple[int, bool]] = []
        while len(taken) < k:
            if not self._queue:
                self._take_matches(self.matches.draw(self._want))
            cut = max(0, len(self._queue) - (k - len(taken)))
            taken += self._queue[cut:]
            del self._queue[cut:]
        codes, live = zip(*taken) if taken else ((), ())
        return np.array(codes, dtype=np.int64), np.array(live, dtype=bool)

    def _code(self, agent_id: str) -> int:
        code = self._codes.get(agent_id)
        if code is None:
            code = self._codes[agent_id] = len(self._names)
            self._names.append(agent_id)
        return code

    def _poll_plan(self, block: bool = False) -> None:
        """Keep one request for a newer match plan out (a long poll: the coordinator answers when the
        pool or the Nash changes, or after ``league.match_plan_seconds``); take the answer when it
        came (or wait for it, ``block``)."""
        if self._pending_plan is None:
            wait = 0.0 if self.matches.plan is None else self.cfg.league.match_plan_seconds
            self._pending_plan = self.coordinator.match_plan.remote(self.learner_id, self.matches.version, wait)
        if not block and not ray.wait([self._pending_plan], timeout=0)[0]:
            return
        ref, self._pending_plan = self._pending_plan, None
        try:
            self.matches.update(ray.get(ref))
        except ray.exceptions.RayError:
            if self.matches.plan is None:
                raise
            log.warning("%s: could not refresh the match plan of %s", self.worker_id, self.learner_id)

    def _take_matches(self, reply: MatchAssignments) -> None:
        codes = [self._code(o) for o in reply.opponents]
        self._queue.extend((codes[k], bool(reply.live[k])) for k in reply.opponent.tolist())
        branches = self.stats["branches"]
        for name, n in reply.branch_counts().items():
            branches[name] = branches.get(name, 0) + n

    # -- the loop ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg.rollout
        self._send_pending()
        self._pending_refresh = []
        self._refresh(self.learner_id, block=True)
        self._queue: list[tuple[int, bool]] = []
        self._pending_plan = None
        self._poll_plan(block=True)
        self._want = max(sum(l.game.num_envs for l in self.lanes), cfg.matches_per_request)
        self._next_episode = 0
        # group ids never reused, also by a restarted worker (numbered from the clock, in microseconds)
        self.groups = GroupBook(self.k, time.time_ns() // 1000) if self.grouped else None
        self._held = {}
        for lane in self.lanes:
            E = lane.game.num_envs
            if self.groups is None:
                lane.opp[:], lane.opp_live[:] = self._next_matches(E)
            else:
                self._start_groups(lane, np.arange(E))
            lane.episode[:] = np.arange(self._next_episode, self._next_episode + E)
            self._next_episode += E
            lane.decisions[:] = 0
            lane.pending, lane.prepared = None, False
        self._recorder = EpisodeRecorder()
        self._completed: list[CompletedGroup] = []  # groups whose transitions are in the recorder, in order
        self._results = ResultColumns()
        self._action_counts = np.zeros(self.num_actions)
        self._env_steps = 0
        inflight: list = []
        report_ref = None
        delivery = None  # grouped play: the delivery in flight
        last_report = time.time()
        submit_every = max(64, cfg.steps_per_batch // max(1, cfg.workers_per_learner))

        while not self._stop.is_set():
            self._poll_plan()
            self._poll_refreshes()
            for lane in self.lanes:
                if lane.prepared:
                    self._finish(lane)
                self._prepare(lane)
            report_due = len(self._results) >= cfg.results_batch_size or (
                len(self._results) > 0 and time.time() - last_report > 2.0)
            if self.grouped:
                if report_due or self._recorder.steps >= submit_every:
                    delivery = self._deliver(delivery)
                    last_report = time.time()
            else:
                if self._recorder.steps >= submit_every:
                    inflight = self._submit(self._recorder.take(), inflight, cfg.max_inflight_batches)
                if report_due:
                    report_ref = self._report(report_ref)
                    last_report = time.time()
        for lane in self.lanes:
            if lane.prepared:
                self._finish(lane)
        # flush: everything finished reaches the coordinator (and, grouped, the learner) before run() returns
        if self.grouped:
            delivery = self._deliver(delivery)
            if delivery is not None:
                self._await_delivery(delivery)
            return self.get_stats()
        report_ref = self._report(report_ref)
        if report_ref is not None:
            self._await_report(report_ref)
        ray.get(inflight)
        return self.get_stats()

    def _prepare(self, lane: Lane) -> None:
        """Choose the learner's actions and send the opponents' request of one lane.

        All frozen-opponent decisions of the lane (both seats, every opponent)
        go out as one request; live opponents (learners' current weights) act here.
        """
        try:
            mine, theirs = lane.play.decisions()
        except Exception as exc:  # the game's own code (a user's game may raise): drop, restart, go on
            self._recover(lane, "observing", exc)
            mine, theirs = lane.play.decisions()
        lane.mine, lane.theirs = mine, theirs
        lane.mine_actions = np.zeros(0, dtype=np.int64)
        if len(mine):
            if self.groups is None:
                a, logp, v = self.live[self.learner_id][1].act(mine.obs, mine.mask, generator=self.rng)
            else:
                a, logp, v = self._act_by_version(lane, mine)
            lane.mine_actions = a
            self._recorder.add(lane.episode[mine.rows], mine.obs, mine.mask, a, logp, v)
            self._action_counts += np.bincount(a, minlength=self.num_actions)
            lane.decisions[mine.rows] += 1
        lane.theirs_actions = np.zeros(len(theirs), dtype=np.int64)
        lane.prepared = True
        lane.pending = None
        if not len(theirs):
            lane.frozen = np.zeros(0, dtype=np.int64)
            return
        codes = lane.opp[theirs.rows]
        live = lane.opp_live[theirs.rows]
        for code in np.unique(codes[live]).tolist():
            sel = np.flatnonzero(live & (codes == code))
            lane.theirs_actions[sel] = self._live_actions(self._names[code], theirs.obs[sel], theirs.mask[sel])
        lane.frozen = np.flatnonzero(~live)
        if lane.frozen.size:
            used, local = np.unique(codes[lane.frozen], return_inverse=True)
            lane.pending = self.opponents.submit([self._names[c] for c in used.tolist()], local.reshape(-1),
                                                 theirs.obs[lane.frozen], theirs.mask[lane.frozen])

    def _act_by_version(self, lane: Lane, mine: Decisions):
        """The learner's actions, each env's by the policy version its group plays."""
        versions = lane.version[mine.rows]
        used = np.unique(versions).tolist()
        if len(used) == 1:
            a, logp, v = self._held[used[0]].act(mine.obs, mine.mask, generator=self.rng)
        else:
            a = np.zeros(len(mine), dtype=np.int64)
            logp, v = np.zeros(len(mine), dtype=np.float32), np.zeros(len(mine), dtype=np.float32)
            for version in used:
                sel = np.flatnonzero(versions == version)
                a[sel], logp[sel], v[sel] = self._held[version].act(mine.obs[sel], mine.mask[sel], generator=self.rng)
        acted = lane.acted[mine.rows]
        lane.acted[mine.rows] = np.where(acted == -1, versions, np.where(acted == versions, acted, -2))
        return a, logp, v

    def _start_groups(self, lane: Lane, rows: np.ndarray) -> None:
        """New episodes in ``rows`` join groups (league.objectives.GroupBook)."""
        version, model = self.live[self.learner_id]
        self._held.setdefault(version, model)
        gid, slot, codes, live, ver = self.groups.start(len(rows), self._next_matches, version)
        lane.group[rows], lane.slot[rows], lane.opp[rows], lane.opp_live[rows] = gid, slot, codes, live
        lane.version[rows], lane.acted[rows] = ver, -1
        if len(self._held) > 1:
            keep = self.groups.versions() | {version}
            self._held = {v: m for v, m in self._held.items() if v in keep}

    def _take_groups(self, seq: int) -> EpisodeGroups:
        done, self._completed = self._completed, []
        used = sorted({c for g in done for c in g.codes.tolist()})
        local = {c: i for i, c in enumerate(used)}
        k = self.k
        return EpisodeGroups(self.worker_id, np.array([g.group_id for g in done], dtype=np.int64),
                             np.array([g.version for g in done], dtype=np.int64), tuple(self._names[c] for c in used),
                             np.array([[local[c] for c in g.codes.tolist()] for g in done], dtype=np.int64).reshape(-1, k),
                             np.array([g.returns for g in done], dtype=np.float64).reshape(-1, k),
                             np.array([g.decisions > 0 for g in done], dtype=bool).reshape(-1, k),
                             np.array([g.acted for g in done], dtype=np.int64).reshape(-1, k), seq=seq)

    def _live_actions(self, agent_id: str, obs, mask) -> np.ndarray:
        if agent_id not in self.live:
            self._refresh(agent_id, block=True)
        elif agent_id != self.learner_id and self.rng.random() < 0.01:
            self._refresh(agent_id, block=False)
        return self.live[agent_id][1].act(obs, mask, generator=self.rng)[0]

    def _finish(self, lane: Lane) -> None:
        """Collect the opponents' actions of one lane, step it, and book finished episodes."""
        if lane.pending is not None:
            lane.theirs_actions[lane.frozen] = self.opponents.result(lane.pending)
        lane.pending, lane.prepared = None, False
        try:
            done = lane.play.step(lane.mine, lane.mine_actions, lane.theirs, lane.theirs_actions)
        except Exception as exc:  # the game's own code (a user's game may raise): drop, restart, go on
            self._recover(lane, "stepping", exc)
            return
        E = lane.game.num_envs
        self._env_steps += E
        self.stats["env_steps"] += E
        if not len(done):
            return
        rows = done.rows
        if self.groups is None:
            self._results.add(lane.opp[rows], done.scores)
            played = lane.decisions[rows] > 0
            self._recorder.finish(lane.episode[rows][played], done.returns[played], lane.decisions[rows][played])
        else:
            for group in self.groups.finish(lane.group[rows], lane.slot[rows], lane.episode[rows], done.returns,
                                            done.scores, lane.decisions[rows], lane.acted[rows]):
                played = group.decisions > 0
                self._recorder.finish(group.episodes[played], group.returns[played], group.decisions[played])
                self._results.add(group.codes, group.scores)
                self._completed.append(group)
        lane.decisions[rows] = 0
        lane.episode[rows] = np.arange(self._next_episode, self._next_episode + rows.size)
        self._next_episode += rows.size
        lane.play.seat[rows] = self.rng.integers(0, 2, size=rows.size)
        if self.groups is None:
            lane.opp[rows], lane.opp_live[rows] = self._next_matches(rows.size)
        else:
            self._start_groups(lane, rows)
        self.stats["episodes"] += int(rows.size)

    def _recover(self, lane: Lane, doing: str, exc: Exception) -> None:
        """The game raised: log it, drop the lane's running episodes (no game of theirs is reported,
        none of their decisions reaches the learner) and restart its environments, with the same
        opponents (grouped play: in the same group slots), so matchmaking and groups go on as they
        were. Finished episodes, and every batch already sent, are untouched. A game whose ``reset``
        raises too is built anew."""
        self.stats["game_errors"] += 1
        log.error("%s: %s %s raised %s: %s; dropping the %d running episodes of its lane and restarting them",
                  self.worker_id, doing, lane.game.name, type(exc).__name__, exc, lane.game.num_envs,
                  exc_info=self.stats["game_errors"] <= 3)
        dropped = lane.episode
        self._recorder.chunks = [tuple(part[keep] for part in chunk) for chunk in self._recorder.chunks
                                 if (keep := ~np.isin(chunk[0], dropped)).any()]
        try:
            lane.game.reset()
        except Exception as exc2:
            log.error("%s: %s: reset raised %s too; building the game anew", self.worker_id, lane.game.name, exc2)
            seed = seed_int(self.cfg.run.seed, "worker", self.worker_id, "rebuild", self.stats["game_errors"])
            lane.game = make_game(self.cfg.game.name, lane.game.num_envs, seed=seed, **self.cfg.game.params)
            lane.play = TwoSeatPlay(lane.game, lane.play.seat)
        E = lane.game.num_envs
        lane.episode = np.arange(self._next_episode, self._next_episode + E)
        self._next_episode += E
        lane.decisions[:] = 0
        lane.acted[:] = -1
        lane.pending, lane.prepared = None, False

    def _submit(self, rollout: Rollout | None, inflight: list, limit: int) -> list:
        if rollout is None:
            return inflight
        while len(inflight) >= limit:  # backpressure: wait for the learner
            ready, inflight = ray.wait(inflight, num_returns=1)
            if ray.get(ready[0]).version != self.live[self.learner_id][0]:
                self._refresh(self.learner_id, block=False)
        inflight.append(self.learners[self.learner_id].submit.remote(rollout))
        self.stats["submitted"] += len(rollout)
        done, inflight = ray.wait(inflight, num_returns=len(inflight), timeout=0)
        for ref in done:
            if ray.get(ref).version != self.live[self.learner_id][0]:
                self._refresh(self.learner_id, block=False)
        return inflight

    def _report(self, previous):
        """Send the finished games as one numbered batch (staged in the outbox first);
        returns the batch in flight. One batch is in flight at a time."""
        if previous is not None:
            self._await_report(previous)
        if not self._results and not self._env_steps:
            return None
        batch = self._results.take(self.worker_id, self.outbox.next_seq(), self.learner_id, self._names,
                                   self._env_steps, {self.learner_id: self._action_counts})
        self.outbox.stage_batch(batch)
        ref = self.coordinator.report_results.remote(batch)
        self._env_steps = 0
        self._action_counts = np.zeros(self.num_actions)
        return ref, batch.seq, len(batch)

    def _deliver(self, previous):
        """Grouped play: the groups completed since the last delivery go out as one delivery, staged
        in the outbox first (games, transitions and groups in one file): their games to the
        coordinator, their transitions with their ``EpisodeGroups`` to the learner, both under one
        seq. Returns the delivery in flight; one is in flight at a time (the outbox keeps one), so
        waiting for the last one is this worker's backpressure."""
        if previous is not None:
            self._await_delivery(previous)
        if not self._results and not self._env_steps:
            return None
        seq = self.outbox.next_seq()
        rollout, groups = self._recorder.take(), self._take_groups(seq)
        batch = self._results.take(self.worker_id, seq, self.learner_id, self._names, self._env_steps,
                                   {self.learner_id: self._action_counts})
        self._env_steps = 0
        self._action_counts = np.zeros(self.num_actions)
        if not len(groups):  # env steps only
            self.outbox.stage_batch(batch)
            return self._send_delivery(batch, None, None)
        if rollout is None:  # the learner had no decision in any of these groups' episodes
            rollout = Rollout.empty(self.lanes[0].game.obs_size, self.num_actions)
        self.outbox.stage_delivery(batch, rollout, groups)
        return self._send_delivery(batch, rollout, groups)

    def _send_delivery(self, batch: ResultBatch, rollout: Rollout | None, groups: EpisodeGroups | None):
        report = self.coordinator.report_results.remote(batch)
        submit = None
        if groups is not None:
            submit = self.learners[self.learner_id].submit.remote(rollout, groups)
            self.stats["submitted"] += len(rollout)
        return report, submit, batch.seq, len(batch)

    def _await_delivery(self, delivery) -> None:
        """Wait until the learner and the coordinator both acknowledged a delivery, then book it (the
        outbox drops it). A delivery the learner rejects as malformed is logged and counted, not re-sent."""
        report, submit, seq, n = delivery
        if submit is not None:
            try:
                ack = ray.get(submit)
            except ray.exceptions.RayTaskError as exc:
                if not isinstance(exc.cause, ValueError):
                    raise
                log.error("%s: the learner rejected delivery %d (%s)", self.worker_id, seq, exc.cause)
                self.stats["deliveries_rejected"] += 1
            else:
                if ack.version != self.live.get(self.learner_id, (-1, None))[0]:
                    self._refresh(self.learner_id, block=False)
        self._await_report((report, seq, n))

    def _await_report(self, inflight) -> None:
        """Wait for a batch's acknowledgement and book it (the coordinator's restarts are
        retried by Ray; the batch is idempotent per (worker, seq))."""
        ref, seq, n = inflight
        try:
            ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc.cause, ValueError):
                raise
            log.error("%s: batch %d rejected (%s)", self.worker_id, seq, exc.cause)
            self.outbox.drop()
            return
        self.outbox.acked(seq, n)
        if seq > self.stats["first_seq"]:  # not a past life's batch re-sent
            self.stats["results_acked"] += 1
            self.stats["games_acked"] += n
            self.stats["last_acked_seq"] = seq

    def _send_pending(self) -> None:
        """Re-send what a past life (or a crashed loop) staged but never saw acknowledged: a result
        batch, or a delivery of groups (to the coordinator and the learner; each takes it once)."""
        staged = self.outbox.pending_delivery()
        if staged is None:
            return
        batch, rollout, groups = staged
        if groups is not None:
            self.stats["redelivered"] += 1
        self._await_delivery(self._send_delivery(batch, rollout, groups))


# The worker loop is synchronous: its Serve handle must run its router in a separate
# event loop, which RAY_SERVE_THROUGHPUT_OPTIMIZED=1 turns off by default.
RolloutWorker = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.5, max_concurrency=2,
                           runtime_env={"env_vars": {"RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "1"}})(RolloutWorkerImpl)
