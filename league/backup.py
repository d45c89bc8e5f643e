"""Online backup of a running league: ``python -m league.backup --storage RUN --out FILE``.

The copy is taken with SQLite's online backup API (``sqlite3.Connection.backup``) in one step: it
reads the store inside one read transaction, so it is the league as of one commit, while the
coordinator goes on writing (WAL: a reader never blocks the writer, nor the writer a reader). The
copy is written beside ``FILE`` and renamed into place only once complete and checked, so a
crashed backup never leaves a half file under that name.

Restore: put the copy at ``NEWRUN/league.db`` (``--out NEWRUN`` does that) and start the launcher
with ``run.storage=NEWRUN``. The resumed league is the backed-up one: its pool, payoff, Elo and
published mixture (``league_state``). Results and snapshots acknowledged after the backup are not
in it; the senders' outboxes belong to the old storage path and are not replayed into the copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from league.errors import ArgumentParser, UsageError, fail
from league.store import DB_NAME, LeagueStore, StoreError, db_path


def backup(storage: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> dict[str, Any]:
    """Copy the store of ``storage`` (a run folder or its ``league.db``) to ``out`` (a file when it
    ends in ``.db``, else a folder that gets ``league.db``), consistently while the league runs.
    An existing file at ``out`` is replaced only with ``force`` (else a UsageError). Returns what
    was copied."""
    src_path = db_path(storage)
    if not src_path.is_file():
        raise UsageError("--storage", f"no league store at {src_path}")
    if src_path.stat().st_size == 0:
        raise UsageError("--storage", f"{src_path} is an empty file, not a nash-league store")
    out = Path(out)
    dst_path = out if out.suffix == ".db" else out / DB_NAME
    if dst_path.resolve() == src_path.resolve():
        raise UsageError(f"--out {out}", "is the store itself")
    if dst_path.exists() and not force:
        raise UsageError(f"--out {out}", f"{dst_path} exists; --force replaces it")
    dst_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst_path.with_name(dst_path.name + ".partial")
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        stale.unlink(missing_ok=True)
    t0 = time.monotonic()
    # read-only: a backup must never write to the league it copies (not even a WAL checkpoint)
    try:
        src = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True, timeout=60.0)
        try:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)  # pages=-1: every page in one step, one read transaction: one consistent state
            finally:
                dst.close()
        finally:
            src.close()
        with LeagueStore(tmp, create=False) as copy:  # checks application id, schema and quick_check
            info = {"agents": len(copy.agents()), "games": copy.result_count(),
                    "nash_solves": len(copy.nash_history()), "tables_through": copy.tables_through()}
    except BaseException:
        for side in ("", "-wal", "-shm"):
            Path(f"{tmp}{side}").unlink(missing_ok=True)
        raise
    for side in ("-wal", "-shm"):  # the check closed the copy cleanly: its WAL is folded in
        Path(f"{tmp}{side}").unlink(missing_ok=True)
    os.replace(tmp, dst_path)
    return {"out": str(dst_path), "bytes": dst_path.stat().st_size, "seconds": round(time.monotonic() - t0, 3),
            **info}


def league_state(league, with_payoff: bool = True) -> dict[str, Any]:
    """What a resume restores of a ``league.league.League``, JSON-ready: the pool (with Elo), the
    measured payoff (``with_payoff``), every Elo rating, the published mixture and the counters."""
    state = {
        "pool": league.pool_view(),
        "elo": sorted([a, float(r), int(league.elo.games.get(a, 0))] for a, r in league.elo.ratings.items()),
        "nash": league.nash_view().to_dict(),
        "pool_version": league.pool_version,
        "counters": dict(sorted(league.counters.items())),
    }
    if with_payoff:
        state["payoff"] = league.payoff_view()
    return state


def state_digest(league) -> str:
    """sha256 of ``league_state`` of a League, its payoff matrices hashed as float64 bytes (a pool
    of 1000 in milliseconds, where their JSON would take seconds)."""
    h = hashlib.sha256(json.dumps(league_state(league, with_payoff=False), sort_keys=True).encode())
    ids = league.measured_ids()
    win_rates = league.payoff.matrix(ids) if ids else None
    h.update(json.dumps(ids).encode())
    if ids:
        for matrix in (win_rates, league.payoff.games_matrix(ids)):
            h.update(np.ascontiguousarray(matrix, dtype=np.float64).tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m league.backup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", required=True, help="the run's storage folder (or its league.db)")
    parser.add_argument("--out", required=True,
                        help="the copy: a file ending in .db, or a folder that gets league.db (a run folder to resume)")
    parser.add_argument("--force", action="store_true", help="replace an existing copy at --out")
    args = parser.parse_args(argv)
    try:
        info = backup(args.storage, args.out, force=args.force)
    except UsageError as exc:
        return fail(exc, status=1)
    except (StoreError, ValueError, sqlite3.Error, OSError) as exc:
        return fail(f"backup of {args.storage}", exc, status=1)
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
