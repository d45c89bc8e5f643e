"""A second value head for play-time search (``policy.search_value``): trained on the learner's
games against itself only, read by ``evaluation.search``; the rollout worker marks those games."""

import io

import numpy as np
import pyspiel
import pytest
import torch

from envs import game_info
from envs.openspiel import state_tensor
from league.config import ConfigError, load_config
from policies.net import PolicyNetError, PolicySpec, build_policy, policy_spec
from policies.ppo import PPOConfig, make_optimizer, ppo_update
from policies.rollout import Rollout
from evaluation.search import PUCT, SearchSpec, _Node
from policies.snapshot import policy_from_bytes, policy_to_bytes

from tests.test_lanes import LEARNER, Harness

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NETS = [("mlp", {"hidden": (32,)}), ("conv", {"channels": 8, "blocks": 1})]


def spec_for(net: str, search_value: bool = True, **kw) -> PolicySpec:
    info = game_info("connect_four")
    return PolicySpec(info.obs_size, info.num_actions, net=net, obs_shape=info.obs_shape,
                      search_value=search_value, **kw)


def constant_heads(model, value: float, search: float, trained: bool = True) -> None:
    """The value head says ``value`` and the search value head ``search`` everywhere."""
    with torch.no_grad():
        for head, v in ((model.value_head, value), (model.search_value_head, search)):
            head.weight.zero_()
            head.bias.fill_(v)
    model.search_value_trained.fill_(trained)


@pytest.mark.parametrize("net, kw", NETS)
def test_the_second_head_is_what_search_values_give_and_the_first_is_what_the_net_plays_by(net, kw):
    model = build_policy(spec_for(net, **kw))
    constant_heads(model, 0.25, -0.5)
    obs = torch.rand(5, model.spec.obs_size)
    mask = torch.ones(5, model.spec.num_actions, dtype=torch.bool)
    logits, value = model(obs, mask)
    logits2, search = model.search_values(obs, mask)
    torch.testing.assert_close(logits, logits2)
    assert torch.allclose(value, torch.tensor(0.25)) and torch.allclose(search, torch.tensor(-0.5))
    constant_heads(model, 0.25, -0.5, trained=False)  # never trained (an exploiter's): the value head's
    torch.testing.assert_close(model.search_values(obs, mask)[1], value)
    constant_heads(model, 0.25, -0.5)
    model.reset_parameters()  # an exploiter's reset: untrained again
    assert not bool(model.search_value_trained)
    plain = build_policy(spec_for(net, search_value=False, **kw))
    assert not hasattr(plain, "search_value_head")
    torch.testing.assert_close(plain.search_values(obs, mask)[1], plain(obs, mask)[1])  # no second head: the first


@pytest.mark.parametrize("net, kw", NETS)
def test_a_snapshot_keeps_the_second_head_and_an_older_spec_has_none(net, kw):
    model = build_policy(spec_for(net, **kw))
    constant_heads(model, 0.25, -0.5)
    blob = policy_to_bytes(model)
    assert torch.load(io.BytesIO(blob), weights_only=True)["spec"]["search_value"] is True
    back = policy_from_bytes(blob)
    obs, mask = torch.rand(3, model.spec.obs_size), torch.ones(3, model.spec.num_actions, dtype=torch.bool)
    assert back.spec == model.spec and torch.allclose(back.search_values(obs, mask)[1], torch.tensor(-0.5))
    old = model.spec.to_dict()
    del old["search_value"]  # a spec written before the second head existed
    assert PolicySpec.from_dict(old).search_value is False


def test_only_the_shipped_nets_take_a_second_head_and_the_config_says_which_key():
    with pytest.raises(PolicyNetError) as err:
        build_policy(PolicySpec(11, 2, net="examples.nets.layernorm_mlp:build", search_value=True))
    assert err.value.key == "policy.search_value"
    with pytest.raises(ConfigError) as cerr:
        load_config("configs/smoke.yaml", ["policy.net=examples.nets.layernorm_mlp:build", "policy.search_value=true"])
    assert cerr.value.key == "policy.search_value"
    cfg = load_config("configs/connect_four_ppo.yaml", ["policy.search_value=true"])
    info = game_info("connect_four")
    assert policy_spec(cfg.policy, info.obs_size, info.num_actions, info.obs_shape).search_value


