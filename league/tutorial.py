"""The predecessor tutorial's API, as thin adapters over the league's own parts.

The tutorial's example (``tests/data/league_smoke_test.py``) builds an ``AgentPool`` kept in a
file (``pool_manifest``), a ``MatchDatabase`` of results and a ``LeagueMatchmaker`` that draws
opponents. Nothing of the running league uses these names; each is a few lines over the one
implementation the league uses:

- ``MatchDatabase``: results into a ``PayoffTable`` (``league/payoff.py``), kept in a league
  store (``league/store.py``) as result batches and replayed from it when reopened;
- ``AgentPool`` with ``StoreManifest``: the pool's records kept in a league store (``AgentPool(pool_manifest=...)``);
- ``LeagueMatchmaker``: PFSP (``pfsp_probabilities``, ``league/matchmaking.py``) or Nash
  sampling over the pool.

A path given to ``pool_manifest`` or ``db_path`` names a league store file (SQLite, whatever its
name) or a run folder, as ``LeagueStore`` takes it; a file that is not a store raises
``StoreError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from league.matchmaking import WEIGHTINGS, WeightFunction, WinRates, pfsp_probabilities
from league.messages import ResultBatch
from league.payoff import PayoffTable
from league.pool import AgentPool as _Pool
from league.pool import AgentRecord
from league.store import LeagueStore

SOURCE = "match_database"  # the result batches' source in the store


def open_store(path: str | os.PathLike) -> LeagueStore:
    """The league store at ``path``: a file name (one with a suffix, ``pool.json``) is the store
    file itself, anything else a run folder."""
    p = Path(path)
    if p.suffix and not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()  # an empty file is an empty SQLite database: LeagueStore makes it a store
    return LeagueStore(p)


class MatchDatabase:
    """The tutorial's match log: ``record(a, b, outcome)`` and ``win_rate``, over a ``PayoffTable``.

    With ``db_path`` every result is stored (one result batch, ``league.messages.ResultBatch``)
    before ``record`` returns, and the batches are replayed when the database is reopened."""

    def __init__(self, db_path: str | os.PathLike | None = None, decay: float = 1.0, prior: float = 0.5):
        self.table = PayoffTable(decay=decay, prior=prior)
        self.store = open_store(db_path) if db_path is not None else None
        self._seq = 0
        if self.store is not None:
            for batch in self.store.results_after(0):
                a, b, games, _, draws, score = batch.pair_counts()
                names = [batch.agents[i] for i in a.tolist()], [batch.agents[j] for j in b.tolist()]
                wins = score - 0.5 * draws  # as the league's intake counts them; one game: record's counts
                self.table.record_counts(*names, games, wins, draws, np.maximum(games - draws - wins, 0.0))
                if batch.source == SOURCE:
                    self._seq = max(self._seq, batch.seq)

    def record(self, a: str, b: str, outcome: float) -> None:
        self.table.record(a, b, outcome)  # checks the outcome and the ids first
        self._seq += 1
        if self.store is not None:
            batch = ResultBatch.from_games(SOURCE, self._seq, [a, b], [0], [1], [float(outcome)])
            self.store.record_results(batch, None, None, {"games": 1.0})

    def win_rate(self, a: str, b: str) -> float:
        if a not in self.table or b not in self.table:
            return self.table.prior
        return self.table.win_rate(a, b)

    def win_rates_for(self, a: str, ids: Sequence[str]) -> np.ndarray:
        if a not in self.table:
            return np.full(len(ids), self.table.prior)
        known = [b for b in ids if b in self.table]
        rates = dict(zip(known, self.table.win_rates_for(a, known)))
        return np.array([rates.get(b, self.table.prior) for b in ids])


class AgentPool(_Pool):
    """The tutorial's pool: ``AgentPool(pool_manifest=path)`` keeps its records in a league store
    (``StoreManifest``); without a path, the league's own in-memory pool."""

    def __init__(self, pool_manifest: str | os.PathLike | None = None, max_size: int | None = None):
        super().__init__(None if pool_manifest is None else StoreManifest(pool_manifest), max_size)


class StoreManifest:
    """Where ``AgentPool(pool_manifest=path)`` keeps its records: a league store's ``agents`` table
    (the records only; the tutorial's snapshots are paths, not weights)."""

    def __init__(self, path: str | os.PathLike):
        self.store = open_store(path)

    def records(self) -> list[AgentRecord]:
        return self.store.agents()

    def changed(self, added: AgentRecord | None = None, removed: Iterable[str] = ()) -> None:
        if added is not None:
            self.store.add_agent(added, None, evicted=list(removed))
        else:
            self.store.remove_agents(list(removed))


class LeagueMatchmaker:
    """The tutorial's matchmaker: PFSP over the pool, or Nash sampling.

    ``select_opponent(focal)`` draws an opponent for ``focal`` among the other
    agents of the pool: from the Nash weights when they are set
    (``set_nash_weights``), otherwise by PFSP with the weight function
    (``set_weight_function``; None restores f_hard with p=2).
    """

    def __init__(self, agent_pool: AgentPool, match_database: WinRates,
                 weight_function: WeightFunction | str | None = None, seed: int | None = None):
        self.pool = agent_pool
        self.match_database = match_database
        self._weighting: WeightFunction | str = weight_function or "hard"
        self._nash: dict[str, float] | None = None
        self.rng = np.random.default_rng(seed)

    def set_weight_function(self, fn: WeightFunction | str | None) -> None:
        if fn is not None and not callable(fn) and fn not in WEIGHTINGS:
            raise ValueError(f"unknown PFSP weighting {fn!r}")
        self._weighting = fn or "hard"

    def set_nash_weights(self, weights: Mapping[str, float] | None) -> None:
        if weights is None:
            self._nash = None
            return
        clean = {}
        for agent_id, w in weights.items():
            w = float(w)
            if not np.isfinite(w) or w < 0:
                raise ValueError(f"Nash weight of {agent_id!r} must be finite and >= 0, got {w}")
            clean[agent_id] = w
        if sum(clean.values()) <= 0:
            raise ValueError("Nash weights must have a positive sum")
        self._nash = clean

    def opponent_probabilities(self, focal: str) -> dict[str, float]:
        ids = [a for a in self.pool.ids() if a != focal]
        if not ids:
            return {}
        if self._nash is not None:
            w = np.array([self._nash.get(a, 0.0) for a in ids])
            if w.sum() > 0:
                return dict(zip(ids, (w / w.sum()).tolist()))
        rates = self.match_database.win_rates_for(focal, ids)
        return dict(zip(ids, pfsp_probabilities(rates, self._weighting).tolist()))

    def select_opponent(self, focal: str) -> str | None:
        probs = self.opponent_probabilities(focal)
        if not probs:
            return None
        ids = list(probs)
        return ids[int(self.rng.choice(len(ids), p=np.fromiter(probs.values(), float)))]
