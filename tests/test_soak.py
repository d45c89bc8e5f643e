"""operations.soak as a user runs it: one JSON line with the slopes an operator reads (keys and counts,
not targets), from a real league under the launcher; and its arithmetic on known samples. The
half-minute soak itself runs in tests/test_operations.py, on the league resumed from an online
backup (one launcher start serves both)."""

import json
import subprocess
import sys

import pytest

from operations.soak import actor_kind, floor_sample, slope_per_hour, summarize

KEYS = {"samples", "store_bytes_per_hour", "rss_mb_per_hour", "rss_mb_per_hour_max_actor", "fds_growth", "throughput_drift", "object_store_mb",
        "snapshot_loads_per_minute", "snapshot_cache_mb", "snapshot_cache_mb_per_hour", "cpu_cores"}


def test_actor_kinds_come_from_ray_process_titles():
    assert actor_kind("ray::LeagueCoordinatorImpl.report_results") == "coordinator"
    assert actor_kind("ray::RolloutWorkerImpl") == "rollout_worker"
    assert actor_kind("ray::ServeReplica:opponents:Opponents") == "serve"
    assert actor_kind("ray::AnchorJudgeImpl.run") == "anchor_judge"
    assert actor_kind("ray::IDLE") is None and actor_kind("/usr/bin/python") is None


def test_summary_fits_the_second_half_and_compares_quarters():
    # RSS flat then rising 2 MB a minute from the middle on; the store grows 1 kB a second throughout
    samples = [{"t": 60.0 * i, "store_bytes": 1000 * 60 * i, "object_store_mb": 1.0,
                "snapshot_loads": {"serve": 3.0 * i, "evaluator": 10.0},
                # the evaluator's cache fills 1 MB a minute up to 8 MB (from the 8th minute on: flat)
                "snapshot_cache_mb": {"evaluator": float(min(i, 8))},
                "kinds": {"learner": {"processes": 2, "rss_mb": 200.0 + 2.0 * max(0, i - 5), "fds": 10 + i,
                                      "pids": {7: 100.0 + 1.5 * max(0, i - 5), 8: 100.0 + 0.5 * max(0, i - 5)},
                                      # pid 7 uses half a core throughout, pid 8 a quarter, then a whole one
                                      "cpu": {7: 30.0 * i, 8: 15.0 * min(i, 5) + 60.0 * max(0, i - 5)}}}}
               for i in range(11)]
    samples[-1]["kinds"]["learner"]["pids"][9] = 50.0  # a process that started late: no slope of its own
    rates = [(60.0 * i + 1, 100.0 if i < 5 else 80.0) for i in range(10)]
    out = summarize(samples, rates, 10)
    assert out["samples"] == 11
    assert out["store_bytes_per_hour"] == pytest.approx(3.6e6)
    assert out["rss_mb_per_hour"]["learner"] == pytest.approx(120.0)
    assert out["rss_mb_per_hour_max_actor"]["learner"] == pytest.approx(90.0)  # pid 7's 1.5 MB a minute
    assert out["fds_growth"] == 5
    assert out["throughput_drift"] == pytest.approx(0.8)
    # quarters of the 600 s: samples nearest 150 and 300 s (120 and 300), 450 and 600 s (420 and 600)
    assert out["cpu_cores"]["second_quarter"]["learner"] == pytest.approx((90 + 45) / 180)
    assert out["cpu_cores"]["last_quarter"]["learner"] == pytest.approx((90 + 180) / 180)
    assert out["snapshot_loads_per_minute"] == {"evaluator": 0.0, "serve": pytest.approx(3.0)}
    assert out["snapshot_cache_mb"] == {"evaluator": 8.0}
    # second half, t = 5..10 min: 5, 6, 7, 8, 8, 8 MB; least squares 22/35 MB a minute
    assert out["snapshot_cache_mb_per_hour"]["evaluator"] == pytest.approx(60 * 22 / 35, abs=1e-3)
    assert slope_per_hour([0.0], [1.0]) == 0.0
    assert out["processes"] == {"learner": 2} and out["rss_mb"] == {"learner": 210.0}
    # a last sample taken while the league stopped (one learner left): the kind as last read whole
    samples[-1]["kinds"]["learner"].update(processes=1, rss_mb=100.0)
    stopping = summarize(samples, rates, 10)
    assert stopping["processes"] == {"learner": 2} and stopping["rss_mb"] == {"learner": 208.0}


