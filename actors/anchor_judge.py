"""Anchor judge: how strong the league is in absolute terms, against opponents that never learn.

Payoffs and Elo inside the league are relative. Every round this actor plays
``evaluator.anchor_games`` whole games of two subjects against every anchor of
the config (``anchors``: ``uniform``, ``mcts:N``, ``pkg.module:factory``;
``evaluation.anchors.score_against``, seats alternating): ``published``, the
league's published Nash mixture (one member drawn per game by its weight), and
``newest_main``, the newest main-agent snapshot in the pool, and with
``search.simulations`` set, ``published_search``: the published mixture with each
member searching that many positions a move (``evaluation.search``), over
``search.anchor_games`` games per anchor where set. Each score is
recorded as the measurement ``anchor:<subject>:<anchor>``, and, where anchors
have fixed ratings (``anchor_elo``; ``uniform`` is 1000), each subject's
maximum-likelihood rating over those games as ``anchor_elo:<subject>``
(``league.anchors``), in the spirit of AlphaStar's evaluation against scripted
opponents of fixed rating (Vinyals et al. 2019). In a team game a round ends with
one more game of the published mixture's heaviest member against the last anchor
of the config, seats alternating by round, whose agents standing at every step
are recorded as ``team_trace`` (``evaluation.anchors.survivors_trace``): the
league page draws it.

Anchors are never training opponents: nothing here reaches matchmaking. The
first round plays as soon as the pool has a subject; each later one starts
``evaluator.anchor_every_seconds`` after the previous one ended, and no sooner
than keeps the judge within ``evaluator.anchor_num_cpus`` of a core, the share
Ray reserves for it (``next_round_at``): a round plays on one core (the MCTS bots
are OpenSpiel's C++, single-threaded), and its games grow longer as the league
learns to resist the bots, so a fixed pause alone would let its share grow.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import ray
import torch

from actors.loop import CONTROL_OPTIONS, control, one_loop
from envs import game_info
from league.anchors import anchor_ratings, anchored_elo
from league.config import Config
from league.measures import (NEWEST_MAIN, PUBLISHED, PUBLISHED_SEARCH, TEAM_TRACE, anchor_elo_kind,
                             anchor_score_kind)
from league.pool import AgentType
from evaluation.anchors import score_against, survivors_trace
from evaluation.search import SearchSpec
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)


def next_round_at(start: float, end: float, cpu_seconds: float, every: float, share: float) -> float:
    """When the next round may start, after one that ran from ``start`` to ``end`` using
    ``cpu_seconds``: ``every`` seconds after it ended, and no sooner than the round's CPU time is
    ``share`` of a core since it started (``share`` 0: no bound)."""
    return max(end + every, start + cpu_seconds / share) if share > 0 else end + every


class AnchorJudgeImpl:
    def __init__(self, cfg: Config, coordinator, seed: int = 0):
        torch.set_num_threads(1)
        self.cfg = cfg
        self.coordinator = coordinator
        self.seed = int(seed)
        self.ratings = anchor_ratings(cfg.anchors, cfg.anchor_elo)
        self.team_game = game_info(cfg.game.name, **cfg.game.kwargs).team_size > 1
        self.search = cfg.search if cfg.search.simulations else None
        self._stop = threading.Event()
        self.rounds = 0  # loop turns, idle ones too (as Evaluator.get_stats)
        self.judged = 0  # rounds that scored at least one subject

    @control
    def get_stats(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "rounds": self.rounds, "judged": self.judged}

    @control
    def stop(self) -> None:
        self._stop.set()

    def _subjects(self) -> list[tuple[str, list[str], list, list[float], int, SearchSpec | None]]:
        """(subject, agent ids, models, weights, pool_version, search) of each subject that exists yet."""
        out = []
        nash = ray.get(self.coordinator.nash.remote())
        if nash.ids:
            models = [policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(i))) for i in nash.ids]
            weights = [float(w) for w in nash.weights]
            out.append((PUBLISHED, nash.ids, models, weights, nash.pool_version, None))
            if self.search is not None:
                out.append((PUBLISHED_SEARCH, nash.ids, models, weights, nash.pool_version, self.search))
        main = AgentType.main()
        mains = [a for a in ray.get(self.coordinator.pool.remote()) if a["agent_type"] == main]
        if mains:
            newest = mains[-1]["agent_id"]  # the pool lists oldest first
            model = policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(newest)))
            out.append((NEWEST_MAIN, [newest], [model], [1.0], nash.pool_version, None))
        return out

    def judge_once(self) -> dict[str, dict[str, Any]]:
        """Score every subject against every anchor and record it; ``{subject: {anchor: score, "elo": r}}``."""
        cfg, games = self.cfg, self.cfg.evaluator.anchor_games
        out: dict[str, dict[str, Any]] = {}
        for subject, ids, models, weights, pool_version, search in self._subjects():
            scored = out.setdefault(subject, {})
            rated = []
            n = search.games_per_anchor(games) if search is not None else games
            for j, anchor in enumerate(cfg.anchors):
                if self._stop.is_set():  # a stop waits for one anchor's games at most
                    return out
                start = time.perf_counter()
                res = score_against(cfg.game.name, cfg.game.kwargs, models, weights, anchor, n,
                                    seed=self.seed + 1000 * self.judged + j, search=search)
                data = {"anchor": anchor, "subject": subject, "agents": ids, "ci95": res["ci95"],
                        "games": res["games"], "pool_version": pool_version,
                        "seconds": time.perf_counter() - start}
                ray.get(self.coordinator.record_measurement.remote(anchor_score_kind(subject, anchor), res["score"], data))
                scored[anchor] = res["score"]
                if anchor in self.ratings:
                    rated.append((self.ratings[anchor], res["score"], res["games"]))
            if rated:
                elo = anchored_elo(rated)
                ray.get(self.coordinator.record_measurement.remote(anchor_elo_kind(subject), elo, {
                    "subject": subject, "agents": ids, "pool_version": pool_version,
                    "anchors": {a: self.ratings[a] for a in cfg.anchors if a in self.ratings},
                    "games": sum(n for _, _, n in rated)}))
                scored["elo"] = elo
            if subject == PUBLISHED and self.team_game and cfg.anchors:
                self._trace(ids, models, weights, pool_version)
        if out:
            self.judged += 1
        return out

    def _trace(self, ids: list[str], models: list, weights: list[float], pool_version: int) -> None:
        """One game of the heaviest member against the last anchor, with its survivors at every step."""
        best = max(range(len(ids)), key=lambda i: weights[i])
        trace = survivors_trace(self.cfg.game.name, self.cfg.game.kwargs, models[best], self.cfg.anchors[-1],
                                seat=self.judged % 2, seed=self.seed + 1000 * self.judged + 999)
        ray.get(self.coordinator.record_measurement.remote(TEAM_TRACE, trace["score"], {
            **trace, "agent": ids[best], "pool_version": pool_version}))

    @one_loop
    def run(self) -> int:
        every = self.cfg.evaluator.anchor_every_seconds
        next_at = time.time()  # the first round as soon as the pool has a subject
        while not self._stop.wait(timeout=max(0.0, min(1.0, next_at - time.time()))):
            self.rounds += 1
            if time.time() < next_at:
                continue
            judged = {}
            start, cpu = time.time(), time.process_time()
            try:
                judged = self.judge_once()
            except (KeyError, ValueError, ray.exceptions.RayTaskError) as exc:
                log.info("anchor round skipped (%s)", exc)  # a member was evicted meanwhile
            if judged:
                next_at = next_round_at(start, time.time(), time.process_time() - cpu, every,
                                        self.cfg.evaluator.anchor_num_cpus)
            else:
                next_at = time.time() + min(every, 2.0)
        return self.judged


AnchorJudge = ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=2,
                         **CONTROL_OPTIONS)(AnchorJudgeImpl)
