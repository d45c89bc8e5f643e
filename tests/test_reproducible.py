"""Reproducible runs: the first learner update depends only on run.seed.

Two real leagues (the smoke config, one learner and its one rollout worker,
in-process opponents, on a real local Ray) with the same seed must produce the
same learner parameters after the first PPO update, and a different seed
different ones. The snapshot rule is set to fire at the first update, so the
parameters are read back from the store exactly as the league froze them.

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

from actors.launch import League, load
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def first_update_parameters(tmp_path, seed: int) -> dict[str, torch.Tensor]:
    storage = tmp_path / f"seed{seed}-{time.monotonic_ns()}"
    cfg, info = load(["--config", "configs/smoke.yaml", f"run.storage={storage}", f"run.seed={seed}",
                      "roles.main_exploiter.count=0", "roles.league_exploiter.count=0", "evaluator.count=0",
                      "serve.api=false", "rollout.opponent_inference=inprocess",
                      "roles.main_agent.snapshot_every_steps=1024"])
    league = League(cfg, info)
    try:
        league.supervise()
        deadline = time.time() + 180
        while league.status()["pool_size"] < 1:
            assert time.time() < deadline, "no snapshot after the first update"
            time.sleep(0.5)
    finally:
        league.stop()
        league.kill()
    with LeagueStore(storage, create=False) as store:
        first = store.agents()[0]
        assert first.agent_id == "main_agent-0-v1" and first.metadata["updates"] == 1
        return policy_from_bytes(store.snapshot_blob(first.agent_id)).state_dict()


def test_same_seed_gives_the_same_parameters_after_the_first_update(ray_local, tmp_path):
    a = first_update_parameters(tmp_path, 11)
    b = first_update_parameters(tmp_path, 11)
    c = first_update_parameters(tmp_path, 12)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert any(not torch.equal(a[name], c[name]) for name in a)
