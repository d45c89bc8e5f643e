"""The league's one SQLite file: copy it and you have the league.

Agents, snapshot weights (blobs), payoff counts, match-result batches, Nash
history, Elo, learner checkpoints and events live in ``RUN_DIR/league.db``
(WAL journal, ``synchronous=FULL``). Every change is one transaction, and a
caller acknowledges a change only after ``commit`` returned, so a process
killed at any moment leaves every acknowledged change on disk.

The payoff and Elo tables are checkpoints, not rewritten with every result
batch: meta ``tables_through`` is the id of the last stored batch they include.
Every batch is stored (``ResultBatch.to_arrays`` as JSON) before it is acknowledged, and
opening a league replays the batches after ``tables_through`` onto the tables
(``League``), which gives the league that was in memory exactly.

A file that is not a nash-league store (wrong SQLite application id, or not
SQLite at all) or that has another schema version raises ``StoreError``; a file
of an earlier schema version is upgraded once, when it is opened, in one
transaction.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from league.messages import ResultBatch
from league.pool import AgentRecord, AgentType

# a checkpoint of the payoff and Elo tables: (payoff rows, Elo rows), see ``LeagueStore.write_tables``
Tables = tuple[list[tuple[str, str, float, float, float]], list[tuple[str, float, int]]]

# 2: a result batch is kept as ``ResultBatch.to_arrays`` (JSON); version 1 files are upgraded on open
SCHEMA_VERSION = 2
APPLICATION_ID = 0x4E4C4731  # "NLG1": marks the file as ours
DB_NAME = "league.db"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE agents (
    agent_id TEXT PRIMARY KEY, version INTEGER NOT NULL, agent_type TEXT NOT NULL,
    learner_id TEXT, parent_id TEXT, step INTEGER NOT NULL, created_at REAL NOT NULL,
    metadata TEXT NOT NULL, snapshot_path TEXT, removed_at REAL, seq INTEGER NOT NULL);
CREATE TABLE snapshots (agent_id TEXT PRIMARY KEY, blob BLOB NOT NULL);
CREATE TABLE payoff (a TEXT NOT NULL, b TEXT NOT NULL, wins REAL NOT NULL, draws REAL NOT NULL,
    losses REAL NOT NULL, PRIMARY KEY (a, b));
CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, seq INTEGER NOT NULL,
    received_at REAL NOT NULL, n INTEGER NOT NULL, payload TEXT NOT NULL, UNIQUE (source, seq));
CREATE TABLE counters (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE nash (id INTEGER PRIMARY KEY AUTOINCREMENT, solved_at REAL NOT NULL, pool_version INTEGER NOT NULL,
    ids TEXT NOT NULL, weights TEXT NOT NULL, entropy REAL NOT NULL, meta_exploitability REAL NOT NULL,
    solve_seconds REAL NOT NULL, method TEXT NOT NULL);
CREATE TABLE elo (agent_id TEXT PRIMARY KEY, rating REAL NOT NULL, games INTEGER NOT NULL);
CREATE TABLE elo_history (time REAL NOT NULL, agent_id TEXT NOT NULL, role TEXT, rating REAL NOT NULL);
CREATE TABLE learners (learner_id TEXT PRIMARY KEY, role TEXT NOT NULL, version INTEGER NOT NULL,
    step INTEGER NOT NULL, updated_at REAL NOT NULL, info TEXT NOT NULL, state BLOB);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE measurements (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    value REAL NOT NULL, data TEXT NOT NULL);
CREATE TABLE diversity (agent_id TEXT PRIMARY KEY, embedding_sum TEXT NOT NULL, steps INTEGER NOT NULL);
CREATE INDEX events_kind ON events (kind);
CREATE INDEX payoff_b ON payoff (b);
CREATE INDEX measurements_kind ON measurements (kind, time);
"""


class StoreError(ValueError):
    """The file is not a readable nash-league store."""


