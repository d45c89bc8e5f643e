"""Leagues with networks other than the MLP, run as users run them (the launcher as a subprocess):
a residual conv net on Connect Four whose snapshots the Serve deployment plays and /nash/act
answers with, exported to ONNX by the CLI; and a user's factory network from examples/nets/."""

from __future__ import annotations

import json
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
from policies.snapshot import policy_from_bytes

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
PORT = 8131

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = ["rollout.envs_per_worker=32", "rollout.steps_per_batch=512", "ppo.minibatch_size=256", "ppo.epochs=1",
         "roles.main_exploiter.count=0", "roles.league_exploiter.count=0", "league.nash_every_seconds=2",
         "evaluator.games_per_pair=16", "run.progress_every_seconds=5"]


def run_league(storage: Path, args: list[str], ready, timeout: float = 300):
    """Launch, call ``ready(store)`` every few seconds until it returns a value, then SIGINT.
    Returns (that value, the launcher's output)."""
    cmd = [sys.executable, "-m", "actors.launch", *args, f"run.storage={storage}", "run.max_minutes=6",
           f"serve.port={PORT}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    value, out = None, ""
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            time.sleep(3)
            if not (storage / "league.db").exists():
                continue
            with LeagueStore(storage, create=False) as store:
                value = ready(store)
            if value is not None:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            out += proc.communicate()[0] or ""
    assert proc.returncode == 0, out[-3000:]
    assert value is not None, out[-3000:]
    return value, out


def test_a_conv_league_on_connect_four_trains_snapshots_serves_and_answers_nash_act(tmp_path):
    from envs import make_game

    game = make_game("connect_four", 64, seed=0)
    obs, masks = game.observe(0)
    frozen_games = {}

    def ready(store):
        nash = store.latest_nash()
        if not nash or len([w for w in nash["weights"] if w > 0]) < 2:
            return None
        # the learner's games against frozen snapshots: those opponents are played by the Serve deployment
        ids = {a.agent_id for a in store.agents()}
        vs_frozen = sum(w + d + l for a, b, w, d, l in store.payoff_rows() if b in ids and a not in ids)
        if vs_frozen < 200:
            return None
        frozen_games["n"] = vs_frozen
        try:
            r = requests.post(f"http://127.0.0.1:{PORT}/nash/act",
                              json={"observations": obs.tolist(), "legal_masks": masks.astype(int).tolist(),
                                    "seed": 1}, timeout=30)
        except requests.ConnectionError:
            return None
        return r.json() if r.status_code == 200 else None

    answer, out = run_league(tmp_path / "run", ["--config", "configs/connect_four.yaml", "policy.net=conv",
                                                "policy.channels=16", "policy.blocks=1",
                                                "rollout.opponent_inference=serve",
                                                "roles.main_agent.snapshot_every_steps=2000", *SMALL], ready)
    assert len(answer["actions"]) == 64
    assert all(masks[i, a] for i, a in enumerate(answer["actions"]))
    with LeagueStore(tmp_path / "run", create=False) as store:
        answered = [n for n in store.nash_history() if n["solved_at"] == pytest.approx(answer["solved_at"], abs=1e-6)]
        members = {i for i, w in zip(answered[0]["ids"], answered[0]["weights"]) if w > 0}
        assert set(answer["members"]) <= members and len(members) >= 2
        models = {a.agent_id: policy_from_bytes(store.snapshot_blob(a.agent_id)) for a in store.agents()}
        learner = store.load_learner("main_agent-0")
    assert all(type(m).__name__ == "ConvActorCritic" and m.spec.channels == 16 for m in models.values())
    assert frozen_games["n"] >= 200
    # trained: the snapshots differ from one another (PPO moved the weights between them)
    params = [np.concatenate([p.detach().numpy().ravel() for p in m.parameters()]) for m in models.values()]
    assert len(params) >= 2 and all(not np.array_equal(params[0], p) for p in params[1:])
    assert learner is not None and learner["version"] > 0

    # the export CLI on this run: each graph equals its stored snapshot on real positions
    import onnxruntime as ort

    out_dir = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "policies.export", "--storage", str(tmp_path / "run"),
                           "--out", str(out_dir)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((out_dir / "policy.json").read_text())
    assert meta["game"] == "connect_four" and meta["obs_shape"] == [3, 6, 7]
    assert meta["observation"] == "observation_tensor"
    with LeagueStore(tmp_path / "run", create=False) as store:
        exported = store.nash_history()
    assert {m["agent_id"] for m in meta["members"]} <= set(exported[-1]["ids"])
    assert sum(m["weight"] for m in meta["members"]) == pytest.approx(1.0, abs=1e-9)
    from test_nets import decisions, run_exported_player

    o, k = decisions("connect_four", 1000, seed=3)
    for m in meta["members"]:
        got = ort.InferenceSession(str(out_dir / m["file"])).run(None, {"obs": o, "mask": k})[0]
        np.testing.assert_allclose(got, models[m["agent_id"]].probs(o, k), atol=1e-5, rtol=0)
    played = run_exported_player(out_dir)
    assert played["episodes"] == 100 and -1.0 <= played["mean_return_seat0"] <= 1.0


def test_a_league_with_a_users_factory_network(tmp_path):
    """Kuhn poker with examples/nets/layernorm_mlp.py: snapshots record the factory path and its
    args, the evaluator measures the Nash mixture exactly, and /nash/act answers."""
    def ready(store):
        nash = store.latest_nash()
        if not nash or len(store.agents()) < 2 or not store.measurements("nash_conv"):
            return None
        try:
            r = requests.post(f"http://127.0.0.1:{PORT}/nash/act",
                              json={"observations": [[1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]] * 8, "seed": 2}, timeout=30)
        except requests.ConnectionError:
            return None
        return r.json() if r.status_code == 200 else None

    answer, _ = run_league(tmp_path / "run", ["--config", "configs/smoke.yaml",
                                              "policy.net=examples.nets.layernorm_mlp:build",
                                              "policy.args={width: 16, depth: 1}", "evaluator.probe_every_seconds=0",
                                              "roles.main_agent.snapshot_every_steps=3000", *SMALL], ready)
    assert len(answer["actions"]) == 8 and set(answer["actions"]) <= {0, 1}
    with LeagueStore(tmp_path / "run", create=False) as store:
        models = [policy_from_bytes(store.snapshot_blob(a.agent_id)) for a in store.agents()]
        agent = store.agents()[0].agent_id
    assert models and all(m.spec.net == "examples.nets.layernorm_mlp:build" for m in models)
    assert all(m.spec.args == {"width": 16, "depth": 1} and type(m.body).__name__ == "LayerNormMLP" for m in models)
    # the exploitability tool rebuilds the user's network in its own process from the stored data
    from policies.exploitability import nash_conv_of_policy

    done = subprocess.run([sys.executable, "-m", "policies.exploitability", "--storage", str(tmp_path / "run"),
                           "--agent", agent], capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    with LeagueStore(tmp_path / "run", create=False) as store:
        here = nash_conv_of_policy("kuhn_poker", policy_from_bytes(store.snapshot_blob(agent)))["nash_conv"]
    assert json.loads(done.stdout)["nash_conv"] == pytest.approx(here, abs=1e-9) and here > 0
