"""Keeping a long league's store bounded: ``python -m league.retention --storage RUN``.

What grows without bound in ``league.db`` and what a resume needs of it:

* result batches (``results``): one row per delivered batch. A resume needs only the batches after
  the last checkpoint of the payoff and Elo tables (``tables_through``: it replays them), and, for
  exactly-once delivery, each sender's newest batch: a sender keeps one message staged at a time
  and re-sends only that one (``actors.outbox``), so ``has_batch`` must still find it. Every other
  batch is *compacted*: deleted, its games added to meta ``compacted_games`` (so
  ``result_count`` still counts every stored game) and its count to ``compacted_batches``.
* the Nash history (``nash``), Elo history, measurements and events: a resume needs the latest
  Nash (the published mixture) and the latest measurement of each kind; the rest is the run's
  record (the report's curves). Solves older than an hour are thinned to one per
  ``league.history_thin_seconds``, and all of it is kept for ``league.history_retention_hours``
  (0: kept for ever); the newest Nash and the newest measurement of each kind always are.
* snapshot weights, payoff rows and Elo rows of evicted agents: removed with the eviction
  (``LeagueStore.add_agent``), so the payoff table holds at most N(N-1)/2 rows for a pool of N; the
  agent's row stays (the pool's version counts it); a store written before evictions dropped its
  payoff and Elo rows drops them once, when it is opened (``LeagueStore``). ``--archive DIR`` (``league.snapshot_archive``)
  first writes the weights of every stored snapshot to ``DIR/AGENT.pt`` so an eviction loses none.

SQLite reuses the pages freed by deletion, so a compacted store stops growing rather than
shrinking; ``--vacuum`` (offline only: it rewrites the file) gives the space back to the disk.
The coordinator compacts every ``league.compact_every_seconds`` (default 300 s) while it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from league.store import LeagueStore, StoreError, db_path


# the result batches a payoff/Elo checkpoint includes (``id <= tables_through``), except each
# sender's newest, which exactly-once needs
_COMPACTABLE = "FROM results WHERE id <= ? AND id NOT IN (SELECT max(id) FROM results GROUP BY source)"


def compactable(store: LeagueStore) -> dict[str, int]:
    """What :func:`compact_results` would remove now, read without changing anything:
    ``{"batches": n, "games": g}``."""
    through = int(store.get_meta("tables_through", 0))
    ((batches, games),) = store._query(f"SELECT count(*), coalesce(sum(n), 0) {_COMPACTABLE}", (through,))
    return {"batches": int(batches), "games": int(games)}


def compact_results(store: LeagueStore) -> dict[str, int]:
    """Delete the result batches the payoff/Elo checkpoint includes, except each sender's newest
    (exactly-once needs it), in one transaction. Returns ``{"batches": n, "games": g}`` removed."""
    with store.transaction() as db:
        through = int(json.loads(db.execute("SELECT value FROM meta WHERE key = 'tables_through'").fetchone()[0]))
        batches, games = db.execute(f"SELECT count(*), coalesce(sum(n), 0) {_COMPACTABLE}", (through,)).fetchone()
        if not batches:
            return {"batches": 0, "games": 0}
        db.execute(f"DELETE {_COMPACTABLE}", (through,))
        for key, n in (("compacted_batches", batches), ("compacted_games", games)):
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(int(n) + (json.loads(row[0]) if row else 0))))
    return {"batches": int(batches), "games": int(games)}


# Nash solves and Elo history younger than this are kept as they are; older ones are thinned
RECENT_HISTORY_SECONDS = 3600.0


def thin_history(store: LeagueStore, every_seconds: float, now: float | None = None) -> dict[str, int]:
    """Keep one Nash solve (the last) per ``every_seconds`` among those older than an hour, with the
    Elo history of the publications kept; the newest Nash always stays. A solve stores the
    weights of the whole pool (40 KB with a full pool of 1000), every ``league.nash_every_seconds``:
    unthinned, that history is the store's largest steady growth. Returns rows removed per table."""
    if every_seconds <= 0:
        return {}
    cutoff = (time.time() if now is None else now) - RECENT_HISTORY_SECONDS
    out = {}
    with store.transaction() as db:
        out["nash"] = db.execute(
            "DELETE FROM nash WHERE solved_at < :cut AND id < (SELECT max(id) FROM nash) AND id NOT IN "
            "(SELECT max(id) FROM nash WHERE solved_at < :cut GROUP BY CAST(solved_at / :every AS INTEGER))",
            {"cut": cutoff, "every": float(every_seconds)}).rowcount
        out["elo_history"] = db.execute(
            "DELETE FROM elo_history WHERE time < :cut AND time NOT IN "
            "(SELECT max(time) FROM elo_history WHERE time < :cut GROUP BY CAST(time / :every AS INTEGER))",
            {"cut": cutoff, "every": float(every_seconds)}).rowcount
    return out


