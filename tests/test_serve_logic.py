"""The Serve pieces that are plain functions: grouping, request parsing, member choice."""

import numpy as np
import pytest

from serve.api import BadRequest, member_for_episode, parse_act_request
from serve.batching import act_known, rows_by_code, run_grouped, validate_request


def test_run_grouped_makes_one_forward_per_id_across_requests_and_scatters_back():
    calls = []

    def forward(agent_ids, obs, masks):
        calls.append([(a, o[:, 0].tolist()) for a, o in zip(agent_ids, obs)])
        return [o[:, 0].astype(int) * 10 + (1 if a == "b" else 0) for a, o in zip(agent_ids, obs)]

    obs = np.array([[1.0], [2.0], [3.0], [4.0]])
    reqs = [(["a", "b"], np.array([0, 1, 0, 1]), obs, np.ones((4, 2), bool)),
            (["b"], np.array([0]), np.array([[5.0]]), np.ones((1, 2), bool)),
            (["c", "a"], np.array([1, 1]), np.array([[6.0], [7.0]]), np.ones((2, 2), bool))]
    out = run_grouped(reqs, forward)
    assert len(calls) == 1  # one pass over every id of the batch
    assert sorted(calls[0]) == [("a", [1.0, 3.0, 6.0, 7.0]), ("b", [2.0, 4.0, 5.0])]  # nothing for unused "c"
    assert [o.tolist() for o in out] == [[10, 21, 30, 41], [51], [60, 70]]


def test_rows_by_code_keeps_row_order_within_each_code():
    parts = rows_by_code(np.array([2, 0, 2, 1, 0]), 4)
    assert [p.tolist() for p in parts] == [[1, 4], [3], [0, 2], []]


GOOD = dict(agent_ids=["a"], codes=np.array([0]), obs=[[1.0]], mask=[[True]])


@pytest.mark.parametrize("change, match", [
    ({"agent_ids": [""]}, "non-empty string"),
    ({"agent_ids": []}, "non-empty list"),
    ({"agent_ids": "a"}, "non-empty list"),
    ({"obs": [1.0]}, "2-D"),
    ({"codes": np.array([1])}, "index agent_ids"),
    ({"codes": np.array([0, 0])}, "codes must be 1 integers"),
    ({"codes": np.array([0.0])}, "integers"),
    ({"obs": [[np.nan]]}, "NaN"),
    ({"mask": [[False]]}, "legal"),
])
def test_validate_request_rejects_malformed(change, match):
    with pytest.raises(ValueError, match=match):
        validate_request(**{**GOOD, **change})


def test_parse_act_request_accepts_a_good_body():
    req = parse_act_request({"observations": [[0.0, 1.0]] * 3, "legal_masks": [[1, 0], [0, 1], [True, True]],
                             "episode_ids": ["x", 2, "y"], "seed": 3}, obs_size=2, num_actions=2)
    assert req["obs"].shape == (3, 2) and req["mask"].tolist() == [[True, False], [False, True], [True, True]]


@pytest.mark.parametrize("body, status", [
    ([1, 2], 400), ({}, 400), ({"observations": []}, 400), ({"observations": "abc"}, 400),
    ({"observations": [[1.0]]}, 422), ({"observations": [[1.0, "x"]]}, 400),
    ({"observations": [[1.0, float("nan")]]}, 422), ({"observations": [[1.0, 2.0], [1.0]]}, 400),
    ({"observations": [[1.0, 2.0]], "legal_masks": [[0, 0]]}, 422),
    ({"observations": [[1.0, 2.0]], "legal_masks": [[0, 2]]}, 422),
    ({"observations": [[1.0, 2.0]], "legal_masks": [[1, 0, 1]]}, 422),
    ({"observations": [[1.0, 2.0]], "legal_masks": [[1, 0]], "episode_ids": [1, 2]}, 422),
    ({"observations": [[1.0, 2.0]], "episode_ids": [[1]]}, 422),
    ({"observations": [[1.0, 2.0]], "seed": -1}, 422), ({"observations": [[1.0, 2.0]], "seed": "1"}, 422),
    ({"observations": [[1.0, 2.0]], "extra": 1}, 400),
    ({"observations": [[1.0, 2.0]] * 5000}, 413),
])
def test_parse_act_request_rejects_bad_bodies_with_a_status(body, status):
    with pytest.raises(BadRequest) as info:
        parse_act_request(body, obs_size=2, num_actions=2)
    assert info.value.status == status


def test_member_per_episode_is_stable_and_follows_weights():
    w = np.array([0.2, 0.5, 0.3])
    assert len({member_for_episode("ep-7", 0, 1, w) for _ in range(5)}) == 1
    n = 30000
    counts = np.bincount([member_for_episode(i, 0, 1, w) for i in range(n)], minlength=3)
    # chi-square with 2 degrees of freedom: 13.8 is the 0.999 quantile
    chi2 = (((counts - n * w) ** 2) / (n * w)).sum()
    assert chi2 < 13.8


def test_an_agent_missing_from_the_models_plays_uniformly_over_legal_actions():
    from policies.net import ActorCritic, PolicySpec

    model = ActorCritic(PolicySpec(2, 3, hidden=(4,)))
    obs = [np.zeros((4000, 2), np.float32), np.zeros((3, 2), np.float32)]
    masks = [np.array([[True, False, True]] * 4000), np.ones((3, 3), bool)]
    gone, known = act_known({"known": model}, ["evicted", "known"], obs, masks, np.random.default_rng(0))
    assert len(known) == 3
    assert set(np.unique(gone)) == {0, 2}
    assert abs((gone == 0).mean() - 0.5) < 0.05
