"""Evaluator: frozen snapshot against frozen snapshot, where the payoff is least certain.

So that the Nash over the pool rests on measured numbers. For games small
enough to enumerate (matrix games, Kuhn and Leduc poker, small perfect-information games such as
tic-tac-toe: ``evaluation.exploitability.is_exact``) the expected score of
a pair is computed exactly (no noise in the meta-game). Where snapshots play their
most probable move (``policy.snapshot_play: greedy``, which needs a deterministic game of
perfect information, Connect Four say), a pair's two games, one in each seat, are the only
games it can play: the evaluator plays them once and records their mean as the exact score
(a pair with a tie among best moves, or a snapshot that samples, is sampled). Otherwise the
pair plays ``evaluator.games_per_pair`` sampled games, half in each seat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict

import numpy as np
import ray
import torch

from actors import heap, priority
from actors.loop import CONTROL_OPTIONS, control, one_loop
from actors.outbox import Outbox
from envs import make_game
from envs.base import utility_range
from league.config import Config
from league.measures import META_NASH_CONV, NASH_CONV
from league.messages import ExactScores, NashMixture, Result, ResultBatch
from league.seeds import generator, seed_int
from monitoring.metrics import LeagueMetrics
from evaluation.exploitability import (exact_nash_conv, is_exact, least_exploitable_mixture, pack_profile,
                                     profile_value, seat_profile, unpack_profile)
from evaluation.game_tree import TooLarge
from policies.net import GreedyPolicy
from policies.rollout import TwoSeatPlay
from policies.snapshot import SnapshotCache, drop_idle

log = logging.getLogger(__name__)

# An exact evaluator scores pairs from the agents' profiles (small, packed one number per own path:
# 192 bytes an agent on Kuhn poker, 17 KB on Leduc, against 45 and 107 KB for its network), kept for
# every agent it scores; of the networks it holds only the last 128 used (a profile is computed once;
# the networks an exploitability round measures are the members of the published mixture and of the
# meta-game Nash (the published one alone had 45 after an hour of Leduc, when 64 held networks meant
# 46 snapshot loads a minute).
EXACT_MODELS_HELD = 128


# With nothing to measure the evaluator asks again after IDLE_SECONDS, doubling up to IDLE_MAX_SECONDS:
# each ask ranks every pair of the pool (O(pool^2) on the coordinator: about 40% of its CPU with
# Leduc's pool at 600, operations.profile), and an exact evaluator idles between new snapshots.
IDLE_SECONDS, IDLE_MAX_SECONDS = 0.5, 4.0


def round_interval(every: float, cpu_seconds: float, share: float) -> float:
    """Seconds from the start of one exploitability round to the next: ``every``, or longer where the
    last round's CPU time would take more than ``share`` of a core (its solves grow with the pool;
    a long run keeps their cost a bounded share of the machine)."""
    return max(every, cpu_seconds / share)


def pace_seconds(cpu_seconds: float, share: float) -> float:
    """Seconds to wait after work that took ``cpu_seconds`` of CPU so that it used at most ``share``
    of a core over the work and the wait together (0 where ``share`` is 1)."""
    return cpu_seconds * (1.0 / share - 1.0)


class EvaluatorImpl:
    def __init__(self, evaluator_id: str, cfg: Config, coordinator, index: int = 0):
        torch.set_num_threads(1)
        heap.fix_mmap_threshold()  # its rounds build and drop arrays of MiBs (actors/heap.py)
        self.evaluator_id = evaluator_id
        self.cfg = cfg
        self.coordinator = coordinator
        self.rng = generator(cfg.run.seed, "evaluator", evaluator_id)
        self.game = make_game(cfg.game.name, max(2, cfg.evaluator.games_per_pair),
                              seed=seed_int(cfg.run.seed, "evaluator", evaluator_id, "game"), **cfg.game.kwargs)
        self.lo, self.hi = utility_range(self.game)
        exact = is_exact(self.game)  # declared, or a small game of perfect information (evaluation.game_tree)
        self.exact = cfg.evaluator.exact and exact
        # greedy snapshots in a deterministic game: each pair's two games decide it (settled_score)
        self.settled = cfg.evaluator.exact and cfg.policy.snapshot_play == "greedy"
        self.pair_game = (make_game(cfg.game.name, 2, seed=seed_int(cfg.run.seed, "evaluator", evaluator_id, "pair"),
                                    **cfg.game.kwargs) if self.settled else None)
        # the one evaluator the config names measures the Nash mixture's exploitability
        self.measures_exploitability = exact and cfg.evaluator.exploitability == index
        held = min(cfg.snapshots.cache_size, EXACT_MODELS_HELD) if self.exact else cfg.snapshots.cache_size
        self.metrics = LeagueMetrics()
        self.cache = SnapshotCache(held, lambda agent_id: ray.get(self.coordinator.get_snapshot.remote(agent_id)),
                                   cfg.snapshots.cache_bytes,
                                   on_load=lambda: self.metrics.inc("snapshot_loads", process="evaluator"),
                                   on_bytes=lambda b: self.metrics.set("snapshot_cache_bytes", b, process="evaluator"),
                                   idle_seconds=cfg.snapshots.cache_idle_seconds)
        # agent id -> its packed profiles in seats 0 and 1 and the time of its last use, least recently used first
        self.profiles: OrderedDict[str, tuple[np.ndarray, np.ndarray, float]] = OrderedDict()
        self._stop = threading.Event()
        self.outbox = Outbox(cfg.run.storage, evaluator_id)  # sampled result batches: exactly once
        self.evaluated = 0
        self.rounds = 0

    @control
    def stop(self) -> None:
        self._stop.set()

    @control
    def get_stats(self) -> dict[str, Any]:
        """This life's work: loop rounds done (idle ones too) and pairs evaluated; games in
        acknowledged result batches (every life)."""
        return {"pid": os.getpid(), "rounds": self.rounds, "evaluated": self.evaluated,
                "results_acked": self.outbox.items}

    def measure_exploitability(self) -> float | None:
        """Exact NashConv of the published mixture, recorded over time. With ``evaluator.publish:
        least_exploitable`` the mixture is first re-solved over the pool's snapshots and published,
        and the meta-game Nash is measured beside it (``meta_nash_conv``)."""
        if self.cfg.evaluator.publish == "least_exploitable":
            try:
                self.publish_least_exploitable()
            except (ValueError, RuntimeError) as exc:  # an LP HiGHS could not solve: keep what is published
                log.warning("%s: least exploitable mixture not published (%s)", self.evaluator_id, exc)
            meta: NashMixture = ray.get(self.coordinator.meta_nash.remote())
            if meta.ids:
                self._measure(meta, META_NASH_CONV)
        nash: NashMixture = ray.get(self.coordinator.nash.remote())
        return self._measure(nash, NASH_CONV) if nash.ids else None

    def _measure(self, nash: NashMixture, kind: str) -> float:
        result = exact_nash_conv(self.game, [self.cache.get(a) for a in nash.ids], nash.weights)
        ray.get(self.coordinator.record_measurement.remote(
            kind, result["nash_conv"], {"pool_version": nash.pool_version, "support": len(nash.ids),
                                        "method": nash.method}))
        return result["nash_conv"]

    def publish_least_exploitable(self) -> NashMixture | None:
        """Solve and publish the mixture of the pool's snapshots with the least exact NashConv."""
        ids, pool_version = ray.get(self.coordinator.publish_candidates.remote(self.cfg.evaluator.publish_candidates))
        if not ids:
            return None
        start = time.perf_counter()
        profiles = [np.stack([self._profile(a, seat) for a in ids]) for seat in (0, 1)]
        incumbent = []
        if not self.game.supports_exact:  # a game of positions weighs its best member against these mixtures
            for mixture in ray.get([self.coordinator.nash.remote(), self.coordinator.meta_nash.remote()]):
                if mixture.ids and set(mixture.ids) <= set(ids):
                    by_id = dict(zip(mixture.ids, mixture.weights))
                    incumbent.append([by_id.get(a, 0.0) for a in ids])
        weights, _ = least_exploitable_mixture(self.game, *profiles, incumbent=incumbent or None)
        return ray.get(self.coordinator.publish.remote(ids, weights.tolist(), pool_version,
                                                       time.perf_counter() - start))

    @one_loop
    def run(self) -> int:
        if not self.exact:  # sampled games yield the cores to learning (exact rounds are short and paced)
            priority.lower_priority(self.cfg.evaluator.nice)
        last_measure, interval = 0.0, self.cfg.run.exploitability_every_seconds
        last_trim, idle = time.time(), IDLE_SECONDS
        pending = self.outbox.pending_batch()
        if pending is not None:  # a past life's batch that was never acknowledged
            self._deliver(pending)
        while not self._stop.is_set():
            if self.measures_exploitability and time.time() - last_measure >= interval:
                last_measure, cpu = time.time(), time.process_time()
                try:
                    self.measure_exploitability()
                except (KeyError, TooLarge, ray.exceptions.RayTaskError) as exc:  # TooLarge: a best response past its cap
                    log.info("%s: exploitability skipped (%s)", self.evaluator_id, exc)
                interval = round_interval(self.cfg.run.exploitability_every_seconds, time.process_time() - cpu,
                                          self.cfg.evaluator.exploitability_cpu_share)
            if time.time() - last_trim >= heap.TRIM_EVERY_SECONDS:  # networks loaded and dropped leave free pages
                heap.trim()
                last_trim = time.time()
            if self._round():
                idle = IDLE_SECONDS
            else:
                self._stop.wait(idle)
                idle = min(2 * idle, IDLE_MAX_SECONDS)
        return self.evaluated

    def measures_once(self) -> bool:
        """Whether each pair is measured once and for all (exact profiles, or a settled pair's two games)."""
        return self.exact or self.settled

    def settle(self, seconds: float = 60.0) -> int:
        """At a stop, after the main agents' last snapshots (the loop has ended): every pair not yet
        measured, measured now, for at most ``seconds``; then the evaluator that measures the
        published mixture's exploitability measures it once more (and, with ``evaluator.publish:
        least_exploitable``, first re-solves and publishes it over the new snapshots), so that what
        is published last is measured. Evaluators that measure each pair once only; returns the
        pairs measured."""
        if not self.measures_once():
            return 0
        before, deadline = self.evaluated, time.time() + seconds
        while time.time() < deadline and self._round():
            pass
        if self.measures_exploitability:
            try:
                if self.cfg.evaluator.publish != "least_exploitable":  # the meta-game Nash over the new snapshots
                    ray.get(self.coordinator.solve_nash.remote())
                self.measure_exploitability()
            except (KeyError, TooLarge, ray.exceptions.RayTaskError) as exc:
                log.info("%s: exploitability at the stop skipped (%s)", self.evaluator_id, exc)
        return self.evaluated - before

    def _round(self) -> bool:
        """Measure the next pairs the coordinator hands out; False when there were none."""
        # exact pairs cost a dot product each once an agent's profiles are known, settled ones two
        # games; both are measured once (snapshots are frozen)
        once = self.measures_once()
        pairs = ray.get(self.coordinator.evaluation_pairs.remote(256 if self.exact else 16 if once else 2, once))
        self.rounds += 1
        if not pairs:
            return False
        try:
            if self.exact:
                ray.get(self.coordinator.record_exact.remote(ExactScores.from_triples(self.exact_scores(pairs))))
            elif self.settled:
                undecided: list[tuple[str, str]] = []
                scores = self.exact_scores(pairs, self.settled_score, undecided)
                if scores:
                    ray.get(self.coordinator.record_exact.remote(ExactScores.from_triples(scores)))
                self.sample(undecided)
            else:
                self.sample(pairs)
        except (KeyError, ray.exceptions.RayTaskError) as exc:
            log.info("%s: pair skipped (%s)", self.evaluator_id, exc)  # an agent was evicted meanwhile
            time.sleep(0.1)
        self.evaluated += len(pairs)
        return True

    def sample(self, pairs) -> None:
        """``games_per_pair`` sampled games of each pair, delivered and stored before the next."""
        for a, b in pairs:
            cpu = time.process_time()
            results = self.sampled_results(a, b)
            # per pair: frozen pairs never decay, so the counts say all the games say
            batch = ResultBatch.from_results(self.evaluator_id, self.outbox.next_seq(), results)
            self.outbox.stage_batch(batch)
            self._deliver(batch)
            self._stop.wait(pace_seconds(time.process_time() - cpu, self.cfg.evaluator.games_cpu_share))

    def _deliver(self, batch: ResultBatch) -> None:
        try:
            ray.get(self.coordinator.report_results.remote(batch))
        except ray.exceptions.RayTaskError:
            self.outbox.drop()  # rejected: not stored, so not owed
            raise
        self.outbox.acked(batch.seq, len(batch))

    def exact_scores(self, pairs: list[tuple[str, str]], score_of=None,
                     undecided: list[tuple[str, str]] | None = None) -> list[tuple[str, str, float]]:
        """Exact scores of the pairs that can be scored (``score_of``: ``exact_score``); a pair whose
        agent was evicted meanwhile, or whose score is not finite (a diverged snapshot), is left
        out, and one that ``score_of`` cannot score exactly (None) is added to ``undecided``."""
        out = []
        for a, b in pairs:
            try:
                score = (score_of or self.exact_score)(a, b)
            except (KeyError, ray.exceptions.RayTaskError) as exc:
                log.info("%s: pair %s/%s skipped (%s)", self.evaluator_id, a, b, type(exc).__name__)
                continue
            if score is None:
                if undecided is not None:
                    undecided.append((a, b))
                continue
            if np.isfinite(score):
                out.append((a, b, float(np.clip(score, 0.0, 1.0))))
            else:
                log.warning("%s: pair %s/%s has no finite score; skipped", self.evaluator_id, a, b)
        return out

    def _profile(self, agent_id: str, seat: int) -> np.ndarray:
        """The agent's exact profile in a seat: both seats' computed once from its network and kept
        (snapshots are frozen), up to ``snapshots.cache_size`` agents, the least recently used dropped,
        and any not used for ``snapshots.cache_idle_seconds`` (as the network cache does)."""
        now = self.cache.clock()  # one clock for an agent's network and its profiles
        drop_idle(self.profiles, now, self.cfg.snapshots.cache_idle_seconds)
        entry = self.profiles.pop(agent_id, None)
        if entry is None:
            model = self.cache.get(agent_id)
            entry = tuple(pack_profile(self.game, seat_profile(self.game, model, s), s) for s in (0, 1)) + (now,)
            while len(self.profiles) >= self.cfg.snapshots.cache_size:
                self.profiles.popitem(last=False)
        self.profiles[agent_id] = (entry[0], entry[1], now)
        return unpack_profile(self.game, entry[seat], seat)

    def exact_score(self, a: str, b: str) -> float:
        """a's expected score against b, averaged over both seats."""
        seat0 = profile_value(self.game, self._profile(a, 0), self._profile(b, 1))  # a in seat 0
        seat1 = -profile_value(self.game, self._profile(b, 0), self._profile(a, 1))  # a in seat 1 (zero-sum)
        norm = lambda r: (r - self.lo) / (self.hi - self.lo)  # noqa: E731
        return 0.5 * (norm(seat0) + norm(seat1))

    @torch.inference_mode()
    def settled_score(self, a: str, b: str) -> float | None:
        """a's exact expected score against b where both are greedy snapshots (``GreedyPolicy``) in a
        deterministic game: the mean of its two games, one in each seat, since each seat has only the
        one game. None where it is not exact: a snapshot that samples (a seed from elsewhere), or a tie
        among a snapshot's best moves on the way (``GreedyPolicy`` shares those)."""
        model_a, model_b = self.cache.get(a), self.cache.get(b)
        if not (isinstance(model_a, GreedyPolicy) and isinstance(model_b, GreedyPolicy)):
            return None

        def best(model, obs, mask):  # the one best move, or None where best moves tie
            probs = model.probs(obs, mask)
            return None if ((probs > 0).sum(axis=1) > 1).any() else probs.argmax(axis=1)

        # a in seat 0 of the first game, in seat 1 of the second
        scores = self._first_episodes(self.pair_game, model_a, model_b, 0, best)
        return None if scores is None else float(scores.mean())

    def sampled_results(self, a: str, b: str) -> list[Result]:
        """``games_per_pair`` games of a against b, half in each seat."""
        sample = lambda model, obs, mask: model.act(obs, mask, generator=self.rng)[0]  # noqa: E731
        scores = self._first_episodes(self.game, self.cache.get(a), self.cache.get(b),
                                      int(self.rng.integers(2**31)), sample)
        return [Result(a, b, float(s)) for s in scores]

    @staticmethod
    def _first_episodes(game, model_a, model_b, seed: int, move) -> np.ndarray | None:
        """a's score in the first episode of each of ``game``'s environments, a in seat ``e % 2`` of
        environment ``e`` (the stepping kernel of the rollout workers; finished environments keep
        playing, only their first episode counts). ``move(model, obs, mask)`` answers the moves of
        the rows still counting, or None to give up (None is returned)."""
        E = game.num_envs
        play = TwoSeatPlay(game, np.arange(E) % 2)  # a is the focal side
        game.reset(seed)
        done = np.zeros(E, dtype=bool)
        scores = np.zeros(E)
        while not done.all():
            mine, theirs = play.decisions()
            acts = []
            for side, model in ((mine, model_a), (theirs, model_b)):
                out = np.zeros(len(side), dtype=np.int64)
                counting = ~done[side.rows]
                if counting.any():
                    chosen = move(model, side.obs[counting], side.mask[counting])
                    if chosen is None:
                        return None
                    out[counting] = chosen
                if (~counting).any():
                    out[~counting] = side.mask[~counting].argmax(axis=1)  # first legal action
                acts.append(out)
            finished = play.step(mine, acts[0], theirs, acts[1])
            new = ~done[finished.rows]
            scores[finished.rows[new]] = finished.scores[new]
            done[finished.rows] = True
        return scores


Evaluator = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.25, max_concurrency=2,
                       **CONTROL_OPTIONS)(EvaluatorImpl)
