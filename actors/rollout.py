"""RolloutWorker: steps a vector of environments for one learner, forever.

The play itself is ``policies.lanes`` (no Ray): each environment plays the learner's policy in a
random seat against an opponent drawn from the coordinator's match plan for the learner (its
opponent distribution; one long-poll request for a newer plan is always out), the learner's
episodes in groups of k (``objective.k_opponents``; k = 1 without a grouped objective), each group
played by the learner version of its start. This actor adds what needs Ray: the plan, the
learner's weights (refreshed by version), and sending what finished.

A group's games go to the coordinator only when all its k episodes finished, in numbered batches
of counts per opponent, staged in the outbox first and re-sent by a restarted worker until
acknowledged (idempotent per (worker, seq)); one is in flight at a time. Where they go:

- plain play (k = 1, no shaper): the learner's transitions go to the learner on their own, in
  batches, with at most ``rollout.max_inflight_batches`` unacknowledged (backpressure);
- a grouped objective (``objective.k_opponents`` > 1 or a reward shaper, league.objectives): the
  complete groups' games, their transitions and their ``EpisodeGroups`` go out as one *delivery*,
  staged in the outbox as one message, to the coordinator and the learner, each of which takes it
  once per (worker, seq). A group unfinished when the loop stops or the worker dies is neither
  reported nor sent, so no group arrives in part, and none twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray
import torch

from actors.loop import CONTROL_OPTIONS, control, one_loop
from actors.opponents import InProcessOpponents
from actors.outbox import Outbox
from envs import make_game
from envs.base import utility_range
from league.config import Config
from league.league import learner_ids
from league.matchmaking import MatchSampler
from league.messages import EpisodeGroups, ResultBatch, WeightsReply
from league.seeds import generator, seed_int, seed_sequence
from policies.expert import MoveSearch
from policies.lanes import Lanes, MatchQueue
from policies.rollout import Rollout
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)


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
        # lanes: another sub-vector steps while one's requests (opponents', or the learner's own) are out
        n_lanes = cfg.rollout.lanes if cfg.rollout.served else 1
        self.per_lane = max(1, cfg.rollout.envs_per_worker // n_lanes)
        self.n_lanes = n_lanes
        # the curriculum stage played, and the one the learner's step asks for (set with its weights)
        self.stage = self.wanted_stage = len(cfg.game.curriculum)
        games = self._games(self.stage)
        if opponents is None and cfg.rollout.opponent_inference == "serve":
            # ray.serve and its web stack load only in workers whose opponents are served
            from serve.opponents import ServedOpponents

            opponents = ServedOpponents()
        elif opponents is None:
            opponents = InProcessOpponents(lambda a: ray.get(coordinator.get_snapshot.remote(a)),
                                           capacity=cfg.snapshots.cache_size, max_bytes=cfg.snapshots.cache_bytes,
                                           idle_seconds=cfg.snapshots.cache_idle_seconds,
                                           seed=seed_sequence(cfg.run.seed, "worker", worker_id, "opponents"))
        self.opponents = opponents
        # the learner's own moves, or a search learner's leaves, in the Serve deployment
        # (rollout.policy_inference: serve): a version of its life -> ServedPolicy
        self.served_policy = None
        if cfg.rollout.policy_inference == "serve":
            from serve.opponents import ServedPolicy, sync_handle

            handle = sync_handle()
            self.served_policy = lambda version, life: ServedPolicy(learner_id, version, handle, life)
        self.live: dict[str, tuple[int, Any]] = {}  # learner id -> (version, model)
        self._stop = threading.Event()
        # Result batches go out through the outbox: numbered so that no life of this worker
        # reuses a number, and re-sent after a kill until acknowledged.
        self.outbox = Outbox(cfg.run.storage, worker_id)
        # Acknowledged result batches of this life: seqs first_seq+1 .. last_acked_seq, each one the coordinator
        # committed before replying (the node-loss test counts them in the store, exactly).
        first = self.outbox.ledger["seq"]
        self.stats = {"submitted": 0, "first_seq": first, "last_acked_seq": None, "results_acked": 0,
                      "games_acked": 0, "redelivered": 0, "deliveries_rejected": 0}
        self._pending_refresh: list = []
        role = learner_ids(cfg).get(learner_id)
        objective = cfg.role(role).objective if role is not None else None
        self.grouped = objective is not None and objective.grouped
        # matches: drawn here from the coordinator's plan, with the worker's own stream of run.seed
        self.matches = MatchSampler(learner_id, generator(cfg.run.seed, "worker", worker_id, "matches"),
                                    cfg.league.match_plan_seconds)
        k = objective.k_opponents if objective is not None else 1
        queue = MatchQueue(self.matches.draw, max(self.per_lane * n_lanes, cfg.rollout.matches_per_request),
                           repeat=cfg.rollout.episodes_per_opponent, k=k)
        # a search learner's moves are searched here, with its own stream of run.seed
        self.search = None
        if role is not None and cfg.role(role).learner == "search":
            self.search = MoveSearch(games[0], self.per_lane, cfg.search_learner, utility_range(games[0]),
                                     generator(cfg.run.seed, "worker", worker_id, "search"))
        self.lanes = Lanes(games, k, queue, opponents,
                           self._live_policy, self.rng, self._rebuild, keep_groups=self.grouped, name=worker_id,
                           self_id=learner_id, search=self.search,
                           opening_plies=cfg.search_learner.opening_plies if self.search is not None else 0)

    # -- weights -------------------------------------------------------------
    def _refresh(self, learner_id: str, block: bool) -> None:
        version = self.live.get(learner_id, (-1, None))[0]
        served = self.served_policy is not None and learner_id == self.learner_id
        ref = self.learners[learner_id].get_weights.remote(version, not served)
        if not block:
            self._pending_refresh.append((learner_id, ref))
            return
        self._apply_weights(learner_id, ray.get(ref))

    def _apply_weights(self, learner_id: str, reply: WeightsReply) -> None:
        if learner_id == self.learner_id:
            self.wanted_stage = self.cfg.game.stage(reply.step)
        if learner_id == self.learner_id and self.served_policy is not None:
            # served: the version (of the learner's life) is all the worker needs; the deployment
            # loads its weights
            held = self.live.get(learner_id, (-1, None))[1]
            if held is None or (held.version, held.life) != (reply.version, reply.life):
                policy = self.served_policy(reply.version, reply.life)
                self.live[learner_id] = (reply.version, policy)
                self.lanes.set_learner(reply.version, policy)
            return
        if reply.blob is not None:
            model = policy_from_bytes(reply.blob)
            model.eval()
            self.live[learner_id] = (reply.version, model)
            if learner_id == self.learner_id:
                self.lanes.set_learner(reply.version, model)

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

    def _live_policy(self, agent_id: str):
        """The policy a live opponent plays now: its learner's current weights, fetched at first
        sight and refreshed now and then (its own learner's on every acknowledgement)."""
        if agent_id not in self.live:
            self._refresh(agent_id, block=True)
        elif agent_id != self.learner_id and self.rng.random() < 0.01:
            self._refresh(agent_id, block=False)
        return self.live[agent_id][1]

    def _rebuild(self, errors: int):
        seed = seed_int(self.cfg.run.seed, "worker", self.worker_id, "rebuild", errors)
        return make_game(self.cfg.game.name, self.per_lane, seed=seed, **self.cfg.game.stage_kwargs(self.stage))

    # -- the curriculum ------------------------------------------------------------------
    def _games(self, stage: int) -> list:
        """One game a lane, of curriculum stage ``stage`` (``len(game.curriculum)``: the game itself)."""
        game = self.cfg.game
        tag = ("stage", stage) if stage < len(game.curriculum) else ()
        return [make_game(game.name, self.per_lane, seed=seed_int(self.cfg.run.seed, "worker", self.worker_id, "lane", i, *tag),
                          **game.stage_kwargs(stage)) for i in range(self.n_lanes)]

    def _follow_curriculum(self) -> None:
        """Play the curriculum stage of the learner's step (``game.curriculum``): a stage's games are
        not reported (the payoff is the game's), its env steps and transitions are."""
        stage, last = self.wanted_stage, len(self.cfg.game.curriculum)
        log.info("%s: curriculum stage %d of %d (%s)", self.worker_id, stage + 1, last + 1,
                 self.cfg.game.stage_kwargs(stage))
        self.stage = stage
        self.lanes.set_games(self._games(stage), report_games=stage == last)

    @control
    def stop(self) -> None:
        self._stop.set()

    @control
    def get_stats(self) -> dict[str, Any]:
        """Env steps, episodes, transitions submitted, matches drawn per matchmaking branch and
        result batches (games) acknowledged, in this life; ``games_acked_all_lives`` from the outbox
        ledger; the curriculum stage played (``len(game.curriculum)``: the game itself)."""
        searched = {} if self.search is None else {"positions_searched": self.search.positions,
                                                   "search_seconds": dict(self.search.profile)}
        return {**self.stats, **self.lanes.counts, **searched, "branches": dict(self.lanes.matches.branches),
                "games_acked_all_lives": self.outbox.items, "curriculum_stage": self.stage}

    # -- the plan ------------------------------------------------------------------
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

    # -- the loop ------------------------------------------------------------------
    @one_loop
    def run(self) -> dict[str, Any]:
        cfg = self.cfg.rollout
        self._send_pending()
        self._pending_refresh = []
        self._refresh(self.learner_id, block=True)
        self._pending_plan = None
        self._poll_plan(block=True)
        # group ids never reused, also by a restarted worker (numbered from the clock, in microseconds)
        self.lanes.start(time.time_ns() // 1000)
        if self.wanted_stage != self.stage:
            self._follow_curriculum()
        inflight: list = []  # plain play: transitions sent to the learner, not yet acknowledged
        delivery = None  # the delivery in flight
        last_report = time.time()
        submit_every = max(64, cfg.steps_per_batch // max(1, cfg.workers_per_learner))

        while not self._stop.is_set():
            self._poll_plan()
            self._poll_refreshes()
            if self.wanted_stage != self.stage:  # the learner's step moved into another stage
                self._follow_curriculum()
            unanswered = self.lanes.counts["served_errors"]
            self.lanes.step()
            if self.lanes.counts["served_errors"] > unanswered:
                # a served version its learner no longer keeps (restarted: another life): ask anew
                self._refresh(self.learner_id, block=False)
            # at least every 2 s: the games finished, or (a curriculum stage's games are not reported) the env steps
            due = len(self.lanes.results) >= cfg.results_batch_size or (
                self.lanes.has_news() and time.time() - last_report > 2.0)
            if self.lanes.recorder.steps >= submit_every:
                if self.grouped:  # the transitions go with their groups' games
                    due = True
                else:
                    inflight = self._submit(self.lanes.recorder.take(), inflight, cfg.max_inflight_batches)
            if due:
                delivery = self._deliver(delivery)
                last_report = time.time()
        self.lanes.finish_prepared()
        # flush: everything finished reaches the coordinator (and, grouped, the learner) before run() returns
        delivery = self._deliver(delivery)
        if delivery is not None:
            self._await_delivery(delivery)
        ray.get(inflight)
        return self.get_stats()

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

    def _deliver(self, previous):
        """The complete groups' games since the last delivery go out as one numbered batch, staged in
        the outbox first; for a grouped objective with their transitions and their ``EpisodeGroups``
        (one file), to the coordinator and the learner under one seq. Returns the delivery in flight;
        one is in flight at a time (the outbox keeps one), so waiting for the last one is this
        worker's backpressure."""
        if previous is not None:
            self._await_delivery(previous)
        if not self.lanes.has_news():
            return None
        seq = self.outbox.next_seq()
        rollout, groups = self.lanes.take_groups(self.worker_id, seq) if self.grouped else (None, None)
        batch = self.lanes.take_batch(self.worker_id, seq, self.learner_id)
        if groups is None or not len(groups):  # the games (or env steps) alone
            self.outbox.stage_batch(batch)
            return self._send_delivery(batch, None, None)
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
        # the coordinator's restarts are retried by Ray; the batch is idempotent per (worker, seq)
        try:
            ray.get(report)
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


# The worker loop is synchronous: its Serve handles run their routers in a loop of their own
# (serve.opponents.sync_handle).
RolloutWorker = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.5, max_concurrency=2,
                           **CONTROL_OPTIONS)(RolloutWorkerImpl)
