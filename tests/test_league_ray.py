"""The asynchronous league on a real local Ray: faults, restarts, and the biased-RPS Nash."""

import time

import numpy as np
import pytest

from actors.launch import League, load

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def wait_for(fn, timeout=120.0, every=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value is not None and value is not False:
            return value
        time.sleep(every)
    raise AssertionError("condition not reached in time")


def start_league(tmp_path, *overrides, config="configs/smoke.yaml"):
    cfg, info = load(["--config", config, f"run.storage={tmp_path}", "run.max_minutes=10", *overrides])
    league = League(cfg, info)
    league.supervise()
    return league


def test_killed_actors_come_back_with_every_acknowledged_result(ray_local, tmp_path):
    ray = ray_local
    league = start_league(tmp_path)
    try:
        def grown():
            league.supervise()
            s = league.status()
            return s if s["pool_size"] >= 3 and s["games"] > 2000 else None
        before = wait_for(grown)
        pool_before = {a["agent_id"] for a in ray.get(league.coordinator.pool.remote())}

        ray.kill(league.coordinator, no_restart=False)
        after = wait_for(lambda: _try_status(league))
        assert after["games"] >= before["games"]  # every acknowledged result survived
        assert pool_before <= {a["agent_id"] for a in ray.get(league.coordinator.pool.remote())}
        wait_for(lambda: (league.supervise(), league.status()["games"] > after["games"] + 1000)[1])

        worker = next(iter(league.workers.values()))
        learner_id = "main_exploiter-0"
        version_before = ray.get(league.learners[learner_id].info.remote())["version"]
        ray.kill(worker, no_restart=False)
        ray.kill(league.learners[learner_id], no_restart=False)
        mid = league.status()["games"]
        wait_for(lambda: (league.supervise(), league.status()["games"] > mid + 2000)[1])
        # the learner resumed from its checkpoint, it did not start over
        info = wait_for(lambda: _try(lambda: ray.get(league.learners[learner_id].info.remote(), timeout=10)))
        assert info["version"] >= 1
        assert ray.get(league.coordinator.status.remote())["learners"][learner_id]["version"] >= version_before
    finally:
        league.stop()
        league.kill()


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


def _try_status(league):
    return _try(league.status)


def test_biased_rps_nash_mixture_plays_the_known_equilibrium(ray_local, tmp_path):
    ray = ray_local
    from policies.snapshot import policy_from_bytes

    league = start_league(tmp_path, config="configs/rps.yaml")
    try:
        def mixture():
            league.supervise()
            nash = ray.get(league.coordinator.nash.remote())
            status = league.status()
            if status["pool_size"] < 8 or not nash.members:
                return None
            probs = np.zeros(3)
            for member in nash.members:
                model = policy_from_bytes(ray.get(league.coordinator.get_snapshot.remote(member.agent_id)))
                obs = np.array([[1.0, 0.0]], dtype=np.float32)
                probs += member.weight * model.probs(obs, np.ones((1, 3), dtype=bool))[0]
            return probs
        deadline = time.time() + 240
        best = None
        while time.time() < deadline:
            probs = wait_for(mixture, timeout=240)
            best = probs
            if np.abs(probs - [0.25, 0.5, 0.25]).sum() <= 0.05:
                break
            time.sleep(5)
        assert np.abs(best - [0.25, 0.5, 0.25]).sum() <= 0.05, best
    finally:
        league.stop()
        league.kill()
