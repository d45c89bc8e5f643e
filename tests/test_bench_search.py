"""bench.search: its figures add up."""

import json

from bench import search


def test_the_search_bench_splits_the_whole_search_time_and_counts_moves(capsys):
    assert search.main(["--seconds", "0.5", "--config", "configs/tic_tac_toe.yaml"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert row["game"] == "tic_tac_toe" and row["simulations"] == 16
    assert row["searched_moves_per_s"] > 0
    assert abs(sum(row["share"].values()) - 1.0) < 0.01 and set(row["share"]) == {"tree", "evaluate", "expand", "proofs"}
    assert 0 < row["search_share_of_loop"] <= 1.0
