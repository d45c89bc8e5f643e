"""bench.search: its figures add up."""

import json

import pytest

from bench import search


def test_the_search_bench_splits_the_whole_search_time_and_counts_moves(capsys):
    assert search.main(["--seconds", "0.5", "--config", "configs/tic_tac_toe.yaml"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["game"] == "tic_tac_toe" and row["simulations"] == 16
    assert row["searched_moves_per_s"] > 0
    assert abs(sum(row["share"].values()) - 1.0) < 0.01 and set(row["share"]) == {"tree", "evaluate", "expand", "proofs"}
    assert 0 < row["search_share_of_loop"] <= 1.0


def test_the_search_bench_measures_each_config_at_each_number_of_games_side_by_side(capsys):
    assert search.main(["--seconds", "0.2", "--config", "configs/tic_tac_toe.yaml", "--envs", "8", "--envs", "32"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    rows = json.loads(out[-1])["rows"]
    assert [(r["config"], r["envs"]) for r in rows] == [("configs/tic_tac_toe.yaml", 8), ("configs/tic_tac_toe.yaml", 32)]
    assert all(r["searched_moves_per_s"] > 0 for r in rows) and len(out) == 4  # header, two rows, the JSON line


def test_a_number_of_games_below_one_is_one_clear_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        search.main(["--envs", "0"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("nash-league: ") and "--envs" in err, err


def test_clones_measures_connect_four_on_both_stores_and_a_game_without_bitboards_once(capsys):
    assert search.main(["--seconds", "0.2", "--config", "configs/connect_four.yaml", "--config",
                        "configs/tic_tac_toe.yaml", "--envs", "8", "--clones"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    rows = json.loads(out[-1])["rows"]
    assert [(r["game"], r["states"], r["clones"]) for r in rows] == [
        ("connect_four", "ConnectFourStates", False), ("connect_four", "OpenSpielStates", True),
        ("tic_tac_toe", "OpenSpielStates", False)]
    assert all(r["searched_moves_per_s"] > 0 for r in rows)
    assert out[2].split()[:2] == ["configs/connect_four.yaml", "clones"] and "clones" not in out[3]
