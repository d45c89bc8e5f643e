"""Evaluator: frozen snapshot against frozen snapshot, where the payoff is least certain.

So that the Nash over the pool rests on measured numbers. For games small
enough to enumerate (matrix games, Kuhn and Leduc poker) the expected score of
a pair is computed exactly (no noise in the meta-game); otherwise the pair
plays ``evaluator.games_per_pair`` sampled games, half in each seat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import ray
import torch

from envs import make_game
from envs.base import NO_ACTION, score_from_returns, utility_range
from league.config import Config
from league.messages import ExactScores, NashView, ResultBatch
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)

EXACT_OPENSPIEL = ("kuhn_poker", "leduc_poker")


class EvaluatorImpl:
    def __init__(self, evaluator_id: str, cfg: Config, coordinator, seed: int = 0):
        torch.set_num_threads(1)
        self.evaluator_id = evaluator_id
        self.cfg = cfg
        self.coordinator = coordinator
        self.rng = np.random.default_rng(seed)
        self.game = make_game(cfg.game.name, max(2, cfg.evaluator.games_per_pair), seed=seed, **cfg.game.params)
        self.lo, self.hi = utility_range(self.game)
        self.exact = cfg.evaluator.exact and (hasattr(self.game, "payoff") or cfg.game.name in EXACT_OPENSPIEL)
        self.models: OrderedDict[str, Any] = OrderedDict()
        self.reach: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()  # agent -> per-seat reach vectors
        self._stop = threading.Event()
        self.seq = int(time.time() * 1000) * 1000
        self.evaluated = 0

    def stop(self) -> None:
        self._stop.set()

    def _model(self, agent_id: str):
        if agent_id not in self.models:
            self.models[agent_id] = policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(agent_id)))
            if len(self.models) > 256:
                self.models.popitem(last=False)
        return self.models[agent_id]

    def measure_exploitability(self) -> float | None:
        """Exact NashConv of the current Nash mixture (Kuhn, Leduc), recorded over time."""
        from policies.exploitability import nash_conv_of_mixture

        nash: NashView = ray.get(self.coordinator.nash.remote())
        if not nash.members:
            return None
        ids = nash.ids
        result = nash_conv_of_mixture(self.cfg.game.name, [self._model(a) for a in ids], nash.weights)
        ray.get(self.coordinator.record_measurement.remote(
            "nash_conv", result["nash_conv"], {"pool_version": nash.pool_version, "support": len(ids)}))
        return result["nash_conv"]

    def run(self) -> int:
        measure = self.cfg.game.name in EXACT_OPENSPIEL and self.evaluator_id.endswith(":0")
        last_measure = 0.0
        while not self._stop.is_set():
            if measure and time.time() - last_measure >= self.cfg.run.exploitability_every_seconds:
                last_measure = time.time()
                try:
                    self.measure_exploitability()
                except (KeyError, ray.exceptions.RayTaskError) as exc:
                    log.info("%s: exploitability skipped (%s)", self.evaluator_id, exc)
            # exact pairs cost a dot product each once an agent's reach vectors are known, and
            # are measured once (snapshots are frozen)
            pairs = ray.get(self.coordinator.evaluation_pairs.remote(256 if self.exact else 2, self.exact))
            if not pairs:
                time.sleep(0.5)
                continue
            try:
                if self.exact:
                    ray.get(self.coordinator.record_exact.remote(ExactScores.from_triples(self.exact_scores(pairs))))
                else:
                    for a, b in pairs:
                        self.seq += 1
                        batch = ResultBatch.from_results(self.evaluator_id, self.seq, self.sampled_results(a, b))
                        ray.get(self.coordinator.report_results.remote(batch))
            except (KeyError, ray.exceptions.RayTaskError) as exc:
                log.info("%s: pair skipped (%s)", self.evaluator_id, exc)  # an agent was evicted meanwhile
                time.sleep(0.1)
            self.evaluated += len(pairs)
        return self.evaluated

    def exact_scores(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str, float]]:
        """Exact scores of the pairs that can be scored; a pair whose agent was evicted
        meanwhile, or whose score is not finite (a diverged snapshot), is left out."""
        out = []
        for a, b in pairs:
            try:
                score = self.exact_score(a, b)
            except (KeyError, ray.exceptions.RayTaskError) as exc:
                log.info("%s: pair %s/%s skipped (%s)", self.evaluator_id, a, b, type(exc).__name__)
                continue
            if np.isfinite(score):
                out.append((a, b, float(np.clip(score, 0.0, 1.0))))
            else:
                log.warning("%s: pair %s/%s has no finite score; skipped", self.evaluator_id, a, b)
        return out

    def exact_score(self, a: str, b: str) -> float:
        """a's expected score against b, averaged over both seats."""
        ma, mb = self._model(a), self._model(b)
        if hasattr(self.game, "payoff"):
            pa = ma.probs(*self.game.observe(0, np.arange(1)))[0][: self.game.payoff.shape[0]]
            pb = mb.probs(*self.game.observe(1, np.arange(1)))[0][: self.game.payoff.shape[1]]
            pa1 = ma.probs(*self.game.observe(1, np.arange(1)))[0][: self.game.payoff.shape[1]]
            pb0 = mb.probs(*self.game.observe(0, np.arange(1)))[0][: self.game.payoff.shape[0]]
            r_ab, r_ba = float(pa @ self.game.payoff @ pb), float(pb0 @ self.game.payoff @ pa1)
            seat0, seat1 = r_ab, -r_ba
        else:
            from policies.exploitability import returns_from_reach

            (a0, a1), (b0, b1) = self._reach(a, ma), self._reach(b, mb)
            seat0 = float(returns_from_reach(self.cfg.game.name, a0, b1))  # a in seat 0
            seat1 = -float(returns_from_reach(self.cfg.game.name, b0, a1))  # a in seat 1 (zero-sum)
        norm = lambda r: (r - self.lo) / (self.hi - self.lo)  # noqa: E731
        return 0.5 * (norm(seat0) + norm(seat1))

    def _reach(self, agent_id: str, model) -> tuple[np.ndarray, np.ndarray]:
        """Reach of every terminal history from the agent's own decisions, per seat (cached:
        snapshots are frozen)."""
        from policies.exploitability import reach_vector

        r = self.reach.get(agent_id)
        if r is None:
            r = self.reach[agent_id] = (reach_vector(self.cfg.game.name, model, 0),
                                        reach_vector(self.cfg.game.name, model, 1))
            if len(self.reach) > 1024:
                self.reach.popitem(last=False)
        return r

    def sampled_results(self, a: str, b: str) -> list[tuple[str, str, float]]:
        game, E = self.game, self.game.num_envs
        models = (self._model(a), self._model(b))
        seat_of_a = np.arange(E) % 2  # half the games in each seat
        game.reset(int(self.rng.integers(2**31)))
        done = np.zeros(E, dtype=bool)
        scores = np.zeros(E)
        while not done.all():
            movers = game.movers()
            actions = np.full((E, 2), NO_ACTION, dtype=np.int64)
            for s in (0, 1):
                for who, model in enumerate(models):
                    rows = np.flatnonzero(movers[:, s] & ((seat_of_a == s) == (who == 0)) & ~done)
                    if rows.size:
                        obs, mask = game.observe(s, rows)
                        actions[rows, s] = model.act(obs, mask, generator=self.rng)[0]
            # finished envs keep playing new episodes; only the first one counts
            for s in (0, 1):
                idle = movers[:, s] & (actions[:, s] == NO_ACTION)
                if idle.any():
                    obs, mask = game.observe(s, np.flatnonzero(idle))
                    actions[idle, s] = [int(np.flatnonzero(m)[0]) for m in mask]
            result = game.step(actions)
            new = result.done & ~done
            score0 = score_from_returns(result.returns, self.lo, self.hi)
            scores[new] = np.where(seat_of_a[new] == 0, score0[new], 1.0 - score0[new])
            done |= result.done
        return [(a, b, float(s)) for s in scores]


Evaluator = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0.25, max_concurrency=2)(EvaluatorImpl)