def db_path(storage: str | os.PathLike) -> Path:
    """``RUN_DIR`` -> ``RUN_DIR/league.db``; a path to a file is kept as is."""
    p = Path(storage)
    return p if p.suffix == ".db" or p.is_file() else p / DB_NAME


def game_of(game: Any, config: Any) -> str | None:
    """The game's name from a store's meta: ``game`` (a name, or a dict with ``name``), else
    ``config``'s ``game.name``; None when neither says."""
    if game is None and isinstance(config, dict):
        game = config.get("game")
    if isinstance(game, dict):
        game = game.get("name")
    return game if isinstance(game, str) and game else None


def recorded_meta(storage: str | os.PathLike) -> dict[str, Any] | None:
    """The ``game`` and ``config`` meta of the league stored in ``storage`` (each absent where the
    store has none), read read-only (SQLite ``mode=ro``) from any store version; None when there is
    no store there, or none that can be read (whoever opens it says what is wrong with it)."""
    path = db_path(Path(storage).expanduser())
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('game', 'config')").fetchall())
        finally:
            db.close()
        return {k: json.loads(v) for k, v in meta.items()}
    except (sqlite3.Error, ValueError):
        return None


def recorded_game(storage: str | os.PathLike) -> str | None:
    """The game of the league stored in ``storage`` (``recorded_meta``); None where it says none."""
    meta = recorded_meta(storage)
    return None if meta is None else game_of(meta.get("game"), meta.get("config"))


_encoder = json.JSONEncoder(check_circular=False, separators=(",", ":"))


def encode_batch(batch: ResultBatch) -> str:
    """A result batch as the store keeps it: compact JSON of ``ResultBatch.to_arrays`` (no circular
    check: it is plain lists of numbers and ids)."""
    return _encoder.encode({key: value.tolist() if isinstance(value, np.ndarray) else value
                            for key, value in batch.to_arrays().items()})


def decode_batch(source: str, seq: int, payload: str) -> ResultBatch:
    return ResultBatch.from_arrays(source, seq, json.loads(payload))


def _upgraded_payload(source: str, seq: int, summary: dict[str, Any] | list[dict[str, Any]]) -> str:
    """A result batch's summary in schema version 1 (columns ``agents, a, b, games, wins, draws,
    score``, or a list of row objects ``{a, b, score}`` with ``games, wins, draws`` when a row
    stands for more than one game) as version 2 keeps it. Version 1 kept neither the reporter's
    environment steps nor its action counts (they went to the counters and the diversity table):
    the batch has 0 and none."""
    if isinstance(summary, dict):
        batch = ResultBatch(source, seq, tuple(summary["agents"]), *(np.asarray(summary[key], dtype=np.int64)
                                                                     for key in ("a", "b", "games", "wins", "draws")),
                            np.asarray(summary["score"], dtype=np.float64))
    else:
        agents: dict[str, int] = {}
        a = [agents.setdefault(r["a"], len(agents)) for r in summary]
        b = [agents.setdefault(r["b"], len(agents)) for r in summary]
        score = np.array([float(r["score"]) for r in summary], dtype=np.float64)
        games = np.array([int(r.get("games", 1)) for r in summary], dtype=np.int64)
        # a row without counts is one game: a win scores more than 1/2, a draw 1/2
        wins = np.array([int(r["wins"]) if "wins" in r else int(r["score"] > 0.5) for r in summary], dtype=np.int64)
        draws = np.array([int(r["draws"]) if "draws" in r else int(r["score"] == 0.5) for r in summary],
                         dtype=np.int64)
        batch = ResultBatch(source, seq, tuple(agents), np.array(a, dtype=np.int64), np.array(b, dtype=np.int64),
                            games, wins, draws, score)
    return encode_batch(batch)


