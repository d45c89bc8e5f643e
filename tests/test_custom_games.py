"""Games users bring by module path: the loader (envs.custom, envs.pettingzoo), the protocol
checker (envs.protocol) on deliberately broken games, the example game in both forms, and the
launcher stopping on a bad game before Ray starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from envs import NO_ACTION, StepResult, game_info, is_user_game, make_game
from envs.protocol import check_game

pytest.importorskip("pettingzoo")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dots_and_boxes"  # the user's own folder: not an installed package
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")


@pytest.fixture(autouse=True)
def user_folders(monkeypatch, tmp_path):
    """The example's folder and a scratch folder on sys.path, as a user running from their folder has."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in ("mygame", "mypkg", "broken_import")]:
        del sys.modules[name]


def write(folder: Path, relpath: str, text: str) -> None:
    path = folder / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


# ---------------------------------------------------------------------------- loader
VECTOR_MODULE = """
    from boxes.vector import DotsAndBoxes

    def make(num_envs, seed=None, rows=2, cols=2):
        return DotsAndBoxes(num_envs, seed=seed, rows=rows, cols=cols)

    not_callable = 3

    def wrong_signature(n):
        return DotsAndBoxes(n)

    def not_a_game(num_envs, seed=None):
        return object()

    def one_env_only(num_envs, seed=None):
        return DotsAndBoxes(1)

    def exact(num_envs, seed=None):
        game = DotsAndBoxes(num_envs)
        game.supports_exact = True
        return game
"""

AEC_MODULE = """
    from boxes.aec import env, raw_env

    def make(**kwargs):
        return raw_env(**kwargs)
"""


def test_top_level_and_dotted_modules_with_named_factories_build_the_game(user_folders):
    write(user_folders, "mygame.py", VECTOR_MODULE)
    write(user_folders, "mypkg/__init__.py", "")
    write(user_folders, "mypkg/games/__init__.py", "")
    write(user_folders, "mypkg/games/dots.py", VECTOR_MODULE)
    for name in ("mygame:make", "mypkg.games.dots:make", "boxes.vector:DotsAndBoxes"):
        game = make_game(name, 3, seed=1, rows=1, cols=3)
        assert (game.num_envs, game.num_actions, game.obs_size) == (3, 4 + 6, 10 + 6)
        assert tuple(game_info(name, rows=1, cols=3))[:3] == (16, 10, False)
        assert game_info(name, rows=1, cols=3).obs_shape == tuple(game.obs_shape)
        assert is_user_game(name)


def test_pettingzoo_environments_load_from_any_module_with_the_factory_named(user_folders):
    write(user_folders, "mygame.py", AEC_MODULE)
    write(user_folders, "mypkg/__init__.py", "")
    write(user_folders, "mypkg/mygame.py", AEC_MODULE)
    names = ["pettingzoo:mygame:env", "pettingzoo:mygame:make", "pettingzoo:mygame",  # top level
             "pettingzoo:mypkg.mygame:raw_env", "pettingzoo:mypkg.mygame", "pettingzoo:boxes.aec:env"]
    for name in names:
        game = make_game(name, 2, seed=0, rows=2, cols=1)
        assert (game.num_actions, game.obs_size) == (7, 11)
        assert tuple(game_info(name, rows=2, cols=1))[:2] == (11, 7)
        assert is_user_game(name)
    # PettingZoo's own games keep their short names, and are not the user's
    assert not is_user_game("pettingzoo:connect_four_v3") and not is_user_game("kuhn_poker")
    assert make_game("pettingzoo:connect_four_v3", 1).num_actions == 7


