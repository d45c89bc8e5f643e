"""RolloutWorker: steps a vector of environments for one learner, forever.

Each environment plays the learner's current policy (refreshed by version)
in a random seat against the opponent the coordinator assigned to it; when an
episode ends the environment takes the next assignment from a local queue
that is refilled asynchronously. The learner's transitions of finished
episodes go to the learner in batches, with at most
``rollout.max_inflight_batches`` unacknowledged (backpressure); outcomes go to
the coordinator in numbered batches (idempotent on retry).
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
from envs import make_game
from envs.base import NO_ACTION, score_from_returns, utility_range
from league.config import Config
from league.messages import MatchAssignments, ResultBatch, WeightsReply
from policies.rollout import Rollout
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)


class EpisodeRecorder:
    """Learner-side decisions of running episodes; hands out finished ones.

    Rows are kept in arrival order with their episode id; ``take`` returns the
    rows of finished episodes grouped per episode (in time order) with the
    terminal return as the reward of each episode's last decision, and keeps
    the rows of episodes still running.
    """

    def __init__(self):
        self.chunks: list[tuple[np.ndarray, ...]] = []
        self.returns: dict[int, float] = {}
        self.steps = 0  # decisions in finished episodes

    def add(self, episode, obs, mask, actions, logp, values) -> None:
        self.chunks.append((episode, obs, mask, actions, logp, values))

    def finish(self, episode: int, learner_return: float, decisions: int) -> None:
        self.returns[episode] = learner_return
        self.steps += decisions

    def take(self) -> Rollout | None:
        if not self.chunks or not self.returns:
            return None
        ep, obs, mask, act, logp, val = (np.concatenate(c) for c in zip(*self.chunks))
        done_eps = np.fromiter(self.returns, dtype=np.int64)
        finished = np.isin(ep, done_eps)
        keep = ~finished
        self.chunks = [(ep[keep], obs[keep], mask[keep], act[keep], logp[keep], val[keep])] if keep.any() else []
        idx = np.flatnonzero(finished)
        idx = idx[np.argsort(ep[idx], kind="stable")]
        eps = ep[idx]
        last = np.ones(len(idx), dtype=bool)
        last[:-1] = eps[1:] != eps[:-1]
        rewards = np.zeros(len(idx), dtype=np.float32)
        rewards[last] = [self.returns[e] for e in eps[last].tolist()]
        self.returns, self.steps = {}, 0
        if not len(idx):
            return None
        return Rollout(obs=obs[idx], mask=mask[idx], actions=act[idx], logp=logp[idx], values=val[idx],
                       rewards=rewards, dones=last)


class ResultColumns:
    """Finished games of the worker's learner, kept as columns until reported as
    one ``league.messages.ResultBatch``."""

    def __init__(self):
        self.opponents: list[np.ndarray] = []  # the worker's opponent codes
        self.scores: list[np.ndarray] = []
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, opponents: np.ndarray, scores: np.ndarray) -> None:
        self.opponents.append(opponents)
        self.scores.append(scores)
        self.n += len(opponents)

    def take(self, source: str, seq: int, learner_id: str, names: list[str], env_steps: int,
             action_counts: dict[str, np.ndarray]) -> ResultBatch:
        codes = np.concatenate(self.opponents) if self.opponents else np.zeros(0, dtype=np.int64)
        scores = np.concatenate(self.scores) if self.scores else np.zeros(0)
        used, b = np.unique(codes, return_inverse=True)
        self.opponents, self.scores, self.n = [], [], 0
        return ResultBatch(source, seq, (learner_id, *(names[c] for c in used.tolist())),
                           np.zeros(len(codes), dtype=np.int64), b.astype(np.int64).reshape(-1) + 1,
                           scores.astype(np.float64), env_steps, action_counts)


class Lane:
    """A sub-vector of environments with its own assignments.

    The worker alternates between lanes: while one lane's opponent requests
    are in flight (served inference), it steps another.
    """

    def __init__(self, game, rng: np.random.Generator):
        E = game.num_envs
        self.game = game
        self.seat = rng.integers(0, 2, size=E)
        self.episode = np.zeros(E, dtype=np.int64)
        self.decisions = np.zeros(E, dtype=np.int64)
        self.opp = np.zeros(E, dtype=np.int64)  # the worker's code of each env's opponent
        self.opp_live = np.zeros(E, dtype=bool)
        self.actions = np.full((E, 2), NO_ACTION, dtype=np.int64)
        self.prepared = False  # actions chosen, opponents' request sent, step not yet taken
        self.pending = None  # opponent inference in flight
        self.targets: list[tuple[np.ndarray, int]] = []  # env rows and seat of the pending request's rows


class RolloutWorkerImpl:
    def __init__(self, worker_id: str, learner_id: str, cfg: Config, coordinator, learners: dict[str, Any],
                 seed: int = 0, opponents=None):
        torch.set_num_threads(1)
        self.worker_id = worker_id
        self.learner_id = learner_id
        self.cfg = cfg
        self.coordinator = coordinator
        self.learners = learners  # learner id -> actor handle (for live opponents)
        self.rng = np.random.default_rng(seed)
        served = cfg.rollout.opponent_inference == "serve"
        n_lanes = cfg.rollout.lanes if served else 1
        per_lane = max(1, cfg.rollout.envs_per_worker // n_lanes)
        self.lanes = [Lane(make_game(cfg.game.name, per_lane, seed=seed * 7 + i, **cfg.game.params), self.rng)
                      for i in range(n_lanes)]
        self.num_actions = self.lanes[0].game.num_actions
        self.lo, self.hi = utility_range(self.lanes[0].game)
        if opponents is not None:
            self.opponents = opponents
        elif served:
            from serve.opponents import ServedOpponents

            self.opponents = ServedOpponents()
        else:
            self.opponents = InProcessOpponents(lambda a: ray.get(coordinator.get_snapshot.remote(a)),
                                                capacity=cfg.serve.lru_size,
                                                seed=seed)
        self.live: dict[str, tuple[int, Any]] = {}  # learner id -> (version, model)
        self._names: list[str] = []  # opponent ids by code: lanes keep small ints, not strings
        self._codes: dict[str, int] = {}
        self._stop = threading.Event()
        # A restarted worker must not reuse sequence numbers of its past life.
        self.seq = int(time.time() * 1000) * 1000
        # Acknowledged result batches of this life: seqs first_seq+1 .. last_acked_seq, each one the coordinator
        # committed before replying (the node-loss test counts them in the store, exactly).
        self.stats = {"env_steps": 0, "episodes": 0, "submitted": 0, "branches": {}, "first_seq": self.seq,
                      "last_acked_seq": None, "results_acked": 0, "games_acked": 0}
        self._pending_refresh: list = []

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
        """Env steps, episodes, transitions submitted, and matches taken per matchmaking branch."""
        return {**self.stats, "branches": dict(self.stats["branches"])}

    # -- assignments -------------------------------------------------------------
    def _next_matches(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` assignments: opponent codes and whether each opponent is live."""
        taken: list[tuple[int, bool]] = []
        while len(taken) < k:
            if len(self._queue) < self._want // 2 + 1 and self._pending_matches is None:
                self._pending_matches = self.coordinator.next_matches.remote(self.learner_id, self._want)
            if not self._queue:
                self._take_matches(block=True)
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

    def _take_matches(self, block: bool) -> None:
        if self._pending_matches is None:
            return
        if not block and not ray.wait([self._pending_matches], timeout=0)[0]:
            return
        reply: MatchAssignments = ray.get(self._pending_matches)
        self._pending_matches = None
        codes = [self._code(o) for o in reply.opponents]
        self._queue.extend((codes[k], bool(reply.live[k])) for k in reply.opponent.tolist())
        branches = self.stats["branches"]
        for name, n in reply.branch_counts().items():
            branches[name] = branches.get(name, 0) + n

    # -- the loop ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg.rollout
        self._pending_refresh = []
        self._refresh(self.learner_id, block=True)
        self._queue: list[tuple[int, bool]] = []
        self._pending_matches = None
        self._want = max(sum(l.game.num_envs for l in self.lanes), cfg.matches_per_request)
        self._next_episode = 0
        for lane in self.lanes:
            E = lane.game.num_envs
            lane.opp[:], lane.opp_live[:] = self._next_matches(E)
            lane.episode[:] = np.arange(self._next_episode, self._next_episode + E)
            self._next_episode += E
            lane.decisions[:] = 0
            lane.pending, lane.prepared = None, False
        self._recorder = EpisodeRecorder()
        self._results = ResultColumns()
        self._action_counts = np.zeros(self.num_actions)
        self._env_steps = 0
        inflight: list = []
        report_ref = None
        last_report = time.time()
        submit_every = max(64, cfg.steps_per_batch // max(1, cfg.workers_per_learner))

        while not self._stop.is_set():
            self._take_matches(block=False)
            self._poll_refreshes()
            for lane in self.lanes:
                if lane.prepared:
                    self._finish(lane)
                self._prepare(lane)
            if self._recorder.steps >= submit_every:
                inflight = self._submit(self._recorder.take(), inflight, cfg.max_inflight_batches)
            if len(self._results) >= cfg.results_batch_size or (self._results and time.time() - last_report > 2.0):
                report_ref = self._report(report_ref)
                last_report = time.time()
        for lane in self.lanes:
            if lane.prepared:
                self._finish(lane)
        # flush: everything finished reaches the coordinator before run() returns
        report_ref = self._report(report_ref)
        self._acknowledged(report_ref)
        ray.get(inflight)
        return self.get_stats()

    def _prepare(self, lane: Lane) -> None:
        """Choose the learner's actions and send the opponents' request of one lane.

        All frozen-opponent decisions of the lane (both seats, every opponent)
        go out as one request; live opponents (learners' current weights) act here.
        """
        game = lane.game
        movers = game.movers()
        lane.actions = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
        targets, parts = [], []
        for s in (0, 1):
            acting = movers[:, s]
            mine = np.flatnonzero(acting & (lane.seat == s))
            theirs = np.flatnonzero(acting & (lane.seat != s))
            if mine.size:
                obs, mask = game.observe(s, mine)
                a, logp, v = self.live[self.learner_id][1].act(obs, mask, generator=self.rng)
                lane.actions[mine, s] = a
                self._recorder.add(lane.episode[mine], obs, mask, a, logp, v)
                self._action_counts += np.bincount(a, minlength=self.num_actions)
                lane.decisions[mine] += 1
            if theirs.size:
                live = lane.opp_live[theirs]
                if live.any():
                    self._act_live(lane, theirs[live], s)
                    theirs = theirs[~live]
                if theirs.size:
                    targets.append((theirs, s))
                    parts.append(game.observe(s, theirs))
        lane.targets = targets
        lane.prepared = True
        if not targets:
            lane.pending = None
            return
        rows = np.concatenate([t[0] for t in targets])
        codes, local = np.unique(lane.opp[rows], return_inverse=True)
        obs = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        mask = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
        lane.pending = self.opponents.submit([self._names[c] for c in codes.tolist()], local, obs, mask)

    def _act_live(self, lane: Lane, rows: np.ndarray, s: int) -> None:
        obs, mask = lane.game.observe(s, rows)
        codes = lane.opp[rows]
        for code in np.unique(codes).tolist():
            sel = codes == code
            lane.actions[rows[sel], s] = self._live_actions(self._names[code], obs[sel], mask[sel])

    def _live_actions(self, agent_id: str, obs, mask) -> np.ndarray:
        if agent_id not in self.live:
            self._refresh(agent_id, block=True)
        elif agent_id != self.learner_id and self.rng.random() < 0.01:
            self._refresh(agent_id, block=False)
        return self.live[agent_id][1].act(obs, mask, generator=self.rng)[0]

    def _finish(self, lane: Lane) -> None:
        """Collect the opponents' actions of one lane, step it, and book finished episodes."""
        if lane.pending is not None:
            actions = self.opponents.result(lane.pending)
            start = 0
            for rows, s in lane.targets:
                lane.actions[rows, s] = actions[start:start + len(rows)]
                start += len(rows)
        lane.pending, lane.prepared = None, False
        result = lane.game.step(lane.actions)
        E = lane.game.num_envs
        self._env_steps += E
        self.stats["env_steps"] += E
        done = np.flatnonzero(result.done)
        if not done.size:
            return
        seat = lane.seat[done]
        score0 = score_from_returns(result.returns[done], self.lo, self.hi)
        scores = np.where(seat == 0, score0, 1.0 - score0)
        self._results.add(lane.opp[done], scores)
        played = lane.decisions[done] > 0
        for e, ret, n in zip(lane.episode[done][played].tolist(), result.returns[done[played], seat[played]].tolist(),
                             lane.decisions[done][played].tolist()):
            self._recorder.finish(e, ret, n)
        lane.decisions[done] = 0
        lane.episode[done] = np.arange(self._next_episode, self._next_episode + done.size)
        self._next_episode += done.size
        lane.seat[done] = self.rng.integers(0, 2, size=done.size)
        lane.opp[done], lane.opp_live[done] = self._next_matches(done.size)
        self.stats["episodes"] += int(done.size)

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

    def _acknowledged(self, pending) -> None:
        if pending is None:
            return
        ref, seq, games = pending
        ray.get(ref)  # one batch in flight; the coordinator retries on restart
        self.stats["results_acked"] += 1
        self.stats["games_acked"] += games
        self.stats["last_acked_seq"] = seq

    def _report(self, previous):
        self._acknowledged(previous)
        if not self._results and not self._env_steps:
            return None
        self.seq += 1
        games = len(self._results)
        batch = self._results.take(self.worker_id, self.seq, self.learner_id, self._names, self._env_steps,
                                   {self.learner_id: self._action_counts})
        ref = self.coordinator.report_results.remote(batch)
        self._env_steps = 0
        self._action_counts = np.zeros(self.num_actions)
        return ref, self.seq, games


# The worker loop is synchronous: its Serve handle must run its router in a separate
# event loop, which RAY_SERVE_THROUGHPUT_OPTIMIZED=1 turns off by default.
RolloutWorker = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.5, max_concurrency=2,
                           runtime_env={"env_vars": {"RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "1"}})(RolloutWorkerImpl)
