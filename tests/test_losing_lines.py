"""experiments.losing_lines: a run's head-to-head score from each seat and the openings it loses,
against games played out here move by move."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyspiel

from envs import make_game
from envs.openspiel import state_tensor
from policies.net import GreedyPolicy
from test_compare import leaning_model, nash_store, sharp_models

ROOT = Path(__file__).resolve().parents[1]


def greedy_nets(seed: int, k: int):
    """Tic-tac-toe networks as greedy snapshots play: each its most probable legal move."""
    return [GreedyPolicy(m).eval() for m in sharp_models(make_game("tic_tac_toe", 1), k, seed)]


def played(first, second) -> tuple[float, list[int]]:
    """The first player's score and the moves of one game of two greedy networks."""
    game = pyspiel.load_game("tic_tac_toe")
    tensor, state, moves = state_tensor(game), game.new_initial_state(), []
    while not state.is_terminal():
        player = state.current_player()
        mask = np.zeros((1, 9), dtype=bool)
        mask[0, state.legal_actions()] = True
        probs = (first, second)[player].probs(np.asarray(tensor(state, player), dtype=np.float32)[None], mask)
        moves.append(int(probs[0].argmax()))
        state.apply_action(moves[-1])
    return (state.returns()[0] + 1) / 2, moves


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.losing_lines", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_each_seat_scores_its_one_game_and_a_game_not_won_is_listed_by_its_opening(tmp_path):
    # two greedy networks whose two games are not both won by one side (a line to lose)
    for seed in range(50):
        a, b = greedy_nets(seed, 2)
        as_first, first_moves = played(a, b)
        b_first, second_moves = played(b, a)
        if as_first < 1.0 or b_first > 0.0:
            break
    assert as_first < 1.0 or b_first > 0.0, "no pair of the 50 seeds loses a game"
    nash_store(tmp_path / "a", "tic_tac_toe", [a.net], [1.0], play="greedy")
    nash_store(tmp_path / "b", "tic_tac_toe", [b.net], [1.0], play="greedy")
    out = run("--storage", str(tmp_path / "a"), "--versus", str(tmp_path / "b"), "--games", "10", "--plies", "4")
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["first"]["games"] == line["second"]["games"] == 5
    assert line["first"]["score"] == as_first and line["second"]["score"] == 1.0 - b_first
    # every game from a seat is the same game: the one opening it does not win, five times, or none
    assert line["first"]["not_won"] == ([{"opening": first_moves[:4], "games": 5}] if as_first < 1.0 else [])
    assert line["second"]["not_won"] == ([{"opening": second_moves[:4], "games": 5}] if b_first > 0.0 else [])


def test_each_seats_score_is_the_exact_expected_score_of_that_seat(tmp_path):
    """A mixture of two greedy networks against one that samples: each seat's score estimates that
    seat's exact expected score (the game's tree walked, ``evaluation.game_tree``), 200 games each."""
    from evaluation.game_tree import position_graph, table, value

    greedy, sampling = greedy_nets(1, 2), sharp_models(make_game("tic_tac_toe", 1), 1, seed=7)[0]
    graph = position_graph("tic_tac_toe")
    t_b = table(graph, sampling)
    exact = {"first": (1 + sum(0.5 * value(graph, table(graph, m), t_b) for m in greedy)) / 2,
             "second": (1 - sum(0.5 * value(graph, t_b, table(graph, m)) for m in greedy)) / 2}
    assert abs(exact["first"] - exact["second"]) > 0.2, exact  # the seats differ: a swap would show
    nash_store(tmp_path / "a", "tic_tac_toe", [m.net for m in greedy], [0.5, 0.5], play="greedy")
    nash_store(tmp_path / "b", "tic_tac_toe", [sampling], [1.0])
    line = json.loads(run("--storage", str(tmp_path / "a"), "--versus", str(tmp_path / "b"), "--games", "400",
                          "--seed", "3").stdout)
    for seat in ("first", "second"):  # a score's standard error over 200 games is at most 0.035
        assert abs(line[seat]["score"] - exact[seat]) < 0.12, (seat, line[seat]["score"], exact)


def test_bad_runs_and_options_are_one_line_each(tmp_path):
    nash_store(tmp_path / "t", "tic_tac_toe", sharp_models(make_game("tic_tac_toe", 1), 1, 0), [1.0])
    kuhn = make_game("kuhn_poker", 1)
    nash_store(tmp_path / "k", "kuhn_poker", [leaning_model(kuhn, 0, 1.0)], [1.0])
    cases = [
        (["--storage", str(tmp_path / "t"), "--versus", str(tmp_path / "k")], "not of tic_tac_toe"),
        (["--storage", str(tmp_path / "k"), "--versus", str(tmp_path / "k")], "perfect information"),
        (["--storage", str(tmp_path / "t"), "--versus", str(tmp_path / "nothing")], "--versus"),
        (["--storage", str(tmp_path / "t"), "--versus", str(tmp_path / "t"), "--games", "0"], "--games must be >= 1"),
    ]
    for args, why in cases:
        out = run(*args)
        assert out.returncode == 2 and out.stdout == "", (args, out)
        assert out.stderr.startswith("nash-league: ") and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert why in out.stderr, (args, out.stderr)
