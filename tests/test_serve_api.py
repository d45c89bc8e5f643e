"""Ray Serve against a running league: served opponents, the learner's own moves served
(``rollout.policy_inference: serve``), and the HTTP API over real HTTP.

The league is biased rock-paper-scissors (observations of 2 numbers, 3 actions): its
Nash over the pool is mixed within seconds, which the member-frequency test needs."""

import asyncio
import json
import time

import msgpack
import numpy as np
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from actors.launch import load
from actors.league_run import LeagueRun

pytestmark = [pytest.mark.ray, pytest.mark.slow]
PORT = 8013
URL = f"http://127.0.0.1:{PORT}"


def pure_strategies(folder) -> list[str]:
    """Rock, paper and scissors as frozen policies (one action with probability ~1)."""
    import torch

    from policies.net import ActorCritic, PolicySpec
    from policies.snapshot import policy_to_bytes

    paths = []
    for k in range(3):
        model = ActorCritic(PolicySpec(2, 3, hidden=(16,)))
        with torch.no_grad():
            model.policy_head.weight.zero_()
            model.policy_head.bias.copy_(torch.tensor([30.0 if a == k else 0.0 for a in range(3)]))
        path = folder / f"pure{k}.pt"
        path.write_bytes(policy_to_bytes(model))
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def league(ray_local, tmp_path_factory):
    storage = tmp_path_factory.mktemp("serve_league")
    seeds = pure_strategies(storage)
    # The pool holds only the three pure strategies (learners never snapshot here), so the
    # Nash over it is known: (1/4, 1/2, 1/4). Learners play them through the Serve deployment, and
    # their own moves are served there too.
    cfg, info = load(["--config", "configs/rps.yaml", f"run.storage={storage / 'run'}", "run.max_minutes=30",
                      f"serve.port={PORT}", "rollout.opponent_inference=serve", "rollout.policy_inference=serve",
                      "roles.main_agent.sampling=pfsp",
                      "roles.main_exploiter.count=0", "roles.league_exploiter.count=0",
                      "roles.main_agent.snapshot_every_steps=1000000000", f"league.seed_snapshots={json.dumps(seeds)}"])
    lg = LeagueRun(cfg, info)
    lg.supervise()
    deadline = time.time() + 120
    while time.time() < deadline:
        lg.supervise()
        nash = requests.get(f"{URL}/nash", timeout=10).json()
        if len(nash["agents"]) == 3 and lg.status()["games"] > 0:
            break
        time.sleep(1)
    else:  # the tests below would fail on a league that is not there yet: say what it lacked
        status = lg.status()
        lg.stop()
        lg.kill()
        pytest.fail(f"the league did not mix its three seeds and play within 120 s: Nash {nash['agents']}, "
                    f"games {status['games']}, pool {status['pool_size']}")
    yield lg
    lg.stop()
    lg.kill()


def test_league_plays_frozen_opponents_through_serve(league, ray_local):
    from ray import serve

    status = serve.status()
    assert status.applications["opponents"].status == "RUNNING"
    # no Serve proxy: no league route goes through one (serve.environment)
    assert status.proxies == {}, status.proxies
    before = league.status()["games"]
    time.sleep(3)
    league.supervise()
    assert league.status()["games"] > before  # the workers keep playing with served opponents


