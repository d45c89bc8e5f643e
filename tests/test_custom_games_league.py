"""Leagues on games users bring, on a real local Ray: the example game through the launcher run as
users run it (a subprocess, from their own folder, `/nash/act` over real HTTP), a
user's game that raises now and then (the league goes on, exact accounting), and PettingZoo's
classic games Connect Four, Leduc hold'em and Go on a 5x5 board."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from test_league_page import browser, wait  # noqa: F401 (browser is a fixture)

from actors.outbox import ledgers
from envs import NO_ACTION
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes

pytest.importorskip("pettingzoo")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dots_and_boxes"
# nash-league importable as if installed, the user's folder not: the launcher must make it so
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def boxes_decisions(n: int, seed: int = 0):
    """Observations and legal masks of real Dots and Boxes positions, from the user's own game."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from boxes.vector import DotsAndBoxes
    finally:
        sys.path.remove(str(EXAMPLE))
    game, rng = DotsAndBoxes(8), np.random.default_rng(seed)
    obs, masks = [], []
    while len(obs) < n:
        seat = int(np.flatnonzero(game.movers()[0])[0])
        o, m = game.observe(seat)
        obs += o.tolist()
        masks += m.astype(int).tolist()
        actions = np.full((8, 2), NO_ACTION)
        movers = game.movers()
        for s in (0, 1):
            rows = np.flatnonzero(movers[:, s])
            actions[rows, s] = (rng.random((rows.size, 12)) * game.observe(s, rows)[1]).argmax(axis=1)
        game.step(actions)
    keep = [i for i, m in enumerate(masks) if any(m)][:n]
    return [obs[i] for i in keep], [masks[i] for i in keep]


def assert_exact_accounting(storage) -> int:
    """Games in every acknowledged result batch == games stored; nothing left pending. Returns the count."""
    books = ledgers(storage)
    acked = sum(l["items"] for l in books if not l["source"].startswith("learner:"))
    assert [l["source"] for l in books if l["pending"]] == []
    with LeagueStore(storage, create=False) as store:
        assert store.result_count() == acked == store.counters()["games"]
    return acked


FACTORY = "examples.nets.layernorm_mlp:build"