class LeagueStore:
    """Thread-safe access to one league file (one connection, one lock)."""

    def __init__(self, storage: str | os.PathLike, *, create: bool = True, readonly: bool = False):
        """``create``: make the file when it is missing. ``readonly``: open it read-only (SQLite
        ``mode=ro``, ``query_only``): nothing is ever written, not even an upgrade, and an empty file
        or one of an earlier schema version is refused rather than made a store."""
        self.path = db_path(storage)
        self.readonly = readonly
        if not self.path.exists():
            if not create or readonly:
                raise StoreError(f"no league store at {self.path}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if readonly and self.path.is_file() and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path} is an empty file, not a nash-league store")
        self._lock = threading.RLock()
        try:
            if readonly:
                self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0,
                                           isolation_level=None, check_same_thread=False)
                self._db.execute("PRAGMA query_only=1")
                self._open_readonly()
            else:
                self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
                self._open()
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                self._db.close()
            raise StoreError(f"{self.path} is not a readable nash-league store: {exc}") from None

    def _open(self) -> None:
        db = self._db
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables == 0 and app_id == 0:
            db.execute("PRAGMA journal_mode=WAL")
            with self.transaction():
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (json.dumps(SCHEMA_VERSION),))
                db.execute("INSERT INTO meta VALUES ('created_at', ?)", (json.dumps(time.time()),))
        elif app_id != APPLICATION_ID:
            raise StoreError(f"{self.path} is an SQLite file but not a nash-league store (application id {app_id:#x})")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise StoreError(f"{self.path} is corrupt: {check}")
        version = self.get_meta("schema_version")
        if version == 1:
            self._upgrade_from_1()
            version = self.get_meta("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}; this nash-league reads version {SCHEMA_VERSION}")
        # Added after schema version 1 shipped; additive, so older files gain it on open.
        db.execute("CREATE TABLE IF NOT EXISTS diversity (agent_id TEXT PRIMARY KEY, embedding_sum TEXT NOT NULL, "
                   "steps INTEGER NOT NULL)")
        # Added after evictions began to delete payoff rows from either side (``_remove``): a file
        # without it also kept the payoff and Elo rows of every agent it had evicted (a resume
        # loads neither); they go with the upgrade, once.
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'payoff_b'").fetchone():
            evicted = "SELECT agent_id FROM agents WHERE removed_at IS NOT NULL"
            with self.transaction():
                db.execute("CREATE INDEX payoff_b ON payoff (b)")
                db.execute(f"DELETE FROM payoff WHERE a IN ({evicted}) OR b IN ({evicted})")
                db.execute(f"DELETE FROM elo WHERE agent_id IN ({evicted})")
        # A file written before the tables were checkpointed rewrote them with every batch: they
        # include every stored batch.
        if self.get_meta("tables_through") is None:
            with self.transaction():
                db.execute("INSERT OR IGNORE INTO meta SELECT 'tables_through', CAST(coalesce(max(id), 0) AS TEXT) "
                           "FROM results")

    def _open_readonly(self) -> None:
        """``_open``'s checks without its writes: a store as ``_open`` leaves it, or a StoreError."""
        db = self._db
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise StoreError(f"{self.path} is not a nash-league store (SQLite application id {app_id:#x})")
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise StoreError(f"{self.path} is corrupt: {check}")
        version = self.get_meta("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}; this nash-league reads version "
                             f"{SCHEMA_VERSION} (the launcher upgrades it when it resumes the run)")

    def _upgrade_from_1(self) -> None:
        """Schema version 1 -> 2, once, in one transaction: every stored result batch's summary is
        rewritten as the one form of a result batch (``encode_batch``). Counts, score sums and the
        order of the batches stay as they were, so the league replays the same games."""
        with self.transaction() as db:
            rows = db.execute("SELECT id, source, seq, payload FROM results ORDER BY id").fetchall()
            try:
                db.executemany("UPDATE results SET payload = ? WHERE id = ?",
                               [(_upgraded_payload(source, seq, json.loads(payload)), batch_id)
                                for batch_id, source, seq, payload in rows])
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{self.path}: a stored result batch cannot be upgraded to schema version "
                                 f"{SCHEMA_VERSION} ({type(exc).__name__}: {exc})") from None
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(SCHEMA_VERSION),))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "LeagueStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic, durable change: BEGIN IMMEDIATE ... COMMIT."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                # A full disk may fail the COMMIT (the transaction stays open) or make SQLite roll back
                # by itself (nothing left to roll back): either way the connection must leave this
                # block outside any transaction, and the caller must hear the first error.
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- meta and counters -------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def counters(self) -> dict[str, float]:
        return dict(self._query("SELECT name, value FROM counters"))

    # -- agents and snapshots ------------------------------------------------
    def add_agent(self, record: AgentRecord, blob: bytes | None, evicted: Iterable[str] = (),
                  clear_payoff: Iterable[str] = (), tables: Tables | None = None) -> None:
        """Insert a snapshot (record + weights), mark evicted agents removed, checkpoint the payoff
        and Elo ``tables`` (``write_tables``) and forget the payoff rows of ``clear_payoff`` (a
        learner that resets), atomically."""
        with self.transaction() as db:
            seq = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM agents").fetchone()[0]
            db.execute(
                "INSERT INTO agents VALUES (?,?,?,?,?,?,?,?,?,NULL,?)",
                (record.agent_id, record.version, record.agent_type.value, record.learner_id, record.parent_id,
                 record.step, record.created_at, json.dumps(record.metadata), record.snapshot_path, seq),
            )
            if blob is not None:
                db.execute("INSERT INTO snapshots VALUES (?, ?)", (record.agent_id, sqlite3.Binary(blob)))
            self._event(db, "snapshot", {"agent_id": record.agent_id, "learner_id": record.learner_id,
                                         "agent_type": record.agent_type.value, "parent_id": record.parent_id,
                                         "step": record.step})
            self._remove(db, evicted)
            if tables is not None:
                self._write_tables(db, *tables)
            for agent_id in clear_payoff:
                self._delete_payoff(db, agent_id)

    def remove_agents(self, agent_ids: Iterable[str]) -> None:
        """Mark agents removed and drop their weights and table rows, atomically."""
        with self.transaction() as db:
            self._remove(db, agent_ids)

    def _remove(self, db: sqlite3.Connection, agent_ids: Iterable[str]) -> None:
        """Mark agents removed; drop their weights, payoff rows and Elo row (as ``Membership.admit``
        drops them in memory: a full pool of N keeps at most N(N-1)/2 payoff rows however many
        agents it has evicted)."""
        now = time.time()
        for agent_id in agent_ids:
            db.execute("UPDATE agents SET removed_at = ? WHERE agent_id = ?", (now, agent_id))
            db.execute("DELETE FROM snapshots WHERE agent_id = ?", (agent_id,))
            self._delete_payoff(db, agent_id)
            db.execute("DELETE FROM elo WHERE agent_id = ?", (agent_id,))
            self._event(db, "evict", {"agent_id": agent_id})

    @staticmethod
    def _delete_payoff(db: sqlite3.Connection, agent_id: str) -> None:
        """An agent's payoff rows, on either side: two lookups (the primary key's index, payoff_b)."""
        db.execute("DELETE FROM payoff WHERE a = ?", (agent_id,))
        db.execute("DELETE FROM payoff WHERE b = ?", (agent_id,))

    def agents(self, include_removed: bool = False) -> list[AgentRecord]:
        sql = ("SELECT agent_id, version, agent_type, learner_id, parent_id, step, created_at, metadata, "
               "snapshot_path FROM agents" + ("" if include_removed else " WHERE removed_at IS NULL") + " ORDER BY seq")
        return [
            AgentRecord(agent_id=r[0], version=r[1], agent_type=AgentType(r[2]), learner_id=r[3], parent_id=r[4],
                        step=r[5], created_at=r[6], metadata=json.loads(r[7]), snapshot_path=r[8])
            for r in self._query(sql)
        ]

    def agent_by_request(self, learner_id: str, request: int) -> AgentRecord | None:
        """The snapshot stored for a learner's numbered snapshot request (``metadata.request``)."""
        rows = self._query("SELECT agent_id FROM agents WHERE learner_id = ? AND json_extract(metadata, '$.request') = ?",
                           (learner_id, int(request)))
        if not rows:
            return None
        return next(r for r in self.agents(include_removed=True) if r.agent_id == rows[0][0])

    def snapshot_blob(self, agent_id: str) -> bytes:
        rows = self._query("SELECT blob FROM snapshots WHERE agent_id = ?", (agent_id,))
        if not rows:
            raise KeyError(f"no snapshot weights for agent {agent_id!r}")
        return bytes(rows[0][0])

    # -- results, payoff, Elo ------------------------------------------------
    def has_batch(self, source: str, seq: int) -> bool:
        return bool(self._query("SELECT 1 FROM results WHERE source = ? AND seq = ?", (source, seq)))

    def record_results(
        self,
        batch: ResultBatch,
        payoff_rows: Iterable[tuple[str, str, float, float, float]] | None,
        elo_rows: Iterable[tuple[str, float, int]] | None,
        counters: dict[str, float],
        diversity_rows: Iterable[tuple[str, Sequence[float], int]] = (),
    ) -> bool:
        """Store a result batch with what it changed (counters, the learners' behaviour embeddings,
        and a checkpoint of the payoff and Elo rows unless they are None), in one transaction.

        Idempotent per (source, seq): a batch retried after a crash is stored
        once; returns False when it was already there.
        """
        return self.record_results_many([batch], payoff_rows, elo_rows, counters, diversity_rows) == 1

    def record_results_many(
        self,
        batches: Sequence[ResultBatch],
        payoff_rows: Iterable[tuple[str, str, float, float, float]] | None,
        elo_rows: Iterable[tuple[str, float, int]] | None,
        counters: dict[str, float],
        diversity_rows: Iterable[tuple[str, Sequence[float], int]] = (),
    ) -> int:
        """Several result batches and what they changed, in one transaction (one fsync: group
        commit). Returns how many batches were new; nothing is written when none was.

        ``payoff_rows`` and ``elo_rows``: every row changed since the last checkpoint, these
        batches included (``write_tables``); None for both leaves the tables as they are, and the
        league replays these batches when it is opened."""
        if (payoff_rows is None) != (elo_rows is None):
            raise ValueError("record_results: payoff_rows and elo_rows are a checkpoint together (both or neither)")
        with self.transaction() as db:
            now, new = time.time(), 0
            for batch in batches:
                key = (batch.source, batch.seq)
                if db.execute("SELECT 1 FROM results WHERE source = ? AND seq = ?", key).fetchone():
                    continue
                # n counts games: a row of a batch stands for "games" games
                db.execute("INSERT INTO results (source, seq, received_at, n, payload) VALUES (?,?,?,?,?)",
                           (batch.source, batch.seq, now, len(batch), encode_batch(batch)))
                new += 1
            if not new:
                return 0
            if payoff_rows is not None:
                self._write_tables(db, payoff_rows, elo_rows)
            for name, delta in counters.items():
                db.execute("INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + ?",
                           (name, delta, delta))
            db.executemany("INSERT OR REPLACE INTO diversity VALUES (?,?,?)",
                           [(a, json.dumps([float(x) for x in total]), int(steps)) for a, total, steps in diversity_rows])
            return new

    @staticmethod
    def _write_tables(db: sqlite3.Connection, payoff_rows: Iterable[tuple[str, str, float, float, float]],
                      elo_rows: Iterable[tuple[str, float, int]]) -> None:
        db.executemany("INSERT OR REPLACE INTO payoff VALUES (?,?,?,?,?)", payoff_rows)
        db.executemany("INSERT OR REPLACE INTO elo VALUES (?,?,?)", elo_rows)
        db.execute("INSERT OR REPLACE INTO meta SELECT 'tables_through', CAST(coalesce(max(id), 0) AS TEXT) "
                   "FROM results")

    def write_tables(self, payoff_rows: Iterable[tuple[str, str, float, float, float]],
                     elo_rows: Iterable[tuple[str, float, int]]) -> None:
        """Checkpoint the payoff and Elo tables: ``payoff_rows`` (a, b, wins, draws, losses; a < b)
        and ``elo_rows`` (agent, rating, games) must be every row changed since the last checkpoint;
        afterwards the tables include every stored result batch."""
        with self.transaction() as db:
            self._write_tables(db, payoff_rows, elo_rows)

    def tables_through(self) -> int:
        """The id of the last stored result batch that the payoff and Elo tables include."""
        return int(self.get_meta("tables_through", 0))

    def results_after(self, batch_id: int = 0) -> Iterator[ResultBatch]:
        """The stored result batches after ``batch_id`` (``tables_through``: what a league replays
        onto its checkpointed tables), in the order they were stored; all of them by default."""
        rows = self._query("SELECT source, seq, payload FROM results WHERE id > ? ORDER BY id", (int(batch_id),))
        for source, seq, payload in rows:
            yield decode_batch(source, seq, payload)

    def diversity_rows(self) -> list[tuple[str, list[float], int]]:
        """Per agent: the running sum of behaviour embeddings and the steps behind it."""
        return [(a, json.loads(total), steps)
                for a, total, steps in self._query("SELECT agent_id, embedding_sum, steps FROM diversity")]

    def payoff_rows(self) -> list[tuple[str, str, float, float, float]]:
        """Decayed counts from ``a``'s side; each unordered pair once (a < b)."""
        return self._query("SELECT a, b, wins, draws, losses FROM payoff")

    def elo_rows(self) -> list[tuple[str, float, int]]:
        return self._query("SELECT agent_id, rating, games FROM elo")

    def result_count(self) -> int:
        """Games in the stored result batches, those compacted away (``league.retention``) included."""
        return self._query("SELECT coalesce(sum(n), 0) FROM results")[0][0] + int(self.get_meta("compacted_games", 0))

    def append_elo_history(self, when: float, rows: Iterable[tuple[str, str | None, float]]) -> None:
        with self.transaction() as db:
            db.executemany("INSERT INTO elo_history VALUES (?,?,?,?)", [(when, a, role, r) for a, role, r in rows])

    def elo_history(self) -> list[tuple[float, str, str | None, float]]:
        return self._query("SELECT time, agent_id, role, rating FROM elo_history ORDER BY time")

    # -- Nash ----------------------------------------------------------------
    def save_nash(self, solved_at: float, pool_version: int, ids: Sequence[str], weights: Sequence[float],
                  entropy: float, meta_exploitability: float, solve_seconds: float, method: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO nash (solved_at, pool_version, ids, weights, entropy, meta_exploitability, solve_seconds, "
                "method) VALUES (?,?,?,?,?,?,?,?)",
                (solved_at, pool_version, json.dumps(list(ids)), json.dumps([float(w) for w in weights]),
                 entropy, meta_exploitability, solve_seconds, method),
            )

    def nash_history(self, limit: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT solved_at, pool_version, ids, weights, entropy, meta_exploitability, solve_seconds, method FROM nash ORDER BY id"
        if limit is not None:
            sql = f"SELECT * FROM ({sql} DESC LIMIT {int(limit)}) ORDER BY solved_at"
        return [
            {"solved_at": r[0], "pool_version": r[1], "ids": json.loads(r[2]), "weights": json.loads(r[3]),
             "entropy": r[4], "meta_exploitability": r[5], "solve_seconds": r[6], "method": r[7]}
            for r in self._query(sql)
        ]

    def latest_nash(self) -> dict[str, Any] | None:
        rows = self.nash_history(limit=1)
        return rows[-1] if rows else None

    # -- learners --------------------------------------------------------------
    def save_learner(self, learner_id: str, role: str, version: int, step: int, state: bytes | None,
                     info: dict[str, Any] | None = None) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO learners VALUES (?,?,?,?,?,?,?) ON CONFLICT(learner_id) DO UPDATE SET role=excluded.role, "
                "version=excluded.version, step=excluded.step, updated_at=excluded.updated_at, info=excluded.info, "
                "state=coalesce(excluded.state, learners.state)",
                (learner_id, role, version, step, time.time(), json.dumps(info or {}),
                 sqlite3.Binary(state) if state is not None else None),
            )

    def load_learner(self, learner_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT role, version, step, updated_at, info, state FROM learners WHERE learner_id = ?",
                           (learner_id,))
        if not rows:
            return None
        r = rows[0]
        return {"learner_id": learner_id, "role": r[0], "version": r[1], "step": r[2], "updated_at": r[3],
                "info": json.loads(r[4]), "state": bytes(r[5]) if r[5] is not None else None}

    def learners(self) -> list[dict[str, Any]]:
        rows = self._query("SELECT learner_id, role, version, step, updated_at, info FROM learners ORDER BY learner_id")
        return [{"learner_id": r[0], "role": r[1], "version": r[2], "step": r[3], "updated_at": r[4],
                 "info": json.loads(r[5])} for r in rows]

    # -- events and measurements ---------------------------------------------
    @staticmethod
    def _event(db: sqlite3.Connection, kind: str, data: dict[str, Any]) -> None:
        db.execute("INSERT INTO events (time, kind, data) VALUES (?,?,?)", (time.time(), kind, json.dumps(data)))

    def add_event(self, kind: str, data: dict[str, Any] | None = None) -> None:
        with self.transaction() as db:
            self._event(db, kind, data or {})

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT time, kind, data FROM events", ()
        if kind is not None:
            sql, args = sql + " WHERE kind = ?", (kind,)
        return [{"time": t, "kind": k, **json.loads(d)} for t, k, d in self._query(sql + " ORDER BY id", args)]

    def last_write_time(self) -> float | None:
        """The time of the newest timed record (event, measurement or rating), None in an empty store."""
        times = [self._query(f"SELECT max(time) FROM {table}")[0][0] for table in ("events", "measurements", "elo_history")]
        return max((t for t in times if t is not None), default=None)

    def add_measurement(self, kind: str, value: float, data: dict[str, Any] | None = None, when: float | None = None) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO measurements (time, kind, value, data) VALUES (?,?,?,?)",
                       (time.time() if when is None else when, kind, float(value), json.dumps(data or {})))

    def latest_measurement(self, kind: str) -> dict[str, Any] | None:
        rows = self._query("SELECT time, value, data FROM measurements WHERE kind = ? ORDER BY time DESC LIMIT 1",
                           (kind,))
        return {"time": rows[0][0], "value": rows[0][1], **json.loads(rows[0][2])} if rows else None

    def measurements(self, kind: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT time, value, data FROM measurements WHERE kind = ? ORDER BY time", (kind,))
        return [{"time": t, "value": v, **json.loads(d)} for t, v, d in rows]

    def measurement_kinds(self, prefix: str = "") -> list[str]:
        """The measurement kinds recorded that start with ``prefix`` (an index range scan), sorted."""
        rows = self._query("SELECT DISTINCT kind FROM measurements WHERE kind >= ? AND kind < ? ORDER BY kind",
                           (prefix, prefix + "\U0010ffff"))
        return [r[0] for r in rows]
