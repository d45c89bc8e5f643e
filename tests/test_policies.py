"""policies/: masked actor-critic, rollouts, GAE, PPO learning, snapshots."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

from envs import make_game
from envs.gym import uniform_opponent
from evaluation.exploitability import expected_returns, nash_conv_of_policy, nash_conv_uniform
from policies.net import (STACK_MAX_WEIGHTS, ActorCritic, GreedyPolicy, PolicySpec, average_rate, follow, mlp_weights,
                          size_buckets, stacked_act, stacked_probs)
from policies.ppo import PPOConfig, compute_gae, make_optimizer, ppo_update, pull_magnet, scheduled_lr, set_lr
from policies.rollout import Rollout, collect_rollout
from policies.snapshot import (
    learner_average_from_bytes,
    learner_magnet_from_bytes,
    learner_state_from_bytes,
    learner_state_to_bytes,
    policy_from_bytes,
    policy_to_bytes,
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_batch(n=512, d=7, a=5, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, d)).astype(np.float32)
    mask = rng.random((n, a)) < 0.5
    mask[np.arange(n), rng.integers(0, a, n)] = True  # at least one legal action per row
    return obs, mask


def sharp_model(d=7, a=5, seed=0, scale=20.0):
    """A net with large logits, so illegal actions would win if masking failed."""
    torch.manual_seed(seed)
    model = ActorCritic(PolicySpec(d, a, (32, 32)))
    with torch.no_grad():
        model.policy_head.weight.mul_(scale * 100)
    return model


# -------------------------------------------------------------------- network
def test_illegal_actions_get_exactly_zero_probability_and_are_never_sampled():
    model = sharp_model()
    obs, mask = random_batch()
    probs = model.probs(obs, mask)
    assert np.all(probs[~mask] == 0.0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    for gen in (None, torch.Generator().manual_seed(1), np.random.default_rng(1)):
        actions, logp, value = model.act(obs, mask, generator=gen)
        assert mask[np.arange(len(obs)), actions].all()
        assert np.isfinite(logp).all() and logp.dtype == np.float32 and value.shape == (len(obs),)
    greedy, _, _ = model.act(obs, mask, deterministic=True)
    np.testing.assert_array_equal(greedy, np.where(mask, probs, -1).argmax(axis=1))


def test_a_seat_without_legal_actions_gets_a_finite_distribution():
    model = sharp_model()
    obs, _ = random_batch(4)
    probs = model.probs(obs, np.zeros((4, 5), dtype=bool))
    assert np.isfinite(probs).all()


def test_sampling_is_reproducible_with_a_generator_and_matches_probabilities():
    model = sharp_model(scale=0.001)
    obs = np.zeros((20000, 7), dtype=np.float32)
    mask = np.array([[True, False, True, True, False]] * 20000)
    p = model.probs(obs[:1], mask[:1])[0]
    for make in (lambda: torch.Generator().manual_seed(3), lambda: np.random.default_rng(3)):
        a1, _, _ = model.act(obs, mask, generator=make())
        a2, _, _ = model.act(obs, mask, generator=make())
        np.testing.assert_array_equal(a1, a2)
        freq = np.bincount(a1, minlength=5) / len(a1)
        np.testing.assert_allclose(freq, p, atol=0.015)  # > 4 sigma at n = 20000


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("hidden", [(16, 8), (128, 64)])  # stacked; wide: one pass each (STACK_MAX_WEIGHTS)
def test_stacked_policies_give_each_policys_own_probabilities(activation, hidden):
    rng = np.random.default_rng(0)
    models = []
    for seed in range(7):
        torch.manual_seed(seed)
        models.append(ActorCritic(PolicySpec(7, 5, hidden=hidden, activation=activation)))
        for prm in models[-1].parameters():  # away from the near-uniform initial head
            prm.data.normal_(0, 1)
    assert (mlp_weights(models[0].spec) > STACK_MAX_WEIGHTS) == (hidden[0] > 16)
    sizes = [3, 1, 12, 7, 2, 40, 1]
    obs = [rng.standard_normal((n, 7)).astype(np.float32) for n in sizes]
    masks = [rng.random((n, 5)) < 0.6 for n in sizes]
    for k in masks:
        k[:, 0] = True
    stacked = stacked_probs(models, obs, masks)
    for m, o, k, got in zip(models, obs, masks, stacked):
        np.testing.assert_allclose(got, m.probs(o, k), atol=1e-5)
        assert (got[~k] == 0).all()
    actions = stacked_act(models, obs, masks, np.random.default_rng(1))
    assert [len(a) for a in actions] == sizes
    assert all(k[np.arange(len(a)), a].all() for a, k in zip(actions, masks))


def test_size_buckets_bound_the_padding():
    sizes = [900, 18, 18, 18, 18, 18, 18, 18, 128, 128, 1, 3]
    buckets = size_buckets(sizes)
    assert sorted(i for b in buckets for i in b) == list(range(len(sizes)))
    for b in buckets:
        assert max(sizes[i] for i in b) * len(b) <= 2.0 * sum(sizes[i] for i in b)
    assert size_buckets([64] * 8) == [list(range(8))]  # even batches: one stack


def test_stacked_policies_of_different_shapes_fall_back_to_one_pass_each():
    a, b = ActorCritic(PolicySpec(3, 2, hidden=(4,))), ActorCritic(PolicySpec(3, 2, hidden=(6,)))
    obs, masks = [np.ones((2, 3), np.float32)] * 2, [np.ones((2, 2), bool)] * 2
    for m, got in zip((a, b), stacked_probs([a, b], obs, masks)):
        np.testing.assert_allclose(got, m.probs(obs[0], masks[0]), atol=1e-6)


def test_reset_parameters_gives_a_fresh_near_uniform_policy():
    model = sharp_model()
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    before = [w.detach().clone() for w in weights]
    model.reset_parameters()
    assert all(not torch.equal(a, b) for a, b in zip(before, weights))
    obs, mask = random_batch()
    probs = model.probs(obs, mask)
    uniform = mask / mask.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probs, uniform, atol=0.05)  # policy head init std 0.01
    w = model.trunk[0].weight.detach()  # (32, 7): orthonormal columns times gain sqrt(2)
    np.testing.assert_allclose((w.T @ w).numpy(), 2.0 * np.eye(w.shape[1]), atol=1e-4)


# -------------------------------------------------------------------- rollout
def small_rollout(n=6, d=3, a=2):
    rng = np.random.default_rng(0)
    return Rollout(
        obs=rng.normal(size=(n, d)), mask=np.ones((n, a), bool), actions=rng.integers(0, a, n),
        logp=rng.normal(size=n), values=rng.normal(size=n), rewards=[0, 1, 0, 0, -1, 2][:n],
        dones=[False, True, False, False, True, True][:n],
    )


def test_rollout_episode_returns_sum_each_episode():
    np.testing.assert_array_equal(small_rollout().episode_returns(), [1.0, -1.0, 2.0])


def test_rollout_rejects_malformed_input():
    with pytest.raises(ValueError, match="obs"):
        Rollout(obs=np.zeros((3, 2)), mask=np.ones((2, 2), bool), actions=[0, 0], logp=[0, 0],
                values=[0, 0], rewards=[0, 0], dones=[0, 1])
    with pytest.raises(ValueError, match="actions"):
        Rollout(obs=np.zeros((2, 2)), mask=np.ones((2, 2), bool), actions=[[0], [0]], logp=[0, 0],
                values=[0, 0], rewards=[0, 0], dones=[0, 1])


def test_rollout_concat_keeps_episode_order():
    r = small_rollout()
    both = Rollout.concat([r, r])
    assert len(both) == 12 and both.num_episodes == 6
    np.testing.assert_array_equal(both.episode_returns(), [1, -1, 2, 1, -1, 2])


def test_collect_rollout_records_complete_learner_episodes_from_both_seats():
    game = make_game("kuhn_poker", 32, seed=0)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
    rollout, outcomes = collect_rollout(game, model, uniform_opponent(np.random.default_rng(0)), 500,
                                        np.random.default_rng(0))
    assert len(rollout) >= 500 and rollout.dones[-1]
    assert rollout.mask[np.arange(len(rollout)), rollout.actions].all()
    assert np.all(rollout.rewards[~rollout.dones] == 0)
    returns = rollout.episode_returns()
    assert len(returns) == len(outcomes) == rollout.num_episodes  # Kuhn: both seats always act
    np.testing.assert_array_equal(outcomes, (returns > 0).astype(float))  # Kuhn has no draws
    assert set(np.abs(returns)) <= {1.0, 2.0}
    seat_one_hot = rollout.obs[:, :2]  # Kuhn's info-state tensor starts with the player one-hot
    share_seat0 = seat_one_hot[:, 0].mean()
    assert 0.35 < share_seat0 < 0.65


def test_collect_rollout_with_alternating_seats_gives_each_seat_exactly_half_the_episodes():
    # a matrix game the row player (seat 0) always wins: the learner's returns tell its seat
    game = make_game("matrix", 64, seed=0, payoff=[[1.0, 1.0], [1.0, 1.0]])
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (8,)))
    opponent = uniform_opponent(np.random.default_rng(0))
    _, returns = collect_rollout(game, model, opponent, 640, np.random.default_rng(0), value="return",
                                 seats="alternate")
    assert len(returns) >= 640 and set(returns) == {1.0, -1.0}
    assert returns.sum() == 0  # every env swaps seats after each of its (one-step) episodes
    _, returns = collect_rollout(game, model, opponent, 640, np.random.default_rng(0), value="return")
    assert returns.sum() != 0  # drawn seats: unbalanced
    with pytest.raises(ValueError, match="seats"):
        collect_rollout(game, model, opponent, 10, np.random.default_rng(0), seats="fixed")


# ------------------------------------------------------------------------ GAE
def test_gae_with_lambda_one_is_return_minus_value_and_with_lambda_zero_is_td_error():
    rewards = np.array([0.0, 1.0, 0.0, 0.0, -1.0], dtype=np.float32)
    values = np.array([0.2, 0.5, -0.1, 0.3, 0.4], dtype=np.float32)
    dones = np.array([False, True, False, False, True])
    g = 0.9
    adv, ret = compute_gae(rewards, values, dones, gamma=g, lam=1.0)
    mc = np.array([g * 1.0, 1.0, g * g * -1.0, g * -1.0, -1.0])
    np.testing.assert_allclose(adv, mc - values, atol=1e-6)
    np.testing.assert_allclose(ret, mc, atol=1e-6)
    adv0, _ = compute_gae(rewards, values, dones, gamma=g, lam=0.0)
    next_v = np.array([values[1], 0.0, values[3], values[4], 0.0])
    np.testing.assert_allclose(adv0, rewards + g * next_v - values, atol=1e-6)


def test_ppo_update_rejects_an_incomplete_episode():
    model = ActorCritic(PolicySpec(3, 2, (8,)))
    r = small_rollout(5)
    r.dones[-1] = False
    with pytest.raises(ValueError, match="complete episode"):
        ppo_update(model, make_optimizer(model, PPOConfig()), r, PPOConfig())


# ------------------------------------------------------------------- learning
def test_ppo_finds_the_exact_best_response_to_a_fixed_mixture_in_biased_rps():
    game = make_game("biased_rps", 256)
    mix = np.array([0.25, 0.25, 0.5])
    best = game.best_response(mix, seat=0)
    assert best.tolist() == game.best_response(mix, seat=1).tolist() == [0]  # unique, margin 1.0
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (32,)))
    cfg = PPOConfig(lr=1e-2, epochs=4, minibatch_size=256, ent_coef=0.0)
    opt = make_optimizer(model, cfg)
    rng, opp_rng, gen = np.random.default_rng(0), np.random.default_rng(1), torch.Generator().manual_seed(0)
    opponent = lambda obs, mask: opp_rng.choice(3, size=len(obs), p=mix)  # noqa: E731
    for _ in range(12):
        rollout, _ = collect_rollout(game, model, opponent, 1024, rng)
        ppo_update(model, opt, rollout, cfg, generator=gen)
    probs = model.probs(np.eye(2, dtype=np.float32), np.ones((2, 3), dtype=bool))  # seat 0 and seat 1
    assert probs[0, 0] > 0.9 and probs[1, 0] > 0.9
    # its value against the mixture approaches the best-response value 0.75
    assert game.expected_payoff(probs[0], mix) > 0.6


def _self_play_biased_rps(magnet_coef: float, updates: int = 300, tail: int = 60) -> np.ndarray:
    """Last-iterate policies of PPO self-play on biased RPS (Nash (1/4, 1/2, 1/4)), one row per
    update of the last ``tail`` updates."""
    game = make_game("biased_rps", 256, seed=0)
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
    cfg = PPOConfig(lr=1e-2, epochs=4, minibatch_size=256, ent_coef=0.0, magnet_coef=magnet_coef, magnet_rate=0.05)
    opt = make_optimizer(model, cfg)
    magnet = copy.deepcopy(model) if magnet_coef > 0 else None
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    self_play = lambda obs, mask: model.act(obs, mask, generator=rng)[0]  # noqa: E731
    obs, mask = game.observe(0, np.arange(1))
    trace = []
    for _ in range(updates):
        rollout, _ = collect_rollout(game, model, self_play, 512, rng)
        ppo_update(model, opt, rollout, cfg, generator=gen, magnet=magnet)
        if magnet is not None:
            pull_magnet(magnet, model, cfg.magnet_rate)
        trace.append(model.probs(obs, mask)[0])
    return np.array(trace[-tail:])


@pytest.mark.slow
def test_magnet_ppo_self_play_last_iterate_converges_to_the_biased_rps_nash_where_plain_ppo_cycles():
    """Magnetic mirror descent (Sokota et al. 2023) makes the last iterate of self-play converge;
    plain policy gradient in self-play cycles around the equilibrium (here between near-pure
    strategies)."""
    nash = np.array([0.25, 0.5, 0.25])
    magnet = _self_play_biased_rps(magnet_coef=1.0)
    assert np.abs(magnet - nash).max() < 0.1  # every one of the last 60 iterates
    assert np.abs(magnet.mean(0) - nash).max() < 0.04
    plain = _self_play_biased_rps(magnet_coef=0.0, updates=200)
    assert np.abs(plain - nash).max() > 0.3


def test_magnet_follows_the_policy_by_its_rate_and_is_checkpointed():
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(5, 3, (8,)))
    magnet = copy.deepcopy(model)
    model.reset_parameters()
    before = [m.detach().clone() for m in magnet.parameters()]
    pull_magnet(magnet, model, 0.25)
    for m, b, p in zip(magnet.parameters(), before, model.parameters()):
        torch.testing.assert_close(m, 0.75 * b + 0.25 * p)
    blob = learner_state_to_bytes(model, None, {"version": 1}, magnet=magnet)
    restored = learner_magnet_from_bytes(blob)
    for a, b in zip(restored.parameters(), magnet.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert learner_magnet_from_bytes(learner_state_to_bytes(model, None, {})) is None


def test_a_snapshot_average_of_k_steps_is_k_single_steps_and_sits_closer_to_where_noisy_weights_centre():
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(5, 3, (8,)))
    once, stepwise = copy.deepcopy(model), copy.deepcopy(model)
    model.reset_parameters()  # held fixed: ten steps in one pull are ten pulls of one step
    follow(once, model, average_rate(0.99, 10))
    for _ in range(10):
        follow(stepwise, model, average_rate(0.99, 1))
    for a, b in zip(once.parameters(), stepwise.parameters()):
        torch.testing.assert_close(a, b)
    assert average_rate(0.999, 64) == pytest.approx(1 - 0.999 ** 64) and average_rate(0.0, 1) == 1.0
    # weights that scatter around a centre (unit noise): the average keeps 0.9 a step, so its spread is
    # sqrt(0.1 / 1.9) = 0.23 of theirs
    centre = [p.detach().clone() for p in model.parameters()]
    average = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    for _ in range(300):
        with torch.no_grad():
            for p, c in zip(model.parameters(), centre):
                p.copy_(c + torch.randn(p.shape, generator=generator))
        follow(average, model, average_rate(0.9, 1))

    def spread(net):
        return torch.cat([(p - c).flatten() for p, c in zip(net.parameters(), centre)]).square().mean().sqrt()

    assert spread(model) > 0.8 and spread(average) < 0.35
    blob = learner_state_to_bytes(model, None, {"version": 1}, average=average)
    for a, b in zip(learner_average_from_bytes(blob).parameters(), average.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert learner_magnet_from_bytes(blob) is None
    assert learner_average_from_bytes(learner_state_to_bytes(model, None, {})) is None


@pytest.mark.parametrize("key, value", [("magnet_coef", -0.1), ("magnet_rate", 1.5), ("lr_decay_steps", -1.0)])
def test_magnet_and_schedule_settings_out_of_range_are_rejected(key, value):
    with pytest.raises(ValueError, match=key):
        PPOConfig(**{key: value})


def test_learning_rate_decays_by_the_inverse_square_root_of_steps_and_is_constant_without_decay():
    assert scheduled_lr(PPOConfig(lr=1e-3), 10**9) == 1e-3
    cfg = PPOConfig(lr=1e-3, lr_decay_steps=1e6)
    assert scheduled_lr(cfg, 0) == 1e-3
    assert scheduled_lr(cfg, 3 * 10**6) == pytest.approx(5e-4)  # 1 / sqrt(1 + 3)
    assert scheduled_lr(cfg, 99 * 10**6) == pytest.approx(1e-4)  # 1 / sqrt(1 + 99)
    model = ActorCritic(PolicySpec(obs_size=3, num_actions=2, hidden=(4,)))
    optimizer = make_optimizer(model, cfg)
    set_lr(optimizer, scheduled_lr(cfg, 3 * 10**6))
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(5e-4)]


@pytest.mark.slow
def test_ppo_against_uniform_on_kuhn_learns_a_best_response():
    game = make_game("kuhn_poker", 64, seed=0)
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (64, 64)))
    cfg = PPOConfig(lr=3e-3, epochs=4, minibatch_size=512, ent_coef=0.0)
    opt = make_optimizer(model, cfg)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    opponent = uniform_opponent(np.random.default_rng(1))
    for _ in range(15):
        rollout, _ = collect_rollout(game, model, opponent, 2048, rng)
        ppo_update(model, opt, rollout, cfg, generator=gen)
    nash_conv = nash_conv_of_policy("kuhn_poker", model)["nash_conv"]
    assert nash_conv < 0.75 < nash_conv_uniform("kuhn_poker")["nash_conv"]  # uniform: 11/12
    # exact value against uniform, averaged over seats; a best response gets 11/24 = 0.4583
    value = (expected_returns("kuhn_poker", model, None)[0] + expected_returns("kuhn_poker", None, model)[1]) / 2
    assert 0.40 < value <= 11 / 24 + 1e-9


# ------------------------------------------------------------------ snapshots
def test_policy_snapshot_round_trip_gives_identical_outputs():
    model = sharp_model(d=11, a=3)
    blob = policy_to_bytes(model)
    back = policy_from_bytes(blob)
    assert back.spec == model.spec
    obs, mask = random_batch(d=11, a=3)
    np.testing.assert_array_equal(back.probs(obs, mask), model.probs(obs, mask))
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for x, y in zip(model.act(obs, mask, generator=gen_a), back.act(obs, mask, generator=gen_b)):
        np.testing.assert_array_equal(x, y)


def test_a_greedy_snapshot_plays_its_most_probable_legal_move_and_searches_with_its_own_prior():
    """``policy.snapshot_play: greedy``: the loaded snapshot puts all its probability on the
    network's most probable legal move, acts it whatever the generator, and hands play-time
    search the network's own logits and value; loaded to train from, it is the bare network."""
    torch.manual_seed(3)
    model = sharp_model(d=11, a=3)
    blob = policy_to_bytes(model, "greedy")
    greedy, bare = policy_from_bytes(blob), policy_from_bytes(blob, as_played=False)
    assert isinstance(greedy, GreedyPolicy) and type(bare) is ActorCritic and greedy.spec == model.spec
    obs, mask = random_batch(d=11, a=3)
    p = model.probs(obs, mask)
    want = np.zeros_like(p)
    want[np.arange(len(p)), p.argmax(axis=1)] = 1.0
    np.testing.assert_array_equal(greedy.probs(obs, mask), want)
    for seed in (0, 1):
        actions, logp, value = greedy.act(obs, mask, generator=np.random.default_rng(seed))
        np.testing.assert_array_equal(actions, p.argmax(axis=1))
        np.testing.assert_allclose(logp, 0.0, atol=1e-6)
        np.testing.assert_allclose(value, model.act(obs, mask)[2], atol=1e-6)
    o, k = torch.as_tensor(obs), torch.as_tensor(mask)
    for got, raw in zip(greedy.search_values(o, k), model.search_values(o, k)):
        torch.testing.assert_close(got, raw)
    np.testing.assert_array_equal(bare.probs(obs, mask), p)
    assert type(policy_from_bytes(policy_to_bytes(model))) is ActorCritic  # sampled, as before
    with pytest.raises(ValueError, match="play must be one of"):
        policy_to_bytes(model, "argmax")
    payload = torch.load(io.BytesIO(blob), weights_only=True)
    payload["play"] = "argmax"
    foreign = io.BytesIO()
    torch.save(payload, foreign)
    with pytest.raises(ValueError, match="plays 'argmax'"):
        policy_from_bytes(foreign.getvalue())