def test_the_learners_moves_are_served_by_version_and_train_it(league, ray_local):
    """The workers ask the deployment for their learner's moves (none played in process, none
    failed); the learner trains on them, so its version moves on; the deployment answers a version
    with that network's values and the log-probabilities of the moves it drew, and refuses a
    version the learner does not keep and a learner the league does not have."""
    import torch
    from ray import serve

    from policies.snapshot import policy_from_bytes
    from serve.opponents import APP_NAME, DEPLOYMENT_NAME

    ray = ray_local
    learner = league.learners["main_agent-0"]
    first = ray.get(learner.get_weights.remote()).version
    deadline = time.time() + 60
    while ray.get(learner.get_weights.remote()).version < first + 2 and time.time() < deadline:
        time.sleep(0.5)
    reply = ray.get(learner.get_weights.remote())
    assert reply.version >= first + 2, (first, reply.version)  # trained on served moves
    stats = [ray.get(w.get_stats.remote()) for w in league.workers.values()]
    assert sum(st["served"] for st in stats) > 0 and sum(st["served_errors"] for st in stats) == 0, stats

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 2)).astype(np.float32)
    mask = np.ones((64, 3), dtype=bool)
    mask[::4, 1] = False

    async def ask(*requests, method="act_live"):  # the handle's router runs in this (the test's) event loop
        handle = getattr(serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME), method)
        answers = []
        for request in requests:
            try:
                answers.append(await handle.remote(*request))
            except Exception as exc:
                answers.append(exc)
        return answers

    async def ask_both():  # one event loop: the handles' router lives in the loop that first used it
        moves = await ask(
            ("main_agent-0", reply.version, obs, mask), ("main_agent-0", reply.version, obs, mask, reply.life),
            ("main_agent-0", 10**9, obs, mask), ("main_agent-0", reply.version, obs, mask, "0000dead"),
            ("nobody-0", 1, obs, mask), ("main_agent-0", reply.version, np.full((2, 2), np.nan), np.ones((2, 3), bool)))
        leaves = await ask(("main_agent-0", reply.version, obs, mask, reply.life), ("main_agent-0", 10**9, obs, mask),
                           method="evaluate_live")
        return moves, leaves

    moves, leaves = asyncio.run(ask_both())
    (actions, logp, values), same, too_old, other_life, unknown, nan = moves
    (leaf_logits, leaf_values), leaf_unknown = leaves
    model = policy_from_bytes(reply.blob)
    with torch.no_grad():
        logits, expected_values = model(torch.as_tensor(obs), torch.as_tensor(mask))
        expected_logp = torch.log_softmax(logits, -1)[torch.arange(64), torch.as_tensor(actions)]
    # a search's leaves (evaluate_live): the version's logits and values, as the worker's own pass gives them
    np.testing.assert_allclose(leaf_logits, logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(leaf_values, expected_values.numpy(), atol=1e-5)
    assert isinstance(leaf_unknown, Exception) and "not 1000000000" in str(leaf_unknown), leaf_unknown
    assert mask[np.arange(64), actions].all()
    np.testing.assert_allclose(values, expected_values.numpy(), atol=1e-5)
    np.testing.assert_allclose(logp, expected_logp.numpy(), atol=1e-5)
    np.testing.assert_allclose(same[2], values, atol=1e-6)  # the version of the learner's own life
    assert isinstance(too_old, Exception) and "not 1000000000" in str(too_old), too_old
    assert isinstance(other_life, Exception) and "restarted" in str(other_life), other_life
    assert isinstance(unknown, Exception) and "unknown learner 'nobody-0'" in str(unknown), unknown
    assert isinstance(nan, Exception) and "NaN" in str(nan), nan


def test_endpoints_report_the_league(league):
    assert requests.get(f"{URL}/healthz", timeout=10).json() == {"status": "ok"}
    status = requests.get(f"{URL}/status", timeout=10).json()
    assert status["games"] > 0 and status["pool_size"] == sum(status["pool_by_role"].values())
    assert set(status["learners"]) == {"main_agent-0"}
    nash = requests.get(f"{URL}/nash", timeout=10).json()
    assert nash["game"] == {"name": "biased_rps", "obs_size": 2, "num_actions": 3, "playable": True}
    assert abs(sum(a["weight"] for a in nash["agents"]) - 1) < 1e-9
    weights = np.array([a["weight"] for a in nash["agents"]])
    assert nash["entropy"] == pytest.approx(float(-(weights * np.log(weights)).sum()), abs=1e-9)
    assert {"agent_id", "weight", "role", "elo"} <= set(nash["agents"][0])
    pool = requests.get(f"{URL}/pool", timeout=10).json()["agents"]
    payoff = requests.get(f"{URL}/payoff", timeout=10).json()
    assert set(payoff["ids"]) <= {a["agent_id"] for a in pool}
    m = np.array(payoff["win_rates"])
    assert m.shape == (len(payoff["ids"]),) * 2 and np.allclose(m + m.T, 1.0)
    schema = requests.get(f"{URL}/openapi.json", timeout=10).json()
    assert {"/healthz", "/status", "/nash", "/nash/act", "/pool", "/payoff"} <= set(schema["paths"])


def test_a_person_plays_biased_rps_against_a_pure_member_over_http(league):
    payoff = [[0, -1, 2], [1, 0, -1], [-2, 1, 0]]  # to the row player, seat 0
    for seat, mine in ((0, 1), (1, 2)):
        v = requests.post(f"{URL}/play", json={"seat": seat}, timeout=10)
        assert v.status_code == 201, v.text
        v = v.json()
        assert v["to_move"] == "you" and v["history"] == [] and v["board"] is None and "scissors" in v["text"]
        assert v["legal_actions"] == [{"action": a, "label": n} for a, n in enumerate(("rock", "paper", "scissors"))]
        sid = v["session"]
        for body in ({"action": 3}, {"action": -1}, {"action": "1"}, {"action": 1, "seat": 0}, [1]):
            r = requests.post(f"{URL}/play/{sid}/move", json=body, timeout=10)
            assert r.status_code == 422 and r.json()["error"], (body, r.text)
        r = requests.post(f"{URL}/play/{sid}/move", data=b"{", headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]
        end = requests.post(f"{URL}/play/{sid}/move", json={"action": mine}, timeout=10).json()
        # each member is a pure strategy: seed-k always plays k
        theirs = {"seed-0": 0, "seed-1": 1, "seed-2": 2}[end["agent_id"]]
        assert end["history"] == [{"by": "you", "action": mine, "label": ["rock", "paper", "scissors"][mine]},
                                  {"by": "league", "action": theirs, "label": ["rock", "paper", "scissors"][theirs]}]
        expected = payoff[mine][theirs] if seat == 0 else -payoff[theirs][mine]
        assert end["terminal"] and end["returns"] == {"you": expected, "league": -expected}
        assert requests.get(f"{URL}/play/{sid}", timeout=10).json() == end
        r = requests.post(f"{URL}/play/{sid}/move", json={"action": 0}, timeout=10)
        assert r.status_code == 409 and r.json()["error"]


def test_act_json_and_msgpack_and_seeded(league):
    body = {"observations": [[1.0, 0.0]] * 4, "legal_masks": [[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]], "seed": 5}
    r = requests.post(f"{URL}/nash/act", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["actions"]) == 4 and out["actions"][1:] == [0, 1, 2]  # masks respected
    # each member is a pure strategy: the action says which member acted
    first = {"seed-0": 0, "seed-1": 1, "seed-2": 2}[out["members"][0]]
    assert out["actions"][0] == first
    again = requests.post(f"{URL}/nash/act", json=body, timeout=30).json()
    if again["pool_version"] == out["pool_version"] and again["solved_at"] == out["solved_at"]:
        assert again["actions"] == out["actions"] and again["members"] == out["members"]
    packed = requests.post(f"{URL}/nash/act", data=msgpack.packb(body),
                           headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"}, timeout=30)
    assert packed.status_code == 200 and packed.headers["content-type"] == "application/msgpack"
    assert len(msgpack.unpackb(packed.content)["actions"]) == 4


def test_member_frequencies_match_the_nash_weights(league):
    for _ in range(20):
        nash = requests.get(f"{URL}/nash", timeout=10).json()
        n = 4000
        body = {"observations": [[1.0, 0.0]] * n, "episode_ids": [f"ep{i}" for i in range(n)]}
        out = requests.post(f"{URL}/nash/act", json=body, timeout=60).json()
        if out["solved_at"] == nash["solved_at"]:
            break
    else:
        pytest.fail("the Nash kept changing under the test")
    ids = [a["agent_id"] for a in nash["agents"]]
    weights = np.array([a["weight"] for a in nash["agents"]])
    counts = np.array([out["members"].count(a) for a in ids])
    assert counts.sum() == n
    assert dict(zip(ids, weights)) == pytest.approx({"seed-0": 0.25, "seed-1": 0.5, "seed-2": 0.25}, abs=1e-6)
    assert stats.chisquare(counts, weights / weights.sum() * n).pvalue > 1e-3


MALFORMED = [
    ("post", "/nash/act", {"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400),
    ("post", "/nash/act", {"data": b"\xc1\xc1", "headers": {"Content-Type": "application/msgpack"}}, 400),
    ("post", "/nash/act", {"data": b"", "headers": {"Content-Type": "application/json"}}, 400),
    ("post", "/nash/act", {"data": b"<xml/>", "headers": {"Content-Type": "application/xml"}}, 415),
    ("post", "/nash/act", {"json": [1, 2, 3]}, 400),
    ("post", "/nash/act", {"json": {}}, 400),
    ("post", "/nash/act", {"json": {"observations": []}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 1]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 3]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2, [0.0] * 1]}}, 400),
    ("post", "/nash/act", {"data": b'{"observations": [[NaN, 0]]}',
                           "headers": {"Content-Type": "application/json"}}, 422),
    ("post", "/nash/act", {"json": {"observations": [["a"] * 2]}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "legal_masks": [[0, 0, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "legal_masks": [[1, 0, 1, 1]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "legal_masks": [[1, 0, 0], [1, 0, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "legal_masks": [[5, 0, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "episode_ids": [1, 2]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "episode_ids": [None]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "seed": -3}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "seed": 1.5}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "deterministic": "yes"}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2], "bogus": 1}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 2] * 5000}}, 413),
    ("post", "/nash/act", {"data": b"x" * (9 * 1024 * 1024), "headers": {"Content-Type": "application/json"}}, 413),
    ("get", "/nash/act", {}, 405),
    ("get", "/no/such/endpoint", {}, 404),
    ("post", "/nash", {"json": {}}, 405),
]


