"""Leagues whose main agent learns from search, on a real local Ray, through the launcher as users run
it: tic-tac-toe (exact NashConv, resume), a user's take-away game written as a PettingZoo AEC env under
the example config (exact NashConv), and Connect Four (`/nash/act` over HTTP, ONNX export of the
network alone)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from league import measures
from league.store import LeagueStore, StoreError
from policies.snapshot import learner_average_from_bytes, learner_state_from_bytes, policy_from_bytes
from test_launch import assert_exact_accounting, run_until
from test_nets import decisions

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
UNIFORM_TIC_TAC_TOE = 1.9196593915343916  # OpenSpiel's nash_conv of uniform play (tests/test_game_tree.py)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def launch_until(*args: str, until, ray_address: str | None = None, seconds: float = 240) -> str:
    """The launcher until ``until()`` holds (asked at each line it prints, a progress line a second),
    then Ctrl-C (``test_launch.run_until``): it must stop cleanly. With ``ray_address`` it joins that
    cluster, as under ``ray job submit``; else it starts its own Ray."""
    env = dict(ENV, RAY_ADDRESS=ray_address) if ray_address else ENV
    code, out, _ = run_until([sys.executable, "-m", "actors.launch", *args, "run.progress_every_seconds=1"],
                             lambda line: True if until() else None, seconds=seconds, env=env)
    assert code == 0, out[-4000:]
    return out


def read_store(storage: Path, fn, empty):
    """``fn(store)`` on the run's store, read only; ``empty`` until the launcher has made it."""
    try:
        with LeagueStore(storage, create=False, readonly=True) as store:
            return fn(store)
    except StoreError:
        return empty


def test_tic_tac_toe_learns_from_search_with_exact_nash_conv_and_resumes(tmp_path, shared_ray):
    def state():
        return read_store(tmp_path, lambda store: ([m["value"] for m in store.measurements(measures.NASH_CONV)],
                                                   [a for a in store.agents() if a.agent_id.startswith("main_agent-0-")],
                                                   store.learners()), ([], [], []))

    def learned():
        values, snapshots, _ = state()
        return len(values) >= 2 and len(snapshots) >= 2 and values[-1] < UNIFORM_TIC_TAC_TOE - 0.07

    out = launch_until("--config", "configs/tic_tac_toe.yaml", f"run.storage={tmp_path}", "run.max_minutes=3",
                       "run.exploitability_every_seconds=5", "roles.main_agent.snapshot_every_steps=5000",
                       "serve.port=8151", until=learned, ray_address=shared_ray)
    assert "NashConv" in out  # the progress line shows the published policy's exact NashConv
    values, snapshots, (learner,) = state()
    assert len(values) >= 2 and len(snapshots) >= 2
    # every measure is a NashConv (in [0, 2] for a game of returns in [-1, 1]); the published one never
    # rises (a published snapshot stays unless one measures lower) and ends below uniform play's
    assert all(0.0 <= v <= 2.0 for v in values)
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:])), values
    assert values[-1] < UNIFORM_TIC_TAC_TOE - 0.07, values
    # the config's snapshots play their best move (policy.snapshot_play: greedy), and so does every
    # published member read back from the store: one legal move with probability 1 at each position
    from evaluation.game_tree import position_graph, table
    from evaluation.stored_run import StoredRun
    from policies.net import GreedyPolicy

    with StoredRun(tmp_path) as run:
        _, models, _ = run.nash_mixture()
    graph = position_graph("tic_tac_toe")
    for model in models:
        assert isinstance(model, GreedyPolicy)
        rows = table(graph, model)[graph.decisions]
        assert np.all((rows == 0.0) | (rows == 1.0)) and np.all(rows.sum(axis=1) == 1.0)

    # resumed from its checkpoint: it goes on from where it stopped (a fresh start would count from
    # version 0 again), as its next checkpoint shows
    def went_on():
        return any(again["version"] > learner["version"] and again["step"] > learner["step"] for again in state()[2])

    launch_until("--config", "configs/tic_tac_toe.yaml", f"run.storage={tmp_path}", "run.max_minutes=1",
                 "learner.checkpoint_every_seconds=5", "serve.port=8151", until=went_on, ray_address=shared_ray)
    assert went_on()


