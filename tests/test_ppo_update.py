"""ppo_update and expert_update on their device-friendly path (issue 49) are today's updates: the
parameters after an update equal the reference's (tests/data/, the code before) to 1e-6 on a fixed
batch and seed, in every branch (epochs, minibatches, magnet, target_kl, the search value head)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from league.config import PPOConfig, SearchLearnerConfig
from policies import expert
from policies.net import ActorCritic, PolicySpec
from policies.ppo import make_optimizer, ppo_update
from policies.rollout import Rollout
from tests.data.expert_reference import expert_update as reference_expert_update
from tests.data.ppo_reference import ppo_update as reference_ppo_update

pytestmark = pytest.mark.usefixtures("one_torch_thread")

D, A = 9, 4


def batch(n: int, seed: int = 0, episode: int = 5, self_play: float = 0.0, model=None) -> Rollout:
    """``n`` decisions in whole episodes of ``episode`` (legal actions, a result at each end); the
    acting log-probs and values are ``model``'s when given, so that ratios start at 1."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, D)).astype(np.float32)
    mask = rng.random((n, A)) < 0.6
    mask[np.arange(n), rng.integers(0, A, n)] = True
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in mask])
    dones = np.zeros(n, bool)
    dones[episode - 1::episode] = True
    dones[-1] = True
    rewards = np.where(dones, rng.choice([-1.0, 1.0], n), 0.0)
    if model is not None:
        with torch.no_grad():
            logits, values = model(torch.from_numpy(obs), torch.from_numpy(mask))
            logp = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(actions)[:, None])[:, 0].numpy()
            values = values.numpy()
    else:
        logp, values = np.log(1.0 / mask.sum(1)), rng.uniform(-0.5, 0.5, n)
    return Rollout(obs=obs, mask=mask, actions=actions, logp=logp, values=values, rewards=rewards, dones=dones,
                   self_play=rng.random(n) < self_play, targets=None)


def build(search_value: bool = False, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(PolicySpec(D, A, (32, 32), search_value=search_value))


def assert_same_parameters(a, b, atol=1e-6):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=atol, rtol=0, msg=lambda m, name=name: f"{name}: {m}")


CASES = {
    "plain": ({}, {}),
    "one_minibatch_no_normalisation": (dict(minibatch_size=1000, normalize_advantages=False), {}),
    "unclipped_value_uneven_minibatches": (dict(minibatch_size=70, clip_value_loss=False), {}),
    "magnet": (dict(magnet_coef=0.3), {"magnet": True}),
    "target_kl": (dict(lr=3e-2, target_kl=0.01), {}),
    "search_value": ({}, {"search_value": True, "self_play": 0.3}),
    "minibatch_of_one_row_last": (dict(minibatch_size=63), {"n": 253}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_update_equals_todays_to_1e6(case):
    settings, how = CASES[case]
    cfg = PPOConfig(**{"lr": 1e-2, "epochs": 4, "minibatch_size": 64, **settings})
    model = build(search_value=how.get("search_value", False))
    data = batch(how.get("n", 300), self_play=how.get("self_play", 0.0), model=model)
    ref = copy.deepcopy(model)
    magnet = magnet_ref = None
    if how.get("magnet"):
        magnet = build(seed=1)
        magnet_ref = copy.deepcopy(magnet)
    opt, opt_ref = make_optimizer(model, cfg), make_optimizer(ref, cfg)
    for update in range(2):  # the second starts from Adam's moments of the first
        stats = ppo_update(model, opt, data, cfg, generator=torch.Generator().manual_seed(update), magnet=magnet)
        want = reference_ppo_update(ref, opt_ref, data, cfg, generator=torch.Generator().manual_seed(update),
                                    magnet=magnet_ref)
        assert_same_parameters(model, ref)
        assert stats.keys() == want.keys()
        for key, value in want.items():
            assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key
    if case == "target_kl":  # the early stop happened, at the same minibatch
        assert stats["num_minibatches"] < 4 * 5
    if case == "search_value":
        assert bool(model.search_value_trained) and np.isfinite(stats["search_value_loss"])


def test_the_default_generator_draws_the_same_shuffle_as_today():
    cfg = PPOConfig(lr=1e-2, epochs=2, minibatch_size=50)
    model = build()
    data = batch(200, model=model)
    ref = copy.deepcopy(model)
    opt, opt_ref = make_optimizer(model, cfg), make_optimizer(ref, cfg)
    torch.manual_seed(5)
    ppo_update(model, opt, data, cfg)
    torch.manual_seed(5)
    reference_ppo_update(ref, opt_ref, data, cfg)
    assert_same_parameters(model, ref)


def test_the_search_learners_update_equals_todays_to_1e6():
    cfg = SearchLearnerConfig(lr=3e-3, minibatch_size=48, reuse=3, weight_decay=1e-3)
    rng = np.random.default_rng(0)
    data = batch(200)
    targets = rng.random((200, A)).astype(np.float32) * data.mask
    data.targets = targets / targets.sum(1, keepdims=True)
    model = build()
    ref = copy.deepcopy(model)
    replay = expert.Replay(150, D, A)  # smaller than the batch: the replay wraps
    new = replay.add(data, value_mix=0.25)
    opt, opt_ref = expert.make_optimizer(model, cfg), expert.make_optimizer(ref, cfg)
    for update in range(2):
        stats = expert.expert_update(model, opt, replay, new, cfg, generator=torch.Generator().manual_seed(update))
        want = reference_expert_update(ref, opt_ref, replay, new, cfg, generator=torch.Generator().manual_seed(update))
        assert_same_parameters(model, ref)
        assert stats.keys() == want.keys()
        for key, value in want.items():
            assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert stats["num_minibatches"] == int(np.ceil(3 * 200 / 48))
