"""Anchors: fixed opponents (policies.anchors) and the bench that scores stored mixtures against them."""

import json
import subprocess
import sys

import numpy as np
import pytest

from policies.anchors import AnchorSpec, parse_anchor, score_against


def test_parse_anchor_reads_the_three_forms_and_names_a_bad_one():
    assert parse_anchor("uniform") == AnchorSpec("uniform", "uniform")
    assert parse_anchor("mcts:1000") == AnchorSpec("mcts:1000", "mcts", simulations=1000)
    assert parse_anchor("my_bots.c4:make").kind == "factory"
    for bad in ("", "mcts:", "mcts:0", "mcts:ten", "nonsense", "pkg.mod:not an identifier"):
        with pytest.raises(ValueError, match="anchor"):
            parse_anchor(bad)


def test_uniform_against_the_uniform_anchor_scores_one_half():
    """Identical players with seats alternated: the expected score is exactly 0.5."""
    out = score_against("tic_tac_toe", None, [None], [1.0], "uniform", games=600, seed=3)
    assert out["ci95"][0] <= 0.5 <= out["ci95"][1]
    assert abs(out["score"] - 0.5) < 0.07


def test_uniform_play_loses_to_mcts_on_connect_four():
    """Uniform random play scores about 0.1 against MCTS-10 on Connect Four (0.075 is the
    commonly quoted figure) and almost nothing against MCTS-100."""
    weak = score_against("connect_four", None, [None], [1.0], "mcts:10", games=300, seed=0)
    assert 0.03 <= weak["score"] <= 0.2
    strong = score_against("connect_four", None, [None], [1.0], "mcts:100", games=100, seed=0)
    assert strong["score"] < weak["score"] and strong["score"] <= 0.05


def test_a_user_bot_gets_the_native_state(tmp_path, monkeypatch):
    """A user's bot is built by its factory from the pyspiel.Game and is asked for every move
    of its seat with the native pyspiel.State."""
    (tmp_path / "first_bot.py").write_text(
        "import pyspiel\n"
        "calls = []\n"
        "class First:\n"
        "    def step(self, state):\n"
        "        calls.append(isinstance(state, pyspiel.State))\n"
        "        return state.legal_actions()[0]\n"
        "def make(game):\n"
        "    assert isinstance(game, pyspiel.Game)\n"
        "    return First()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import first_bot

    out = score_against("tic_tac_toe", None, [None], [1.0], "first_bot:make", games=40, seed=0)
    assert out["games"] == 40 and 0.0 <= out["score"] <= 1.0
    assert len(first_bot.calls) >= 40 * 2 and all(first_bot.calls)  # every game has >= 2 bot moves
    with pytest.raises(ValueError, match="cannot load"):
        score_against("tic_tac_toe", None, [None], [1.0], "first_bot:nope", games=1)


def test_mcts_needs_a_perfect_information_game():
    with pytest.raises(ValueError, match="perfect-information"):
        score_against("kuhn_poker", None, [None], [1.0], "mcts:10", games=1)


def test_mixture_weights_are_checked():
    with pytest.raises(ValueError, match="weights"):
        score_against("tic_tac_toe", None, [None], [np.nan], "uniform", games=1)


def test_bench_anchors_prints_one_json_line_per_target():
    out = subprocess.run([sys.executable, "-m", "bench.anchors", "--uniform", "--game", "tic_tac_toe",
                          "--anchors", "uniform,mcts:10", "--games", "20"],
                         capture_output=True, text=True, check=True, timeout=120)
    line = json.loads(out.stdout.strip())
    assert line["bench"] == "anchors" and set(line["anchors"]) == {"uniform", "mcts:10"}
    assert all(v["games"] == 20 and 0.0 <= v["score"] <= 1.0 for v in line["anchors"].values())
    bad = subprocess.run([sys.executable, "-m", "bench.anchors", "--uniform", "--game", "tic_tac_toe",
                          "--anchors", "mcts:0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--anchors" in bad.stderr
