"""The Serve pieces that are plain functions: grouping, request parsing, member choice."""

import numpy as np
import pytest

from serve.api import BadRequest, member_for_episode, parse_act_request
from serve.batching import run_grouped, validate_request


def test_run_grouped_makes_one_forward_per_id_and_splits_back_in_order():
    calls = []

    def forward(agent_id, obs, mask):
        calls.append((agent_id, len(obs)))
        return obs[:, 0].astype(int) * 10 + (1 if agent_id == "b" else 0)

    reqs = [("a", np.array([[1.0], [2.0]]), np.ones((2, 2), bool)),
            ("b", np.array([[3.0]]), np.ones((1, 2), bool)),
            ("a", np.array([[4.0]]), np.ones((1, 2), bool))]
    out = run_grouped(reqs, forward)
    assert sorted(calls) == [("a", 3), ("b", 1)]
    assert [o.tolist() for o in out] == [[10, 20], [31], [40]]


@pytest.mark.parametrize("req, match", [
    ({"agent_id": "", "obs": [[1.0]], "mask": [[True]]}, "agent_id"),
    ({"agent_id": "a", "obs": [1.0], "mask": [[True]]}, "2-D"),
    ({"agent_id": "a", "obs": [[np.nan]], "mask": [[True]]}, "NaN"),
    ({"agent_id": "a", "obs": [[1.0]], "mask": [[False]]}, "legal"),
    ("not a dict", "dict"),
])
def test_validate_request_rejects_malformed(req, match):
    with pytest.raises(ValueError, match=match):
        validate_request(req)


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