@pytest.mark.parametrize("method, path, kwargs, status", MALFORMED)
def test_malformed_requests_get_a_json_4xx(league, method, path, kwargs, status):
    r = getattr(requests, method)(f"{URL}{path}", timeout=60, **kwargs)
    assert r.status_code == status, r.text
    assert isinstance(r.json().get("error"), str) and r.json()["error"]


PATHOLOGICAL = [
    (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    (b"\x91" * 100_000 + b"\xc0", "application/msgpack"),
    (b'{"observations": [[1' + b"0" * 5000 + b', 0]]}', "application/json"),
    (b'{"observations": [[1e300, 0]]}', "application/json"),
    (b'{"observations": [[true, false]]}', "application/json"),
    (b'{"observations": [["1", "0"]]}', "application/json"),
    (b'{"observations": [[1, 0]], "\\ud800": 1}', "application/json"),
    (b'\xff\xfe{\x00}\x00', "application/json"),
    (msgpack.packb({"observations": [[msgpack.ExtType(5, b"xx"), 0]]}), "application/msgpack"),
    (msgpack.packb({b"observations": [[1, 0]]}), "application/msgpack"),
    (b"\xdd\xff\xff\xff\xff", "application/msgpack"),
    (b"\xc7\x01\x00\x00", "application/msgpack"),  # ext type 0: an unpickling format would run code here
]


@pytest.mark.parametrize("raw, content_type", PATHOLOGICAL)
def test_pathological_bodies_get_a_json_4xx(league, raw, content_type):
    r = requests.post(f"{URL}/nash/act", data=raw, headers={"Content-Type": content_type}, timeout=60)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]