def prune_history(store: LeagueStore, keep_seconds: float, now: float | None = None) -> dict[str, int]:
    """Delete Nash solves, Elo history, measurements and events older than ``keep_seconds``,
    keeping the newest Nash (the published mixture a resume restores), the newest measurement of
    each kind (what the status shows) and the events a resume reads (``coordinator_start``,
    ``learner_start``: the run's record of its lives). Returns rows removed per table."""
    if keep_seconds <= 0:
        return {}
    cutoff = (time.time() if now is None else now) - keep_seconds
    out = {}
    with store.transaction() as db:
        out["nash"] = db.execute("DELETE FROM nash WHERE solved_at < ? AND id < (SELECT max(id) FROM nash)",
                                 (cutoff,)).rowcount
        out["elo_history"] = db.execute("DELETE FROM elo_history WHERE time < ?", (cutoff,)).rowcount
        out["measurements"] = db.execute(
            "DELETE FROM measurements WHERE time < ? AND id NOT IN (SELECT max(id) FROM measurements GROUP BY kind)",
            (cutoff,)).rowcount
        out["events"] = db.execute(
            "DELETE FROM events WHERE time < ? AND kind NOT IN ('coordinator_start', 'learner_start')",
            (cutoff,)).rowcount
    return out


def archive_blob(folder: str | os.PathLike, agent_id: str, blob: bytes) -> bool:
    """Write one snapshot's weights to ``folder/AGENT_ID.pt`` (written then renamed) unless there;
    True when written."""
    folder = Path(folder)
    path = folder / f"{agent_id.replace('/', '_')}.pt"
    if path.exists():
        return False
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pt.tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return True


def archive_snapshots(store: LeagueStore, folder: str | os.PathLike) -> int:
    """Write every stored snapshot's weights not yet in ``folder`` to ``folder/AGENT_ID.pt``.
    Returns how many files were written."""
    written = 0
    for agent in store.agents():
        try:
            blob = store.snapshot_blob(agent.agent_id)
        except KeyError:
            continue
        written += archive_blob(folder, agent.agent_id, blob)
    return written


def table_bytes(storage: str | os.PathLike) -> dict[str, int]:
    """Bytes per table and index of a store (SQLite's ``dbstat``), largest first; {} where this
    SQLite was built without it."""
    db = sqlite3.connect(f"file:{db_path(storage)}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:
        rows = []
    finally:
        db.close()
    return dict(rows)


def apply(store: LeagueStore, history_retention_hours: float = 0.0, archive: str | None = None,
          history_thin_seconds: float = 0.0) -> dict[str, Any]:
    """One retention pass (what the coordinator runs every ``league.compact_every_seconds``)."""
    out: dict[str, Any] = {}
    if archive:
        out["archived"] = archive_snapshots(store, archive)
    out["compacted"] = compact_results(store)
    out["thinned"] = thin_history(store, history_thin_seconds)
    out["pruned"] = prune_history(store, history_retention_hours * 3600.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m league.retention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", required=True, help="the run's storage folder (or its league.db)")
    parser.add_argument("--history-hours", type=float, default=0.0,
                        help="also delete Nash/Elo history, measurements and events older than this (0: keep)")
    parser.add_argument("--thin-seconds", type=float, default=0.0,
                        help="keep one Nash solve per this many seconds among those older than an hour (0: all)")
    parser.add_argument("--archive", default=None, help="write snapshot weights to this folder first")
    parser.add_argument("--vacuum", action="store_true",
                        help="rewrite the file to give freed space back (stop the league first)")
    args = parser.parse_args(argv)
    try:
        with LeagueStore(args.storage, create=False) as store:
            before = store.path.stat().st_size
            out = apply(store, args.history_hours, args.archive, args.thin_seconds)
            if args.vacuum:
                with store._lock:
                    store._db.execute("VACUUM")
            out["bytes_before"], out["bytes_after"] = before, store.path.stat().st_size
    except (StoreError, sqlite3.Error, OSError) as exc:
        print(f"nash-league: retention failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
