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
        self.game = make_game(cfg.game.name, cfg.rollout.envs_per_worker, seed=seed, **cfg.game.params)
        self.lo, self.hi = utility_range(self.game)
        self.opponents = opponents or InProcessOpponents(
            lambda a: ray.get(coordinator.get_snapshot.remote(a)), capacity=64, seed=seed)
        self.live: dict[str, tuple[int, Any]] = {}  # learner id -> (version, model)
        self._stop = threading.Event()
        # A restarted worker must not reuse sequence numbers of its past life.
        self.seq = int(time.time() * 1000) * 1000
        self.stats = {"env_steps": 0, "episodes": 0, "submitted": 0}

    # -- weights -------------------------------------------------------------
    def _refresh(self, learner_id: str, block: bool) -> None:
        version = self.live.get(learner_id, (-1, None))[0]
        ref = self.learners[learner_id].get_weights.remote(version)
        if not block:
            ready, _ = ray.wait([ref], timeout=0.05)
            if not ready:
                self._pending_refresh.append((learner_id, ref))
                return
        self._apply_weights(learner_id, ray.get(ref))

    def _apply_weights(self, learner_id: str, reply) -> None:
        version, blob = reply
        if blob is not None:
            model = policy_from_bytes(blob)
            model.eval()
            self.live[learner_id] = (version, model)

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
        return dict(self.stats)

    # -- the loop ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg.rollout
        game, E = self.game, self.game.num_envs
        self._pending_refresh: list = []
        self._refresh(self.learner_id, block=True)
        queue: list[tuple[str, bool]] = []
        pending_matches = None

        def next_match() -> tuple[str, bool]:
            nonlocal pending_matches
            if len(queue) < E // 2 + 1 and pending_matches is None:
                pending_matches = self.coordinator.next_matches.remote(self.learner_id, max(E, cfg.matches_per_request))
            if not queue:
                queue.extend((o, live) for o, live, _ in ray.get(pending_matches))
                pending_matches = None
            return queue.pop()

        opp = np.empty(E, dtype=object)
        opp_live = np.zeros(E, dtype=bool)
        for e in range(E):
            opp[e], opp_live[e] = next_match()
        seat = self.rng.integers(0, 2, size=E)
        episode = np.arange(E, dtype=np.int64)
        next_episode = E
        decisions = np.zeros(E, dtype=np.int64)
        recorder = EpisodeRecorder()
        results: list[tuple[str, str, float]] = []
        inflight: list = []
        report_ref = None
        env_steps_unreported = 0
        last_report = time.time()
        submit_every = max(64, cfg.steps_per_batch // max(1, cfg.workers_per_learner))

        while not self._stop.is_set():
            if pending_matches is not None:
                ready, _ = ray.wait([pending_matches], timeout=0)
                if ready:
                    queue.extend((o, live) for o, live, _ in ray.get(pending_matches))
                    pending_matches = None
            self._poll_refreshes()
            movers = game.movers()
            actions = np.full((E, 2), NO_ACTION, dtype=np.int64)
            for s in (0, 1):
                acting = movers[:, s]
                mine = np.flatnonzero(acting & (seat == s))
                theirs = np.flatnonzero(acting & (seat != s))
                if mine.size:
                    obs, mask = game.observe(s, mine)
                    a, logp, v = self.live[self.learner_id][1].act(obs, mask, generator=self.rng)
                    actions[mine, s] = a
                    recorder.add(episode[mine], obs, mask, a, logp, v)
                    decisions[mine] += 1
                if theirs.size:
                    obs, mask = game.observe(s, theirs)
                    self._opponent_actions(theirs, obs, mask, opp, opp_live, actions, s)
            result = game.step(actions)
            env_steps_unreported += E
            self.stats["env_steps"] += E
            for e in np.flatnonzero(result.done).tolist():
                score0 = float(score_from_returns(result.returns[e], self.lo, self.hi))
                score = score0 if seat[e] == 0 else 1.0 - score0
                results.append((self.learner_id, str(opp[e]), score))
                if decisions[e]:
                    recorder.finish(int(episode[e]), float(result.returns[e, seat[e]]), int(decisions[e]))
                decisions[e] = 0
                episode[e] = next_episode
                next_episode += 1
                seat[e] = self.rng.integers(0, 2)
                opp[e], opp_live[e] = next_match()
                self.stats["episodes"] += 1
            if recorder.steps >= submit_every:
                inflight = self._submit(recorder.take(), inflight, cfg.max_inflight_batches)
            if len(results) >= cfg.results_batch_size or (results and time.time() - last_report > 2.0):
                report_ref = self._report(results, env_steps_unreported, report_ref)
                results, env_steps_unreported, last_report = [], 0, time.time()
        # flush: everything finished reaches the coordinator before run() returns
        report_ref = self._report(results, env_steps_unreported, report_ref)
        if report_ref is not None:
            ray.get(report_ref)
        ray.get(inflight)
        return self.get_stats()

    def _opponent_actions(self, envs, obs, mask, opp, opp_live, actions, seat) -> None:
        ids = opp[envs]
        live = opp_live[envs]
        frozen_groups, frozen_rows = [], []
        for agent_id in np.unique(ids).tolist():
            rows = np.flatnonzero(ids == agent_id)
            if live[rows[0]]:
                if agent_id not in self.live:
                    self._refresh(agent_id, block=True)
                elif agent_id != self.learner_id and self.rng.random() < 0.01:
                    self._refresh(agent_id, block=False)
                a, _, _ = self.live[agent_id][1].act(obs[rows], mask[rows], generator=self.rng)
                actions[envs[rows], seat] = a
            else:
                frozen_groups.append((agent_id, obs[rows], mask[rows]))
                frozen_rows.append(rows)
        if frozen_groups:
            for rows, a in zip(frozen_rows, self.opponents.act(frozen_groups)):
                actions[envs[rows], seat] = a

    def _submit(self, rollout: Rollout | None, inflight: list, limit: int) -> list:
        if rollout is None:
            return inflight
        while len(inflight) >= limit:  # backpressure: wait for the learner
            ready, inflight = ray.wait(inflight, num_returns=1)
            reply = ray.get(ready[0])
            if reply["version"] != self.live[self.learner_id][0]:
                self._refresh(self.learner_id, block=False)
        inflight.append(self.learners[self.learner_id].submit.remote(rollout.to_dict()))
        self.stats["submitted"] += len(rollout)
        done, inflight = ray.wait(inflight, num_returns=len(inflight), timeout=0)
        for ref in done:
            if ray.get(ref)["version"] != self.live[self.learner_id][0]:
                self._refresh(self.learner_id, block=False)
        return inflight

    def _report(self, results, env_steps: int, previous):
        if previous is not None:
            ray.get(previous)  # one batch in flight; the coordinator retries on restart
        if not results and not env_steps:
            return None
        self.seq += 1
        return self.coordinator.report_results.remote(self.worker_id, self.seq, results, env_steps)


RolloutWorker = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.5, max_concurrency=2)(RolloutWorkerImpl)
