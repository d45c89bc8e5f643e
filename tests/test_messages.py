"""league/messages.py: the typed messages between actors validate what they carry."""

import json
import pickle

import numpy as np
import pytest

from league.messages import Match
from league.messages import ExactScores, MatchAssignments, NashMixture, Result, ResultBatch
from league.store import encode_batch


def columns(**change):
    cols = {"agents": ("m", "x"), "a": np.array([0, 0]), "b": np.array([1, 1]), "score": np.array([1.0, 0.0])}
    cols.update(change)
    return cols


def pair_rows(batch):
    """A batch's rows as (a, b, games, wins, draws, score) with agent names."""
    names = batch.agents
    return [(names[i], names[j], g, w, d, s) for i, j, g, w, d, s in
            zip(batch.a.tolist(), batch.b.tolist(), batch.games.tolist(), batch.wins.tolist(), batch.draws.tolist(),
                batch.score.tolist())]


def test_games_are_counted_per_ordered_pair_in_order_of_first_game():
    batch = ResultBatch.from_games("w", 1, ("m", "x", "y"), np.array([0, 0, 2, 0]), np.array([1, 2, 1, 1]),
                                   np.array([1.0, 0.25, 0.5, 0.5]))
    assert pair_rows(batch) == [("m", "x", 2, 1, 1, 1.5), ("m", "y", 1, 0, 0, 0.25), ("y", "x", 1, 0, 1, 0.5)]
    assert len(batch) == 4
    empty = ResultBatch.from_games("w", 2, (), [], [], [])
    assert len(empty) == 0 and pair_rows(empty) == []


def test_an_agent_listed_twice_is_one_agent():
    """A worker lists its learner first and then every opponent, itself included in self-play."""
    batch = ResultBatch.from_games("w", 1, ("m", "x", "m"), np.array([0, 0, 2]), np.array([2, 1, 1]),
                                   np.array([0.5, 1.0, 0.0]))
    assert batch.agents == ("m", "x")
    assert pair_rows(batch) == [("m", "m", 1, 0, 1, 0.5), ("m", "x", 2, 1, 0, 1.0)]


def test_result_batch_from_results_interns_ids():
    batch = ResultBatch.from_results("w", 7, [("m", "x", 1.0), Result("x", "m", 0.0)], env_steps=5)
    assert batch.agents == ("m", "x") and batch.a.tolist() == [0, 1] and batch.b.tolist() == [1, 0]
    assert pair_rows(batch) == [("m", "x", 1, 1, 0, 1.0), ("x", "m", 1, 0, 0, 0.0)]
    assert (batch.source, batch.seq, batch.env_steps) == ("w", 7, 5)


def test_result_batch_survives_pickling_as_ray_sends_it():
    batch = ResultBatch.from_games("w", 3, ("m", "x"), np.array([0]), np.array([1]), np.array([0.5]), 12,
                                   {"m": [1.0, 2.0]})
    back = pickle.loads(pickle.dumps(batch))
    assert pair_rows(back) == pair_rows(batch) and back.action_counts["m"].tolist() == [1.0, 2.0]


def test_result_batch_arrays_come_back_as_the_same_batch():
    batch = ResultBatch("w", 3, ("m", "x", "y"), [0, 0, 2], [1, 2, 0], [3, 1, 2], [1, 0, 1], [1, 1, 0],
                        [1.75, 0.5, 1.25], 40, {"m": [1.0, 2.0], "y": [0.0, 5.0, 1.0]})
    arrays = batch.to_arrays()
    for back in (ResultBatch.from_arrays("w", 3, arrays),
                 ResultBatch.from_arrays("w", 3, {k: np.asarray(v) for k, v in arrays.items()}),  # as npz keeps them
                 ResultBatch.from_arrays("w", 3, json.loads(encode_batch(batch)))):  # as the store keeps them
        assert pair_rows(back) == pair_rows(batch) and back.env_steps == 40
        assert {k: v.tolist() for k, v in back.action_counts.items()} == {"m": [1.0, 2.0], "y": [0.0, 5.0, 1.0]}
    with pytest.raises(ValueError, match="missing 'wins'"):
        ResultBatch.from_arrays("w", 3, {k: v for k, v in arrays.items() if k != "wins"})
    with pytest.raises(ValueError, match="score"):
        ResultBatch.from_arrays("w", 3, {**arrays, "score": np.array([7.0, 0.5, 1.25])})
    assert sorted(arrays) == ["a", "agents", "b", "count_0", "count_1", "count_ids", "draws", "env_steps", "games",
                              "score", "wins"]


