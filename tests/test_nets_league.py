"""Leagues with networks other than the MLP, run as users run them (the launcher as a subprocess):
a residual conv net on Connect Four whose snapshots the Serve deployment plays and /nash/act
answers with, exported to ONNX by the CLI, and which scores itself against fixed anchors (uniform
play and MCTS-10), with and without play-time search, on /status, in the store and on the progress
line. A user's factory network runs in a
league on the user's own game in test_custom_games_league.py."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from league.anchors import SUBJECTS, anchored_elo, elo_kind, score_kind
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
PORT = 8131

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = ["rollout.envs_per_worker=32", "rollout.steps_per_batch=512", "ppo.minibatch_size=256", "ppo.epochs=1",
         "roles.main_exploiter.count=0", "roles.league_exploiter.count=0", "league.nash_every_seconds=2",
         "evaluator.games_per_pair=16", "run.progress_every_seconds=5"]


def run_league(storage: Path, args: list[str], ready, ray_address: str, timeout: float = 300):
    """Launch into the cluster at ``ray_address`` (as under ``ray job submit``), call ``ready(store)``
    every few seconds until it returns a value, then SIGINT. Returns (that value, the launcher's
    output)."""
    cmd = [sys.executable, "-m", "actors.launch", *args, f"run.storage={storage}", "run.max_minutes=6",
           f"serve.port={PORT}"]
    log = storage.parent / f"{storage.name}.log"  # a file: a joined launcher prints its actors' logs too
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(ENV, RAY_ADDRESS=ray_address), stdout=sink,
                                stderr=subprocess.STDOUT)
    value = None
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
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert value is not None, out[-3000:]
    return value, out


ANCHORS = ["uniform", "mcts:10"]
ANCHOR_GAMES = 20
SEARCH_GAMES = 6  # search.anchor_games: the searched subject's games per anchor and round


def anchors_on_status() -> dict | None:
    """/status once every subject has a score against every anchor, else None."""
    s = requests.get(f"http://127.0.0.1:{PORT}/status", timeout=30).json()
    a = s["quality"].get("anchors", {})
    return s if all(set(a.get(subject, {})) == set(ANCHORS) for subject in SUBJECTS) else None


def test_a_conv_league_on_connect_four_trains_snapshots_serves_answers_nash_act_and_scores_anchors(tmp_path, shared_ray):
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
            status = anchors_on_status()
            # a person plays the league (seat 1: it moves first): with search.simulations set, its
            # member searches from the game's state
            play = requests.post(f"http://127.0.0.1:{PORT}/play", json={"seat": 1}, timeout=30)
        except requests.ConnectionError:
            return None
        if r.status_code != 200 or status is None or play.status_code != 201:
            return None
        # the mixture that answered, from the store: the Nash may have been solved again since the
        # read above, so wait for an answer from a mixture of two or more
        answered = [n for n in store.nash_history() if n["solved_at"] == pytest.approx(r.json()["solved_at"], abs=1e-6)]
        members = {i for i, w in zip(answered[0]["ids"], answered[0]["weights"]) if w > 0} if answered else set()
        if len(members) < 2:
            return None
        return r.json(), members, status, play.json()

    (answer, members, status, play), out = run_league(
        tmp_path / "run", ["--config", "configs/connect_four_ppo.yaml", "policy.net=conv", "policy.channels=16",
                           "policy.blocks=1", "rollout.opponent_inference=serve",
                           "roles.main_agent.snapshot_every_steps=2000", f"anchors=[{', '.join(ANCHORS)}]",
                           'anchor_elo={"mcts:10": 1400}', "evaluator.anchor_every_seconds=2", "search.simulations=8",
                           f"search.anchor_games={SEARCH_GAMES}",
                           f"evaluator.anchor_games={ANCHOR_GAMES}", *SMALL], ready, shared_ray)
    from actors.progress import quality_text

    assert "vs anchors uniform" in quality_text(status) and "with search uniform" in quality_text(status)  # what the progress line shows of this status
    assert_anchor_scores_are_stored_measurements(status["quality"]["anchors"], tmp_path / "run")
    assert len(answer["actions"]) == 64
    assert play["search"] is True and [h["by"] for h in play["history"]] == ["league"] and play["to_move"] == "you"
    assert all(masks[i, a] for i, a in enumerate(answer["actions"]))
    assert set(answer["members"]) <= members  # every answer by a member of the mixture that answered
    with LeagueStore(tmp_path / "run", create=False) as store:
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
    done = subprocess.run([sys.executable, "-m", "serve.export", "--storage", str(tmp_path / "run"),
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


def assert_anchor_scores_are_stored_measurements(shown: dict, storage: Path) -> None:
    """Every score /status showed is a measurement in the store, exactly, with its interval; the
    anchored Elo of a round is the maximum-likelihood rating from that round's scores; the anchors
    never enter the pool."""
    with LeagueStore(storage, create=False) as store:
        for subject in SUBJECTS:
            rated = []
            for anchor in ANCHORS:
                m = shown[subject][anchor]
                assert 0.0 <= m["value"] <= 1.0
                assert m["games"] == (SEARCH_GAMES if subject == "published_search" else ANCHOR_GAMES)
                assert m["anchor"] == anchor and m["subject"] == subject
                assert m["ci95"][0] <= m["value"] <= m["ci95"][1]
                assert m in store.measurements(score_kind(subject, anchor))
                rated.append(({"uniform": 1000.0, "mcts:10": 1400.0}[anchor], m["value"], m["games"]))
            elo = shown["elo"][subject]
            assert elo in store.measurements(elo_kind(subject))
            if elo["time"] >= max(shown[subject][a]["time"] for a in ANCHORS):  # the same round's rating
                assert elo["value"] == pytest.approx(anchored_elo(rated), abs=1e-6)
            assert math.isfinite(elo["value"])
        newest = [a for a in store.agents(include_removed=True) if a.agent_type.value == "main_agent"]
        assert shown["newest_main"]["uniform"]["agents"][0] in {a.agent_id for a in newest}
        assert not any(a.agent_id in ANCHORS for a in store.agents(include_removed=True))