def test_a_streamed_body_over_the_limit_gets_413(league):
    chunks = (b"[" + b"0," * 500_000 for _ in range(10))  # chunked: no Content-Length to refuse early
    r = requests.post(f"{URL}/nash/act", data=chunks, headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413 and "larger than" in r.json()["error"]


leaves = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=6)
          | st.binary(max_size=6))
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=25)
scalars = st.integers(-2, 2) | st.floats() | st.booleans() | st.none() | st.text(max_size=2)
near_valid = st.fixed_dictionaries(
    {"observations": st.lists(st.lists(scalars, min_size=1, max_size=3), min_size=1, max_size=3)},
    optional={"legal_masks": st.lists(st.lists(st.integers(-1, 2) | st.booleans(), max_size=4), max_size=3),
              "episode_ids": st.lists(st.integers() | st.text(max_size=3) | st.none(), max_size=3),
              "seed": values, "deterministic": values})
valid = st.fixed_dictionaries(
    {"observations": st.lists(st.lists(st.floats(-10, 10), min_size=2, max_size=2), min_size=1, max_size=4)},
    optional={"seed": st.integers(0, 2**63 - 1), "deterministic": st.booleans()})


def _post(raw: bytes, content_type) -> requests.Response:
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = requests.post(f"{URL}/nash/act", data=raw, headers=headers, timeout=60)
    assert r.status_code < 500, (raw[:200], content_type, r.status_code, r.text)
    if r.status_code != 200:
        assert 400 <= r.status_code < 500 and r.json()["error"], r.text
    return r


