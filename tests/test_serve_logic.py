"""The Serve pieces that are plain functions: grouping, request parsing, member choice."""

import json

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serve.api import BadRequest, member_for_episode, parse_act_request
from serve.codec import decode_body, encode_json
from serve.batching import act_known, rows_by_code, run_grouped, run_live, validate_live_request, validate_request


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


def test_run_live_makes_one_pass_per_learner_version_across_requests_and_scatters_back():
    calls = []

    def act(key, obs, mask):
        calls.append((key, obs[:, 0].tolist()))
        x = obs[:, 0]
        return x.astype(np.int64) * 10 + key[1], (x / 100).astype(np.float32), (-x).astype(np.float32)

    def req(learner, version, *xs, life="x"):
        return (learner, version, life), np.array([[x] for x in xs], dtype=np.float32), np.ones((len(xs), 2), bool)

    reqs = [req("a", 1, 1.0, 2.0), req("a", 2, 3.0), req("b", 1, 4.0), req("a", 1, 5.0, 6.0),
            req("a", 1, 7.0, life="y")]  # another life of learner a: other weights under version 1
    out = run_live(reqs, act)
    assert sorted(calls) == [(("a", 1, "x"), [1.0, 2.0, 5.0, 6.0]), (("a", 1, "y"), [7.0]), (("a", 2, "x"), [3.0]),
                             (("b", 1, "x"), [4.0])]
    assert [a.tolist() for a, _, _ in out] == [[11, 21], [32], [41], [51, 61], [71]]
    np.testing.assert_allclose(out[3][1], [0.05, 0.06])
    np.testing.assert_allclose(out[3][2], [-5.0, -6.0])
    assert run_live([], act) == []
    # a search's leaves: (logits (n, A), values (n,)) split back by rows as well
    leaves = run_live(reqs, lambda key, obs, mask: (np.repeat(obs, 3, axis=1), obs[:, 0] + key[1]))
    assert [logits.shape for logits, _ in leaves] == [(2, 3), (1, 3), (1, 3), (2, 3), (1, 3)]
    assert [v.tolist() for _, v in leaves] == [[2.0, 3.0], [5.0], [5.0], [6.0, 7.0], [8.0]]


@pytest.mark.parametrize("args, match", [
    (("", 1), "learner_id"), ((7, 1), "learner_id"), (("a", -1), "version"), (("a", True), "version"),
    (("a", 1.5), "version"), (("a", 1, np.full((2, 3), np.nan)), "NaN"),
    (("a", 1, np.zeros((2, 3)), np.zeros((2, 4), bool)), "legal action"),
    (("a", 1, np.zeros((2, 3)), np.ones((3, 4), bool)), "same rows"),
    (("a", 1, np.zeros((2, 3)), np.ones((2, 4), bool), 5), "life"),
])
def test_validate_live_request_rejects_malformed(args, match):
    learner, version, *rest = args
    obs, mask, life = (rest + [np.zeros((2, 3)), np.ones((2, 4), bool), ""][len(rest):])[:3]
    with pytest.raises(ValueError, match=match):
        validate_live_request(learner, version, life, obs, mask)
    ok = validate_live_request("a", np.int64(3), "f00d", np.zeros((2, 3)), np.ones((2, 4), bool))
    assert ok[0] == ("a", 3, "f00d") and ok[1].dtype == np.float32 and ok[2].dtype == bool


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
    assert req.obs.shape == (3, 2) and req.mask.tolist() == [[True, False], [False, True], [True, True]]


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


# -- bodies the API cannot read: always a BadRequest (4xx), whatever the parser raises ----------------

def _bad(raw: bytes, content_type: str = "application/json", obs_size: int = 2, num_actions: int = 3) -> int:
    """The status a raw body gets, or 200 if it parses and validates."""
    try:
        parse_act_request(decode_body(raw, content_type), obs_size, num_actions)
    except BadRequest as exc:
        assert 400 <= exc.status < 500 and str(exc)
        return exc.status
    return 200