def test_corrupt_or_foreign_blobs_raise_value_error():
    blob = policy_to_bytes(ActorCritic(PolicySpec(4, 2, (8,))))
    foreign = io.BytesIO()
    torch.save({"weights": torch.zeros(3)}, foreign)
    wrong_shape = io.BytesIO()
    payload = torch.load(io.BytesIO(blob), weights_only=True)
    payload["spec"]["obs_size"] = 5
    torch.save(payload, wrong_shape)
    for bad in (b"", b"not a torch file", blob[: len(blob) // 2], bytes(reversed(blob)), foreign.getvalue(),
                wrong_shape.getvalue(), learner_state_to_bytes(ActorCritic(PolicySpec(4, 2, (8,))))):
        with pytest.raises(ValueError):
            policy_from_bytes(bad)
    with pytest.raises(ValueError):
        learner_state_from_bytes(blob)  # a policy blob is not a learner checkpoint
    with pytest.raises(ValueError):
        policy_from_bytes("a string")


def test_learner_checkpoint_restores_parameters_and_optimizer_state():
    game = make_game("kuhn_poker", 16, seed=0)
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
    cfg = PPOConfig(lr=1e-3, epochs=1, minibatch_size=64)
    opt = make_optimizer(model, cfg)
    opponent = uniform_opponent(np.random.default_rng(0))
    rollout, _ = collect_rollout(game, model, opponent, 128, np.random.default_rng(0))
    ppo_update(model, opt, rollout, cfg, generator=torch.Generator().manual_seed(0))
    blob = learner_state_to_bytes(model, opt, {"version": 3, "role": "main_agent"})
    model2, opt2, extra = learner_state_from_bytes(blob, lambda m: make_optimizer(m, cfg))
    assert extra == {"version": 3, "role": "main_agent"}
    # one more identical update from both gives identical parameters (Adam moments restored)
    ppo_update(model, opt, rollout, cfg, generator=torch.Generator().manual_seed(1))
    ppo_update(model2, opt2, rollout, cfg, generator=torch.Generator().manual_seed(1))
    for a, b in zip(model.parameters(), model2.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_two_seat_play_scores_each_finished_game_from_the_focal_side():
    """Biased RPS (A[0, 2] = 2, A[2, 0] = -2, range [-2, 2]); the focal side plays rock (0), the
    other side scissors (2). In seat 0 the focal return is A[0, 2] = 2; in seat 1 it is
    -A[2, 0] = 2. Either way: return 2, score 1 (the top of the range), a win."""
    from policies.rollout import TwoSeatPlay

    game = make_game("biased_rps", 6, seed=0)
    play = TwoSeatPlay(game, np.array([0, 1, 0, 1, 1, 0]))
    mine, theirs = play.decisions()
    assert len(mine) == len(theirs) == 6
    assert sorted(mine.rows.tolist()) == list(range(6))
    np.testing.assert_array_equal(mine.seats, play.seat[mine.rows])
    np.testing.assert_array_equal(theirs.seats, 1 - play.seat[theirs.rows])
    done = play.step(mine, np.zeros(6, dtype=np.int64), theirs, np.full(6, 2, dtype=np.int64))
    assert done.rows.tolist() == list(range(6))
    np.testing.assert_array_equal(done.returns, 2.0)
    np.testing.assert_array_equal(done.scores, 1.0)
    np.testing.assert_array_equal(done.outcomes, 1.0)


def test_episode_recorder_hands_out_finished_episodes_in_finishing_order():
    from policies.rollout import EpisodeRecorder

    rec = EpisodeRecorder()
    obs, mask = np.zeros((1, 3), dtype=np.float32), np.ones((1, 2), dtype=bool)
    one = lambda ep, a: rec.add(np.array([ep]), obs, mask, np.array([a]), np.zeros(1), np.zeros(1))  # noqa: E731
    one(5, 0), one(3, 1), one(5, 1), one(9, 0)
    rec.finish([5, 3], [1.0, -2.0], [2, 1])  # 5 finished first, 9 still runs
    assert rec.steps == 3
    r = rec.take()
    assert r.actions.tolist() == [0, 1, 1]  # episode 5 (both decisions in time order), then 3
    assert r.dones.tolist() == [False, True, True] and r.rewards.tolist() == [0.0, 1.0, -2.0]
    assert rec.take() is None  # nothing else finished
    rec.finish([9], [0.5], [1])
    assert rec.take().rewards.tolist() == [0.5]


def test_snapshot_cache_evicts_the_least_recently_used_beyond_its_count_and_its_bytes():
    from policies.snapshot import SnapshotCache, weight_bytes

    blobs = {f"a{i}": policy_to_bytes(ActorCritic(PolicySpec(4, 3, (8,)))) for i in range(5)}
    size = weight_bytes(policy_from_bytes(blobs["a0"]))
    assert size == 4 * ((4 * 8 + 8) + (8 * 3 + 3) + (8 * 1 + 1))  # trunk, policy head, value head
    fetched = []
    cache = SnapshotCache(3, lambda a: fetched.append(a) or blobs[a], max_bytes=int(2.5 * size))
    for a in ("a0", "a1", "a0", "a2"):  # a1 is least recently used when a2 arrives
        cache.get(a)
    assert "a1" not in cache and "a0" in cache and "a2" in cache
    assert len(cache) == 2 and cache.bytes == 2 * size and cache.loads == 3 and fetched == ["a0", "a1", "a2"]
    by_count = SnapshotCache(3, lambda a: blobs[a])
    for a in blobs:
        by_count.get(a)
    assert list(by_count._entries) == ["a2", "a3", "a4"] and by_count.bytes == 3 * size
    one = SnapshotCache(3, lambda a: blobs[a], max_bytes=size // 2)  # the newest stays though larger
    one.get("a0")
    one.get("a1")
    assert len(one) == 1 and "a1" in one and one.bytes == size
    with pytest.raises(ValueError, match="max_bytes"):
        SnapshotCache(3, max_bytes=0)


def test_snapshot_cache_lets_go_of_policies_idle_longer_than_its_bound():
    """Agents the pool evicted are never asked for again: the idle bound drops them, so a cache
    holds the agents played lately, not every agent played since it filled."""
    from policies.snapshot import SnapshotCache, weight_bytes

    blobs = {f"a{i}": policy_to_bytes(ActorCritic(PolicySpec(4, 3, (8,)))) for i in range(4)}
    size = weight_bytes(policy_from_bytes(blobs["a0"]))
    now = [0.0]
    told = []  # what the process's gauge is told: the bytes held after each change
    cache = SnapshotCache(8, lambda a: blobs[a], idle_seconds=10.0, clock=lambda: now[0], on_bytes=told.append)
    cache.get("a0")
    cache.get("a1")
    now[0] = 6.0
    cache.get("a0")  # a0 used again at 6 s, a1 last at 0 s
    now[0] = 10.0
    assert cache.lookup("a2") is None and len(cache) == 2  # nothing idle for more than 10 s yet
    now[0] = 10.5
    cache.get("a2")
    assert "a1" not in cache and "a0" in cache and "a2" in cache
    assert cache.expired == 1 and cache.bytes == 2 * size and cache.loads == 3
    now[0] = 100.0
    assert cache.lookup("a0") is None and len(cache) == 0 and cache.bytes == 0 and cache.expired == 3
    # loads a0, a1; a0 again is a hit (no change); a2 after a1 expired; a0 and a2 expired
    assert told == [size, 2 * size, size, 2 * size, 0]
    cache.get("a1")  # an expired agent still in the pool loads again
    assert cache.loads == 4 and len(cache) == 1
    forever = SnapshotCache(8, lambda a: blobs[a], clock=lambda: now[0])
    forever.get("a0")
    now[0] = 1e9
    assert "a0" in forever and forever.lookup("a0") is not None  # no idle bound: only count and bytes
    with pytest.raises(ValueError, match="idle_seconds"):
        SnapshotCache(3, idle_seconds=0)


def test_a_specs_hash_is_computed_once_and_never_travels_with_it():
    import copy
    import pickle

    spec = PolicySpec(7, 5, hidden=(16, 8), args={"k": 1})
    h = hash(spec)
    assert spec.__dict__["_hash"] == h and hash(spec) == h
    for twin in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert "_hash" not in twin.__dict__  # another process salts string hashes differently
        assert twin == spec and hash(twin) == h and len({twin, spec}) == 1
