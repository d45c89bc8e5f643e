import numpy as np
import pytest

from league import DiversityTracker, EloTable, TrajectoryBatch, expected_score
from league.diversity import diversity_score, embed_trajectory, pairwise_cosine_distances
from league.elo import UNIFORM_RANDOM


def test_elo_expected_score_formula_and_update():
    assert expected_score(1000, 1000) == 0.5
    assert expected_score(1400, 1000) == pytest.approx(1 / (1 + 10 ** (-1)))
    elo = EloTable(k=32)
    elo.update("a", "b", 1.0)
    assert elo.rating("a") == pytest.approx(1016.0) and elo.rating("b") == pytest.approx(984.0)


def test_elo_anchor_never_moves_and_ratings_converge_to_logistic_gap():
    elo = EloTable(k=8)
    rng = np.random.default_rng(0)
    p = 0.76  # an agent winning 76% has an Elo gap of 400*log10(0.76/0.24) ~ 200
    trace = []
    for _ in range(40000):
        elo.update("agent", UNIFORM_RANDOM, float(rng.random() < p))
        trace.append(elo.rating("agent"))
    assert elo.rating(UNIFORM_RANDOM) == 1000.0
    # the rating fluctuates around its fixed point: average the second half
    assert np.mean(trace[20000:]) - 1000 == pytest.approx(400 * np.log10(p / (1 - p)), abs=10)


def test_elo_rejects_bad_k_and_scores():
    with pytest.raises(ValueError, match="K"):
        EloTable(k=0)
    with pytest.raises(ValueError, match="score"):
        EloTable().update("a", "b", 2.0)


def test_embedding_of_discrete_actions_is_their_histogram():
    emb = embed_trajectory(TrajectoryBatch(actions=np.array([0, 0, 1, 3]), num_actions=4))
    assert np.allclose(emb, [0.5, 0.25, 0.0, 0.25])


def test_cosine_distances_and_diversity_score():
    e = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    d = pairwise_cosine_distances(e)
    assert d[0, 1] == pytest.approx(1.0) and d[0, 2] == pytest.approx(1 - 1 / np.sqrt(2))
    off = [1.0, 1 - 1 / np.sqrt(2), 1 - 1 / np.sqrt(2)]
    assert diversity_score(e, "mean") == pytest.approx(np.mean(off))
    assert diversity_score(e, "min") == pytest.approx(min(off))
    assert diversity_score(e, "median") == pytest.approx(np.median(off))


def test_tracker_identical_agents_score_zero_disjoint_score_one():
    t = DiversityTracker()
    t.update("a", TrajectoryBatch(actions=np.zeros(10, int), num_actions=2))
    t.update("b", TrajectoryBatch(actions=np.zeros(5, int), num_actions=2))
    assert t.diversity_score() == pytest.approx(0.0)
    t.update("c", TrajectoryBatch(actions=np.ones(10, int), num_actions=2))
    assert t.diversity_score("min") == pytest.approx(0.0)
    assert t.pairwise_distances()[0, 2] == pytest.approx(1.0)


def test_trajectory_batch_rejects_bad_shapes():
    with pytest.raises(ValueError, match="positions"):
        TrajectoryBatch(actions=np.zeros(3), positions=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        TrajectoryBatch(actions=np.array([np.nan, 1.0]))
