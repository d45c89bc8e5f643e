"""The whole league as one plain object: it composes the parts that own the league's state.

- ``league.membership.Membership``: who is in the pool, with their payoff and Elo rows;
- ``league.intake.ResultIntake``: result batches and exact scores into the tables and the
  store, with the tables' checkpoints;
- ``league.publication.Publication``: the meta-game Nash, the published mixture and their
  protection from eviction;

and owns the learners (their progress, snapshots and resets) and matchmaking. ``LeagueCoordinator``
(actors/) is a thin Ray shell around a ``League``; all the rules live in these plain objects so
they can be tested without Ray. Every change that a caller is told about has been committed to
the store first.

Identities: a live learner plays under its learner id (``<role>-0``); its frozen snapshots
are pool agents (``<role>-0-v3``).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Generator, Sequence

import numpy as np

from league.config import ROLE_CONFIGS, Config
from league.elo import EloTable
from league.intake import ResultIntake
from league.matchmaking import CachedWinRates, LeagueView, MatchPlan
from league.membership import Membership
from league.messages import Checkpoint, MatchAssignments, NashMixture, ProgressDecision, ResultBatch
from league.messages import Result  # noqa: F401  (re-exported: Result used to live here)
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord, AgentType
from league.publication import Publication
from league.roles import Role, make_role
from league.seeds import generator
from league.store import LeagueStore

log = logging.getLogger(__name__)

PAYOFF_HEADROOM = 64  # payoff rows beyond the pool's: its learners (and anchors)
PAYOFF_RESERVE = 4096  # the most agents the payoff table makes room for up front (4 x 128 MiB)


def learner_ids(cfg: Config) -> dict[str, AgentType]:
    """Learner id -> role, as the config asks (``<role>-0``, ..., the roles in the registry's order)."""
    return {f"{name}-{i}": AgentType(name) for name, role in cfg.roles.items() for i in range(role.count)}


@dataclass
class LearnerState:
    learner_id: str
    role: AgentType
    version: int = 0
    step: int = 0
    step_at_snapshot: int = 0
    snapshots: int = 0
    resets: int = 0
    parent_id: str | None = None

    def info(self) -> dict[str, Any]:
        d = asdict(self)
        d["role"] = self.role.value
        return d


class League:
    def __init__(self, cfg: Config, store: LeagueStore | None = None, seed: int | None = None):
        self.cfg = cfg
        self.store = store
        self.rng = generator(cfg.run.seed if seed is None else seed, "league")
        self.learners: dict[str, LearnerState] = {l: LearnerState(l, role) for l, role in learner_ids(cfg).items()}
        self.roles: dict[AgentType, Role] = {AgentType(name): make_role(name, role) for name, role in cfg.roles.items()}
        self.pool = AgentPool(max_size=cfg.league.pool_max_size)
        # room for a full pool and its learners from the start (up to PAYOFF_RESERVE agents): the
        # coordinator's memory is then set by the config, not by how far the pool has filled
        self.payoff = PayoffTable(decay=cfg.league.payoff_decay, prior_games=cfg.league.payoff_prior_games,
                                  capacity=min(cfg.league.pool_max_size + PAYOFF_HEADROOM, PAYOFF_RESERVE))
        self.elo = EloTable(k=cfg.league.elo_k, initial=cfg.league.elo_initial)
        self.intake = ResultIntake(self.payoff, self.elo, self.pool, self.learners, store,
                                   cfg.league.payoff_checkpoint_seconds)
        self.membership = Membership(self.pool, self.payoff, self.elo, self.intake.tables, store)
        self.publication = Publication(self.pool, self.payoff, self.elo,
                                       {l: s.role.value for l, s in self.learners.items()}, cfg.evaluator.publish,
                                       store)
        self.diversity = self.intake.diversity
        self.counters = self.intake.counters
        # plans handed to rollout workers: learner -> (pool and Nash they were made for, games then, plan);
        # versions are unique across restarts (this life's token and a counter)
        self._plans: dict[str, tuple[tuple, float, MatchPlan]] = {}
        self._plan_life, self._plans_made = uuid.uuid4().hex[:8], 0
        if store is not None:
            self.membership.restore(store, self.learners)
            self._restore_learners(store)
            self.publication.restore(store)
            self.intake.restore(store)
        for learner_id in self.learners:
            self.membership.add_learner(learner_id)
        if store is not None:
            replayed = self.intake.replay(store)
            log.info("league restored: %d agents, %d results (%d batches replayed onto the tables), %d learners",
                     len(self.pool), store.result_count(), replayed, len(self.learners))

    def _restore_learners(self, store: LeagueStore) -> None:
        for row in store.learners():
            info = row["info"]
            if row["learner_id"] in self.learners and info:
                st = self.learners[row["learner_id"]]
                for key in ("version", "step", "step_at_snapshot", "snapshots", "resets", "parent_id"):
                    if key in info:
                        setattr(st, key, info[key])

    # -- the parts' state, as callers read it ---------------------------------------
    @property
    def pool_version(self) -> int:
        return self.membership.version

    @property
    def nash(self) -> NashMixture:
        """The published mixture: what /nash, Nash sampling and measurements use."""
        return self.publication.nash

    @property
    def meta_nash(self) -> NashMixture:
        """The latest meta-game solve (``nash`` too, unless the evaluator's mixture is published)."""
        return self.publication.meta_nash

    @property
    def results_since_solve(self) -> int:
        """Results between frozen agents (the meta-game's) since the meta-game was last solved."""
        return self.intake.frozen_results - self.publication.results_at_solve

    # -- matchmaking -------------------------------------------------------
    def view(self) -> LeagueView:
        return LeagueView(self.pool, CachedWinRates(self.payoff), {l: s.role for l, s in self.learners.items()},
                          self.nash.support())

    def next_matches(self, learner_id: str, n: int) -> MatchAssignments:
        state = self._learner(learner_id)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not (1 <= n <= 100_000):
            raise ValueError(f"number of matches must be an integer in [1, 100000], got {n!r}")
        return self.roles[state.role].match_plan(learner_id, self.view()).draw(self.rng, int(n))

    def match_plan(self, learner_id: str, known_version: str | None = None, now: float | None = None) -> MatchPlan | None:
        """The learner's opponent distribution, for a rollout worker to draw its matches from
        (``MatchPlan.draw``, with the worker's own random stream); None when ``known_version`` is
        still current. A plan is remade when the pool or the Nash changed, and at most every
        ``league.match_plan_seconds`` while results move the win rates; the same distribution
        ``next_matches`` draws from, up to that age."""
        state = self._learner(learner_id)
        now = time.time() if now is None else float(now)
        league_key = (self.pool_version, self.nash.solved_at, self.nash.pool_version)
        games = self.counters.get("games", 0.0)
        cached = self._plans.get(learner_id)
        if cached is None or cached[0] != league_key or (
                games != cached[1] and now - cached[2].made_at >= self.cfg.league.match_plan_seconds):
            self._plans_made += 1
            plan = self.roles[state.role].match_plan(learner_id, self.view(), f"{self._plan_life}-{self._plans_made}",
                                                     now)
            cached = self._plans[learner_id] = (league_key, games, plan)
        plan = cached[2]
        return None if known_version == plan.version else plan

    def _learner(self, learner_id: str) -> LearnerState:
        try:
            return self.learners[learner_id]
        except KeyError:
            raise ValueError(f"unknown learner id {learner_id!r}") from None

    # -- results (league.intake) ---------------------------------------------------
    def report_results(self, batch: ResultBatch) -> bool:
        """Apply and persist one batch of results; False if it was seen before.

        The batch was validated when it was built (``ResultBatch``); an id that
        is neither a learner nor in the pool (an agent evicted meanwhile) drops
        that one result, not the batch. The learners' action histograms feed the
        diversity tracker, persisted in the same transaction.
        """
        (outcome,) = self.intake.report([batch])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def apply_results(self, batches: Sequence[ResultBatch]) -> Generator[tuple | None, None, None]:
        """Several batches, one a step, stored in one transaction: ``ResultIntake.apply``."""
        return self.intake.apply(batches)

    def record_exact(self, a: str, b: str, score: float, weight: float = 1e6) -> None:
        """Set a frozen pair's payoff to an exactly computed expected score."""
        self.intake.record_exact([(a, b, score)], weight)

    def record_exact_many(self, scores: Sequence[tuple[str, str, float]], weight: float = 1e6) -> int:
        """``record_exact`` for many pairs, stored in one transaction; returns how many were kept
        (pairs with an agent evicted meanwhile are dropped)."""
        return self.intake.record_exact(scores, weight)

    def checkpoint(self) -> None:
        """Write the payoff and Elo rows changed since the last checkpoint now (e.g. at shutdown)."""
        self.intake.checkpoint()

    # -- learners: progress, snapshots, resets -----------------------------------
    def learner_progress(self, learner_id: str, version: int, step: int) -> ProgressDecision:
        """A learner reports its version and step; returns whether to snapshot now."""
        st = self._learner(learner_id)
        st.version, st.step = int(version), int(step)
        role = self.roles[st.role]
        targets = role.snapshot_targets(learner_id, self.view())
        rates = self.payoff.win_rates_for(learner_id, targets) if targets else []
        games = [self.payoff.games(learner_id, t) for t in targets]
        decision = role.should_snapshot(st.step - st.step_at_snapshot, rates, games)
        return ProgressDecision(bool(decision.snapshot), decision.reason)

    def final_snapshot_due(self, learner_id: str, step: int) -> bool:
        """At a stop: whether a main agent trained since its last snapshot, so that its last weights
        join the pool (and may be published) rather than only its checkpoint."""
        st = self._learner(learner_id)
        return ROLE_CONFIGS[st.role.value].main and int(step) > st.step_at_snapshot

    def snapshot_for_request(self, learner_id: str, request: int) -> AgentRecord | None:
        """The snapshot already made for a learner's numbered request (also if evicted since), if any."""
        if self.store is not None:
            return self.store.agent_by_request(learner_id, int(request))
        for record in self.pool.list(learner_id=learner_id):
            if record.metadata.get("request") == int(request):
                return record
        return None

    def add_snapshot(self, learner_id: str, blob: bytes | None, step: int, metadata: dict | None = None,
                     agent_id: str | None = None, request: int | None = None) -> tuple[AgentRecord, bool]:
        """Freeze a learner into the pool; returns the record and whether the learner must reset.

        ``request`` (the learner's number for this snapshot) and the reset decision are kept
        in the record's metadata, so a repeated request is answered the same way."""
        st = self._learner(learner_id)
        meta = dict(metadata or {})
        if request is not None:
            meta["request"] = int(request)
        meta.setdefault("learner_version", st.version)
        lineage = self.pool.latest(learner_id)
        version = (lineage.version if lineage else st.snapshots) + 1
        record = AgentRecord(
            agent_id=agent_id or f"{learner_id}-v{version}", version=version, agent_type=st.role,
            learner_id=learner_id, parent_id=st.parent_id, step=int(step), created_at=time.time(), metadata=meta,
        )
        # The snapshot is its learner at this moment: it inherits the learner's Elo.
        evicted = self.membership.admit(record, self.elo.rating(learner_id))
        role = self.roles[st.role]
        reset = role.should_reset(self.rng)
        st.snapshots += 1
        st.step_at_snapshot = int(step)
        st.parent_id = record.agent_id
        if reset:
            st.resets += 1
            st.parent_id = role.reset_target(self.pool)
            self.membership.clear_payoff(learner_id)
        meta["reset"] = reset
        if reset and st.parent_id is not None:
            meta["reset_to"] = st.parent_id  # the snapshot the learner restarts from (a repeat gets the same)
        self.membership.commit(record, blob, evicted, cleared=[learner_id] if reset else [])
        if self.store is not None:
            self.store.save_learner(learner_id, st.role.value, st.version, st.step, None, st.info())
            if reset:
                self.store.add_event("reset", {"learner_id": learner_id, "after": record.agent_id})
        return record, reset

    def add_seed(self, agent_id: str, blob: bytes, metadata: dict | None = None) -> AgentRecord:
        """Put an existing snapshot (e.g. from a file) into the pool as a snapshot of the main role."""
        if agent_id in self.pool:
            return self.pool.get(agent_id)
        record = AgentRecord(agent_id=agent_id, version=1, agent_type=AgentType.main(),
                             metadata=dict(metadata or {}, seeded=True))
        self.membership.commit(record, blob, self.membership.admit(record))
        return record

    def win_rate_vs_nash(self, agent_id: str) -> float | None:
        """Expected score of ``agent_id`` against the current Nash mixture."""
        support = {a: w for a, w in self.nash.support().items() if a in self.pool and a != agent_id}
        if not support:
            return None
        ids = list(support)
        w = np.array([support[a] for a in ids])
        return float(self.payoff.win_rates_for(agent_id, ids) @ (w / w.sum()))

    def save_checkpoint(self, learner_id: str, version: int, step: int, state: bytes) -> None:
        st = self._learner(learner_id)
        st.version, st.step = int(version), int(step)
        if self.store is not None:
            self.store.save_learner(learner_id, st.role.value, st.version, st.step, state, st.info())

    def load_checkpoint(self, learner_id: str) -> Checkpoint | None:
        self._learner(learner_id)
        row = self.store.load_learner(learner_id) if self.store is not None else None
        if row is None:
            return None
        return Checkpoint(learner_id, int(row["version"]), int(row["step"]), row["state"])

    # -- Nash (league.publication) ----------------------------------------------------
    def nash_due(self, now: float) -> bool:
        return self.publication.due(now, self.pool_version, self.intake.frozen_results,
                                    self.cfg.league.nash_every_results, self.cfg.league.nash_every_seconds)

    def measured_ids(self) -> list[str]:
        """The pool agents the meta-game rests on (``Publication.measured_ids``)."""
        return self.publication.measured_ids()

    def nash_job(self) -> Callable[[], NashMixture] | None:
        """A re-solve of the meta-game as it is now, to run in another thread; None while nothing
        is measured. Adopt its result with :meth:`set_nash`."""
        return self.publication.job(self.pool_version)

    def solve_nash(self) -> NashMixture:
        """Solve the zero-sum meta-game over the frozen pool and adopt it."""
        return self.publication.solve(self.pool_version, self.intake.frozen_results)

    def set_nash(self, state: NashMixture) -> None:
        """Adopt a meta-game solve (``Publication.adopt``)."""
        self.publication.adopt(state, self.intake.frozen_results)

    def publish_candidates(self, limit: int) -> list[str]:
        """The snapshots the least exploitable mixture is re-solved over (``Publication.lp_candidates``)."""
        return self.publication.lp_candidates(limit)

    def set_published(self, ids: Sequence[str], weights: Sequence[float], pool_version: int,
                      solve_seconds: float = 0.0) -> NashMixture:
        """Publish the exact evaluator's least exploitable mixture (``Publication.publish_least_exploitable``)."""
        return self.publication.publish_least_exploitable(ids, weights, pool_version, solve_seconds)

    # -- evaluation --------------------------------------------------------------
    def evaluation_pairs(self, n: int, unmeasured_only: bool = False) -> list[tuple[str, str]]:
        """The ``n`` frozen pairs to measure next. Unmeasured pairs first, in the order the
        meta-game takes agents in (``Publication.measured_ids``): each agent against those before
        it, the meta-game Nash's members first, then the newest agent, the next newest, ... So a
        new snapshot is measured against the Nash first and enters the meta-game within a few
        pairs. Then the measured pairs whose payoff is least certain (fewest games, weighted up
        where the Nash puts weight). ``unmeasured_only``: only pairs without any game (an exact
        evaluator measures a pair once: snapshots are frozen); empty when there is nothing left."""
        ids = self.pool.ids()
        if len(ids) < 2:
            return []
        games = self.payoff.games_matrix(ids)
        rank = np.empty(len(ids), dtype=np.int64)
        rank[self.publication.evaluation_order(ids)] = np.arange(len(ids))
        # unmeasured pairs (i < j) straight from the matrix: at a full pool of 1000 almost every pair
        # is measured, and this runs several times a second for an exact evaluator
        ui, uj = np.nonzero(np.triu(games <= 0, 1))
        later, earlier = np.maximum(rank[ui], rank[uj]), np.minimum(rank[ui], rank[uj])
        first = np.lexsort((earlier, later))[:n]
        pairs = [(ids[i], ids[j]) for i, j in zip(ui[first], uj[first])]
        if len(pairs) < n and not unmeasured_only:
            support = self.nash.support()
            w = np.array([1.0 + 4.0 * support.get(a, 0.0) for a in ids])
            iu = np.triu_indices(len(ids), 1)
            uncertainty = (np.outer(w, w) / np.sqrt(games + 1.0))[iu]
            measured = np.flatnonzero(games[iu] > 0)
            chosen = measured[np.argsort(-uncertainty[measured], kind="stable")][: n - len(pairs)]
            pairs += [(ids[iu[0][k]], ids[iu[1][k]]) for k in chosen]
        return pairs

    # -- reading ------------------------------------------------------------------
    def learner_views(self) -> dict[str, dict[str, Any]]:
        """Per learner: role, version, step, snapshots, resets, Elo, expected score against the Nash;
        with ``game.curriculum``, the stage its rollout workers play (``len(curriculum)``: the game)."""
        views = {l: {**s.info(), "elo": self.elo.rating(l), "win_rate_vs_nash": self.win_rate_vs_nash(l)}
                 for l, s in self.learners.items()}
        if self.cfg.game.curriculum:
            for view in views.values():
                view["curriculum_stage"] = self.cfg.game.stage(view["step"])
        return views

    def role_of(self, agent_id: str) -> str | None:
        """The role of a learner or a pool agent; None for an id the league does not know."""
        st = self.learners.get(agent_id)
        if st is not None:
            return st.role.value
        return self.pool.get(agent_id).agent_type.value if agent_id in self.pool else None

    def pool_size(self) -> int:
        return len(self.pool)

    def diversity_score(self) -> float | None:
        """Mean pairwise cosine distance of the learners' behaviour; None below two learners seen."""
        return self.diversity.diversity_score() if len(self.diversity.agent_ids) >= 2 else None

    def status(self) -> dict[str, Any]:
        """The league now, JSON-ready (``GET /status``, the launcher's progress line)."""
        return {
            "pool_size": len(self.pool),
            "pool_by_role": self.pool.counts_by_type(),
            "pool_version": self.pool_version,
            "games": self.counters.get("games", 0.0),
            "env_steps": self.counters.get("env_steps", 0.0),
            "learners": self.learner_views(),
            "nash_entropy": self.nash.entropy,
            "nash_support": len(self.nash.support()),
            "meta_exploitability": self.nash.meta_exploitability,
            "meta_game_agents": len(self.nash.ids),  # the pool agents the published mixture was solved over
            "diversity_score": self.diversity_score(),
        }

    def nash_view(self, state: NashMixture | None = None) -> NashMixture:
        """The published mixture (or ``state``) as it is handed out: its support, with each member's
        role and Elo, and the evidence under it (the agents its meta-game was solved over, and the
        fewest games measured between a member and one of them)."""
        n = self.nash if state is None else state
        support = n.support()
        known = [a for a in n.ids if a in self.pool]
        members = [a for a in support if a in self.pool]
        games = self.payoff.games_matrix(members, known).astype(np.float64)
        column = {a: j for j, a in enumerate(known)}
        for r, a in enumerate(members):
            games[r, column[a]] = np.inf  # an agent against itself is not evidence
        min_games = float(games.min()) if games.size and np.isfinite(games.min()) else 0.0
        return replace(n, ids=list(support), weights=list(support.values()),
                       roles=[self.role_of(a) for a in support], elo=[self.elo.rating(a) for a in support],
                       measured_agents=len(n.ids), pool_agents=len(self.pool), min_pair_games=min_games)

    def pool_view(self) -> list[dict[str, Any]]:
        """Every pool agent, oldest first, with its Elo (``GET /pool``)."""
        return [{**r.to_dict(), "elo": self.elo.rating(r.agent_id)} for r in self.pool.list()]

    def payoff_view(self) -> dict[str, Any]:
        """The measured meta-game: ids, win rates and games (``GET /payoff``)."""
        ids, matrix = self.publication.payoff_matrix()
        return {"ids": ids, "win_rates": matrix.tolist(), "games": self.payoff.games_matrix(ids).tolist() if ids else []}