def test_the_example_game_runs_a_league_from_the_launcher_and_answers_nash_act(tmp_path):
    """The example's vector game, run from the user's folder with the user's own network (a factory
    imported from elsewhere): ``/nash/act`` answers real positions with legal moves from members of
    the pool, every acknowledged game is stored once, and the snapshots record the factory. (The
    example's PettingZoo form runs through the launcher in tests/test_search_league.py, its game
    line changed to a user's take-away game.)"""
    port = 8141
    cmd = [sys.executable, "-m", "actors.launch", "--config", "config.yaml", f"run.storage={tmp_path}",
           "run.max_minutes=4", f"serve.port={port}", "league.nash_every_seconds=2",
           *[f"roles.{role}.snapshot_every_steps=1000" for role in ("main_agent", "main_exploiter", "league_exploiter")],
           "roles.main_exploiter.min_steps_before_snapshot=500", "roles.league_exploiter.min_steps_before_snapshot=500",
           "rollout.envs_per_worker=32", "rollout.steps_per_batch=512", "evaluator.games_per_pair=16",
           f"policy.net={FACTORY}", "policy.args={width: 16, depth: 1}"]
    proc = subprocess.Popen(cmd, cwd=EXAMPLE, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    obs, masks = boxes_decisions(32)
    answer = None
    try:
        deadline = time.time() + 210
        while time.time() < deadline and proc.poll() is None and answer is None:
            time.sleep(2)
            try:
                r = requests.post(f"http://127.0.0.1:{port}/nash/act", timeout=30,
                                  json={"observations": obs, "legal_masks": masks, "seed": 1})
                nash = requests.get(f"http://127.0.0.1:{port}/nash", timeout=30).json()
            except requests.ConnectionError:
                continue
            if r.status_code == 200 and r.json()["pool_version"] == nash.get("pool_version"):  # the same pool
                answer = r.json()
                # the Nash is re-solved every 2 s within a pool version: its members are pool agents
                pool = requests.get(f"http://127.0.0.1:{port}/pool", timeout=30).json()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert answer is not None, out[-3000:]
    assert len(answer["actions"]) == 32
    assert all(masks[i][a] == 1 for i, a in enumerate(answer["actions"]))  # legal in every position asked
    pool_ids = {a["agent_id"] for a in (pool["agents"] if isinstance(pool, dict) else pool)}
    assert set(answer["members"]) <= pool_ids and answer["members"]
    assert nash["game"]["obs_size"] == 20 and nash["game"]["num_actions"] == 12
    assert assert_exact_accounting(tmp_path) > 0
    with LeagueStore(tmp_path, create=False) as store:
        assert store.get_meta("game") == "boxes.vector:DotsAndBoxes"
        # where the game imports from, so the evaluation tools load it from any directory (league.imports)
        assert store.get_meta("import_paths")[0] == str(EXAMPLE.resolve())
        blobs = [store.snapshot_blob(a.agent_id) for a in store.agents()]
    # the example configs' snapshots play their network's most probable move; the network is the config's
    assert blobs and all(type(policy_from_bytes(b)).__name__ == "GreedyPolicy" for b in blobs)
    models = [policy_from_bytes(b, as_played=False) for b in blobs]
    # snapshots record the factory and its args, as data
    assert all(m.spec.net == FACTORY and m.spec.args == {"width": 16, "depth": 1} for m in models)
    assert all(type(m.body).__name__ == "LayerNormMLP" for m in models)


# ---------------------------------------------------------------------------- in-process leagues, one Ray
FLAKY = """
    import numpy as np

    from boxes.vector import DotsAndBoxes


    class FlakyBoxes(DotsAndBoxes):
        '''Dots and Boxes whose step (and, more rarely, observe) raises on a schedule drawn from its seed,
        after its first 100 steps (the launcher's protocol check plays fewer).'''

        def __init__(self, num_envs, seed=None, **params):
            super().__init__(num_envs, seed=seed, **params)
            self.schedule = np.random.default_rng(seed)
            self.steps = 0

        def step(self, actions):
            self.steps += 1
            if self.steps > 100 and self.schedule.random() < 0.02:
                raise RuntimeError("a bug in the user's step")
            return super().step(actions)

        def observe(self, seat, envs=None):
            if self.steps > 100 and self.schedule.random() < 0.002:
                raise IndexError("a bug in the user's observe")
            return super().observe(seat, envs)
"""


@pytest.fixture(scope="module")
def user_ray(request, tmp_path_factory):
    """A local Ray whose workers import the user's modules (the example's folder and a folder
    holding a flaky game), as the launcher's PYTHONPATH gives them."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "flaky_boxes.py").write_text(textwrap.dedent(FLAKY))
    before = os.environ.get("PYTHONPATH")
    paths = [str(folder), str(EXAMPLE)]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([before] if before else []))
    sys.path[:0] = paths
    try:
        yield request.getfixturevalue("own_ray")
    finally:
        for p in paths:
            sys.path.remove(p)
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def run_league(storage, game: str, *overrides, until, timeout=120.0, config="configs/smoke.yaml", before_stop=None):
    """A small league on ``game`` in this process's Ray until ``until(status)``; stopped, killed,
    and the last status returned. ``before_stop(league)`` looks at the running league first."""
    from actors.launch import load
    from actors.league_run import LeagueRun

    cfg, info = load(["--config", config, f"game.name={game}", f"run.storage={storage}",
                      "serve.api=false", "rollout.opponent_inference=inprocess", "evaluator.probe_every_seconds=0",
                      "anchors=[]",
                      "evaluator.exact=false", "evaluator.games_per_pair=16", "rollout.envs_per_worker=16",
                      "roles.league_exploiter.count=0", *overrides])
    league = LeagueRun(cfg, info)
    try:
        deadline = time.time() + timeout
        while True:
            league.supervise()
            status = league.status()
            if until(status) or time.time() > deadline:
                break
            time.sleep(1)
        stats = {wid: __import__("ray").get(w.get_stats.remote()) for wid, w in league.workers.items()}
        if before_stop is not None:
            before_stop(league)
        final = league.stop()
    finally:
        league.kill()
    return status, final, stats


def thread_nice(pid: int) -> set[int]:
    """The nice values of a process's threads, as the kernel reports them."""
    values = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            values.add(os.getpriority(os.PRIO_PROCESS, int(task.name)))
        except ProcessLookupError:  # the thread ended
            continue
    return values


def test_a_game_that_raises_mid_run_drops_episodes_and_the_league_goes_on(user_ray, tmp_path):
    """A user's game that raises now and then: its episodes are dropped, the league goes on. The
    run's sampling evaluator plays at the lowest CPU priority (evaluator.nice=19): every thread
    of its process; its learner at the highest an actor can start at (learner.nice=0)."""
    import ray

    seen, nice = {}, {}

    def until(status):
        seen.setdefault("first", status["games"])
        return status["games"] > seen["first"] + 3000 and status["pool_size"] >= 2

    def look(league):
        nice["evaluator"] = thread_nice(ray.get(league.evaluators["evaluator:0"].get_stats.remote())["pid"])
        nice["learner"] = thread_nice(ray.get(next(iter(league.learners.values())).info.remote())["pid"])

    status, final, stats = run_league(tmp_path, "flaky_boxes:FlakyBoxes", "evaluator.nice=19", "learner.nice=0",
                                      until=until, before_stop=look)
    assert nice["evaluator"] == {19}, nice
    assert nice["learner"] == {0}, nice  # every thread of the learner's process
    errors = sum(s["game_errors"] for s in stats.values())
    assert errors > 0, stats  # the game did raise, in the workers
    assert status["games"] > seen["first"] + 3000 and final["pool_size"] >= 2, status
    assert assert_exact_accounting(tmp_path) == final["games"]


@pytest.mark.parametrize("game, params", [
    ("pettingzoo:connect_four_v3", []),
    ("pettingzoo:leduc_holdem_v4", []),
    ("pettingzoo:go_v5", ["game.params={board_size: 5, komi: 0.5}"]),
], ids=["connect_four", "leduc", "go5x5"])
def test_pettingzoo_classic_leagues(user_ray, tmp_path, game, params):
    # the main agent alone (its snapshots fill the pool): the game is what differs between these leagues
    cadence = ["roles.main_agent.snapshot_every_steps=1000", "roles.main_exploiter.count=0"]
    status, final, _ = run_league(tmp_path, game, *params, *cadence,
                                  until=lambda s: s["pool_size"] >= 2 and s["games"] >= 500 and s["nash_support"] >= 1)
    assert final["pool_size"] >= 2 and final["games"] >= 500, final
    assert assert_exact_accounting(tmp_path) == final["games"]
    with LeagueStore(tmp_path, create=False) as store:
        nash = store.latest_nash()
        assert nash is not None and abs(sum(nash["weights"]) - 1.0) < 1e-6
        assert store.get_meta("game") == game


BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"


def test_a_team_game_league_serves_its_squads_through_serve_and_nash_act(user_ray, browser, tmp_path):  # noqa: F811
    """MAgent2 battle, 6 agents a side, by config alone (configs/battle.yaml at a small map): frozen
    team opponents go through the Serve deployment, snapshots enter the pool and the Nash, every
    acknowledged game is stored once, and ``/nash/act`` drives a whole squad in one call (one
    episode id: one Nash member plays all its agents). The anchor judge scores the published
    mixture against the scripted team, and the league page draws its latest game against it:
    the agents each side had standing at every step. The learner's first 3,000 decisions are a
    curriculum stage at 2 agents a side; its workers move on to the game itself."""
    pytest.importorskip("magent2")
    from selenium.webdriver.common.by import By

    from envs import make_game

    teams = {"prefix": ["red_", "blue_"], "score": "survivors", "max_cycles": 30}
    squad = make_game(BATTLE, 1, seed=3, teams=teams, map_size=16).observe_side(0)
    assert len(squad.env) == 6
    port = 8137
    answer, page = {}, {}

    def until(status):
        if status["pool_size"] >= 2 and status["nash_support"] >= 1 and status["games"] >= 200 and not answer:
            r = requests.post(f"http://127.0.0.1:{port}/nash/act", timeout=30, json={
                "observations": squad.obs.tolist(), "legal_masks": squad.mask.astype(int).tolist(),
                "episode_ids": [7] * len(squad.env), "seed": 1})
            answer.update(r.json(), status=r.status_code)
        if answer and not page:
            trace = requests.get(f"http://127.0.0.1:{port}/nash", timeout=30).json()["quality"].get("team_trace")
            if trace is not None:
                browser.get(f"http://127.0.0.1:{port}/")
                wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#survivors polyline")) == 2)
                lines = browser.find_elements(By.CSS_SELECTOR, "#survivors polyline")
                page.update(trace=trace, sides={l.get_attribute("data-side"): int(l.get_attribute("data-final"))
                                                for l in lines},
                            anchors=[r.get_attribute("data-anchor")
                                     for r in browser.find_elements(By.CSS_SELECTOR, "#anchors tbody tr")])
        return bool(answer) and bool(page)

    status, final, stats = run_league(
        tmp_path, BATTLE, "game.params={map_size: 16}",
        "game.teams={prefix: [red_, blue_], score: survivors, max_cycles: 30}", "policy.hidden=[32, 32]",
        "game.curriculum=[{until_step: 3000, params: {map_size: 12}}]",
        "rollout.envs_per_worker=4", "rollout.steps_per_batch=1024", "ppo.minibatch_size=256",
        "roles.main_agent.snapshot_every_steps=2000", "roles.main_exploiter.snapshot_every_steps=2000",
        "roles.main_exploiter.min_steps_before_snapshot=1000", "anchors=[evaluation.scripted:attack_nearest]",
        "evaluator.anchor_games=2", "evaluator.anchor_every_seconds=5", "serve.api=true",
        f"serve.port={port}", "rollout.opponent_inference=serve", until=until, timeout=240,
        config="configs/battle.yaml")
    trace = page["trace"]
    rows = np.array(trace["survivors"])
    assert rows[0].tolist() == [6, 6] and (np.diff(rows, axis=0) <= 0).all(), trace
    assert trace["anchor"] == "evaluation.scripted:attack_nearest" and trace["value"] == trace["score"]
    assert page["sides"] == {"published": rows[-1][0], "anchor": rows[-1][1]}, page
    assert page["anchors"] == ["evaluation.scripted:attack_nearest"], page
    assert answer.get("status") == 200, (answer, status)
    assert len(answer["actions"]) == 6 and len(set(answer["members"])) == 1
    assert all(0 <= a < 21 for a in answer["actions"])
    assert final["pool_size"] >= 2 and final["games"] >= 200, final
    assert sum(s["env_steps"] for s in stats.values()) > 0
    assert [s["curriculum_stage"] for s in stats.values()] == [1] * len(stats), stats
    assert assert_exact_accounting(tmp_path) == final["games"]
    with LeagueStore(tmp_path, create=False) as store:
        assert store.get_meta("game") == BATTLE
        assert store.get_meta("game_params") == {"map_size": 16, "teams": teams}
