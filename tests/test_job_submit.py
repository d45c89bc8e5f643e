"""`ray job submit -- python -m actors.launch` against a real `ray start` cluster, watched by
`make monitor`'s Prometheus (the shipped config)."""

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from league.store import LeagueStore

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus (make test installs it)")
def test_job_submit_runs_the_smoke_league_on_a_started_cluster_and_prometheus_sees_it(tmp_path):
    # The cluster runs the entrypoint with its own PATH: start it from the project's environment.
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PATH=f"{BIN}:{os.environ['PATH']}")
    ray = str(BIN / "ray")
    start = subprocess.run([ray, "start", "--head", "--port=6390", "--num-cpus=16", "--include-dashboard=true",
                            "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", "--dashboard-port=8266", "--disable-usage-stats",
                            "--metrics-export-port=8081"],
                           env=env, capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout + start.stderr
    # `make monitor` on the head node: the shipped config, unedited
    prom_url = f"http://127.0.0.1:{free_port()}"
    prom = subprocess.Popen(["prometheus", f"--config.file={ROOT / 'monitoring/prometheus/prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address={prom_url[7:]}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        storage = tmp_path / "run"
        job = subprocess.run(
            [ray, "job", "submit", "--address", "http://127.0.0.1:8266", "--working-dir", str(ROOT),
             "--runtime-env-json", '{"excludes": [".venv", "runs", ".git", ".hypothesis", ".pytest_cache"]}',
             "--", "python", "-m", "actors.launch", "--config", "configs/smoke.yaml", "run.max_minutes=1",
             f"run.storage={storage}"],
            env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "succeeded" in job.stdout
        assert "stopped; the league is in" in job.stdout
        with LeagueStore(storage, create=False) as store:
            assert len(store.agents()) >= 3
            assert store.counters()["games"] > 1000
            assert store.latest_nash() is not None
        # Prometheus scraped the job's league on the port the cluster was started with
        session, endpoints = re.search(r"metrics of Ray session (\S+) at (\S+);", job.stdout).groups()
        assert endpoints.rsplit(":", 1)[1] == "8081"  # the node's address: Ray's, not always the loopback asked for
        pools = requests.get(f"{prom_url}/api/v1/query", timeout=10, params={
            "query": f'last_over_time(ray_league_pool_size{{SessionName="{session}"}}[10m])'}).json()["data"]["result"]
        assert {p["metric"]["role"] for p in pools} == {"main_agent", "main_exploiter", "league_exploiter"}
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
