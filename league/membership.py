"""Who is in the league: the pool of frozen agents, with their payoff and Elo rows.

An agent enters or leaves the pool, the payoff table and the Elo table together, in one place
(``Membership.admit``): a snapshot or a seed joins all three, and every agent the pool evicts to
make room leaves all three. The store learns of it in one transaction, which also checkpoints
the payoff and Elo tables (``league.intake.TableCheckpoints``).
"""

from __future__ import annotations

from typing import Iterable

from league.elo import EloTable
from league.intake import TableCheckpoints
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord
from league.store import LeagueStore


class Membership:
    """The pool, payoff and Elo tables of a league, changed together.

    ``version`` counts the pool's changes (every agent ever added, evicted ones included), so
    that a plan or a Nash made for one pool is known to be stale."""

    def __init__(self, pool: AgentPool, payoff: PayoffTable, elo: EloTable, tables: TableCheckpoints,
                 store: LeagueStore | None = None):
        self.pool, self.payoff, self.elo, self.tables, self.store = pool, payoff, elo, tables, store
        self.version = 0

    def restore(self, store: LeagueStore, learners: Iterable[str]) -> None:
        """The stored pool and its checkpointed payoff and Elo rows (``learners``: the live ids
        whose payoff rows are kept too)."""
        for record in store.agents():
            self.pool.insert(record)
            self.payoff.add_agent(record.agent_id)
        known = set(self.pool.ids()) | set(learners)
        for a, b, w, d, l in store.payoff_rows():
            if a in known and b in known:
                self.payoff.set_counts(a, b, w, d, l)
        for agent_id, rating, games in store.elo_rows():
            if agent_id in known and agent_id not in self.elo.anchors:
                self.elo.ratings[agent_id] = rating
                self.elo.games[agent_id] = games
        self.version = len(store.agents(include_removed=True))

    def add_learner(self, learner_id: str) -> None:
        """A live learner: payoff and Elo rows, no pool record."""
        self.payoff.add_agent(learner_id)
        self.elo.add(learner_id)

    def admit(self, record: AgentRecord, rating: float | None = None) -> list[AgentRecord]:
        """Put ``record`` into the pool with a payoff row and an Elo rating (``rating``; the initial
        one when None), and take out of all three every agent the pool evicts to make room.
        Returns the evicted records; ``commit`` stores the change."""
        self.pool.insert(record)
        evicted = self.pool.evict()
        self.payoff.add_agent(record.agent_id)
        self.elo.add(record.agent_id, rating)
        self.tables.ratings_changed([record.agent_id])
        for r in evicted:
            self.payoff.remove_agent(r.agent_id)
            self.elo.remove(r.agent_id)
        return evicted

    def clear_payoff(self, learner_id: str) -> None:
        """Forget a learner's payoff rows (it reset: its past games say nothing of it now)."""
        self.payoff.remove_agent(learner_id)
        self.payoff.add_agent(learner_id)

    def commit(self, record: AgentRecord, blob: bytes | None, evicted: Iterable[AgentRecord],
               cleared: Iterable[str] = ()) -> None:
        """Store an ``admit`` (the record and its weights ``blob``, the evictions, the payoff rows of
        ``cleared`` learners forgotten) in one transaction with a checkpoint of the tables: every
        batch replayed after it was applied to this pool."""
        if self.store is not None:
            store = self.store
            self.tables.write(lambda tables: store.add_agent(record, blob, evicted=[r.agent_id for r in evicted],
                                                             clear_payoff=list(cleared), tables=tables))
        self.version += 1
