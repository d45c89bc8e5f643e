import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from league.messages import ResultBatch
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore, StoreError


def test_roundtrip_of_every_table(tmp_path):
    with LeagueStore(tmp_path) as s:
        rec = AgentRecord("main-v1", 1, AgentType.MAIN_AGENT, learner_id="main", step=10, metadata={"x": 1})
        s.add_agent(rec, b"\x00weights\xff")
        s.add_agent(AgentRecord("main-v2", 2, AgentType.MAIN_AGENT, learner_id="main", parent_id="main-v1"), b"w2",
                    evicted=["main-v1"])
        assert s.record_results(ResultBatch.from_results("worker-0", 1, [("main", "main-v2", 1.0)], env_steps=7),
                                [("main", "main-v2", 1.0, 0.0, 0.0)], [("main", 1010.0, 1)], {"games": 1, "env_steps": 7})
        retry = ResultBatch.from_results("worker-0", 1, [])
        assert not s.record_results(retry, [], [], {"games": 1})  # retried batch: stored once
        s.save_nash(1.0, 3, ["main-v2"], [1.0], 0.0, 0.0, 0.001, "lp")
        s.save_learner("main", "main_agent", 5, 123, b"state", {"snapshots": 2})
        s.save_learner("main", "main_agent", 6, 124, None)  # keeps the last state blob
        s.add_measurement("nash_conv", 0.5, {"game": "kuhn_poker"})
    with LeagueStore(tmp_path, create=False) as s:
        assert [a.agent_id for a in s.agents()] == ["main-v2"]
        assert [a.agent_id for a in s.agents(include_removed=True)] == ["main-v1", "main-v2"]
        assert s.snapshot_blob("main-v2") == b"w2"
        with pytest.raises(KeyError):
            s.snapshot_blob("main-v1")
        assert s.payoff_rows() == [("main", "main-v2", 1.0, 0.0, 0.0)]
        assert s.counters() == {"games": 1.0, "env_steps": 7.0}
        assert s.latest_nash()["ids"] == ["main-v2"]
        learner = s.load_learner("main")
        assert (learner["version"], learner["state"]) == (6, b"state")
        assert [e["kind"] for e in s.events()] == ["snapshot", "snapshot", "evict"]
        assert s.measurements("nash_conv")[0]["value"] == 0.5


def test_tables_through_names_the_batches_a_restart_replays(tmp_path):
    with LeagueStore(tmp_path) as s:
        assert s.tables_through() == 0
        # batch seq: seq games of main against x, one won
        rows = lambda seq: ResultBatch("w", seq, ("main", "x"), [0], [1], [seq], [1], [0], [1.0])  # noqa: E731
        assert s.record_results(rows(2), [("main", "x", 1.0, 0.0, 1.0)], [("main", 1001.0, 2)], {"games": 2})
        assert s.tables_through() == 1  # rows given: a checkpoint that includes batch 1
        for seq in (3, 4):  # no rows: the tables stay as they were, and these are replayed
            assert s.record_results(rows(seq), None, None, {"games": seq})
        assert s.tables_through() == 1
        assert [(x.seq, x.agents, x.games.tolist(), x.wins.tolist(), x.score.tolist()) for x in s.results_after(1)] == [
            (3, ("main", "x"), [3], [1], [1.0]), (4, ("main", "x"), [4], [1], [1.0])]
        assert s.payoff_rows() == [("main", "x", 1.0, 0.0, 1.0)] and s.counters() == {"games": 9.0}
        with pytest.raises(ValueError, match="both or neither"):
            s.record_results(rows(5), [], None, {})
        s.write_tables([("main", "x", 2.0, 0.0, 5.0)], [("main", 1002.0, 7)])
        assert s.tables_through() == 3 and list(s.results_after(3)) == []
        assert s.payoff_rows() == [("main", "x", 2.0, 0.0, 5.0)] and s.elo_rows() == [("main", 1002.0, 7)]
        s.record_results(rows(5), None, None, {"games": 5})
        s._db.execute("DELETE FROM meta WHERE key = 'tables_through'")  # a file from before checkpoints
    with LeagueStore(tmp_path) as s:  # rewrote its tables with every batch: nothing to replay
        assert s.tables_through() == 4


def test_foreign_and_corrupt_files_give_clear_errors(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(StoreError, match="not a readable nash-league store"):
        LeagueStore(garbage)
    import sqlite3
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="not a nash-league store"):
        LeagueStore(foreign)
    with pytest.raises(StoreError, match="no league store"):
        LeagueStore(tmp_path / "missing", create=False)
    good = tmp_path / "run"
    LeagueStore(good).close()
    conn = sqlite3.connect(good / "league.db")
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        LeagueStore(good)


DATA = Path(__file__).resolve().parent / "data"


def store_v1(run_dir):
    """The version-1 store, rebuilt from its SQL dump (tests/data/store_v1.sql) in ``run_dir``;
    an open connection to it."""
    run_dir.mkdir(parents=True)
    raw = sqlite3.connect(run_dir / "league.db")
    raw.executescript((DATA / "store_v1.sql").read_text())
    return raw


