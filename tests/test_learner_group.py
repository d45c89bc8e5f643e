"""Learner groups (``learner.replicas``) in a real league on a local Ray: the replicas of each role
instance hold the same parameters, version and step after every update, and the group comes back
whole, losing nothing acknowledged, when one of its replicas or its replica 0 is killed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from actors.launch import load
from actors.learner_group import RendezvousImpl


def wait_for(fn, timeout=180.0, every=0.5, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_restarted_replica_opens_the_next_generation_and_the_others_follow_it():
    meet = RendezvousImpl(3)
    g = meet.generation
    assert meet.join(1) == g and meet.join(0, ("10.0.0.1", 4000)) == g
    assert meet.address(g) is None  # replica 2 is missing
    assert meet.join(2) == g and meet.address(g) == ("10.0.0.1", 4000)
    # replica 1 died and came back: generation g is broken
    assert meet.join(1) == g + 1
    assert meet.address(g) == "stale" and meet.address(g + 1) is None
    assert meet.join(2) == g + 1 and meet.address(g + 1) is None  # replica 0 has not come back yet
    assert meet.join(0, ("10.0.0.2", 4001)) == g + 1 and meet.address(g + 1) == ("10.0.0.2", 4001)
    # a restarted rendezvous (its state lost) never reopens a generation a surviving replica is in
    assert RendezvousImpl(3).address(g + 1) == "stale"


def test_the_barrier_lets_an_update_start_only_when_every_replica_is_ready_and_releases_on_stop():
    import asyncio

    async def scenario():
        meet = RendezvousImpl(2)
        g = meet.generation
        meet.join(0, ("h", 1))
        meet.join(1)
        first = asyncio.ensure_future(meet.barrier(g, 0, 0))
        await asyncio.sleep(0.01)
        assert not first.done()  # replica 1 is not ready yet
        assert await meet.barrier(g, 1, 0) == "go" and await first == "go"
        # replica 0 waits for update 1; replica 1 restarts into the next generation: replica 0 hears it
        waiting = asyncio.ensure_future(meet.barrier(g, 0, 1))
        await asyncio.sleep(0.01)
        assert meet.join(1) == g + 1
        assert await waiting == "broken"
        meet.join(0, ("h", 2))
        # the league stops while replica 1 waits: it is released without training
        waiting = asyncio.ensure_future(meet.barrier(g + 1, 1, 0))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        meet.stop()
        assert await waiting == "stop" and await meet.barrier(g + 1, 0, 0) == "stop"
    asyncio.run(scenario())


def lockstep(league, at_least: dict[str, int], timeout=300.0) -> dict[str, int]:
    """Wait until every group's replicas report the same version (past ``at_least``); then their
    parameters' digests and steps must be equal. Returns each group's version."""
    import ray

    seen: dict[str, int] = {}

    def settled():
        for lid, group in league.replicas.items():
            if lid in seen:
                continue
            league.supervise()
            try:
                digests = ray.get([r.weights_digest.remote() for r in group], timeout=30)
            except ray.exceptions.RayError:  # a replica mid-restart
                return False
            if len({v for v, _, _ in digests}) == 1 and digests[0][0] > at_least.get(lid, 0):
                assert len({d for _, _, d in digests}) == 1, f"{lid}: replicas at one version hold different weights"
                assert len({s for _, s, _ in digests}) == 1, f"{lid}: replicas at one version count other steps"
                seen[lid] = digests[0][0]
        return len(seen) == len(league.replicas)
    wait_for(settled, timeout=timeout, what="every learner group at one version")
    return seen


@pytest.mark.ray
def test_replicas_train_in_lockstep_and_a_killed_replica_loses_nothing_acknowledged(ray_local, tmp_path):
    from actors.league_run import LeagueRun
    from operations.chaos import Chaos, accounting

    # the smoke league's main agent and main exploiter (whose resets replica 0 hands to the others),
    # without the league exploiter, probe and anchors: eight processes of learners and workers on two
    # cores; the learners' moves are served, by whichever replica holds a version of its life
    cfg, info = load(["--config", "configs/smoke.yaml", f"run.storage={tmp_path}", "learner.replicas=2",
                      "roles.league_exploiter.count=0", "evaluator.probe_every_seconds=0", "anchors=[]",
                      "rollout.policy_inference=serve"])
    league = LeagueRun(cfg, info)
    try:
        assert {lid: len(g) for lid, g in league.replicas.items()} == {lid: 2 for lid in league.learners}
        assert len(league.workers) == 2 * len(league.learners)  # each replica has workers of its own
        for group in league.replicas.values():
            assert [i["replica"] for i in ray_local.get([r.info.remote() for r in group])] == [0, 1]
        versions = lockstep(league, {lid: 1 for lid in league.learners})
        chaos = Chaos(league, str(tmp_path), np.random.default_rng(0))
        assert chaos.strike("learner_replica") is not None
        assert chaos.strike("learner") is not None  # a replica 0: the league's learner
        lockstep(league, versions)  # the restarted groups train on: served moves of their new lives
        served = [ray_local.get(w.get_stats.remote())["served"] for w in league.workers.values()]
        assert all(n > 0 for n in served), served  # every replica's workers had their moves served
        assert chaos.kills == {**{k: 0 for k in ("coordinator", "worker", "evaluator", "replica")},
                               "learner": 1, "learner_replica": 1}
    finally:
        league.stop()
        league.kill()
    books = accounting(str(tmp_path))
    assert books["results_acked"] > 0 and books["snapshots_acked"] > 0
    assert books["results_stored"] == books["results_acked"]
    assert books["snapshots_stored"] == books["snapshots_loadable"] == books["snapshots_acked"]
    assert books["snapshots_unacked_stored"] == [] and books["outbox_pending"] == []


def test_a_learner_group_is_refused_for_grouped_objectives_and_auto_keeps_one_process():
    from actors.preflight import load_checked
    from league.config import ConfigError, load_config
    from league.sizing import Resources, plan

    grouped = ["roles.main_agent.objective.k_opponents=2", "roles.main_exploiter.count=0",
               "roles.league_exploiter.count=0"]
    with pytest.raises(ConfigError, match="learner.replicas.*grouped objectives"):
        load_checked("configs/smoke.yaml", [*grouped, "learner.replicas=2"])
    cfg, _ = plan(load_config("configs/smoke.yaml", [*grouped, "learner.replicas=auto"]), Resources(64, 0))
    assert cfg.learner.replicas == 1
    cfg, _ = plan(load_config("configs/smoke.yaml", ["learner.replicas=auto"]), Resources(64, 0))
    assert cfg.learner.replicas > 1