def soak_command(*args: str) -> list[str]:
    """A half-minute soak of the shipped smoke config, sampled every 2.5 s."""
    return [sys.executable, "-m", "operations.soak", "--minutes", "0.5", "--interval", "2.5", "--config", "configs/smoke.yaml",
            *args]


def assert_one_soak_line(out: subprocess.CompletedProcess) -> dict:
    """What a half-minute soak (``soak_command``) prints: one JSON line with the keys, a sample every
    2.5 s, every actor kind of the league and a store that grew. Returns the line."""
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    got = json.loads(lines[0])
    assert KEYS <= set(got)
    assert got["samples"] >= 6  # one every 2.5 s over half a minute, less start-up
    assert {"coordinator", "learner", "rollout_worker", "evaluator"} <= set(got["rss_mb_per_hour"])
    assert got["processes"]["learner"] == 3 and got["processes"]["coordinator"] == 1
    assert got["store_bytes"] > 0
    return got


def test_a_sample_keeps_each_process_least_memory_over_its_interval():
    # pid 1 works on a transient array in the middle reading; pid 2 is gone by the last (a stop):
    # each process read in the interval counts, with its least RSS and its latest CPU time
    window = [{"learner": {"processes": 2, "rss_mb": 0, "fds": 5, "pids": {1: 100.0, 2: 50.0}, "cpu": {1: 1.0, 2: 1.0}}},
              {"learner": {"processes": 2, "rss_mb": 0, "fds": 6, "pids": {1: 180.0, 2: 40.0}, "cpu": {1: 2.0, 2: 2.0}}},
              {"learner": {"processes": 1, "rss_mb": 0, "fds": 4, "pids": {1: 104.0}, "cpu": {1: 3.0}}}]
    got = floor_sample(window)["learner"]
    assert got["pids"] == {1: 100.0, 2: 40.0} and got["rss_mb"] == 140.0 and got["processes"] == 2
    assert got["fds"] == 4 and got["cpu"] == {1: 3.0, 2: 2.0}


def test_metric_lines_give_object_store_use_and_snapshot_loads_per_process():
    from operations.soak import object_store_mb, snapshot_cache_mb, snapshot_loads

    lines = ['# TYPE ray_league_snapshot_cache_loads_total counter',
             'ray_league_snapshot_cache_loads_total{Component="core_worker",SessionName="s",process="serve"} 12.0',
             'ray_league_snapshot_cache_loads_total{Component="core_worker",SessionName="s",process="serve"} 3.0',
             'ray_league_snapshot_cache_loads_total{SessionName="s",process="evaluator",WorkerId="w"} 5.0',
             'ray_object_store_memory{Location="MMAP_SHM",SessionName="s"} 1048576.0',
             'ray_object_store_memory_other 7.0',
             'ray_league_snapshot_cache_bytes{SessionName="s",process="rollout_worker",WorkerId="a"} 1048576.0',
             'ray_league_snapshot_cache_bytes{SessionName="s",process="rollout_worker",WorkerId="b"} 2097152.0']
    assert snapshot_cache_mb(lines) == {"rollout_worker": 3.0}
    assert snapshot_loads(lines) == {"serve": 15.0, "evaluator": 5.0}
    assert object_store_mb(lines) == 1.0
    assert object_store_mb([]) is None and snapshot_loads([]) == {}