def test_a_version_1_store_is_upgraded_once_to_the_same_league(tmp_path):
    """tests/data/store_v1.sql is the dump of a store written by a league of store version 1 (tests/data/write_store_v1.py):
    batches stored as columns and as row objects (one a pair, and one a game without counts), some
    included in the payoff and Elo checkpoint and some to be replayed. Opened now, it is upgraded
    once, in one transaction, and the league it opens to has the payoff counts, Elo and counters
    that the league of version 1 had in memory: the same pairs, agents and counters exactly (==), the
    decayed counts and ratings to 1e-12 (numpy's pow and sums may round the last bit differently from
    the release that wrote the expected values)."""
    from league.config import load_config
    from league.league import League

    expected = json.loads((DATA / "store_v1_expected.json").read_text())
    raw = store_v1(tmp_path / "run")
    before = raw.execute("SELECT id, source, seq, n FROM results ORDER BY id").fetchall()
    kinds = {type(json.loads(p)).__name__ for (p,) in raw.execute("SELECT payload FROM results")}
    raw.close()
    assert kinds == {"dict", "list"} and len(before) == expected["batches"]
    cfg = load_config(None, [f"run.storage={tmp_path / 'run'}"])
    with LeagueStore(tmp_path / "run") as store:
        assert store.get_meta("schema_version") == 2
        assert store._query("SELECT id, source, seq, n FROM results ORDER BY id") == before
        assert store.tables_through() == expected["tables_through"]
        batches = list(store.results_after())
        assert [(b.source, b.seq) for b in batches] == [(s, q) for _, s, q, _ in before]
        assert [len(b) for b in batches] == [n for *_, n in before]
        league = League(cfg, store)
        pairs = [list(row) for row in league.payoff.pairs()]
        assert [row[:2] for row in pairs] == [row[:2] for row in expected["payoff"]]
        assert np.allclose([row[2:] for row in pairs], [row[2:] for row in expected["payoff"]], rtol=1e-12, atol=0)
        elo = {a: [r, league.elo.games[a]] for a, r in league.elo.ratings.items()}
        assert sorted(elo) == sorted(expected["elo"])
        assert all(elo[a][1] == g and elo[a][0] == pytest.approx(r, rel=1e-12) for a, (r, g) in expected["elo"].items())
        assert league.counters == expected["counters"]
        upgraded = store._query("SELECT payload FROM results ORDER BY id")
    with LeagueStore(tmp_path / "run") as store:  # once: a second open rewrites nothing
        assert store._query("SELECT payload FROM results ORDER BY id") == upgraded


def test_a_store_that_cannot_be_upgraded_is_left_as_it_was(tmp_path):
    raw = store_v1(tmp_path / "run")
    raw.execute("UPDATE results SET payload = '[{\"a\": \"x\", \"b\": \"y\", \"score\": 3.0}]' WHERE id = 4")
    raw.commit()
    payloads = raw.execute("SELECT payload FROM results ORDER BY id").fetchall()
    raw.close()
    with pytest.raises(StoreError, match="cannot be upgraded to schema version 2"):
        LeagueStore(tmp_path / "run")
    raw = sqlite3.connect(tmp_path / "run" / "league.db")
    assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
    assert raw.execute("SELECT payload FROM results ORDER BY id").fetchall() == payloads
    raw.close()


WRITER = textwrap.dedent("""
    import sys
    from league.messages import ResultBatch
    from league.pool import AgentRecord, AgentType
    from league.store import LeagueStore
    s = LeagueStore(sys.argv[1])
    start = int(sys.argv[2])
    for i in range(start, start + 100000):
        s.record_results(ResultBatch("w", i, ("a", "b"), [0], [1], [8], [0], [0], [0.0]),
                         [("a", "b", float(i), 0.0, 1.0)], [("a", 1000.0 + i, i)], {"games": 8})
        if i % 7 == 0:
            s.add_agent(AgentRecord(f"x-v{i}", i, AgentType.MAIN_AGENT, learner_id="x"), bytes(2000))
        print(i, flush=True)
""")


def run_and_kill(script, run_dir, start: int, acknowledgements: int) -> list[int]:
    """Run ``script RUN_DIR START`` (it prints each acknowledged number) and SIGKILL it after that many
    acknowledgements (a number, not a time: a loaded machine may not have started the writer yet),
    so the kill lands mid-transaction of the next one. Returns every number it printed: a line
    printed after our last read counts as acknowledged too."""
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir), str(start)], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    acked = []
    for _ in range(acknowledgements):
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(int(line))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return acked + [int(x) for x in proc.stdout.read().split()]


def test_sigkill_mid_write_loses_nothing_committed(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = np.random.default_rng(0)
    acked: list[int] = []
    unprinted: set[int] = set()  # batches committed by a killed writer after its last printed line
    start = 0
    for _ in range(6):
        acked += run_and_kill(script, tmp_path / "run", start, int(rng.integers(5, 40)))
        with LeagueStore(tmp_path / "run") as s:
            for i in acked[-50:] + acked[:10]:
                assert s.has_batch("w", i), i
            stored = s.result_count()
            assert s.counters()["games"] == stored  # counters moved in the same transactions as results
            last = max(acked)
            if s.has_batch("w", last + 1):
                unprinted.add(last + 1)
            assert stored == 8 * (len(acked) + len(unprinted))
            assert {f"x-v{i}" for i in acked if i % 7 == 0} <= {a.agent_id for a in s.agents()}
            start = last + 1000
    assert len(acked) >= 6 * 5


def test_latest_measurement_is_the_newest_of_its_kind(tmp_path):
    with LeagueStore(tmp_path) as store:
        assert store.latest_measurement("probe_br_return") is None
        store.add_measurement("probe_br_return", 0.5, {"ci95": [0.4, 0.6]}, when=10.0)
        store.add_measurement("probe_br_return", 0.8, {"ci95": [0.7, 0.9]}, when=20.0)
        store.add_measurement("nash_conv", 2.7, when=30.0)
        assert store.latest_measurement("probe_br_return") == {"time": 20.0, "value": 0.8, "ci95": [0.7, 0.9]}
