"""A bounded store (league.retention): compaction and pruning keep every thing a resume needs, and
the resumed league is exactly (==) the one before; a retry of an acknowledged batch stays a repeat."""

import json
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from league.backup import backup, league_state, state_digest
from league.league import League
from league.retention import apply, archive_snapshots, compact_results, compactable, main as retention_main, prune_history
from league.store import LeagueStore
from test_result_pairs import assert_same_league, league_with_pool, random_batch


def _report(league, rng, sources, seqs, n=3):
    agents = (*league.learners, *league.pool.ids())
    for _ in range(n):
        for source in sources:
            seqs[source] = seqs.get(source, 0) + 1
            batch = replace(random_batch(agents, rng, 200, seqs[source]), source=source)
            assert league.report_results(batch)


def test_compaction_then_resume_gives_the_same_league_and_retries_stay_repeats(tmp_path):
    rng = np.random.default_rng(3)
    league, frozen = league_with_pool(tmp_path, checkpoint_seconds=3600)
    store, seqs = league.store, {}
    _report(league, rng, ["w0", "w1", "evaluator:0"], seqs)
    league.solve_nash()
    record, _ = league.add_snapshot("main_exploiter-0", b"w", step=50)  # a checkpoint of the tables
    through = store.tables_through()
    _report(league, rng, ["w0", "w1"], seqs, n=2)  # after the checkpoint: replayed by a resume
    games = store.result_count()
    assert through == 9 and games == 13 * 200 and store.tables_through() == through

    assert compactable(store) == {"batches": 8, "games": 8 * 200}  # read: nothing removed yet
    assert store.result_count() == games and len(store._query("SELECT 1 FROM results")) == 13
    got = compact_results(store)
    # every batch up to the checkpoint goes but each sender's newest (here all after it, but evaluator:0's)
    assert got == {"batches": 8, "games": 8 * 200}
    assert store._query("SELECT source, seq FROM results ORDER BY id") == [
        ("evaluator:0", 3), ("w0", 4), ("w1", 4), ("w0", 5), ("w1", 5)]
    assert store.result_count() == games  # compacted games still count
    assert compact_results(store) == {"batches": 0, "games": 0} == compactable(store)  # idempotent

    resumed = League(league.cfg, LeagueStore(tmp_path))
    assert_same_league(resumed, league)
    assert league_state(resumed) == league_state(league)  # pool, payoff, Elo, published Nash, counters
    assert state_digest(resumed) == state_digest(league)
    # a sender re-sends only its one staged batch, its newest: still a repeat after compaction
    agents = (*league.learners, *league.pool.ids())
    retry = replace(random_batch(agents, rng, 10, seqs["evaluator:0"]), source="evaluator:0", env_steps=0,
                    action_counts={})
    assert not resumed.report_results(retry)
    assert resumed.store.result_count() == games
    assert state_digest(resumed) == state_digest(league)
    retry = replace(retry, seq=retry.seq + 1)
    assert resumed.report_results(retry)  # a new batch: the payoff moves, and the digest with it
    assert state_digest(resumed) != state_digest(league)


def test_history_pruning_keeps_the_published_mixture_and_the_latest_measurements(tmp_path):
    rng = np.random.default_rng(4)
    league, frozen = league_with_pool(tmp_path)
    store = league.store
    _report(league, rng, ["w0"], {}, n=2)
    for _ in range(3):
        league.solve_nash()
    store.add_measurement("nash_conv", 0.5, {"x": 1}, when=1.0)
    store.add_measurement("nash_conv", 0.25, {"x": 2})
    store.add_measurement("probe_br_return", 0.1, when=1.0)
    with store.transaction() as db:  # everything so far is two days old
        for table, col in (("nash", "solved_at"), ("elo_history", "time"), ("events", "time")):
            db.execute(f"UPDATE {table} SET {col} = {col} - 172800")
    before = league_state(League(league.cfg, LeagueStore(tmp_path)))
    solves = len(store.nash_history())
    removed = prune_history(store, 24 * 3600)
    assert solves >= 3 and removed["nash"] == solves - 1 and not store.elo_history()
    assert len(store.nash_history()) == 1  # only the newest: the published mixture
    assert [m["value"] for m in store.measurements("nash_conv")] == [0.25]
    assert [m["value"] for m in store.measurements("probe_br_return")] == [0.1]  # newest of its kind
    assert {e["kind"] for e in store.events()} <= {"coordinator_start", "learner_start"}
    assert league_state(League(league.cfg, LeagueStore(tmp_path))) == before
    assert prune_history(store, 0) == {}  # 0: kept for ever


