"""The asynchronous league on a real local Ray: faults, restarts, and the biased-RPS Nash."""

import time

import numpy as np
import pytest

from actors.launch import load
from actors.league_run import LeagueRun

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
    league = LeagueRun(cfg, info)
    league.supervise()
    return league


def test_a_batch_retried_across_a_coordinator_restart_is_stored_exactly_once(ray_local, tmp_path):
    """Kill the coordinator while a result batch is in flight: Ray retries the call on the
    restarted coordinator, and the batch is stored once. A sender that never saw the reply
    sends it again under the same number (its outbox): still once."""
    ray = ray_local
    from actors.coordinator import LeagueCoordinator
    from league.league import learner_ids
    from league.messages import ResultBatch
    from league.store import LeagueStore

    cfg, _ = load(["--config", "configs/smoke.yaml", f"run.storage={tmp_path}"])
    coordinator = LeagueCoordinator.options(name="retry-coordinator", namespace="league-test").remote(cfg)
    ray.get(coordinator.ping.remote())
    ids = tuple(learner_ids(cfg))
    rng = np.random.default_rng(0)
    n = 50_000
    a, b, score = rng.integers(0, len(ids), n), rng.integers(0, len(ids), n), rng.choice([0.0, 0.5, 1.0], n)
    batch = ResultBatch.from_games("worker:test:0", 1, ids, a, b, score, env_steps=7 * n)
    try:
        in_flight = coordinator.report_results.remote(batch)
        time.sleep(0.05)  # delivered and being applied
        ray.kill(coordinator, no_restart=False)
        assert ray.get(in_flight, timeout=120) is True
        # the reply lost: the sender's restarted life sends the same batch again
        assert ray.get(coordinator.report_results.remote(batch), timeout=120) is True
        later = ResultBatch.from_games("worker:test:0", 2, ids, a[:10], b[:10], score[:10], env_steps=70)
        assert ray.get(coordinator.report_results.remote(later), timeout=60) is True
        status = ray.get(coordinator.status.remote())
        assert (status["games"], status["env_steps"]) == (n + 10, 7 * n + 70)
        with LeagueStore(tmp_path, create=False) as store:
            assert store.result_count() == n + 10
            assert store.counters()["games"] == n + 10
    finally:
        ray.kill(coordinator, no_restart=True)


def test_each_kind_of_kill_loses_no_acknowledged_result_or_snapshot(ray_local, tmp_path):
    """Kill the coordinator, a learner, a rollout worker, the evaluator and the Serve
    opponents replica of a running smoke league, one after the other, each after the
    league recovered from the one before. Exact totals: the games in every batch a
    sender saw acknowledged are the games stored; every snapshot a learner saw
    acknowledged is stored and loads; nothing else is stored."""
    from operations.chaos import KINDS, run_chaos

    # no prober or anchor judge: the evaluator killed is the one that measures the payoff
    summary = run_chaos(schedule=list(KINDS), storage=str(tmp_path), minutes=10, every_s=(1.0, 2.0),
                        overrides=("evaluator.probe_every_seconds=0", "anchors=[]"))
    print(summary)
    assert summary["kills"] == {kind: 1 for kind in KINDS}
    assert summary["unrecovered"] == 0 and summary["outbox_pending"] == []
    assert summary["results_acked"] > 0 and summary["snapshots_acked"] > 0
    assert summary["results_stored"] == summary["results_acked"]
    assert summary["snapshots_stored"] == summary["snapshots_acked"]
    assert summary["snapshots_loadable"] == summary["snapshots_acked"]
    assert summary["snapshots_unacked_stored"] == []
    assert summary["nash_solves_after_last_kill"] > 0
    assert summary["lost"] is False


def test_biased_rps_nash_mixture_plays_the_known_equilibrium(ray_local, tmp_path):
    ray = ray_local
    from policies.snapshot import policy_from_bytes

    league = start_league(tmp_path, config="configs/rps.yaml")
    try:
        def mixture():
            league.supervise()
            nash = ray.get(league.coordinator.nash.remote())
            status = league.status()
            if status["pool_size"] < 8 or not nash.ids:
                return None
            probs = np.zeros(3)
            for agent_id, weight in zip(nash.ids, nash.weights):
                model = policy_from_bytes(ray.get(league.coordinator.get_snapshot.remote(agent_id)))
                obs = np.array([[1.0, 0.0]], dtype=np.float32)
                probs += weight * model.probs(obs, np.ones((1, 3), dtype=bool))[0]
            return probs
        deadline = time.time() + 240
        best = None
        while time.time() < deadline:
            probs = wait_for(mixture, timeout=240)
            best = probs
            if np.abs(probs - [0.25, 0.5, 0.25]).sum() <= 0.05:
                break
            time.sleep(1)
        assert np.abs(best - [0.25, 0.5, 0.25]).sum() <= 0.05, best
    finally:
        league.stop()
        league.kill()
