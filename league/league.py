"""The whole league as one plain object: pool, payoff, Elo, roles, Nash, storage.

``LeagueCoordinator`` (actors/) is a thin Ray shell around a ``League``; all
the rules live here so they can be tested without Ray. Every change that a
caller is told about has been committed to the store first.

Identities: a live learner plays under its learner id (``main_agent-0``); its
frozen snapshots are pool agents (``main_agent-0-v3``). Results between a live
learner and anyone are recorded with the payoff's decay (the learner changes);
results between two frozen snapshots never decay (they are stationary
measurements). A self-play game (learner against its own live self) counts as
a game played but carries no payoff information.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Generator, Sequence

import numpy as np

from league.config import Config
from league.diversity import DiversityTracker, TrajectoryBatch
from league.elo import EloTable
from league.matchmaking import CachedWinRates, LeagueView, MatchPlan, match_plan
from league.messages import Checkpoint, MatchAssignments, NashMember, NashView, ProgressDecision, ResultBatch
from league.messages import Result  # noqa: F401  (re-exported: Result used to live here)
from league.nash import NashSolver, meta_exploitability, nash_entropy
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord, AgentType
from league.seeds import generator
from league.roles import should_reset, should_snapshot, snapshot_targets
from league.store import LeagueStore

log = logging.getLogger(__name__)

ROLES = (AgentType.MAIN_AGENT, AgentType.MAIN_EXPLOITER, AgentType.LEAGUE_EXPLOITER)


def learner_ids(cfg: Config) -> dict[str, AgentType]:
    """Learner id -> role, as the config asks (``main_agent-0``, ...)."""
    return {f"{role.value}-{i}": role for role in ROLES for i in range(cfg.role(role).count)}


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


@dataclass
class NashState:
    ids: list[str] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    entropy: float = 0.0
    meta_exploitability: float = 0.0
    solved_at: float = 0.0
    pool_version: int = -1
    solve_seconds: float = 0.0
    method: str = ""

    def support(self, eps: float = 1e-9) -> dict[str, float]:
        return {a: w for a, w in zip(self.ids, self.weights) if w > eps}


def solve_meta_game(solver: NashSolver, ids: list[str], matrix: np.ndarray, pool_version: int) -> NashState:
    """The Nash of the win-rate matrix ``matrix`` over ``ids`` (as a zero-sum game,
    win rate - 1/2). Touches only ``solver`` and its arguments, so the coordinator
    can run it in a worker thread on a copy of the matrix."""
    start = time.perf_counter()
    solution = solver.solve(matrix - 0.5, ids=ids)
    seconds = time.perf_counter() - start
    weights = np.clip(solution.row, 0.0, None)
    weights = weights / weights.sum()
    return NashState(
        ids=list(ids), weights=weights.tolist(), entropy=nash_entropy(weights),
        meta_exploitability=float(meta_exploitability(matrix - 0.5, weights)), solved_at=time.time(),
        pool_version=pool_version, solve_seconds=seconds, method=solution.method,
    )


class League:
    def __init__(self, cfg: Config, store: LeagueStore | None = None, seed: int | None = None):
        self.cfg = cfg
        self.store = store
        self.rng = generator(cfg.run.seed if seed is None else seed, "league")
        self.pool = AgentPool(max_size=cfg.league.pool_max_size)
        self.payoff = PayoffTable(decay=cfg.league.payoff_decay, prior_games=cfg.league.payoff_prior_games)
        self.elo = EloTable(k=cfg.league.elo_k, initial=cfg.league.elo_initial)
        self.learners: dict[str, LearnerState] = {}
        self.nash = NashState()  # the published mixture: what /nash, Nash sampling and measurements use
        # the latest meta-game solve; unless ``evaluator.publish`` is least_exploitable it is ``nash``
        self.meta_nash = self.nash
        self.published: NashState | None = None  # the evaluator's least exploitable mixture, if any
        self.solver = NashSolver()
        self.pool_version = 0
        self.results_since_solve = 0
        self.counters: dict[str, float] = {"games": 0.0, "env_steps": 0.0}
        self.diversity = DiversityTracker()
        # plans handed to rollout workers: learner -> (pool and Nash they were made for, games then, plan);
        # versions are unique across restarts (this life's token and a counter)
        self._plans: dict[str, tuple[tuple, float, MatchPlan]] = {}
        self._plan_life, self._plans_made = uuid.uuid4().hex[:8], 0
        # payoff pairs and Elo ratings changed since the tables were last checkpointed in the store
        self._dirty_pairs: dict[tuple[str, str], None] = {}
        self._dirty_elo: set[str] = set()
        self._checkpointed_at = time.monotonic()
        for learner_id, role in learner_ids(cfg).items():
            self.learners[learner_id] = LearnerState(learner_id, role)
        if store is not None:
            self._restore(store)
        for learner_id in self.learners:
            self.payoff.add_agent(learner_id)
            self.elo.add(learner_id)
        if store is not None:
            self._replay(store)

    # -- restore ---------------------------------------------------------
    def _restore(self, store: LeagueStore) -> None:
        for record in store.agents():
            self.pool.insert(record)
            self.payoff.add_agent(record.agent_id)
        known = set(self.pool.ids()) | set(self.learners)
        for a, b, w, d, l in store.payoff_rows():
            if a in known and b in known:
                self.payoff.set_counts(a, b, w, d, l)
        for agent_id, rating, games in store.elo_rows():
            if agent_id not in self.elo.anchors:
                self.elo.ratings[agent_id] = rating
                self.elo.games[agent_id] = games
        for row in store.learners():
            info = row["info"]
            if row["learner_id"] in self.learners and info:
                st = self.learners[row["learner_id"]]
                for key in ("version", "step", "step_at_snapshot", "snapshots", "resets", "parent_id"):
                    if key in info:
                        setattr(st, key, info[key])
        latest = store.latest_nash()
        if latest is not None:
            self.nash = NashState(**{k: latest[k] for k in ("ids", "weights", "entropy", "meta_exploitability",
                                                           "solved_at", "pool_version", "solve_seconds", "method")})
            self.meta_nash = self.nash
            if self.nash.method == "least_exploitable" and self.cfg.evaluator.publish == "least_exploitable":
                self.published = self.nash  # a meta-game solve does not replace it before the next publication
            self.pool.protect(self.nash.support())
        self.counters.update(store.counters())
        for agent_id, total, steps in store.diversity_rows():
            if agent_id in self.learners:
                self.diversity.restore(agent_id, total, steps)
        self.pool_version = len(store.agents(include_removed=True))

    def _replay(self, store: LeagueStore) -> None:
        """Apply the result batches stored after the last checkpoint of the payoff and Elo tables, in
        the order they were applied before. Every change to the pool or to payoff rows checkpoints the
        tables, so the league applied each of them to the pool and tables it has now: the replay gives exactly the
        payoff and Elo that were in memory. Counters and behaviour were stored with each batch."""
        replayed = 0
        for batch in store.results_after(store.tables_through()):
            self._apply_tables(batch)
            replayed += 1
        log.info("league restored: %d agents, %d results (%d batches replayed onto the tables), %d learners",
                 len(self.pool), store.result_count(), replayed, len(self.learners))

    # -- matchmaking -------------------------------------------------------
    def view(self) -> LeagueView:
        return LeagueView(self.pool, CachedWinRates(self.payoff), {l: s.role for l, s in self.learners.items()},
                          self.nash.support())

    def next_matches(self, learner_id: str, n: int) -> MatchAssignments:
        state = self._learner(learner_id)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not (1 <= n <= 100_000):
            raise ValueError(f"number of matches must be an integer in [1, 100000], got {n!r}")
        return match_plan(learner_id, state.role, self.cfg.role(state.role), self.view()).draw(self.rng, int(n))

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
            plan = match_plan(learner_id, state.role, self.cfg.role(state.role), self.view(),
                              f"{self._plan_life}-{self._plans_made}", now)
            cached = self._plans[learner_id] = (league_key, games, plan)
        plan = cached[2]
        return None if known_version == plan.version else plan

    def _learner(self, learner_id: str) -> LearnerState:
        try:
            return self.learners[learner_id]
        except KeyError:
            raise ValueError(f"unknown learner id {learner_id!r}") from None

    # -- results -------------------------------------------------------------
    def report_results(self, batch: ResultBatch) -> bool:
        """Apply and persist one batch of results; False if it was seen before.

        The batch was validated when it was built (``ResultBatch``); an id that
        is neither a learner nor in the pool (an agent evicted meanwhile) drops
        that one result, not the batch. The learners' action histograms feed the
        diversity tracker, persisted in the same transaction.
        """
        (outcome,) = self.report_results_many([batch])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def report_results_many(self, batches: Sequence[ResultBatch]) -> list:
        """``report_results`` for several batches, applied in order and persisted in one transaction
        (group commit: one fsync for every batch that arrived while the last one was written).

        Returns, per batch, True (stored), False (seen before) or the ValueError that rejected it;
        a rejected batch changes nothing and holds back none of the others."""
        outcomes, write = self.apply_results_many(batches)
        write()
        return outcomes

    def apply_results_many(self, batches: Sequence[ResultBatch]) -> tuple[list, Callable[[], None]]:
        """``report_results_many`` in two steps: the batches are applied in memory now, and the
        returned ``write`` persists them in one transaction. ``write`` touches only the store (which
        has its own lock), so the coordinator runs it in a writer thread while its event loop serves
        other requests; nothing is acknowledged before it returned, and the next group is applied
        only after it (``has_batch`` must see this group)."""
        for step in self.apply_results_stepwise(batches):
            pass
        return step

    def apply_results_stepwise(self, batches: Sequence[ResultBatch]) -> Generator[tuple | None, None, None]:
        """``apply_results_many`` one batch a step: the generator yields None after each batch it
        applied (the coordinator's event loop serves other requests in between), and last
        ``(outcomes, write)``. Nothing else may change the league until that last step."""
        outcomes: list = []
        seen: set[tuple[str, int]] = set()
        writes, moved, behaviour = [], set(), set()
        counted = {"games": 0.0, "env_steps": 0.0}
        for batch in batches:
            if not isinstance(batch, ResultBatch):
                outcomes.append(ValueError(f"report_results takes a ResultBatch, got {type(batch).__name__}"))
                continue
            key = (batch.source, batch.seq)
            if key in seen or (self.store is not None and self.store.has_batch(*key)):
                outcomes.append(False)
                continue
            seen.add(key)
            c, m, b = self._apply_batch(batch)
            self._dirty_pairs.update(dict.fromkeys(c))
            moved |= m
            behaviour |= b
            counted["games"] += float(len(batch))
            counted["env_steps"] += float(batch.env_steps)
            writes.append(batch)
            outcomes.append(True)
            yield
        if self.store is None or not writes:
            yield outcomes, lambda: None
            return
        self._dirty_elo |= moved
        diversity_rows = [(x, *self.diversity.state(x)) for x in behaviour]
        # The tables are checkpointed every league.payoff_checkpoint_seconds; a restart replays the
        # batches stored since.
        if time.monotonic() - self._checkpointed_at < self.cfg.league.payoff_checkpoint_seconds:
            tables = None
        else:
            tables = self._take_tables()
        store = self.store

        def write() -> None:
            try:
                store.record_results_many(writes, *(tables or (None, None)), counted, diversity_rows)
            except BaseException:
                self._untake_tables(tables)
                raise

        yield outcomes, write

    def _take_tables(self) -> tuple[list, list]:
        """The payoff and Elo rows changed since the last checkpoint (now forgotten as changed; give
        them back with ``_untake_tables`` if they could not be written)."""
        pairs = {(min(a, b), max(a, b)) for a, b in self._dirty_pairs if a in self.payoff and b in self.payoff}
        elo = [x for x in self._dirty_elo if x in self.elo.ratings]
        self._dirty_pairs, self._dirty_elo = {}, set()
        self._checkpointed_at = time.monotonic()
        return self.payoff.rows(sorted(pairs)), [(x, self.elo.ratings[x], self.elo.games[x]) for x in sorted(elo)]

    def _untake_tables(self, tables: tuple[list, list] | None) -> None:
        if tables is not None:
            self._dirty_pairs.update(dict.fromkeys((a, b) for a, b, *_ in tables[0]))
            self._dirty_elo.update(x for x, *_ in tables[1])

    def _with_tables(self, write: Callable[[tuple[list, list]], Any]) -> Any:
        """``write(tables)``: a change to the store that also checkpoints the payoff and Elo tables."""
        tables = self._take_tables()
        try:
            return write(tables)
        except BaseException:
            self._untake_tables(tables)
            raise

    def checkpoint(self) -> None:
        """Write the payoff and Elo rows changed since the last checkpoint now (e.g. at shutdown,
        so that the next start replays nothing)."""
        if self.store is not None:
            self._with_tables(lambda tables: self.store.write_tables(*tables))

    def _apply_batch(self, batch: ResultBatch) -> tuple[list, set, set]:
        """One batch into payoff, Elo, counters and diversity (memory only): the pairs, ratings and
        behaviours it changed. The cost grows with its pairs, not its games."""
        changed, moved = self._apply_tables(batch)
        for key, value in (("games", float(len(batch))), ("env_steps", float(batch.env_steps))):
            self.counters[key] = self.counters.get(key, 0.0) + value
        return changed, moved, self._apply_behaviour(batch)

    def _apply_tables(self, batch: ResultBatch) -> tuple[list, set]:
        """Payoff and Elo of a batch's pairs (``pair_counts``): a batch when it
        arrives, and the same batch when a restart replays it. Returns the pairs and ratings it changed.

        Counters, game counts and the meta-game's counts are exact; a learner's decayed payoff and
        Elo treat a pair's games as exchangeable (``PayoffTable.record_counts``,
        ``EloTable.update_pairs``): with one game per pair both equal the game-by-game update."""
        names = np.array(batch.agents, dtype=object)
        a, b, games, wins, draws, score = batch.pair_counts()
        is_learner = np.array([x in self.learners for x in names], dtype=bool)
        known = is_learner | np.array([x in self.pool for x in names], dtype=bool)
        counted_pair = (names[a] != names[b]) & known[a] & known[b] if len(a) else np.zeros(0, dtype=bool)
        live = counted_pair & (is_learner[a] | is_learner[b]) if len(a) else counted_pair
        frozen = counted_pair & ~live
        win_mass = score - 0.5 * draws  # fractional scores count score wins and 1 - score losses
        loss_mass = (games - draws) - win_mass
        changed = []
        for rows, decay in ((live, None), (frozen, 1.0)):
            if rows.any():
                changed += self.payoff.record_pair_counts(names, a[rows], b[rows], games[rows], win_mass[rows],
                                                          draws[rows], np.maximum(loss_mass[rows], 0.0), decay=decay)
        rated = np.concatenate([np.flatnonzero(live), np.flatnonzero(frozen)])
        moved = self.elo.update_pair_codes(names, a[rated], b[rated], games[rated], score[rated])
        self.results_since_solve += int(games[frozen].sum())
        return changed, moved

    def _apply_behaviour(self, batch: ResultBatch) -> set:
        behaviour = []
        for learner_id, counts in batch.action_counts.items():
            if learner_id in self.learners and counts.sum() > 0:
                actions = np.repeat(np.arange(len(counts)), counts.astype(np.int64))
                if len(actions):
                    self.diversity.update(learner_id, TrajectoryBatch(actions=actions, num_actions=len(counts)))
                    behaviour.append(learner_id)
        return set(behaviour)

    def record_exact(self, a: str, b: str, score: float, weight: float = 1e6) -> None:
        """Set a frozen pair's payoff to an exactly computed expected score."""
        self.record_exact_many([(a, b, score)], weight)

    def record_exact_many(self, scores: Sequence[tuple[str, str, float]], weight: float = 1e6) -> int:
        """``record_exact`` for many pairs, stored in one transaction; returns how many were kept
        (pairs with an agent evicted meanwhile are dropped)."""
        kept = []
        for a, b, score in scores:
            if not (0.0 <= score <= 1.0):
                raise ValueError(f"score must be in [0, 1], got {score}")
            if a in self.pool and b in self.pool and a != b:
                kept.append((a, b, float(score)))
        for a, b, score in kept:
            self.payoff.set_counts(a, b, weight * score, 0.0, weight * (1.0 - score))
            self._dirty_pairs[(a, b)] = None
        self.results_since_solve += len(kept)
        if self.store is not None and kept:
            # a checkpoint: batches stored before this were applied before these counts were set
            self._with_tables(lambda tables: self.store.write_tables(*tables))
        return len(kept)

    # -- learners: progress, snapshots, resets -----------------------------------
    def learner_progress(self, learner_id: str, version: int, step: int) -> ProgressDecision:
        """A learner reports its version and step; returns whether to snapshot now."""
        st = self._learner(learner_id)
        st.version, st.step = int(version), int(step)
        targets = snapshot_targets(st.role, self.pool.ids(), self.view().main_learners(),
                                   [r.agent_id for r in self.pool.list(learner_id=learner_id)])
        rates = self.payoff.win_rates_for(learner_id, targets) if targets else []
        games = [self.payoff.games(learner_id, t) for t in targets]
        decision = should_snapshot(st.role, self.cfg.role(st.role), st.step - st.step_at_snapshot, rates, games)
        return ProgressDecision(bool(decision.snapshot), decision.reason)

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
        self.pool.insert(record)
        evicted = self.pool.evict()
        reset = should_reset(self.cfg.role(st.role), self.rng)
        st.snapshots += 1
        st.step_at_snapshot = int(step)
        st.parent_id = record.agent_id
        if reset:
            st.resets += 1
            st.parent_id = self._reset_target(self.cfg.role(st.role).reset_to)
        meta["reset"] = reset
        if reset and st.parent_id is not None:
            meta["reset_to"] = st.parent_id  # the snapshot the learner restarts from (a repeat gets the same)
        self.payoff.add_agent(record.agent_id)
        # The snapshot is its learner at this moment: it inherits the learner's Elo.
        self.elo.add(record.agent_id, self.elo.rating(learner_id))
        self._dirty_elo.add(record.agent_id)
        for r in evicted:
            self.payoff.remove_agent(r.agent_id)
            self.elo.remove(r.agent_id)
        if reset:
            self.payoff.remove_agent(learner_id)
            self.payoff.add_agent(learner_id)
        if self.store is not None:
            # a checkpoint of the tables with the pool's change: every batch replayed after it was
            # applied to this pool
            self._with_tables(lambda tables: self.store.add_agent(
                record, blob, evicted=[r.agent_id for r in evicted], clear_payoff=[learner_id] if reset else [],
                tables=tables))
            self.store.save_learner(learner_id, st.role.value, st.version, st.step, None, st.info())
            if reset:
                self.store.add_event("reset", {"learner_id": learner_id, "after": record.agent_id})
        self.pool_version += 1
        return record, reset

    def _reset_target(self, reset_to: str | None) -> str | None:
        """A role's ``reset_to``: a snapshot id, or a role name for that role's latest snapshot
        (an exploiter warm-started from the newest main agent); None when there is none yet."""
        if reset_to in {t.value for t in AgentType}:
            records = self.pool.list(agent_type=reset_to)
            return records[-1].agent_id if records else None
        return reset_to

    def add_seed(self, agent_id: str, blob: bytes, metadata: dict | None = None) -> AgentRecord:
        """Put an existing snapshot (e.g. from a file) into the pool as a main-agent snapshot."""
        if agent_id in self.pool:
            return self.pool.get(agent_id)
        record = AgentRecord(agent_id=agent_id, version=1, agent_type=AgentType.MAIN_AGENT,
                             metadata=dict(metadata or {}, seeded=True))
        self.pool.insert(record)
        evicted = self.pool.evict()
        self.payoff.add_agent(agent_id)
        self.elo.add(agent_id)
        self._dirty_elo.add(agent_id)
        for r in evicted:
            self.payoff.remove_agent(r.agent_id)
            self.elo.remove(r.agent_id)
        if self.store is not None:
            self._with_tables(lambda tables: self.store.add_agent(record, blob, evicted=[r.agent_id for r in evicted],
                                                                  tables=tables))
        self.pool_version += 1
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

    # -- Nash ------------------------------------------------------------------
    def nash_due(self, now: float) -> bool:
        if len(self.pool) == 0:
            return False
        if self.meta_nash.pool_version != self.pool_version:
            return True
        return (self.results_since_solve >= self.cfg.league.nash_every_results
                or (self.results_since_solve > 0 and now - self.meta_nash.solved_at >= self.cfg.league.nash_every_seconds))

    def measured_ids(self) -> list[str]:
        """The pool agents, oldest first, each kept only if its games against
        every agent kept before it have been measured. An unmeasured pair sits at
        the prior 0.5, and a fresh snapshot at 0.5 against everyone would look
        unbeatable to the Nash: the meta-game must rest on measured numbers."""
        ids = self.pool.ids()
        if not ids:
            return []
        measured = self.payoff.games_matrix(ids) > 0
        keep: list[int] = []
        for i in range(len(ids)):
            if measured[i, keep].all():
                keep.append(i)
        return [ids[i] for i in keep]

    def payoff_matrix(self) -> tuple[list[str], np.ndarray]:
        ids = self.measured_ids()
        return ids, self.payoff.matrix(ids) if ids else np.zeros((0, 0))

    def nash_job(self) -> Callable[[], NashState] | None:
        """A re-solve of the meta-game as it is now, to run in another thread (it
        touches only copies); None while nothing is measured. Adopt its result
        with :meth:`set_nash`."""
        ids, matrix = self.payoff_matrix()
        if not ids:
            return None
        return functools.partial(solve_meta_game, self.solver, ids, matrix.copy(), self.pool_version)

    def solve_nash(self) -> NashState:
        """Solve the zero-sum meta-game over the frozen pool and adopt it."""
        ids, matrix = self.payoff_matrix()
        if not ids:
            return self.nash
        state = solve_meta_game(self.solver, ids, matrix, self.pool_version)
        self.set_nash(state)
        return state

    def set_nash(self, state: NashState) -> None:
        """Adopt a meta-game solve (solved here or in a worker thread): it is published, and
        persisted, unless the league publishes the evaluator's least exploitable mixture and has one."""
        self.meta_nash = state
        self.results_since_solve = 0
        if self.published is None:
            self._publish(state)
        else:
            self._protect()

    def set_published(self, ids: Sequence[str], weights: Sequence[float], pool_version: int,
                      solve_seconds: float = 0.0) -> NashState:
        """Publish the exact evaluator's least exploitable mixture of measured snapshots
        (``evaluator.publish: least_exploitable``) in place of the meta-game Nash. Members evicted
        since are dropped and the rest renormalised; its meta-exploitability is measured on the
        meta-game like the Nash's (it may be above 0: the mixture is chosen against every policy
        of the game, not only against the pool's members)."""
        ids, w = list(ids), np.asarray(weights, dtype=np.float64)
        if len(ids) != len(w) or not len(ids) or not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"a published mixture needs one finite weight >= 0 per agent, got {len(ids)} ids "
                             f"and weights {w.tolist()[:8]}")
        keep = np.array([a in self.pool for a in ids])
        if not (w[keep] > 0).any():
            raise ValueError(f"no member of the published mixture is in the pool (ids {ids[:5]})")
        ids, w = [a for a, k in zip(ids, keep) if k], w[keep] / w[keep].sum()
        matrix = self.payoff.matrix(ids)
        state = NashState(ids=ids, weights=w.tolist(), entropy=nash_entropy(w),
                          meta_exploitability=float(meta_exploitability(matrix - 0.5, w)), solved_at=time.time(),
                          pool_version=int(pool_version), solve_seconds=float(solve_seconds),
                          method="least_exploitable")
        self.published = state
        self._publish(state)
        return state

    def _protect(self) -> None:
        """No agent with weight in the published mixture or the meta-game Nash is evicted."""
        self.pool.protect({**self.meta_nash.support(), **self.nash.support()})

    def _publish(self, state: NashState) -> None:
        self.nash = state
        self._protect()
        if self.store is not None:
            self.store.save_nash(state.solved_at, state.pool_version, state.ids, state.weights, state.entropy,
                                 state.meta_exploitability, state.solve_seconds, state.method)
            self.store.append_elo_history(state.solved_at, [(a, s.role.value, self.elo.rating(a))
                                                           for a, s in self.learners.items()])

    # -- evaluation --------------------------------------------------------------
    def evaluation_pairs(self, n: int, unmeasured_only: bool = False) -> list[tuple[str, str]]:
        """The ``n`` frozen pairs whose payoff is least certain (fewest games,
        weighted up where the Nash puts weight). ``unmeasured_only``: only pairs
        without any game (an exact evaluator measures a pair once: snapshots
        are frozen); empty when there is nothing left to measure."""
        ids = self.pool.ids()
        if len(ids) < 2:
            return []
        games = self.payoff.games_matrix(ids)
        support = self.nash.support()
        w = np.array([1.0 + 4.0 * support.get(a, 0.0) for a in ids])
        uncertainty = np.outer(w, w) / np.sqrt(games + 1.0)
        iu = np.triu_indices(len(ids), 1)
        candidates = np.arange(len(iu[0]))
        if unmeasured_only:
            candidates = candidates[games[iu] <= 0]
        order = candidates[np.argsort(-uncertainty[iu][candidates], kind="stable")[:n]]
        return [(ids[iu[0][k]], ids[iu[1][k]]) for k in order]

    # -- reading ------------------------------------------------------------------
    def learner_views(self) -> dict[str, dict[str, Any]]:
        """Per learner: role, version, step, snapshots, resets, Elo, expected score against the Nash."""
        return {l: {**s.info(), "elo": self.elo.rating(l), "win_rate_vs_nash": self.win_rate_vs_nash(l)}
                for l, s in self.learners.items()}

    def learner_role(self, agent_id: str) -> str | None:
        """The role of a live learner; None for anyone else."""
        st = self.learners.get(agent_id)
        return st.role.value if st is not None else None

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
            "diversity_score": self.diversity_score(),
        }

    def nash_view(self, state: NashState | None = None) -> NashView:
        """The adopted Nash mixture (or ``state``) with each member's role and Elo."""
        n = self.nash if state is None else state
        members = tuple(NashMember(a, float(w), self.role_of(a), self.elo.rating(a)) for a, w in n.support().items())
        return NashView(members, n.entropy, n.meta_exploitability, n.pool_version, n.solved_at, n.solve_seconds,
                        n.method)

    def pool_view(self) -> list[dict[str, Any]]:
        """Every pool agent, oldest first, with its Elo (``GET /pool``)."""
        return [{**r.to_dict(), "elo": self.elo.rating(r.agent_id)} for r in self.pool.list()]

    def payoff_view(self) -> dict[str, Any]:
        """The measured meta-game: ids, win rates and games (``GET /payoff``)."""
        ids, matrix = self.payoff_matrix()
        return {"ids": ids, "win_rates": matrix.tolist(), "games": self.payoff.games_matrix(ids).tolist() if ids else []}
