"""Reproducible runs: the first learner update depends only on run.seed.

Two real leagues (the smoke config, one learner and its one rollout worker,
in-process opponents) with the same seed must produce the same learner
parameters after the first PPO update, and a different seed different ones.
The snapshot rule is set to fire at the first update, so the parameters are
read back from the store exactly as the league froze them. Each league is
started, read and stopped as a user does from Python (``nash_league.LeagueRun``,
which starts its own local Ray), and its store checked after the stop.

Why this can hold at all: the first update trains on the worker's first rollout
batch alone (``rollout.steps_per_batch`` learner decisions), which is a function
of the learner's initial weights (torch seeded from run.seed), the worker's
seat/action stream and its games' chance streams (numpy SeedSequence children
of run.seed) and the coordinator's match draws (one learner: one caller, one
stream; an empty pool: self-play). Nothing in it depends on timing. Seeding
torch with ``hash((seed, learner_id))``, salted per process, breaks it.
"""

import time

import pytest
import torch

from league.store import LeagueStore
from nash_league import LeagueRun
from policies.snapshot import policy_from_bytes
from test_launch import assert_exact_accounting

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def first_update_parameters(tmp_path, seed: int) -> dict[str, torch.Tensor]:
    """One league as a user starts it from Python (no Ray running: it starts a local one), until
    its first snapshot is in the pool and in the published Nash; stopped, its store holds every
    game it acknowledged and the mixture it published."""
    storage = tmp_path / f"seed{seed}-{time.monotonic_ns()}"
    run = LeagueRun.start("configs/smoke.yaml", {
        "run.storage": str(storage), "run.seed": seed, "roles.main_exploiter.count": 0,
        "roles.league_exploiter.count": 0, "evaluator.count": 0, "evaluator.probe_every_seconds": 0,
        "anchors": [], "serve.api": False,
        "rollout.opponent_inference": "inprocess", "roles.main_agent.snapshot_every_steps": 1024})
    try:
        deadline = time.time() + 180
        while not (run.status()["games"] > 0 and run.nash()["agents"]):
            assert time.time() < deadline, "no snapshot in the published Nash after the first update"
            time.sleep(0.5)
        nash = run.nash()
    finally:
        final = run.stop()
    with LeagueStore(storage, create=False) as store:
        assert_exact_accounting(store, storage)
        assert store.result_count() == final["games"] > 0
        published = [{a: w for a, w in zip(n["ids"], n["weights"]) if w > 1e-9}
                     for n in store.nash_history() if n["solved_at"] == nash["solved_at"]]
        assert published == [{a["agent_id"]: a["weight"] for a in nash["agents"]}]
        assert sum(a["weight"] for a in nash["agents"]) == pytest.approx(1.0)
        first = store.agents()[0]
        assert first.agent_id == "main_agent-0-v1" and first.metadata["updates"] == 1
        return policy_from_bytes(store.snapshot_blob(first.agent_id)).state_dict()


def test_same_seed_gives_the_same_parameters_after_the_first_update(tmp_path, shared_ray):
    import ray

    a = first_update_parameters(tmp_path, 11)  # no Ray running: LeagueRun starts a local one, and stops it
    assert not ray.is_initialized()
    # a process connected to a Ray (a notebook's ray.init on a cluster) runs its leagues there, one
    # after another
    ray.init(address=shared_ray, log_to_driver=False)
    try:
        b = first_update_parameters(tmp_path, 11)
        c = first_update_parameters(tmp_path, 12)
        assert ray.is_initialized()  # a Ray it did not start is left running
    finally:
        ray.shutdown()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert any(not torch.equal(a[name], c[name]) for name in a)