@pytest.mark.parametrize("name, message", [
    ("nosuchmodule:make", "cannot import module 'nosuchmodule'"),
    ("mygame:missing", "module 'mygame' has no 'missing'"),
    ("mygame:not_callable", "is not callable"),
    ("mygame:wrong_signature", "calling it as wrong_signature(num_envs=..., seed=..., **[])"),
    ("mygame:not_a_game", "not a VectorGame"),
    ("mygame:one_env_only", "asked for num_envs=2, the game has num_envs=1"),
    ("mygame:exact", "supports_exact"),
    ("my-game:make", "want 'module:factory'"),
    ("mygame:make:extra", "want 'module:factory'"),
    ("broken_import:make", "it imports 'no_such_dependency', which is missing"),
    ("pettingzoo:nosuch_v0", "neither pettingzoo.classic.nosuch_v0 nor a module of that name"),
    ("pettingzoo:boxes.aec:nosuch", "module 'boxes.aec' has no 'nosuch'"),
    ("pettingzoo:boxes.rules", "has no raw_env() or env(); name the factory"),
    ("pettingzoo:nosuchpkg.mod:env", "cannot import module 'nosuchpkg.mod'"),
])
def test_bad_module_paths_get_a_clear_error(user_folders, name, message):
    write(user_folders, "mygame.py", VECTOR_MODULE)
    write(user_folders, "broken_import.py", "import no_such_dependency\n")
    with pytest.raises(ValueError) as err:
        make_game(name, 2, seed=0)
    assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------- the protocol checker
def boxes(num_envs=4):
    from boxes.vector import DotsAndBoxes

    return DotsAndBoxes(num_envs, seed=0)


def broken(method: str, fn, attrs: dict | None = None):
    """A builder of the example game with one method replaced by ``fn(game, original, *args)``."""
    def build():
        from boxes.vector import DotsAndBoxes

        def override(self, *args):
            return fn(self, getattr(DotsAndBoxes, method).__get__(self), *args)

        return type("Broken", (DotsAndBoxes,), {method: override, **(attrs or {})})(4, seed=0)
    return build


def step_counting(limit):
    """A step that works ``limit`` times per game, then raises."""
    def step(game, original, actions):
        game.calls = getattr(game, "calls", 0) + 1
        if game.calls > limit:
            raise RuntimeError("the user's bug")
        return original(actions)
    return step


def result_of(change):
    """A step whose result the original step gives, then ``change(game, result)`` alters."""
    return lambda g, f, a: change(g, f(a))


def never_ending(game, original, actions):
    result = original(actions)
    game.lines[:, :2] = False  # lines 0 and 1 are rubbed out after every step: the board never fills
    return result