def test_archive_and_command_line(tmp_path, capsys):
    rng = np.random.default_rng(5)
    league, frozen = league_with_pool(tmp_path / "run")
    _report(league, rng, ["w0"], {}, n=2)
    league.checkpoint()
    store = league.store
    assert archive_snapshots(store, tmp_path / "archive") == 3
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == sorted(f"{a}.pt" for a in frozen)
    assert (tmp_path / "archive" / f"{frozen[0]}.pt").read_bytes() == store.snapshot_blob(frozen[0])
    assert apply(store, archive=str(tmp_path / "archive"))["archived"] == 0  # already there
    store.close()
    assert retention_main(["--storage", str(tmp_path / "run"), "--vacuum"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compacted"] == {"batches": 0, "games": 0}  # w0's newest batch stays; the other went above
    assert retention_main(["--storage", str(tmp_path / "nothing")]) == 1
    assert "no league store" in capsys.readouterr().err


def test_backup_of_an_open_store_is_that_store(tmp_path):
    rng = np.random.default_rng(6)
    league, frozen = league_with_pool(tmp_path / "run", checkpoint_seconds=3600)
    _report(league, rng, ["w0"], {}, n=3)
    league.solve_nash()
    info = backup(tmp_path / "run", tmp_path / "copy")  # while the store is open, batches unreplayed
    assert info["games"] == 600 and info["agents"] == 3
    assert (tmp_path / "copy" / "league.db").is_file() and not (tmp_path / "copy" / "league.db.partial").exists()
    assert league_state(League(league.cfg, LeagueStore(tmp_path / "copy"))) == league_state(league)
    with pytest.raises(ValueError, match="the store itself"):
        backup(tmp_path / "run", tmp_path / "run" / "league.db")
    (tmp_path / "bad.db").write_bytes(b"not sqlite" * 100)
    with pytest.raises(Exception, match="not a readable|not a database"):
        backup(tmp_path / "bad.db", tmp_path / "out.db")
    assert not (tmp_path / "out.db").exists()


def test_old_nash_history_is_thinned_to_one_solve_per_interval(tmp_path):
    from league.retention import thin_history

    league, frozen = league_with_pool(tmp_path)
    store = league.store
    for _ in range(6):
        league.solve_nash()
    now = max(n["solved_at"] for n in store.nash_history()) + 1.0
    with store.transaction() as db:  # six solves a minute apart, hours old, then one now
        for i, (row_id,) in enumerate(db.execute("SELECT id FROM nash ORDER BY id").fetchall()):
            when = 7200.0 * (1 + (i >= 3)) + 60.0 * i  # ids 0-2 in one 20-minute bucket, 3-5 in another
            db.execute("UPDATE nash SET solved_at = ? WHERE id = ?", (now - 20000 + when, row_id))
    league.solve_nash()
    before = store.nash_history()
    removed = thin_history(store, 1200.0, now=now + 10)
    after = store.nash_history()
    buckets = {int(n["solved_at"] // 1200) for n in before[:-1]}
    assert removed["nash"] == len(before) - len(after) == len(before) - 1 - len(buckets)
    assert after[-1] == before[-1]  # the newest: what a resume restores
    assert {int(n["solved_at"] // 1200) for n in after[:-1]} == buckets  # one per bucket, the last of each
    for n in after[:-1]:
        assert n["solved_at"] == max(m["solved_at"] for m in before[:-1] if int(m["solved_at"] // 1200)
                                     == int(n["solved_at"] // 1200))
    assert thin_history(store, 0) == {}


def test_evicted_agents_leave_no_payoff_or_elo_rows_so_the_table_stays_bounded(tmp_path):
    # a pool of 3 admits 12 snapshots with games between everyone: the store keeps the payoff rows
    # of the pool and the learners only (what a resume loads), not one row per agent ever evicted
    rng = np.random.default_rng(7)
    league, _ = league_with_pool(tmp_path)
    league.cfg.league.pool_max_size = league.membership.pool.max_size = 3
    store = league.store
    for i in range(12):
        league.add_snapshot("main_agent-0", b"w", step=100 * (i + 1))
        _report(league, rng, ["w0"], {"w0": i}, n=1)
        league.checkpoint()
    removed = {r.agent_id for r in store.agents(include_removed=True)} - set(league.pool.ids())
    assert len(league.pool.ids()) == 3 and len(removed) == 3 + 12 - 3  # league_with_pool made 3
    live = set(league.pool.ids()) | set(league.learners)
    rows = store.payoff_rows()
    assert rows and all(a in live and b in live for a, b, *_ in rows)
    assert len(rows) <= len(live) * (len(live) - 1) // 2
    assert not removed & {agent_id for agent_id, *_ in store.elo_rows()}
    resumed = League(league.cfg, LeagueStore(tmp_path))
    assert league_state(resumed) == league_state(league)


def test_an_older_store_drops_the_rows_it_kept_for_evicted_agents_when_opened(tmp_path):
    # a store written before evictions dropped payoff and Elo rows (and before payoff_b): opening it
    # drops them once, and a resume is the same league before and after
    rng = np.random.default_rng(8)
    league, frozen = league_with_pool(tmp_path)
    _report(league, rng, ["w0"], {}, n=2)
    league.checkpoint()
    store = league.store
    gone = "main_agent-0-v0-evicted"
    with store.transaction() as db:  # what an older store held for an agent it had evicted
        db.execute("INSERT INTO agents SELECT ?, version, agent_type, learner_id, parent_id, step, created_at, "
                   "metadata, snapshot_path, 1.0, seq + 100 FROM agents WHERE agent_id = ?", (gone, frozen[0]))
        db.executemany("INSERT INTO payoff VALUES (?, ?, 1, 0, 2)", [(gone, frozen[1]), ("main_agent-0", gone)])
        db.execute("INSERT INTO elo VALUES (?, 1100, 3)", (gone,))
        db.execute("DROP INDEX payoff_b")
    payoff, elo = len(store.payoff_rows()), len(store.elo_rows())
    store.close()
    reopened = LeagueStore(tmp_path)
    assert (len(reopened.payoff_rows()), len(reopened.elo_rows())) == (payoff - 2, elo - 1)
    assert not [r for r in reopened.payoff_rows() if gone in r[:2]] and gone not in [a for a, *_ in reopened.elo_rows()]
    assert reopened._query("SELECT count(*) FROM sqlite_master WHERE name = 'payoff_b'") == [(1,)]
    resumed = League(league.cfg, reopened)
    assert league_state(resumed, with_payoff=True)["payoff"] == league_state(league)["payoff"]
    assert league_state(resumed)["elo"] == league_state(league)["elo"]
