"""The league probes its own Nash mixture: the launcher as users run it (subprocess, shipped smoke
config with the probe switched on), and the probe's result in the store, on /status and /nash, and on
the progress line beside meta-exploitability."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from league.store import LeagueStore

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
PORT = 8129

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_smoke_league_records_a_probe_and_shows_it_beside_meta_exploitability(tmp_path):
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           "run.max_minutes=3", f"serve.port={PORT}", "evaluator.probe_every_seconds=5", "evaluator.probe_steps=20000",
           "evaluator.probe_eval_episodes=5000", "run.progress_every_seconds=2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    status = nash = None
    lines = []
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            lines.append(line)
            if "probe BR +" in line:
                status = requests.get(f"http://127.0.0.1:{PORT}/status", timeout=30).json()
                nash = requests.get(f"http://127.0.0.1:{PORT}/nash", timeout=30).json()
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert proc.returncode == 0, text[-3000:]
    assert status is not None, text[-3000:]
    probe = status["quality"]["probe"]
    assert nash["quality"]["probe"]["value"] == pytest.approx(probe["value"]) or \
        nash["quality"]["probe"]["time"] >= probe["time"]
    low, high = probe["ci95"]
    assert low <= probe["value"] <= high
    # Kuhn is enumerable: the probe carries the exact best-response value, and a trained best
    # response is a lower bound on it (up to its confidence interval)
    assert low <= probe["exact_br_return"] + 1e-9
    assert probe["exact_nash_conv"] == pytest.approx(2 * probe["exact_br_return"])
    assert "meta-expl" in text and "probe BR +" in text
    with LeagueStore(tmp_path, create=False) as store:
        rows = store.measurements("probe_br_return")
        assert rows and all(r["steps"] >= 20000 and r["episodes"] >= 5000 for r in rows)
        assert store.latest_measurement("probe_br_return")["time"] == rows[-1]["time"]
