"""evaluation.pace: a kept run's learner pace per stretch and its judge's scores per block of snapshots."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from evaluation.pace import judge_by_snapshot, stretch_rates
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore

ROOT = Path(__file__).resolve().parent.parent


def test_stretch_rates_take_the_first_and_last_snapshot_inside_each_stretch():
    points = [(10.0, 1000), (70.0, 7000), (130.0, 10000), (190.0, 13000), (250.0, 19000)]
    assert stretch_rates(points, 120.0) == [100.0, 50.0, None]  # (7000-1000)/60, (13000-10000)/60, one point
    assert stretch_rates([], 120.0) == []
    assert stretch_rates([(5.0, 0), (400.0, 100)], 120.0) == [None, None, None, None]  # nothing spans a stretch


def test_the_judges_scores_are_averaged_per_block_of_snapshots():
    rounds = {"mcts:10": [{"agents": ["main_agent-0-v1"], "value": 0.2}, {"agents": ["main_agent-0-v39"], "value": 0.4},
                          {"agents": ["main_agent-0-v45"], "value": 0.9}]}
    assert judge_by_snapshot(rounds, 40) == {"mcts:10": {"v0-v39": {"score": 0.3, "rounds": 2},
                                                         "v40-v79": {"score": 0.9, "rounds": 1}}}


def test_bench_pace_reads_a_kept_run(tmp_path):
    """A store as a run leaves it (snapshot events, the learner's row, the judge's measurements),
    its clock set so that the stretches are known: the command prints them, and refuses a run
    without that learner with the option's name."""
    run = tmp_path / "run"
    with LeagueStore(run) as store:
        store.add_event("coordinator_start")
        for v, step in enumerate([1000, 7000, 10000, 13000, 19000], start=1):
            store.add_agent(AgentRecord(agent_id=f"main_agent-0-v{v}", version=v, agent_type=AgentType.MAIN_AGENT,
                                        learner_id="main_agent-0", step=step), b"weights")
        store.save_learner("main_agent-0", "main_agent", 12, 19500, None)
        store.add_measurement("anchor:newest_main:mcts:10", 0.25, {"agents": ["main_agent-0-v2"]})
        store.add_measurement("anchor:published:mcts:10", 0.9, {"agents": ["main_agent-0-v2"]})  # not the newest main's
    db = sqlite3.connect(run / "league.db")
    t0 = 1_000_000.0
    db.execute("UPDATE events SET time = ? WHERE kind = 'coordinator_start'", (t0,))
    for v, t in enumerate([10.0, 70.0, 130.0, 190.0, 250.0], start=1):
        db.execute("UPDATE events SET time = ? WHERE kind = 'snapshot' AND data LIKE ?", (t0 + t, f'%-v{v}"%'))
    db.commit()
    db.close()
    out = subprocess.run([sys.executable, "-m", "evaluation.pace", "--storage", str(run), "--every", "120"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout)
    assert line["stretches"] == [100.0, 50.0, None]
    assert (line["snapshots"], line["updates"], line["step"]) == (5, 12, 19500)
    assert line["judge"] == {"mcts:10": {"v0-v39": {"score": 0.25, "rounds": 1}}}
    bad = subprocess.run([sys.executable, "-m", "evaluation.pace", "--storage", str(run), "--learner", "main_exploiter-0"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "no learner 'main_exploiter-0' (--learner)" in bad.stderr, bad.stderr
