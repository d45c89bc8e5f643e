"""Ray Serve against a running smoke league: served opponents, and the HTTP API over real HTTP."""

import json
import time

import msgpack
import numpy as np
import pytest
import requests
from scipy import stats

from actors.launch import League, load

pytestmark = [pytest.mark.ray, pytest.mark.slow]
PORT = 8013
URL = f"http://127.0.0.1:{PORT}"


@pytest.fixture(scope="module")
def league(ray_local, tmp_path_factory):
    storage = tmp_path_factory.mktemp("serve_league")
    cfg, info = load(["--config", "configs/smoke.yaml", f"run.storage={storage}", "run.max_minutes=30",
                      f"serve.port={PORT}", "rollout.opponent_inference=serve"])
    lg = League(cfg, info)
    lg.supervise()
    deadline = time.time() + 180
    while time.time() < deadline:
        lg.supervise()
        nash = requests.get(f"{URL}/nash", timeout=10).json()
        if len(nash["agents"]) >= 2 and lg.status()["pool_size"] >= 4:
            break
        time.sleep(1)
    yield lg
    lg.stop()
    for actor in [lg.coordinator, *lg.learners.values(), *lg.workers.values(), *lg.evaluators.values()]:
        ray_local.kill(actor, no_restart=True)


def test_league_plays_frozen_opponents_through_serve(league, ray_local):
    from ray import serve

    status = serve.status()
    assert status.applications["opponents"].status == "RUNNING"
    before = league.status()["games"]
    time.sleep(3)
    league.supervise()
    assert league.status()["games"] > before  # the workers keep playing with served opponents


def test_endpoints_report_the_league(league):
    assert requests.get(f"{URL}/healthz", timeout=10).json() == {"status": "ok"}
    status = requests.get(f"{URL}/status", timeout=10).json()
    assert status["games"] > 0 and status["pool_size"] == sum(status["pool_by_role"].values())
    assert {"main_agent-0", "main_exploiter-0", "league_exploiter-0"} <= set(status["learners"])
    nash = requests.get(f"{URL}/nash", timeout=10).json()
    assert nash["game"] == {"name": "kuhn_poker", "obs_size": 11, "num_actions": 2}
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


def test_act_json_and_msgpack_and_seeded(league):
    body = {"observations": np.eye(11)[:4].tolist(), "legal_masks": [[1, 1], [1, 0], [0, 1], [1, 1]], "seed": 5}
    r = requests.post(f"{URL}/nash/act", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["actions"]) == 4 and out["actions"][1] == 0 and out["actions"][2] == 1  # masks respected
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
        body = {"observations": [[0.0] * 11] * n, "episode_ids": [f"ep{i}" for i in range(n)]}
        out = requests.post(f"{URL}/nash/act", json=body, timeout=60).json()
        if out["solved_at"] == nash["solved_at"]:
            break
    else:
        pytest.fail("the Nash kept changing under the test")
    ids = [a["agent_id"] for a in nash["agents"]]
    weights = np.array([a["weight"] for a in nash["agents"]])
    counts = np.array([out["members"].count(a) for a in ids])
    assert counts.sum() == n
    if len(ids) > 1:
        assert stats.chisquare(counts, weights / weights.sum() * n).pvalue > 1e-3


MALFORMED = [
    ("post", "/nash/act", {"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400),
    ("post", "/nash/act", {"data": b"\xc1\xc1", "headers": {"Content-Type": "application/msgpack"}}, 400),
    ("post", "/nash/act", {"data": b"", "headers": {"Content-Type": "application/json"}}, 400),
    ("post", "/nash/act", {"data": b"<xml/>", "headers": {"Content-Type": "application/xml"}}, 415),
    ("post", "/nash/act", {"json": [1, 2, 3]}, 400),
    ("post", "/nash/act", {"json": {}}, 400),
    ("post", "/nash/act", {"json": {"observations": []}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 10]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 12]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11, [0.0] * 10]}}, 400),
    ("post", "/nash/act", {"data": b'{"observations": [[NaN, 0,0,0,0,0,0,0,0,0,0]]}',
                           "headers": {"Content-Type": "application/json"}}, 422),
    ("post", "/nash/act", {"json": {"observations": [["a"] * 11]}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "legal_masks": [[0, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "legal_masks": [[1, 0, 1]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "legal_masks": [[1, 0], [1, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "legal_masks": [[5, 0]]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "episode_ids": [1, 2]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "episode_ids": [None]}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "seed": -3}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "seed": 1.5}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "deterministic": "yes"}}, 422),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11], "bogus": 1}}, 400),
    ("post", "/nash/act", {"json": {"observations": [[0.0] * 11] * 5000}}, 413),
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


def test_api_and_league_survive_the_malformed_requests(league):
    assert requests.get(f"{URL}/healthz", timeout=10).status_code == 200
    before = league.status()["games"]
    time.sleep(3)
    assert league.status()["games"] > before