@pytest.mark.parametrize("raw, content_type, status", [
    (b"[" * 100_000 + b"]" * 100_000, "application/json", 400),  # nesting deeper than the parser's recursion
    (b'{"observations": [[1, 2]], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "application/json", 400),
    (msgpack.packb([[[[[[]]]]]] * 1) * 1, "application/msgpack", 400),
    (b"\x91" * 100_000 + b"\xc0", "application/msgpack", 400),  # msgpack nested 100k deep
    (b'{"observations": [[1e999, 0]]}', "application/json", 422),  # overflows to infinity
    (b'{"observations": [[Infinity, 0]]}', "application/json", 422),
    (b'{"observations": [[-Infinity, NaN]]}', "application/json", 422),
    (b'{"observations": [[1' + b"0" * 5000 + b', 0]]}', "application/json", 400),  # over Python's int-string limit
    (b'{"observations": [[1' + b"0" * 400 + b', 0]]}', "application/json", 422),  # an int beyond float range
    (b'{"observations": [[1e300, 0]]}', "application/json", 422),  # finite, but overflows float32
    (b'{"observations": [[true, false]]}', "application/json", 400),  # booleans are not numbers
    (b'{"observations": [[1, 0]], "legal_masks": [["1", 0, 0]]}', "application/json", 422),
    (b'{"observations": [["1", "0"]]}', "application/json", 400),  # numpy would read these as numbers
    (b'{"observations": [[1, 0]], "\\ud800": 1}', "application/json", 400),  # lone surrogate in a field name
    (b'{"observations": [[1, 0]], "episode_ids": ["\\udfff"]}', "application/json", 200),
    (b'\xff\xfe{\x00}\x00', "application/json", 400),  # UTF-16 with a BOM: an empty object
    (b'{"observations": "\xff"}', "application/json", 400),  # not UTF-8
    (b"\xff\xff", "application/json", 400),
    (b'{"observations": [[1, 0]], "seed": true}', "application/json", 422),
    (b'{"observations": [[1, 0]], "seed": 1e3}', "application/json", 422),
    (b'{"observations": [[1, 0]], "episode_ids": [18446744073709551616]}', "application/json", 422),
    (b'{"observations": [[1, 0]], "deterministic": 1}', "application/json", 422),
    (b'{"observations": [[1, 0]]}', "application/json; charset=utf-8", 200),
    (b'{"observations": [[1, 0]]}', "text/plain", 415),
    (b'{"observations": [[[1], 0]]}', "application/json", 400),
    (b'{"observations": [[1, 0], [1, 0, 2]]}', "application/json", 400),
    (b'{"observations": [[1, 0], 7]}', "application/json", 400),
    (b'{"observations": [[]]}', "application/json", 422),
    (msgpack.packb({"observations": [[msgpack.ExtType(5, b"xx"), 0]]}), "application/msgpack", 400),
    (msgpack.packb({"observations": [[msgpack.Timestamp(1, 2), 0]]}, datetime=False), "application/msgpack", 400),
    (msgpack.packb({"observations": [[b"\x00" * 8, 0]]}), "application/msgpack", 400),
    (msgpack.packb({b"observations": [[1, 0]]}), "application/msgpack", 400),  # a bytes key
    (msgpack.packb({"observations": [[1, 0]]}, use_bin_type=False)[:-1], "application/msgpack", 400),  # cut short
    (msgpack.packb({"observations": [[1, 0]]}) + b"\x00", "application/msgpack", 400),  # trailing data
    (b"\xa3\xff\xfe\xfd", "application/msgpack", 400),  # a str that is not UTF-8
    (b"\xdd\xff\xff\xff\xff", "application/msgpack", 400),  # claims 4 billion elements
    (msgpack.packb({"observations": [[1.0, 0.5]], "legal_masks": [[True, False, 1.0]]}), "application/msgpack", 200),
    (msgpack.packb({"observations": [[float("nan"), 0]]}), "application/msgpack", 422),
])
def test_pathological_bodies_get_a_4xx(raw, content_type, status):
    assert _bad(raw, content_type) == status


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)
numbers = st.integers(-3, 3) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans() | st.none() | st.text(max_size=2)
near_valid = st.fixed_dictionaries(
    {"observations": st.lists(st.lists(numbers, min_size=1, max_size=3), min_size=1, max_size=3)},
    optional={"legal_masks": st.lists(st.lists(st.integers(-1, 2) | st.booleans() | st.floats(), max_size=4), max_size=3),
              "episode_ids": st.lists(st.integers() | st.text(max_size=3) | st.none(), max_size=3),
              "seed": json_values, "deterministic": json_values})


@settings(max_examples=300, deadline=None)
@given(body=json_values | near_valid)
def test_any_json_value_parses_or_gets_a_4xx(body):
    raw = json.dumps(body).encode()  # NaN and Infinity go out as the tokens Python's parser takes back
    assert _bad(raw, "application/json") in (200, 400, 413, 415, 422)
    packed = msgpack.packb(body, use_bin_type=True) if _msgpack_fits(body) else None
    if packed is not None:
        assert _bad(packed, "application/msgpack") in (200, 400, 413, 415, 422)


def _msgpack_fits(value) -> bool:
    try:
        msgpack.packb(value)
        return True
    except (OverflowError, ValueError):  # integers beyond 64 bits
        return False


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64), content_type=st.sampled_from(["application/json", "application/msgpack", None]))
def test_any_bytes_parse_or_get_a_4xx(raw, content_type):
    assert _bad(raw, content_type) in (200, 400, 413, 415, 422)


def test_an_accepted_body_yields_finite_float32_and_a_legal_row_per_mask():
    req = parse_act_request(decode_body(b'{"observations": [[1, -1e6]], "legal_masks": [[0, 1.0, true]]}',
                                        "application/json"), 2, 3)
    assert req.obs.dtype == np.float32 and np.isfinite(req.obs).all()
    assert req.mask.tolist() == [[False, True, True]]


def test_responses_encode_as_strict_ascii_json_whatever_the_payload():
    raw = encode_json({"error": "bad \ud800 field", "x": [float("nan"), float("inf"), 1.5]})
    assert json.loads(raw) == {"error": "bad \ud800 field", "x": [None, None, 1.5]}
    raw.decode("ascii")