def _json_bytes(body) -> bytes | None:
    try:
        return json.dumps(body).encode()  # NaN/Infinity go out as tokens the server must refuse
    except TypeError:  # bytes leaves have no JSON form
        return None


def _msgpack_bytes(body) -> bytes | None:
    try:
        return msgpack.packb(body, use_bin_type=True)
    except (OverflowError, ValueError):
        return None


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(body=values | near_valid | valid, raw=st.binary(max_size=48),
       ext=st.tuples(st.integers(0, 127), st.binary(max_size=8)),
       content_type=st.sampled_from(["application/json", "application/msgpack", "text/plain", None,
                                     "application/json; charset=latin-1", "application/msgpack; x=1"]))
def test_generated_bodies_get_200_or_a_json_4xx_never_a_5xx(league, body, raw, ext, content_type):
    as_json = _json_bytes(body)
    if as_json is not None:
        r = _post(as_json, "application/json")
        if r.status_code == 200:
            out = r.json()
            assert len(out["actions"]) == len(body["observations"]) and all(0 <= a < 3 for a in out["actions"])
    as_msgpack = _msgpack_bytes(body)
    if as_msgpack is not None:
        _post(as_msgpack, "application/msgpack")
        _post(msgpack.packb([msgpack.ExtType(*ext), body], default=repr),
              "application/msgpack")
    _post(raw, content_type)


def test_api_listens_on_loopback_only_and_a_taken_port_is_a_clear_error(league):
    import psutil

    from serve.api import ApiUnavailable, start_api

    listening = {c.laddr.ip for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == PORT}
    assert listening == {"127.0.0.1"}
    cfg, _ = load(["--config", "configs/rps.yaml", f"serve.port={PORT}", "ray.namespace=league-test-other"])
    with pytest.raises(ApiUnavailable, match=f"127.0.0.1:{PORT} \\(serve.host, serve.port\\).*in use"):
        start_api(cfg, 2, 3)
    assert requests.get(f"{URL}/healthz", timeout=10).json() == {"status": "ok"}


def test_api_and_league_survive_the_malformed_requests(league):
    r = requests.post(f"{URL}/nash/act", json={"observations": [[1.0, 0.0]], "legal_masks": [[0, 1, 0]]}, timeout=30)
    assert r.status_code == 200 and r.json()["actions"] == [1]
    assert requests.get(f"{URL}/healthz", timeout=10).status_code == 200
    before = league.status()["games"]
    time.sleep(3)
    assert league.status()["games"] > before
