"""A league on a PettingZoo game, end to end, the way users run it: the launcher as a
subprocess on the shipped config (shrunk by overrides), real Ray and Serve, then
`/nash/act` over real HTTP answering observations of a real PettingZoo table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from league.store import LeagueStore

pytest.importorskip("pettingzoo")
pytest.importorskip("rlcard")

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
PORT = 8127

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def holdem_decisions(n, seed=0):
    """Observations and legal masks of real PettingZoo hold'em decisions."""
    from pettingzoo.classic import texas_holdem_v4

    env = texas_holdem_v4.env()
    rng = np.random.default_rng(seed)
    obs, masks = [], []
    env.reset(seed=seed)
    while len(obs) < n:
        for agent in env.agent_iter():
            o, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            obs.append(o["observation"].astype(float).tolist())
            masks.append(o["action_mask"].astype(int).tolist())
            env.step(int(rng.choice(np.flatnonzero(o["action_mask"]))))
        env.reset()
    return obs[:n], masks[:n]


def test_texas_holdem_league_snapshots_solves_a_nash_and_answers_nash_act(tmp_path):
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/pettingzoo_texas_holdem.yaml",
           f"run.storage={tmp_path}", "run.max_minutes=4", f"serve.port={PORT}", "league.nash_every_seconds=2",
           "roles.main_agent.snapshot_every_steps=3000",
           "roles.main_exploiter.snapshot_every_steps=3000", "roles.main_exploiter.min_steps_before_snapshot=1000",
           "roles.league_exploiter.snapshot_every_steps=3000", "roles.league_exploiter.min_steps_before_snapshot=1000",
           "rollout.envs_per_worker=64", "rollout.steps_per_batch=1024", "evaluator.games_per_pair=32",
           "policy.hidden=[64,64]"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    obs, masks = holdem_decisions(64)
    answer = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            time.sleep(3)
            if not (tmp_path / "league.db").exists():
                continue
            with LeagueStore(tmp_path, create=False) as store:
                nash = store.latest_nash()
                if len(store.agents()) < 4 or not nash or len(nash["ids"]) < 4:
                    continue
            try:
                r = requests.post(f"http://127.0.0.1:{PORT}/nash/act", json={"observations": obs, "legal_masks": masks,
                                                                           "seed": 1}, timeout=30)
            except requests.ConnectionError:
                continue
            if r.status_code == 200:
                answer = r.json()
                nash_reply = requests.get(f"http://127.0.0.1:{PORT}/nash", timeout=30).json()
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert answer is not None, out[-3000:]
    # every answer is a legal action of the table it was asked about, by a Nash member
    assert len(answer["actions"]) == 64
    assert all(masks[i][a] == 1 for i, a in enumerate(answer["actions"]))
    members = {a["agent_id"] for a in nash_reply["agents"]}
    assert set(answer["members"]) <= members
    assert abs(sum(a["weight"] for a in nash_reply["agents"]) - 1.0) < 1e-6
    assert nash_reply["game"]["obs_size"] == 72 and nash_reply["game"]["num_actions"] == 4
    with LeagueStore(tmp_path, create=False) as store:
        agents = store.agents()
        assert len(agents) >= 4 and "main_agent" in {a.agent_type.value for a in agents}
        nash = store.latest_nash()
        assert len(nash["ids"]) >= 4 and abs(sum(nash["weights"]) - 1.0) < 1e-6
        assert store.counters()["games"] > 1000
        assert store.get_meta("game") == "pettingzoo:texas_holdem_v4"
