"""The launcher as users run it: a subprocess, real Ray, real SIGINT, a resumed run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from league.store import LeagueStore

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")


@pytest.mark.parametrize("override, key", [
    ("run.max_minuts=1", "run.max_minuts"),
    ("league.payoff_decay=1.5", "league.payoff_decay"),
    ("ppo.lrr=0.1", "ppo.lrr"),
    ("ppo.lr=-1", "ppo.lr"),
    ("game.name=no_such_game", "game.name"),
])
def test_bad_config_stops_before_ray_with_one_line_naming_the_key(override, key):
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", override],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nash-league: config error: {key}"), out.stderr
    assert "Started a local Ray" not in out.stdout + out.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_sigint_stops_cleanly_and_the_league_resumes(tmp_path):
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           "run.max_minutes=5"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "pool " in line and "env steps/s" in line and " pool 0 " not in line and "games 0 " not in line:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert proc.returncode == 0, text
    assert "stopped; the league is in" in text
    with LeagueStore(tmp_path, create=False) as store:
        first_pool = {a.agent_id for a in store.agents()}
        first_games = store.counters()["games"]
        first_versions = {l["learner_id"]: l["version"] for l in store.learners()}
        assert first_pool and first_games > 0 and store.latest_nash() is not None
        assert all(store.load_learner(l)["state"] for l in first_versions)

    out = subprocess.run([*cmd[:-1], "run.max_minutes=0.4"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    with LeagueStore(tmp_path, create=False) as store:
        evicted = {e["agent_id"] for e in store.events("evict")}
        assert first_pool - evicted <= {a.agent_id for a in store.agents()}
        assert store.counters()["games"] > first_games
        for learner in store.learners():
            # resumed from the checkpoint: versions go on from where they were
            assert learner["version"] > first_versions[learner["learner_id"]]
        assert len(store.events("coordinator_start")) == 2
        assert store.measurements("nash_conv"), "the evaluator records the exact NashConv over time"

    # the report, rendered from this real run: every figure drawn from data
    from test_report import FIGURES, _images

    out = subprocess.run([sys.executable, "-m", "monitoring.report", "--storage", str(tmp_path)], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    images = _images((tmp_path / "report.html").read_text())
    assert set(images) == set(FIGURES)
    for key, (img, has_data) in images.items():
        assert has_data and img[..., :3].std() > 0.01, key