def test_ppo_trains_the_second_head_on_self_play_decisions_only():
    """One observation, one-decision episodes: against itself the learner's return is -1, against
    everyone else +1, one decision in four against itself. The search head learns -1 (self-play's
    value), the value head the mix's mean, 0.5."""
    torch.manual_seed(0)
    model = build_policy(PolicySpec(4, 2, (16,), search_value=True))
    assert not bool(model.search_value_trained)
    n = 512
    self_play = np.arange(n) % 4 == 0
    obs = np.tile(np.array([1.0, 0.0, 0.5, -0.5], dtype=np.float32), (n, 1))
    rollout = Rollout(obs=obs, mask=np.ones((n, 2), bool), actions=np.zeros(n), logp=np.full(n, np.log(0.5)),
                      values=np.zeros(n), rewards=np.where(self_play, -1.0, 1.0), dones=np.ones(n, bool),
                      self_play=self_play)
    cfg = PPOConfig(lr=1e-2, epochs=4, minibatch_size=128, clip_value_loss=False)
    opt = make_optimizer(model, cfg)
    for _ in range(40):
        with torch.no_grad():
            rollout.logp = model.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(rollout.mask),
                                                  torch.as_tensor(rollout.actions))[0].numpy()
            rollout.values = model(torch.as_tensor(obs), torch.as_tensor(rollout.mask))[1].numpy()
        stats = ppo_update(model, opt, rollout, cfg, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, value = model(torch.as_tensor(obs[:1]), torch.as_tensor(rollout.mask[:1]))
        _, search = model.search_values(torch.as_tensor(obs[:1]), torch.as_tensor(rollout.mask[:1]))
    assert abs(float(search) + 1.0) < 0.05 and abs(float(value) - 0.5) < 0.05
    assert stats["search_value_loss"] < 1e-2 and bool(model.search_value_trained)
    rollout.self_play = np.zeros(n, bool)  # no self-play decisions: nothing for the second head
    assert np.isnan(ppo_update(model, opt, rollout, cfg)["search_value_loss"])


def test_lanes_mark_the_decisions_of_games_against_the_learner_itself():
    """Grouped lanes (the groups give each episode's opponent): a decision is marked self-play
    exactly when its episode's opponent is the learner, live."""
    h = Harness(k=2, keep_groups=True, self_id=LEARNER)
    for _ in range(30):
        h.lanes.step()
    h.lanes.finish_prepared()
    rollout, groups = h.lanes.take_groups("worker:x", seq=1)
    opponent = np.asarray(groups.opponents)[groups.opponent][groups.played]  # each recorded episode's
    ends = np.flatnonzero(rollout.dones)
    expected = np.repeat(opponent == LEARNER, np.diff(np.concatenate([[-1], ends])))
    assert expected.any() and not expected.all()
    np.testing.assert_array_equal(rollout.self_play, expected)
    unmarked = Harness(k=2, keep_groups=True)  # a learner that names no self: nothing marked
    for _ in range(30):
        unmarked.lanes.step()
    unmarked.lanes.finish_prepared()
    assert not unmarked.lanes.take_groups("worker:x", seq=1)[0].self_play.any()


def test_search_scores_a_leaf_with_the_second_head():
    game = pyspiel.load_game("connect_four")
    obs = len(state_tensor(game)(game.new_initial_state(), 0))
    model = build_policy(PolicySpec(obs, game.num_distinct_actions(), (16,), search_value=True))
    constant_heads(model, 0.9, -0.3)
    puct = PUCT(game, model, SearchSpec(simulations=8), np.random.default_rng(0))
    node = _Node(game.new_initial_state())
    (v,) = puct._evaluate([node])
    assert v[node.player] == pytest.approx(-0.3) and v[1 - node.player] == pytest.approx(0.3)
