"""Learner replica groups (policies.replica_group) without Ray: two processes over gloo, each given a
part of a batch, end an update with the parameters of one learner given the whole batch (to
1e-5), and with bitwise the same parameters as each other."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from conftest import free_port
from envs.symmetry import Symmetries
from league.config import PPOConfig, SearchLearnerConfig
from policies import expert
from policies.ppo import make_optimizer, ppo_update
from policies.replica_group import ReplicaGroup
from policies.rollout import Rollout
from tests.test_ppo_update import batch, build

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N = 300
PPO = {  # name: (PPO settings, model kwargs, rows of replica 0 (whole episodes of 5), magnet)
    # 4 epochs of minibatches of 64 (the last of 44), advantages normalised per minibatch
    "equal_halves": (dict(epochs=4, minibatch_size=64), {}, 150, False),
    # replica 0 holds 10 rows: many minibatches of 16 have none of them; magnet, search head, early stop
    "unequal_with_empty_shares": (dict(epochs=4, minibatch_size=16, magnet_coef=0.3, target_kl=0.02),
                                  {"search_value": True}, 10, True),
}
EXPERT_SPLIT = 120


def ppo_cfg(settings: dict) -> PPOConfig:
    return PPOConfig(**{"lr": 1e-2, "normalize_advantages": True, **settings})


def expert_cfg() -> SearchLearnerConfig:
    return SearchLearnerConfig(lr=3e-3, minibatch_size=40, reuse=2, weight_decay=1e-3)


def whole_batch() -> Rollout:
    rng = np.random.default_rng(1)
    data = batch(N, seed=3, self_play=0.3)
    targets = rng.random((N, 4)).astype(np.float32) * data.mask
    data.targets = targets / targets.sum(1, keepdims=True)
    return data


def model_for(kwargs: dict, seed: int = 0):
    return build(seed=seed, **kwargs)


def train_ppo(name: str, data: Rollout, group: ReplicaGroup | None, seed_offset: int = 0):
    settings, kwargs, _, with_magnet = PPO[name]
    cfg = ppo_cfg(settings)
    model = model_for(kwargs, seed=seed_offset)
    magnet = model_for({}, seed=7) if with_magnet else None
    if magnet is not None and kwargs:
        magnet = model_for(kwargs, seed=7)
    if group is not None:
        group.broadcast_(model)  # replica 1 built another net: it takes replica 0's
    opt = make_optimizer(model, cfg)
    stats = [ppo_update(model, opt, data, cfg, generator=torch.Generator().manual_seed(u), magnet=magnet,
                        group=group) for u in range(2)]
    return model, stats


def train_expert(data: Rollout, group: ReplicaGroup | None):
    """Two updates under two symmetries (each draw's own, as the replicas draw alike)."""
    cfg = expert_cfg()
    model = model_for({})
    size, actions = data.obs.shape[1], data.mask.shape[1]
    mirror = Symmetries(np.stack([np.arange(size), np.arange(size)[::-1]]),
                        np.stack([np.arange(actions), np.arange(actions)[::-1]]))
    replay = expert.Replay(1000, size, actions)
    new = replay.add(data)
    opt = expert.make_optimizer(model, cfg)
    stats = [expert.expert_update(model, opt, replay, new, cfg, generator=torch.Generator().manual_seed(u),
                                  group=group, symmetries=mirror) for u in range(2)]
    return model, stats


def replica(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    group = ReplicaGroup.join("127.0.0.1", port, rank, 2, backend="gloo", timeout_s=60)
    try:
        data = whole_batch()
        results = {}
        for name, (_, _, split, _) in PPO.items():
            mine = data.slice(0, split) if rank == 0 else data.slice(split, N)
            assert group.rows_before(len(mine)) == ((0, N) if rank == 0 else (split, N))
            model, stats = train_ppo(name, mine, group, seed_offset=rank)
            results[name] = ({k: v.clone() for k, v in model.state_dict().items()}, stats)
        mine = data.slice(0, EXPERT_SPLIT) if rank == 0 else data.slice(EXPERT_SPLIT, N)
        model, stats = train_expert(mine, group)
        results["expert"] = ({k: v.clone() for k, v in model.state_dict().items()}, stats)
        torch.save(results, f"{out}/replica{rank}.pt")
    finally:
        group.leave()


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    out = tmp_path_factory.mktemp("replicas")
    # forked (the test's imports carried over): a spawned interpreter would import torch anew
    mp.start_processes(replica, args=(free_port(), str(out)), nprocs=2, join=True, start_method="fork")
    return [torch.load(out / f"replica{r}.pt") for r in range(2)]


def assert_close_states(got: dict, want: dict, atol: float) -> None:
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=atol, rtol=0, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("name", list(PPO))
def test_two_replicas_end_a_ppo_update_as_one_learner_on_the_whole_batch(two_replicas, name):
    model, stats = train_ppo(name, whole_batch(), None)
    want = model.state_dict()
    for r in range(2):
        state, replica_stats = two_replicas[r][name]
        assert_close_states(state, want, atol=1e-5)
        for got, one in zip(replica_stats, stats):
            assert got["num_minibatches"] == one["num_minibatches"] and got["num_transitions"] == N
            for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "magnet_kl",
                        "explained_variance"):
                assert got[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
            if "search_value_loss" in one:
                assert got["search_value_loss"] == pytest.approx(one["search_value_loss"], rel=1e-4, abs=1e-6)
    if name == "unequal_with_empty_shares":
        assert stats[0]["num_minibatches"] < 4 * 19  # the early stop came, on the group's KL
    first, second = two_replicas[0][name][0], two_replicas[1][name][0]
    assert all(torch.equal(first[k], second[k]) for k in first)  # bitwise the same


def test_two_replicas_end_a_search_learner_update_as_one_learner_on_the_whole_replay(two_replicas):
    model, stats = train_expert(whole_batch(), None)
    for r in range(2):
        state, replica_stats = two_replicas[r]["expert"]
        assert_close_states(state, model.state_dict(), atol=1e-5)
        for got, one in zip(replica_stats, stats):
            assert got["num_minibatches"] == one["num_minibatches"] == int(np.ceil(2 * N / 40))
            assert got["num_transitions"] == N
            for key in ("policy_loss", "value_loss", "entropy", "target_entropy", "grad_norm"):
                assert got[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    first, second = two_replicas[0]["expert"][0], two_replicas[1]["expert"][0]
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_the_group_of_one_needs_no_torch_distributed():
    group = ReplicaGroup.single()
    t = torch.arange(3.0)
    assert group.size == 1 and group.rank == 0
    assert group.sum_(t) is t and t.tolist() == [0.0, 1.0, 2.0]
    assert group.rows_before(7) == (0, 7)
    model = model_for({})
    before = copy.deepcopy(model.state_dict())
    group.broadcast_(model)
    assert_close_states(model.state_dict(), before, atol=0)
    gen = torch.Generator()
    assert group.shared_generator(gen) is gen and group.shared_generator(None) is None
    group.leave()
    assert not torch.distributed.is_initialized()