TAKEAWAY = "pettingzoo:tests.data.takeaway:env"


def test_a_users_take_away_game_under_the_example_config_learns_from_search_and_is_measured_exactly(tmp_path):
    """The example config with its game line changed, as a user would, their game a module beside it
    (``takeaway.py``) and the launcher run from elsewhere: the module imports from the config's folder.
    Its roles learn with search, and the game's positions enumerate, so the published mixture's
    NashConv is exact. Its searches remember what they proved, so the league learns to play the
    game: from 2.0 (a best response wins from both seats, as against uniform play) the exact NashConv
    falls below 0.5. ``/nash/act`` answers real positions with legal moves, and every acknowledged
    game is stored once."""
    shutil.copyfile(ROOT / "tests" / "data" / "takeaway.py", tmp_path / "takeaway.py")
    config = tmp_path / "config.yaml"
    text = (ROOT / "examples/dots_and_boxes/config_pettingzoo.yaml").read_text()
    lines = ['game: {name: "pettingzoo:takeaway:env"}' if line.startswith("game:") else line for line in text.splitlines()]
    config.write_text("\n".join(lines) + "\n")
    # real positions of the same game (this repository's copy) with fewer stones than moves: some moves illegal
    obs, masks = decisions(TAKEAWAY, 2000)
    obs, masks = obs[~masks.all(axis=1)][:16], masks[~masks.all(axis=1)][:16]
    assert len(obs) == 16
    port = 8152
    answer = {}

    def measured() -> bool:
        def done(store):
            learners = store.learners()
            low = any(m["value"] <= 0.5 for m in store.measurements(measures.NASH_CONV))
            return low and bool(learners) and all(l["step"] > 0 for l in learners)
        if not answer and read_store(tmp_path / "run", done, False):
            r = requests.post(f"http://127.0.0.1:{port}/nash/act", timeout=30, json={
                "observations": obs.tolist(), "legal_masks": masks.astype(int).tolist(), "seed": 1})
            answer.update(r.json(), status=r.status_code,
                          nash=requests.get(f"http://127.0.0.1:{port}/nash", timeout=30).json())
        return bool(answer)

    # stopped once measured: the cap bounds only a run that fails
    out = launch_until("--config", str(config), f"run.storage={tmp_path / 'run'}", "run.max_minutes=5",
                       "run.exploitability_every_seconds=10", f"serve.port={port}", until=measured, seconds=330)
    assert answer, out[-3000:]  # the league measured a NashConv of at most 0.5 within its 5 minutes
    assert answer["status"] == 200, answer
    assert len(answer["actions"]) == 16 and all(masks[i, a] for i, a in enumerate(answer["actions"]))
    assert answer["nash"]["game"]["obs_size"] == 122 and answer["nash"]["game"]["num_actions"] == 12
    with LeagueStore(tmp_path / "run", create=False) as store:
        assert store.get_meta("game") == "pettingzoo:takeaway:env"
        # where the game imports from, so the evaluation tools load it from any directory (league.imports)
        assert store.get_meta("import_paths")[0] == str(tmp_path.resolve())
        measured = store.measurements(measures.NASH_CONV)
        learners = store.learners()
        blobs = [store.snapshot_blob(a.agent_id) for a in store.agents()]
        # every answer by snapshots of this league
        assert answer["members"] and set(answer["members"]) <= {a.agent_id for a in store.agents(include_removed=True)}
        assert_exact_accounting(store, tmp_path / "run")
    assert measured and all(0.0 <= m["value"] <= 2.0 for m in measured)
    assert min(m["value"] for m in measured) <= 0.5, [round(m["value"], 3) for m in measured]
    assert learners and all(l["step"] > 0 for l in learners)
    # the example config's snapshots play their network's most probable move
    assert blobs and all(type(policy_from_bytes(b)).__name__ == "GreedyPolicy" for b in blobs)


