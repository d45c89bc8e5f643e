"""``python -m bench.coordinator`` as users run it: a subprocess with its own local Ray, a real
coordinator holding the 1,000-agent pool, simulated workers as Ray actors, one JSON line on
stdout. (Its figures are measured by the command itself, not asserted here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")


@pytest.mark.ray
@pytest.mark.slow
def test_the_bench_prints_one_json_line_with_every_client_count_and_the_ceiling():
    out = subprocess.run([sys.executable, "-m", "bench.coordinator", "--seconds", "2", "--clients", "2,3",
                          "--max-actors", "2", "--batch-games", "1024"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1, out.stdout[-2000:]
    report = json.loads(lines[0])
    assert set(report) == {"clients", "inprocess", "settings"}
    assert set(report["clients"]) == {"2", "3"}
    assert report["settings"]["pool"] == 1000 and report["settings"]["batch_games"] == 1024
    for entry in (*report["clients"].values(), report["inprocess"]):
        assert entry["reports"] > 0 and entry["calls"] >= 2 * entry["reports"]
        assert 0 < entry["next_matches_p50_ms"] <= entry["next_matches_p99_ms"]
    # results count once acknowledged, as whole reports: 1024 games = two rounds of 512 matches
    for entry in report["clients"].values():  # over the measured 2 s
        assert entry["results_per_s"] == 1024 * entry["reports"] // 2
    inprocess = report["inprocess"]  # over the loop's own elapsed time, a little past the 2 s
    assert 1024 * inprocess["reports"] / 3 <= inprocess["results_per_s"] <= 1024 * inprocess["reports"] / 2
    assert report["clients"]["2"]["actors"] == 2 and report["clients"]["3"]["actors"] == 2  # 3 loops in 2 processes
    for entry in report["clients"].values():  # one machine: every client process's CPU is read
        assert entry["client_nodes"] == 1 and entry["actors_on_coordinator_node"] == entry["actors"]
    for entry in report["clients"].values():
        assert entry["coordinator_cores"] > 0 and entry["client_cores"] > 0
        assert entry["machine_cores"] >= entry["coordinator_cores"]


def test_a_bad_override_stops_the_bench_with_one_line_naming_the_key():
    out = subprocess.run([sys.executable, "-m", "bench.coordinator", "--set", "league.match_plan_seconds=-1"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1].endswith("error: league.match_plan_seconds: must be > 0, got -1.0")
    assert "Started a local Ray" not in out.stderr
