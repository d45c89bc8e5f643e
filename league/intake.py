"""Result intake: result batches and exact scores into the payoff and Elo tables, then the store.

The payoff and Elo tables are checkpoints in the store, not rewritten with every batch
(``league.store``): ``TableCheckpoints`` tracks the rows changed since the last one, and a restart
replays the batches stored after it (``ResultIntake.replay``), which gives exactly the tables
that were in memory.

Identities: a live learner plays under its learner id; a result between a live learner and anyone
is recorded with the payoff's decay (the learner changes), a result between two frozen snapshots
never decays (a stationary measurement). A game of a learner against its own live self counts as a
game played but carries no payoff information.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Container, Generator, Sequence

import numpy as np

from league.diversity import DiversityTracker, TrajectoryBatch
from league.elo import EloTable
from league.messages import ResultBatch
from league.payoff import PayoffTable
from league.pool import AgentPool
from league.store import LeagueStore, Tables

log = logging.getLogger(__name__)


class TableCheckpoints:
    """The payoff pairs and Elo ratings changed since the tables were last written to the store.

    ``take`` hands out those rows (and forgets them as changed); a write that fails gives them
    back with ``untake``; ``write`` does both around one change to the store."""

    def __init__(self, payoff: PayoffTable, elo: EloTable):
        self.payoff, self.elo = payoff, elo
        self._pairs: dict[tuple[str, str], None] = {}  # insertion-ordered set
        self._ratings: set[str] = set()
        self.taken_at = time.monotonic()

    def pairs_changed(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._pairs.update(dict.fromkeys(pairs))

    def ratings_changed(self, agent_ids: Sequence[str] | set[str]) -> None:
        self._ratings.update(agent_ids)

    def age(self) -> float:
        """Seconds since the tables were last taken for a checkpoint."""
        return time.monotonic() - self.taken_at

    def take(self) -> Tables:
        """The payoff rows (a < b) and Elo rows changed since the last checkpoint, of agents the
        tables still hold; they count as written from now on."""
        pairs = {(min(a, b), max(a, b)) for a, b in self._pairs if a in self.payoff and b in self.payoff}
        elo = [x for x in self._ratings if x in self.elo.ratings]
        self._pairs, self._ratings = {}, set()
        self.taken_at = time.monotonic()
        return self.payoff.rows(sorted(pairs)), [(x, self.elo.ratings[x], self.elo.games[x]) for x in sorted(elo)]

    def untake(self, tables: Tables | None) -> None:
        """Rows that ``take`` handed out but could not be written: changed again."""
        if tables is not None:
            self._pairs.update(dict.fromkeys((a, b) for a, b, *_ in tables[0]))
            self._ratings.update(x for x, *_ in tables[1])

    def write(self, write: Callable[[Tables], Any]) -> Any:
        """``write(tables)``: a change to the store that also checkpoints the tables."""
        tables = self.take()
        try:
            return write(tables)
        except BaseException:
            self.untake(tables)
            raise


class ResultIntake:
    """Takes result batches and exact scores into payoff, Elo, counters and behaviour, and stores
    them: every batch once per ``(source, seq)``, acknowledged only after its transaction.

    ``learners``: the live learner ids (anything with ``in``); ``pool``: the frozen agents. An id
    that is neither (an agent evicted meanwhile) drops its rows, not the batch."""

    def __init__(self, payoff: PayoffTable, elo: EloTable, pool: AgentPool, learners: Container[str],
                 store: LeagueStore | None = None, checkpoint_seconds: float = 5.0):
        self.payoff, self.elo, self.pool, self.learners, self.store = payoff, elo, pool, learners, store
        self.checkpoint_seconds = float(checkpoint_seconds)
        self.tables = TableCheckpoints(payoff, elo)
        self.diversity = DiversityTracker()
        self.counters: dict[str, float] = {"games": 0.0, "env_steps": 0.0}
        self.frozen_results = 0  # games between frozen agents (the meta-game's) taken in this life

    # -- restore ---------------------------------------------------------------
    def restore(self, store: LeagueStore) -> None:
        """Counters and the learners' behaviour as stored (they are stored with every batch)."""
        self.counters.update(store.counters())
        for agent_id, total, steps in store.diversity_rows():
            if agent_id in self.learners:
                self.diversity.restore(agent_id, total, steps)

    def replay(self, store: LeagueStore) -> int:
        """Apply the result batches stored after the last checkpoint of the tables, in the order
        they were applied before; returns how many. Every change to the pool or to payoff rows
        checkpoints the tables, so each of them was applied to the pool and tables there are now:
        the replay gives exactly the payoff and Elo that were in memory."""
        replayed = 0
        for batch in store.results_after(store.tables_through()):
            self._apply_tables(batch)
            replayed += 1
        return replayed

    # -- result batches ----------------------------------------------------------
    def report(self, batches: Sequence[ResultBatch]) -> list:
        """Apply ``batches`` in order and store them in one transaction (group commit: one fsync).

        Returns, per batch, True (stored), False (seen before) or the ValueError that rejected it;
        a rejected batch changes nothing and holds back none of the others."""
        for step in self.apply(batches):
            pass
        outcomes, write = step
        write()
        return outcomes

    def apply(self, batches: Sequence[ResultBatch]) -> Generator[tuple | None, None, None]:
        """``report`` in steps: the generator applies one batch a step in memory and yields None
        (the coordinator's event loop serves other requests in between), and last yields
        ``(outcomes, write)``; ``write`` stores the batches in one transaction. It touches only the
        store (which has its own lock), so it may run in another thread. Nothing else may change
        the league until the last step, and nothing is acknowledged before ``write`` returned."""
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
            changed, m = self._apply_tables(batch)
            self.tables.pairs_changed(changed)
            moved |= m
            behaviour |= self._apply_behaviour(batch)
            for name, value in (("games", float(len(batch))), ("env_steps", float(batch.env_steps))):
                self.counters[name] = self.counters.get(name, 0.0) + value
                counted[name] += value
            writes.append(batch)
            outcomes.append(True)
            yield
        if self.store is None or not writes:
            yield outcomes, lambda: None
            return
        self.tables.ratings_changed(moved)
        diversity_rows = [(x, *self.diversity.state(x)) for x in behaviour]
        # The tables are checkpointed every league.payoff_checkpoint_seconds; a restart replays the
        # batches stored since.
        tables = self.tables.take() if self.tables.age() >= self.checkpoint_seconds else None
        store = self.store

        def write() -> None:
            try:
                store.record_results_many(writes, *(tables or (None, None)), counted, diversity_rows)
            except BaseException:
                self.tables.untake(tables)
                raise

        yield outcomes, write

    def _apply_tables(self, batch: ResultBatch) -> tuple[list, set]:
        """Payoff and Elo of a batch's pairs (``pair_counts``): a batch when it arrives, and the
        same batch when a restart replays it. Returns the pairs and ratings it changed.

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
        self.frozen_results += int(games[frozen].sum())
        return changed, moved

    def _apply_behaviour(self, batch: ResultBatch) -> set:
        """The learners' action histograms into the diversity tracker; returns the learners moved."""
        behaviour = []
        for learner_id, counts in batch.action_counts.items():
            if learner_id in self.learners and counts.sum() > 0:
                actions = np.repeat(np.arange(len(counts)), counts.astype(np.int64))
                if len(actions):
                    self.diversity.update(learner_id, TrajectoryBatch(actions=actions, num_actions=len(counts)))
                    behaviour.append(learner_id)
        return set(behaviour)

    # -- exact scores ---------------------------------------------------------------
    def record_exact(self, scores: Sequence[tuple[str, str, float]], weight: float = 1e6) -> int:
        """Set frozen pairs' payoff to exactly computed expected scores (``weight`` games' worth),
        stored in one transaction; returns how many were kept (pairs with an agent evicted
        meanwhile are dropped)."""
        kept = []
        for a, b, score in scores:
            if not (0.0 <= score <= 1.0):
                raise ValueError(f"score must be in [0, 1], got {score}")
            if a in self.pool and b in self.pool and a != b:
                kept.append((a, b, float(score)))
        for a, b, score in kept:
            self.payoff.set_counts(a, b, weight * score, 0.0, weight * (1.0 - score))
        self.tables.pairs_changed([(a, b) for a, b, _ in kept])
        self.frozen_results += len(kept)
        if self.store is not None and kept:
            # a checkpoint: batches stored before this were applied before these counts were set
            self.tables.write(lambda tables: self.store.write_tables(*tables))
        return len(kept)

    def checkpoint(self) -> None:
        """Write the payoff and Elo rows changed since the last checkpoint now (e.g. at shutdown,
        so that the next start replays nothing)."""
        if self.store is not None:
            self.tables.write(lambda tables: self.store.write_tables(*tables))