def test_connect_four_learns_from_search_answers_nash_act_and_exports_the_network_alone(tmp_path, shared_ray):
    """The searches' leaves are evaluated in the Serve deployment (``rollout.policy_inference: serve``,
    one batch across workers, as on a GPU), the worker holding only version numbers: the learner
    trains only if they are answered."""
    storage = tmp_path / "run"
    with (tmp_path / "launcher.log").open("w") as sink:  # a file: a joined launcher prints its actors' logs too
        proc = subprocess.Popen([sys.executable, "-m", "actors.launch", "--config", "configs/connect_four.yaml",
                                 f"run.storage={storage}", "run.max_minutes=4", "serve.port=8153",
                                 "policy.hidden=[32,32]", "search_learner.simulations=4", "search_learner.considered=4",
                                 "rollout.envs_per_worker=32", "rollout.steps_per_batch=256",
                                 "roles.main_agent.snapshot_every_steps=300", "evaluator.games_per_pair=16",
                                 "anchors=[]", "rollout.policy_inference=serve"],
                                cwd=ROOT, env=dict(ENV, RAY_ADDRESS=shared_ray), stdout=sink, stderr=subprocess.STDOUT)
    import pyspiel

    state = pyspiel.load_game("connect_four").new_initial_state()
    obs, mask = [state.observation_tensor(0)], [state.legal_actions_mask(0)]
    answer = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and answer is None:
            time.sleep(1)
            try:
                r = requests.post("http://127.0.0.1:8153/nash/act", timeout=30,
                                  json={"observations": obs, "legal_masks": mask, "seed": 1})
            except requests.ConnectionError:
                continue
            if r.status_code == 200:
                answer = r.json()
        proc.send_signal(signal.SIGINT)  # Ctrl-C once it answers: the league stops cleanly
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = (tmp_path / "launcher.log").read_text()
    assert proc.returncode == 0, out[-3000:]
    assert answer is not None and 0 <= answer["actions"][0] < 7, out[-3000:]
    with LeagueStore(storage, create=False) as store:
        (learner,) = store.learners()
        state = store.load_learner(learner["learner_id"])["state"]
        agents, nash = store.agents(), store.latest_nash()
        measured = {frozenset(row[:2]) for row in store.payoff_rows()}
    assert learner["step"] > 0 and learner["version"] > 0
    # the stop put the main agent's last weights in the pool, measured against every other snapshot
    # (greedy snapshots: each pair settled by its two games) before the last publication
    newest = max(agents, key=lambda a: a.step)
    assert newest.step == learner["step"], ([a.step for a in agents], learner["step"])
    assert all(frozenset((newest.agent_id, a.agent_id)) in measured for a in agents if a is not newest)
    assert newest.agent_id in nash["ids"]
    # the config's snapshots come from a moving average of the weights (policy.snapshot_average),
    # checkpointed beside them; it trails the weights it follows
    model, _, _ = learner_state_from_bytes(state)
    average = learner_average_from_bytes(state)
    assert average is not None
    gaps = [float((a - p).abs().max()) for a, p in zip(average.parameters(), model.parameters())]
    assert max(gaps) > 0 and all(np.isfinite(gaps))
    exported = subprocess.run([sys.executable, "-m", "serve.export", "--storage", str(storage), "--out",
                               str(tmp_path / "onnx")], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-2000:]
    manifest = json.loads((tmp_path / "onnx" / "policy.json").read_text())
    import onnxruntime as ort

    member = manifest["members"][0]
    session = ort.InferenceSession(str(tmp_path / "onnx" / member["file"]))
    feeds = {i.name: v for i, v in zip(session.get_inputs(), (np.asarray(obs, np.float32), np.asarray(mask, bool)))}
    logits = session.run(None, feeds)[0]
    assert logits.shape == (1, 7) and np.isfinite(logits).all()
