"""envs/pettingzoo.py: PettingZoo AEC classic games behind the vectorized two-player protocol."""

from __future__ import annotations

import numpy as np
import pytest

from envs import NO_ACTION, game_info, make_game
from envs.base import utility_range

pytest.importorskip("pettingzoo")
pytest.importorskip("rlcard")

HOLDEM = "pettingzoo:texas_holdem_v4"


def play_random(game, rng, steps):
    """Random legal play; returns the returns of every finished episode."""
    finished = []
    for _ in range(steps):
        movers = game.movers()
        assert (movers.sum(axis=1) == 1).all()  # turn-based: exactly one seat moves
        actions = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            rows = np.flatnonzero(movers[:, s])
            if rows.size:
                _, mask = game.observe(s, rows)
                assert mask.any(axis=1).all()
                actions[rows, s] = (rng.random(mask.shape) * mask).argmax(axis=1)
        result = game.step(actions)
        finished.append(result.returns[result.done])
        assert not result.returns[~result.done].any()
    return np.concatenate(finished)


def test_holdem_shapes_masks_and_info():
    game = make_game(HOLDEM, 8, seed=0)
    assert (game.obs_size, game.num_actions, game.supports_exact) == (72, 4, False) == tuple(game_info(HOLDEM))[:3]
    assert game.obs_shape == game_info(HOLDEM).obs_shape == (72,)
    movers = game.movers()
    for s in (0, 1):
        obs, mask = game.observe(s)
        assert obs.shape == (8, 72) and obs.dtype == np.float32
        assert mask.shape == (8, 4) and mask.dtype == bool
        assert (mask.any(axis=1) == movers[:, s]).all()  # the waiting seat has an all-False mask
        # every seat sees its two hole cards plus the two blinds' chips, from the start
        assert (obs[:, :52].sum(axis=1) == 2).all()


def test_holdem_random_play_is_legal_and_zero_sum_within_its_range():
    game = make_game(HOLDEM, 32, seed=1)
    returns = play_random(game, np.random.default_rng(0), 600)
    assert len(returns) > 500
    np.testing.assert_allclose(returns.sum(axis=1), 0.0, atol=1e-9)
    lo, hi = utility_range(game)
    assert lo <= returns.min() and returns.max() <= hi
    assert (returns[:, 0] != 0).mean() > 0.5  # chips change hands in most hands


def test_connect_four_through_the_same_adapter():
    game = make_game("pettingzoo:connect_four_v3", 16, seed=0)
    assert (game.obs_size, game.num_actions) == (6 * 7 * 2, 7)
    returns = play_random(game, np.random.default_rng(1), 400)
    assert len(returns) >= 100
    assert set(np.unique(returns[:, 0])) <= {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(returns.sum(axis=1), 0.0)


def reference_episodes(module, seed, episodes, choose):
    """One plain PettingZoo environment (the wrapped ``env()`` users build), stepped the
    canonical AEC way: per decision (seat, observation, mask); per episode each agent's
    return as the sum of what ``last()`` reports at its turns."""
    env = module.env()
    agents = env.possible_agents
    out = []
    for k in range(episodes):
        env.reset(seed=seed if k == 0 else None)
        decisions, totals = [], {a: 0.0 for a in agents}
        for agent in env.agent_iter():
            obs, reward, term, trunc, _ = env.last()
            totals[agent] += reward
            if term or trunc:
                env.step(None)
                continue
            mask = obs["action_mask"].astype(bool)
            action = choose(mask)
            decisions.append((agents.index(agent), obs["observation"].reshape(-1).copy(), mask, action))
            env.step(action)
        out.append((decisions, [totals[a] for a in agents]))
    return out


def test_vector_stepping_matches_single_plain_environments():
    from pettingzoo.classic import texas_holdem_v4

    E, seed, episodes = 6, 11, 5
    game = make_game(HOLDEM, E, seed=seed)
    rngs = [np.random.default_rng(100 + e) for e in range(E)]

    def chooser(rng):
        return lambda mask: int(rng.choice(np.flatnonzero(mask)))

    reference = [reference_episodes(texas_holdem_v4, game._env_seed(seed, e), episodes,
                                     chooser(np.random.default_rng(100 + e))) for e in range(E)]
    got = [[([], None)] for _ in range(E)]
    while min(len(g) for g in got) <= episodes:
        movers = game.movers()
        actions = np.full((E, 2), NO_ACTION, dtype=np.int64)
        for e in range(E):
            s = int(np.flatnonzero(movers[e])[0])
            obs, mask = game.observe(s, np.array([e]))
            a = int(rngs[e].choice(np.flatnonzero(mask[0])))
            actions[e, s] = a
            got[e][-1][0].append((s, obs[0], mask[0], a))
        result = game.step(actions)
        for e in np.flatnonzero(result.done):
            got[e][-1] = (got[e][-1][0], list(result.returns[e]))
            got[e].append(([], None))
    for e in range(E):
        for (ref_dec, ref_ret), (dec, ret) in zip(reference[e], got[e][:episodes]):
            assert len(dec) == len(ref_dec)
            for (s0, o0, m0, a0), (s1, o1, m1, a1) in zip(ref_dec, dec):
                assert s0 == s1 and a0 == a1
                np.testing.assert_array_equal(o0, o1)
                np.testing.assert_array_equal(m0, m1)
            assert ret == pytest.approx(ref_ret)


def test_bad_actions_raise_and_change_nothing():
    game = make_game(HOLDEM, 4, seed=3)
    before = [e.env.get_state(0)["raw_obs"] for e in game.envs]
    movers = game.movers()
    seat = np.argmax(movers, axis=1)
    _, mask = game.observe(0)
    _, mask1 = game.observe(1)
    mask = np.where(movers[:, :1], mask, mask1)
    good = np.full((4, 2), NO_ACTION, dtype=np.int64)
    good[np.arange(4), seat] = mask.argmax(axis=1)
    illegal = good.copy()
    illegal[0, seat[0]] = int(np.flatnonzero(~mask[0])[0]) if (~mask[0]).any() else 9
    idle = good.copy()
    idle[1, 1 - seat[1]] = 0
    missing = good.copy()
    missing[2, seat[2]] = NO_ACTION
    for bad, needle in ((illegal, "illegal action"), (idle, "does not act"), (missing, "illegal action"),
                        (good[:3], "shape"), (good.astype(float), "integers")):
        with pytest.raises(ValueError, match=needle):
            game.step(bad)
    assert [e.env.get_state(0)["raw_obs"] for e in game.envs] == before
    game.step(good)  # and a legal step still goes through


@pytest.mark.parametrize("name, message", [
    ("pettingzoo:", "name a PettingZoo environment"),
    ("pettingzoo:no_such_game_v1", "cannot import"),
    ("pettingzoo:texas_holdem_v1", "use texas_holdem_v4 instead"),
])
def test_bad_pettingzoo_names_get_a_clear_error(name, message):
    with pytest.raises(ValueError, match=message):
        make_game(name, 2)
