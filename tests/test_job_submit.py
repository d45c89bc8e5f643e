"""`ray job submit -- python -m actors.launch` against a real `ray start` cluster."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from league.store import LeagueStore

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_job_submit_runs_the_smoke_league_on_a_started_cluster(tmp_path):
    # The cluster runs the entrypoint with its own PATH: start it from the project's environment.
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PATH=f"{BIN}:{os.environ['PATH']}")
    ray = str(BIN / "ray")
    start = subprocess.run([ray, "start", "--head", "--port=6390", "--num-cpus=16", "--include-dashboard=true",
                            "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--dashboard-port=8266", "--disable-usage-stats"],
                           env=env, capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        storage = tmp_path / "run"
        job = subprocess.run(
            [ray, "job", "submit", "--address", "http://127.0.0.1:8266", "--working-dir", str(ROOT),
             "--runtime-env-json", '{"excludes": [".venv", "runs", ".git", ".hypothesis", ".pytest_cache"]}',
             "--", "python", "-m", "actors.launch", "--config", "configs/smoke.yaml", "run.max_minutes=0.5",
             f"run.storage={storage}"],
            env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout
        assert "stopped; the league is in" in job.stdout
        with LeagueStore(storage, create=False) as store:
            assert len(store.agents()) >= 3
            assert store.counters()["games"] > 1000
            assert store.latest_nash() is not None
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