@pytest.mark.parametrize("change, match", [
    ({"agents": "m"}, "list of agent ids"),
    ({"agents": ("m", 3)}, "list of agent ids"),
    ({"a": np.array([0, 3])}, "index agents"),
    ({"b": np.array([-1, 0])}, "index agents"),
    ({"a": np.array([0.0, 1.0])}, "integer"),
    ({"score": np.array([1.0])}, "one length"),
    ({"a": np.zeros((2, 1), dtype=int)}, "1-D"),
    ({"score": np.array([1.0, 7.0])}, r"score must be in \[0, 1\], got 7.0"),
    ({"score": np.array([np.nan, 0.0])}, r"score must be in \[0, 1\]"),
    ({"score": ["x", "y"]}, "numeric"),
])
def test_malformed_result_columns_raise_value_error(change, match):
    with pytest.raises(ValueError, match=match):
        ResultBatch.from_games("w", 1, **columns(**change))
    with pytest.raises(ValueError, match=match):
        ExactScores(**columns(**change))


@pytest.mark.parametrize("field, value, match", [
    ("source", "", "source"), ("seq", "1", "seq"), ("seq", True, "seq"), ("env_steps", -1, "env_steps"),
    ("action_counts", {"m": [1.0, -2.0]}, "action_counts"), ("action_counts", [1, 2], "action_counts"),
])
def test_malformed_result_batch_fields_raise_value_error(field, value, match):
    kwargs = {"source": "w", "seq": 1, **columns(), field: value}
    with pytest.raises(ValueError, match=match):
        ResultBatch.from_games(**kwargs)


def test_match_assignments_keep_opponent_liveness_and_branch():
    matches = [Match("l", "l", True, "self_play"), Match("l", "s1", False, "pfsp"), Match("l", "s1", False, "pfsp"),
               Match("l", "s2", False, "forgotten")]
    m = MatchAssignments.from_matches("l", matches)
    assert len(m) == 4
    assert [m.opponents[k] for k in m.opponent] == ["l", "s1", "s1", "s2"]
    assert [bool(m.live[k]) for k in m.opponent] == [True, False, False, False]
    assert [m.branches[k] for k in m.branch] == ["self_play", "pfsp", "pfsp", "forgotten"]
    assert m.branch_counts() == {"self_play": 1, "pfsp": 2, "forgotten": 1}


def test_exact_scores_round_trip():
    s = ExactScores.from_triples([("a", "b", 0.25), ("b", "c", 1.0)])
    assert s.triples() == [("a", "b", 0.25), ("b", "c", 1.0)] and len(s) == 2


def test_nash_mixture_as_json():
    view = NashMixture(["a", "b"], [0.25, 0.75], 0.56, 0.01, 4, 100.0, 0.002, "lp", ["main_agent", None],
                       [1010.0, 990.0])
    assert view.ids == ["a", "b"] and view.weights.tolist() == [0.25, 0.75]
    d = view.to_dict()
    assert d["agents"] == [{"agent_id": "a", "weight": 0.25, "role": "main_agent", "elo": 1010.0},
                           {"agent_id": "b", "weight": 0.75, "role": None, "elo": 990.0}]
    assert (d["pool_version"], d["method"]) == (4, "lp")


@pytest.mark.parametrize("fields", [dict(ids=["a", "b"], weights=[1.0]), dict(ids=["a"], weights=[1.0], elo=[1, 2])])
def test_nash_mixture_refuses_columns_of_other_lengths(fields):
    with pytest.raises(ValueError, match="NashMixture"):
        NashMixture(**fields)
