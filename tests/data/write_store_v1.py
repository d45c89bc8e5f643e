"""Writes tests/data/store_v1.sql (the dump of a league.db) and store_v1_expected.json: a league store in the summary
format of store version 1 (a result batch's summary either as a list of row objects, one per game
or per pair, or as columns), with the payoff and Elo that the league writing it had in memory.

It needs the code of a store-version-1 nash-league on PYTHONPATH (it writes rows through
``LeagueStore.record_results``, which later versions no longer take):

    PYTHONPATH=/path/to/v1/checkout python tests/data/write_store_v1.py
"""

import json
import sqlite3
import shutil
import sys
from pathlib import Path

import numpy as np

from league.config import load_config
from league.league import League
from league.messages import ResultBatch
from league.store import LeagueStore

HERE = Path(__file__).resolve().parent
OUT = HERE / "store_v1"


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    # no periodic checkpoint: the per-pair batches after the last checkpoint stay to be replayed
    cfg = load_config(None, [f"run.storage={OUT}", "league.payoff_checkpoint_seconds=3600", "serve.api=false"])
    rng = np.random.default_rng(7)
    with LeagueStore(OUT) as store:
        league = League(cfg, store)
        for i in range(3):
            league.add_seed(f"seed-{i}", b"w%d" % i)
        frozen = ["seed-0", "seed-1", "seed-2"]
        learners = list(league.learners)
        seq = 0

        def games(n):
            return [(str(rng.choice(learners)), str(rng.choice(frozen + learners)), float(rng.integers(0, 3)) / 2)
                    for _ in range(n)] + [(frozen[k % 3], frozen[(k + 1) % 3], float(rng.integers(0, 3)) / 2)
                                          for k in range(n // 4)]

        # one row a game (a per-game batch: the league checkpoints its tables with it)
        for _ in range(2):
            seq += 1
            assert league.report_results(ResultBatch.from_results("w0", seq, games(30), env_steps=90))
        # per-pair batches (columns), replayed after the checkpoint
        for _ in range(3):
            seq += 1
            assert league.report_results(ResultBatch.from_results("w1", seq, games(40), env_steps=120).aggregated())
        # an earlier writer's rows of one game each (no "games": one game a row), before the checkpoint
        seq += 1
        rows = [{"a": x, "b": y, "score": sc} for x, y, sc in games(12) if x != y]
        assert store.record_results("w3", seq, rows, None, None, {"games": float(len(rows))})
        league.checkpoint()
        for _ in range(3):
            seq += 1
            assert league.report_results(ResultBatch.from_results("w1", seq, games(40), env_steps=120).aggregated())
        # an earlier writer's per-pair rows, after the tables' checkpoint (replayed on open)
        for _ in range(3):
            seq += 1
            batch = ResultBatch.from_results("w2", seq, games(40), env_steps=0).aggregated()
            a, b, g, w, d, s = batch.pair_counts()
            names = batch.agents
            rows = [{"a": names[i], "b": names[j], "games": int(n), "score": float(sc), "wins": int(x),
                     "draws": int(y), "losses": int(n - x - y)}
                    for i, j, n, x, y, sc in zip(a.tolist(), b.tolist(), g.tolist(), w.tolist(), d.tolist(),
                                                 s.tolist())]
            assert store.record_results("w2", seq, rows, None, None, {"games": float(g.sum())})
    # what a league opening this file has in memory: the tables plus the replayed batches
    with LeagueStore(OUT, create=False) as store:
        league = League(cfg, store)
        expected = {"payoff": league.payoff.pairs(), "elo": {a: [r, league.elo.games[a]]
                                                             for a, r in league.elo.ratings.items()},
                    "counters": league.counters, "tables_through": store.tables_through(),
                    "batches": store._query("SELECT count(*) FROM results")[0][0]}
    for suffix in ("-wal", "-shm"):
        (OUT / f"league.db{suffix}").unlink(missing_ok=True)
    (HERE / "store_v1_expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    db = sqlite3.connect(OUT / "league.db")  # kept as text: the test rebuilds the file from the dump
    head = "".join(f"PRAGMA {p} = {db.execute(f'PRAGMA {p}').fetchone()[0]};\n" for p in ("application_id", "user_version"))
    (HERE / "store_v1.sql").write_text(head + "\n".join(db.iterdump()) + "\n")
    db.close()
    shutil.rmtree(OUT)
    print(json.dumps({k: expected[k] for k in ("tables_through", "batches", "counters")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