BROKEN = {
    "obs float64": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0].astype(np.float64), f(s, e)[1])),
                    "observations must be (4, 20) float32 (num_envs, obs_size), got shape (4, 20) dtype float64"),
    "obs too short": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0][:, :19], f(s, e)[1])),
                      "observations must be (4, 20) float32"),
    "obs NaN": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0] * np.nan, f(s, e)[1])), "non-finite observation"),
    "mask int": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0], f(s, e)[1].astype(np.int8))),
                 "masks must be (4, 12) bool (num_envs, num_actions), got shape (4, 12) dtype int8"),
    "mask for the waiting seat": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0], np.ones_like(f(s, e)[1]))),
                                  "gives legal actions in env 0, where seat 1 does not move"),
    "no legal action": (broken("observe", lambda g, f, s, e=None: (f(s, e)[0], np.zeros_like(f(s, e)[1]))),
                        "seat 0 must move in env 0 but has no legal action"),
    "both move in a turn-based game": (broken("movers", lambda g, f: np.ones((g.num_envs, 2), dtype=bool)),
                                       "movers() of env 0 is [True, True]; in a turn-based game exactly one seat must move"),
    "movers int": (broken("movers", lambda g, f: f().astype(int)), "movers() must be an (4, 2) bool array"),
    "returns not zero-sum": (broken("step", result_of(lambda g, r: StepResult(r.done, np.abs(r.returns)))),
                             "do not sum to zero"),
    "returns before the end": (broken("step", result_of(lambda g, r: StepResult(r.done, r.returns + 0.5))),
                               "whose episode did not end"),
    "done float": (broken("step", result_of(lambda g, r: StepResult(r.done.astype(float), r.returns))),
                   "step().done must be an (4,) bool array"),
    "episodes never end": (broken("step", never_ending), "an episode of env 0 did not end within 50 steps"),
    "step raises": (broken("step", step_counting(10)), "step() raised RuntimeError: the user's bug"),
    "accepts illegal actions": (broken("step", lambda g, f, a: f(np.where(a >= g.num_actions, 0, a))),
                                "step() accepted action 12 (num_actions is 12)"),
    "obs_shape": (broken("reset", lambda g, f, seed=None: (f(seed), setattr(g, "obs_shape", (4, 4)))[0]),
                  "obs_shape (4, 4) holds 16 values, obs_size is 20"),
    "range": (broken("reset", lambda g, f, seed=None: f(seed), {"utility_range": (-0.5, 0.5)}),
              "leave utility_range (-0.5, 0.5)"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_checker_names_what_a_broken_game_breaks(case):
    build, message = BROKEN[case]
    game = build()
    with pytest.raises(ValueError) as err:
        check_game(game, max_episode_steps=50)
    text = str(err.value)
    assert text.startswith("dots_and_boxes_2x2 breaks the game protocol (envs/base.py): ")
    assert message in text and "\n" not in text, text


@pytest.mark.parametrize("name, params", [
    ("boxes.vector:DotsAndBoxes", {}), ("boxes.vector:DotsAndBoxes", {"rows": 3, "cols": 2}),
    ("pettingzoo:boxes.aec:env", {}), ("pettingzoo:connect_four_v3", {}), ("kuhn_poker", {}),
    ("goofspiel", {"num_cards": 4}), ("rps", {}),
])
def test_games_that_keep_the_protocol_pass(name, params):
    check_game(make_game(name, 5, seed=3, **params), episodes=3)


def test_the_checker_leaves_the_game_reset():
    game = boxes()
    check_game(game)
    assert not game.lines.any() and (game.turn == 0).all()


# ---------------------------------------------------------------------------- the example game
def test_both_forms_of_the_example_play_the_same_game():
    """Random legal play, the same actions in both forms: same movers, observations, masks, returns."""
    vec = make_game("boxes.vector:DotsAndBoxes", 6, seed=0, rows=2, cols=3)
    aec = make_game("pettingzoo:boxes.aec:env", 6, seed=0, rows=2, cols=3)
    rng = np.random.default_rng(0)
    returns = []
    for _ in range(200):
        movers = vec.movers()
        assert np.array_equal(movers, aec.movers())
        actions = np.full((6, 2), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            ov, mv = vec.observe(s)
            oa, ma = aec.observe(s)
            np.testing.assert_array_equal(ov, oa)
            np.testing.assert_array_equal(mv, ma)
            rows = np.flatnonzero(movers[:, s])
            actions[rows, s] = (rng.random((rows.size, vec.num_actions)) * mv[rows]).argmax(axis=1)
        a, b = vec.step(actions), aec.step(actions)
        np.testing.assert_array_equal(a.done, b.done)
        np.testing.assert_array_equal(a.returns, b.returns)
        returns.append(a.returns[a.done])
    returns = np.concatenate(returns)
    assert len(returns) == 6 * (200 // 17)  # every episode is 17 lines long
    assert set(np.unique(returns[:, 0])) <= {-1.0, 0.0, 1.0} and (returns.sum(axis=1) == 0).all()


def test_closing_a_box_earns_another_line_and_the_text_shows_the_board():
    game = boxes(1)
    b = game.board
    for seat, line in [(0, b.horizontal(0, 0)), (1, b.vertical(0, 0)), (0, b.horizontal(1, 0))]:
        actions = np.full((1, 2), NO_ACTION)
        actions[0, seat] = line
        game.step(actions)
    assert game.movers().tolist() == [[False, True]]
    game.step(np.array([[NO_ACTION, b.vertical(0, 1)]]))  # seat 1 closes box (0, 0) and draws again
    assert game.movers().tolist() == [[False, True]]
    obs, mask = game.observe(1)
    assert obs[0, b.num_lines:].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]  # its own box, then the opponent's
    assert mask[0].sum() == 12 - 4
    assert game.render_text(0) == "\n".join([
        "+---+   +",
        "| 1 |    ",
        "+---+   +",
        "         ",
        "+   +   +",
        "seat 1 to move; boxes: seat 0 0, seat 1 1"])
    names = [game.action_name(0, a) for a in range(game.num_actions)]
    assert names[b.vertical(0, 1)] == "(0,1)-(1,1)" and len(set(names)) == 12


def test_the_pettingzoo_form_renders_the_same_text_and_names():
    from boxes.aec import env

    e = env(render_mode="ansi")
    e.reset(seed=0)
    for line in (0, 6, 2, 7):
        e.step(line)
    vec = boxes(1)
    for seat, line in [(0, 0), (1, 6), (0, 2), (1, 7)]:
        actions = np.full((1, 2), NO_ACTION)
        actions[0, seat] = line
        vec.step(actions)
    assert e.render() == vec.render_text(0)
    assert [e.unwrapped.action_name(0, a) for a in range(12)] == [vec.action_name(0, a) for a in range(12)]


# ---------------------------------------------------------------------------- the launcher
BROKEN_GAME = """
    from boxes.vector import DotsAndBoxes

    class Float64Observations(DotsAndBoxes):
        def observe(self, seat, envs=None):
            obs, mask = super().observe(seat, envs)
            return obs.astype("float64"), mask
"""


@pytest.mark.parametrize("name, message", [
    ("flawed:Float64Observations", "observations must be (4, 20) float32"),
    ("flawed:NoSuch", "module 'flawed' has no 'NoSuch'"),
    ("nosuchmodule:make", "cannot import module 'nosuchmodule'"),
])
def test_a_bad_game_stops_the_launcher_before_ray_with_one_line(tmp_path, name, message):
    """The launcher run from the user's folder (their module beside them, the config elsewhere)."""
    write(tmp_path, "flawed.py", BROKEN_GAME)
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", str(EXAMPLE / "config.yaml"),
                          f"game.name={name}", f"run.storage={tmp_path / 'run'}"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=dict(ENV, PYTHONPATH=str(ROOT)))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nash-league: config: game.name: "), out.stderr
    assert message in lines[0] and (name in lines[0])
    assert "Started a local Ray" not in out.stdout + out.stderr


# ---------------------------------------------------------------------------- a game raising in a worker
def test_a_worker_drops_the_running_episodes_of_a_game_that_raised(tmp_path):
    """A worker's ``policies.lanes.Lanes._recover`` (no Ray started): the lane's running episodes leave the recorder,
    finished ones stay, the game restarts, the same opponents play the new episodes. The league run
    of tests/test_custom_games_league.py checks the rest (exact counts, the league going on)."""
    from actors.launch import load
    from actors.rollout import RolloutWorkerImpl
    from policies.rollout import EpisodeRecorder

    cfg, _ = load(["--config", "configs/smoke.yaml", "game.name=boxes.vector:DotsAndBoxes",
                   f"run.storage={tmp_path}", "rollout.opponent_inference=inprocess", "rollout.envs_per_worker=4"])
    worker = RolloutWorkerImpl("worker:main_agent-0:0", "main_agent-0", cfg, None, {}, opponents=object())
    lanes = worker.lanes
    lane = lanes.lanes[0]
    lanes.recorder, lanes._next_episode = EpisodeRecorder(), 10
    lane.episode[:] = [6, 7, 8, 9]
    lane.opponent[:] = [0, 1, 0, 1]
    lane.decisions[:] = 2
    for episodes in ([5, 6, 7], [8, 9, 5]):  # episode 5 finished earlier; 6..9 run in the lane
        n = len(episodes)
        lanes.recorder.add(np.array(episodes), np.zeros((n, 20), np.float32), np.ones((n, 12), bool),
                             np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32))
    lanes.recorder.finish([5], [1.0], [2])
    lane.game.step(np.array([[0, NO_ACTION]] * 4))
    lanes._recover(lane, "stepping", RuntimeError("a bug in the user's step"))
    assert worker.get_stats()["game_errors"] == 1
    assert lane.episode.tolist() == [10, 11, 12, 13] and lanes._next_episode == 14
    assert lane.decisions.tolist() == [0, 0, 0, 0] and lane.opponent.tolist() == [0, 1, 0, 1]
    assert not lane.game.lines.any() and not lane.prepared
    rollout = lanes.recorder.take()
    assert len(rollout) == 2 and rollout.rewards.tolist() == [0.0, 1.0]  # episode 5 only, whole
    assert lanes.recorder.chunks == []
