"""envs/teams.py and the team view of envs/base.py: PettingZoo parallel games of two teams
(MAgent2's battle on its smallest map), checked against the PettingZoo environment stepped
directly with the same actions; two-player games seen as teams of one."""

from __future__ import annotations

import numpy as np
import pytest

from envs import NO_ACTION, game_info, make_game
from envs.base import score_from_returns, utility_range
from envs.teams import TeamError, env_seed

pytest.importorskip("magent2")

BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"
TEAMS = {"prefix": ["red_", "blue_"]}
SMALL = {"map_size": 12, "max_cycles": 40}  # 12 is the smallest map battle allows: 2 agents a side
# battle's actions are the cells of a radius-2 disc ordered by row then column (6 stays, 7 moves one
# cell right, 8 two), then attacks on the 8 neighbours (16 attacks left, 17 right). On this map the
# sides start 8 cells apart: red meets blue by moving 2, 2, 2, 1 cells right.
CHARGE, STAY, ATTACK = (8, 8, 8, 7), 6, (17, 16)


def battle_actions(game, t, rng):
    """A fight with random legal actions in it (uniform random play on this map almost never
    kills): red charges for four steps while blue stays, then every agent attacks the enemy in
    front of it, and each agent plays a uniformly random legal action instead with probability
    0.1. ``t`` is the step of each environment's episode (or of all). Returns the (E, 2, N)
    actions and each side's batch."""
    acts = np.full((game.num_envs, 2, game.team_size), NO_ACTION, dtype=np.int64)
    batches = []
    for s in (0, 1):
        b = game.observe_side(s)
        step = np.broadcast_to(np.asarray(t), (game.num_envs,))[b.env]  # of each row's episode
        opening = np.array(CHARGE)[np.minimum(step, len(CHARGE) - 1)] if s == 0 else STAY
        scripted = np.where(step < len(CHARGE), opening, ATTACK[s])
        random = (rng.random(b.mask.shape) * b.mask).argmax(axis=1)
        acts[b.env, s, b.agent] = np.where(rng.random(len(random)) < 0.1, random, scripted)
        batches.append(b)
    return acts, batches


def test_battle_shapes_and_side_mapping():
    game = make_game(BATTLE, 3, seed=0, teams=TEAMS, **SMALL)
    assert (game.team_size, game.num_actions, game.obs_shape, game.obs_size) == (2, 21, (13, 13, 5), 845)
    assert game.channels_last and game.simultaneous
    assert game.sides == (["red_0", "red_1"], ["blue_0", "blue_1"])
    assert tuple(game_info(BATTLE, teams=TEAMS, **SMALL)) == (845, 21, False, (13, 13, 5), True, 2)
    assert game.alive().shape == (3, 2, 2) and game.alive().all()
    from magent2.environments import battle_v4

    for s, side in enumerate(game.sides):
        b = game.observe_side(s)
        assert b.obs.shape == (6, 845) and b.obs.dtype == np.float32
        assert b.mask.shape == (6, 21) and b.mask.all()  # battle has no masks: every action is legal
        assert b.env.tolist() == [0, 0, 1, 1, 2, 2] and b.agent.tolist() == [0, 1] * 3
        for e in range(3):  # each row is that agent's observation in PettingZoo's own environment
            ref, _ = battle_v4.parallel_env(**SMALL).reset(seed=env_seed(0, e))
            for k, agent in enumerate(side):
                np.testing.assert_array_equal(b.obs[2 * e + k], ref[agent].reshape(-1))


@pytest.mark.parametrize("scoring", ["sum", "survivors"])
def test_battle_matches_pettingzoo_stepped_directly(scoring):
    """E vectorized environments against E plain ones fed the same actions: every step the same
    live agents with the same observations, dead agents out of the batch, episodes ending when
    the environment ends them and restarting, each side's score what PettingZoo's rewards and
    terminations give by the rule."""
    from magent2.environments import battle_v4

    E, seed, episodes = 3, 0, 4
    game = make_game(BATTLE, E, seed=seed, teams={**TEAMS, "score": scoring}, **SMALL)
    refs = [battle_v4.parallel_env(**SMALL) for _ in range(E)]
    for e, env in enumerate(refs):
        env.reset(seed=env_seed(seed, e))
    totals = np.zeros((E, 2))
    finished = [[] for _ in range(E)]
    deaths, t, ends = 0, np.zeros(E, dtype=int), []
    rng = np.random.default_rng(0)
    while min(map(len, finished)) < episodes:
        acts, batches = battle_actions(game, t, rng)
        for e, env in enumerate(refs):
            live = {(s, k) for s in (0, 1) for k, a in enumerate(game.sides[s]) if a in env.agents}
            assert {(s, k) for s in (0, 1) for k in np.flatnonzero(game.alive()[e, s])} == live
            assert sum(int((b.env == e).sum()) for b in batches) == len(live)
        result = game.step_team(acts)
        for e, env in enumerate(refs):
            sent = {a: int(acts[e, s, k]) for s in (0, 1) for k, a in enumerate(game.sides[s]) if a in env.agents}
            obs, rewards, terms, truncs, _ = env.step(sent)
            deaths += sum(terms.values()) if env.agents else 0  # mid-episode
            for a, r in rewards.items():
                totals[e, int(a.startswith("blue_"))] += r if scoring == "sum" else 0
            t[e] += 1
            if not env.agents:  # PettingZoo says the episode is over
                wiped_out = all(terms[a] for a in sent)  # MAgent2 then terminates the winners too
                ends.append((int(t[e]), wiped_out))
                if scoring == "survivors":
                    standing = [env.unwrapped.env.get_num(h) for h in env.unwrapped.handles]  # red, blue
                    if not wiped_out:  # then PettingZoo's terminations say who stands
                        assert standing == [sum(not terms[a] for a in sent if a.startswith(p)) for p in TEAMS["prefix"]]
                    totals[e] += standing
                assert result.done[e]
                np.testing.assert_allclose(result.returns[e], totals[e], rtol=1e-12)
                finished[e].append(totals[e].copy())
                totals[e], t[e] = 0, 0
                env.reset()
            else:
                assert not result.done[e] and not result.returns[e].any()
                for s in (0, 1):  # the rows of the live agents are PettingZoo's observations
                    b = game.observe_side(s)
                    for k in b.agent[b.env == e]:
                        np.testing.assert_array_equal(b.obs[(b.env == e) & (b.agent == k)][0],
                                                      obs[game.sides[s][k]].reshape(-1))
    # agents did die mid-episode, and left the batch (checked each step above); some episodes ran to
    # the time limit, others ended early when a side was wiped out
    assert deaths >= 2
    assert {wiped for _, wiped in ends} == {True, False}
    assert {length < SMALL["max_cycles"] for length, wiped in ends if wiped} == {True}
    scores = np.array([f for fs in finished for f in fs])
    assert scores.shape == (E * episodes, 2)
    if scoring == "survivors":
        assert set(np.unique(scores)) <= {0.0, 1.0, 2.0} and (scores < 2).any()
    np.testing.assert_array_equal(game.score(scores), np.where(scores[:, 0] > scores[:, 1], 1.0,
                                                               np.where(scores[:, 0] < scores[:, 1], 0.0, 0.5)))


def test_dead_agents_leave_the_batch_and_take_no_action():
    game = make_game(BATTLE, 2, seed=5, teams=TEAMS, **SMALL)
    rng = np.random.default_rng(0)
    for t in range(SMALL["max_cycles"] - 1):
        acts, _ = battle_actions(game, t, rng)
        game.step_team(acts)
        dead = np.argwhere(~game.alive())
        if len(dead):
            break
    assert len(dead), "no agent died; the test's seeds no longer make a fight"
    e, s, k = dead[0]
    b = game.observe_side(s)
    assert not ((b.env == e) & (b.agent == k)).any()
    assert len(b.env) == game.alive()[:, s].sum()
    acts, _ = battle_actions(game, 10, rng)
    acts[e, s, k] = 0
    with pytest.raises(ValueError, match=f"agent {k} of side {s} does not act in env {e}"):
        game.step_team(acts)
    acts[e, s, k] = NO_ACTION
    live = np.argwhere(game.alive())[0]
    acts[tuple(live)] = 21
    with pytest.raises(ValueError, match="illegal action 21"):
        game.step_team(acts)
    with pytest.raises(ValueError, match=r"shape \(2, 2, 2\)"):
        game.step_team(acts[:, :, :1])


def test_max_cycles_ends_episodes_and_resets():
    game = make_game(BATTLE, 2, seed=1, teams={**TEAMS, "max_cycles": 7}, **SMALL)
    rng = np.random.default_rng(0)
    ends = []
    for t in range(21):
        result = game.step_team(battle_actions(game, t % 7, rng)[0])
        ends.append(result.done.copy())
        if result.done.any():
            assert game.alive().all()  # a fresh episode: every agent back
    assert np.array(ends).nonzero()[0].tolist() == [6, 6, 13, 13, 20, 20]


TWO_PLAYER = ["kuhn_poker", "pettingzoo:texas_holdem_v4", "biased_rps"]


@pytest.mark.parametrize("name", TWO_PLAYER)
def test_two_player_game_is_a_team_of_one_on_the_same_path(name):
    a, b = make_game(name, 8, seed=3), make_game(name, 8, seed=3)
    assert a.team_size == 1 == game_info(name).team_size
    rng = np.random.default_rng(0)
    for _ in range(40):
        movers = b.movers()
        np.testing.assert_array_equal(a.alive(), movers[:, :, None])
        team = np.full((8, 2, 1), NO_ACTION, dtype=np.int64)
        plain = np.full((8, 2), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            batch = a.observe_side(s)
            rows = np.flatnonzero(movers[:, s])
            obs, mask = b.observe(s, rows)
            assert batch.env.tolist() == rows.tolist() and not batch.agent.any()
            np.testing.assert_array_equal(batch.obs, obs)
            np.testing.assert_array_equal(batch.mask, mask)
            choice = (rng.random(mask.shape) * mask).argmax(axis=1)
            team[batch.env, s, batch.agent] = choice
            plain[rows, s] = choice
        ra, rb = a.step_team(team), b.step(plain)
        np.testing.assert_array_equal(ra.done, rb.done)
        np.testing.assert_array_equal(ra.returns, rb.returns)
        np.testing.assert_array_equal(a.score(ra.returns), score_from_returns(rb.returns, *utility_range(b)))


def test_two_agent_parallel_game_is_two_teams_of_one():
    """A parallel game of exactly two agents needs no prefixes; rows are PettingZoo's observations."""
    from pettingzoo.classic import rps_v2

    game = make_game("pettingzoo-parallel:pettingzoo.classic.rps_v2:parallel_env", 4, seed=2)
    assert (game.team_size, game.num_actions, game.sides) == (1, 3, (["player_0"], ["player_1"]))
    refs = [rps_v2.parallel_env() for _ in range(4)]
    ref_obs = [env.reset(seed=env_seed(2, e))[0] for e, env in enumerate(refs)]
    for t in range(5):
        acts = np.full((4, 2, 1), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            b = game.observe_side(s)
            assert b.env.tolist() == [0, 1, 2, 3]
            np.testing.assert_array_equal(b.obs[:, 0], [o[game.sides[s][0]] for o in ref_obs])
            acts[:, s, 0] = (t + s + np.arange(4)) % 3
        result = game.step_team(acts)
        for e, env in enumerate(refs):
            ref_obs[e], rewards, *_ = env.step({"player_0": int(acts[e, 0, 0]), "player_1": int(acts[e, 1, 0])})
            if not env.agents:
                ref_obs[e] = env.reset()[0]
                assert result.done[e]
                np.testing.assert_allclose(result.returns[e], [rewards["player_0"], rewards["player_1"]])


@pytest.mark.parametrize("name, teams, params, key, words", [
    (BATTLE, {"prefix": ["red_", "green_"]}, {"map_size": 12}, "game.teams.prefix", "'green_' matches no agent"),
    (BATTLE, {"prefix": ["red_0", "blue_"]}, {"map_size": 12}, "game.teams.prefix", "agent red_1 matches neither"),
    (BATTLE, {"prefix": ["r", "re"]}, {"map_size": 12}, "game.teams.prefix", "matches both"),
    (BATTLE, {"prefix": "red_"}, {"map_size": 12}, "game.teams.prefix", "two non-empty strings"),
    (BATTLE, None, {"map_size": 12}, "game.teams.prefix", "the game has 4 agents"),
    (BATTLE, {**TEAMS, "score": "kills"}, {"map_size": 12}, "game.teams.score", "sum, survivors"),
    (BATTLE, {**TEAMS, "size": 2}, {"map_size": 12}, "game.teams.size", "unknown key"),
    (BATTLE, {**TEAMS, "max_cycles": 0}, {"map_size": 12}, "game.teams.max_cycles", "positive int"),
    (BATTLE, TEAMS, {"map_size": 8}, "game.params", "size of map must be at least 12"),
    ("pettingzoo-parallel:magent2.environments.adversarial_pursuit_v4:parallel_env",
     {"prefix": ["predator_", "prey_"]}, {"map_size": 12}, "game.teams.prefix", "different spaces"),
    ("pettingzoo-parallel:magent2.environments.no_such_game:parallel_env", TEAMS, {}, "game.name",
     "cannot import module"),
    ("kuhn_poker", TEAMS, {}, "game.teams", "only pettingzoo-parallel games have teams"),
])
def test_team_config_errors_are_one_line_naming_the_key(name, teams, params, key, words):
    for build in (lambda: make_game(name, 2, seed=0, teams=teams, **params),
                  lambda: game_info(name, teams=teams, **params)):
        with pytest.raises(TeamError) as info:
            build()
        text = str(info.value)
        assert info.value.key == key and text.startswith(f"{key}: ") and "\n" not in text
        assert words in text


def test_survivors_outside_magent2_are_the_agents_not_terminated():
    """Rock-paper-scissors ends by truncation only: both agents stand, every episode a 1-1 tie."""
    game = make_game("pettingzoo-parallel:pettingzoo.classic.rps_v2:parallel_env", 3, seed=0,
                     teams={"score": "survivors"}, max_cycles=4)
    assert game._groups is None
    ends = [game.step_team(np.zeros((3, 2, 1), dtype=np.int64)) for _ in range(8)]
    assert [r.done.all() for r in ends] == [False, False, False, True] * 2
    np.testing.assert_array_equal(ends[3].returns, np.ones((3, 2)))
    np.testing.assert_array_equal(game.score(ends[3].returns), 0.5)


def test_reset_restores_every_agent_and_mask():
    game = make_game(BATTLE, 2, seed=0, teams=TEAMS, **SMALL)
    first = [game.observe_side(s) for s in (0, 1)]
    rng = np.random.default_rng(0)
    for t in range(12):
        game.step_team(battle_actions(game, t, rng)[0])
    game.reset(0)
    for s in (0, 1):
        again = game.observe_side(s)
        assert again.mask.all()
        np.testing.assert_array_equal(again.obs, first[s].obs)


def test_team_games_keep_the_protocol_check():
    from envs.protocol import check_game, is_team_game

    game = make_game(BATTLE, 2, seed=0, teams=TEAMS, map_size=12, max_cycles=30)
    assert is_team_game(game) and not is_team_game(make_game("kuhn_poker", 2))
    check_game(game, seed=0)  # the shipped adapter keeps it
    from envs import SideBatch

    # a game that forgets an agent's row
    game.observe_side = lambda side: SideBatch(*(x[:-1] for x in type(game).observe_side(game, side)))
    with pytest.raises(ValueError, match=r"observe_side\(0\) rows must be the live agents"):
        check_game(game, seed=0)
    kuhn = make_game("kuhn_poker", 2)
    kuhn.team_size = 3  # declared, without the team view behind it
    with pytest.raises(ValueError, match="team_size is 3 but the game does not implement the team view"):
        check_game(kuhn)


REINFORCEMENTS = '''
import numpy as np
from gymnasium.spaces import Box, Discrete
from pettingzoo.utils.env import ParallelEnv


class Reinforcements(ParallelEnv):
    """a_0 and b_0 start; a_1 and b_1 join after step 2; b_0 dies on step 3; 5 steps in all.
    Observation [step, k, action last played]; an agent k may play actions 0..k+1 (infos' mask);
    its reward is the action it played."""

    metadata = {"name": "reinforcements"}

    def __init__(self):
        self.possible_agents = ["a_0", "a_1", "b_0", "b_1"]

    def observation_space(self, agent):
        return Box(-1.0, 10.0, (3,), np.float32)

    def action_space(self, agent):
        return Discrete(3)

    def _out(self):
        obs = {a: np.array([self.t, int(a[-1]), self.last.get(a, -1)], np.float32) for a in self.agents}
        infos = {a: {"action_mask": np.arange(3) <= int(a[-1]) + 1} for a in self.agents}
        return obs, infos

    def reset(self, seed=None, options=None):
        self.t, self.last, self.agents = 0, {}, ["a_0", "b_0"]
        return self._out()

    def step(self, actions):
        self.t += 1
        self.last = dict(actions)
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = {a: a == "b_0" and self.t == 3 for a in self.agents}
        truncs = {a: self.t == 5 for a in self.agents}
        self.agents = [a for a in self.agents if not terms[a] and not truncs[a]]
        if self.t == 2:
            self.agents += ["a_1", "b_1"]
        obs, infos = self._out()
        return obs, rewards, terms, truncs, infos
'''


@pytest.mark.parametrize("scoring", ["sum", "survivors"])
def test_agents_that_join_enter_the_batch_and_masks_come_from_infos(tmp_path, monkeypatch, scoring):
    (tmp_path / "reinforcements.py").write_text(REINFORCEMENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    game = make_game("pettingzoo-parallel:reinforcements:Reinforcements", 2, seed=0,
                     teams={"prefix": ["a_", "b_"], "score": scoring})
    assert game.team_size == 2 and game.obs_shape == (3,)
    # who acts on each step (before it), for side a and side b, in every environment
    expected = [([0], [0]), ([0], [0]), ([0, 1], [0, 1]), ([0, 1], [1]), ([0, 1], [1])]
    total = np.zeros(2)
    for t, live in enumerate(expected):
        acts = np.full((2, 2, 2), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            b = game.observe_side(s)
            assert b.env.tolist() == [0] * len(live[s]) + [1] * len(live[s]) and b.agent.tolist() == live[s] * 2
            np.testing.assert_array_equal(b.obs[:, :2], [[t, k] for k in live[s] * 2])
            np.testing.assert_array_equal(b.mask, [np.arange(3) <= k + 1 for k in live[s] * 2])
            acts[b.env, s, b.agent] = b.agent + 1  # the largest legal action: reward k + 1
            total[s] += (b.agent[b.env == 0] + 1).sum()
        if t == 0:
            bad = acts.copy()
            bad[0, 0, 0] = 2  # agent 0 may play 0 or 1 only
            with pytest.raises(ValueError, match="illegal action 2 for agent 0 of side 0 in env 0"):
                game.step_team(bad)
        result = game.step_team(acts)
        assert result.done.tolist() == [t == 4] * 2
    want = total if scoring == "sum" else [2, 1]  # b_0 died on step 3
    np.testing.assert_array_equal(result.returns, [want, want])
    assert game.alive()[:, :, 0].all() and not game.alive()[:, :, 1].any()  # reset: a_0, b_0 again


def test_dense_rewards_are_each_agents_own_step_rewards_and_reach_its_trajectory():
    """With ``dense_rewards`` every step carries each agent's reward from the environment, in its
    (env, side, agent) cell; an agent's trajectory sums its own rewards plus the team's margin at
    the end; without it the step carries none and the trajectory holds the margin alone."""
    from envs.protocol import check_game
    from policies.rollout import collect_rollout

    plain = make_game(BATTLE, 2, seed=4, teams=TEAMS, **SMALL)
    assert plain.step_team(np.zeros((2, 2, plain.team_size), dtype=np.int64)).rewards is None
    game = make_game(BATTLE, 2, seed=4, teams={**TEAMS, "dense_rewards": True}, **SMALL)
    check_game(game, seed=0)
    env = game.envs[0]
    rng = np.random.default_rng(0)
    seen = np.zeros((2, 2, game.team_size))
    for _ in range(25):
        alive = game.alive()
        acts = np.where(alive, rng.integers(0, game.num_actions, size=alive.shape), NO_ACTION)
        before = list(env.agents)
        result = game.step_team(acts)
        assert result.rewards.shape == (2, 2, game.team_size) and np.isfinite(result.rewards).all()
        assert (result.rewards[~alive] == 0).all()  # no reward for an agent that did not act
        seen += result.rewards != 0
        if not result.done[0]:
            # env 0's own reward dict of this step, agent by agent (battle's step penalty is never 0)
            for agent in before:
                side, k = game.slot[agent]
                assert result.rewards[0, side, k] != 0
    assert seen.all()
    with pytest.raises(TeamError, match="game.teams.dense_rewards"):
        make_game(BATTLE, 1, teams={**TEAMS, "dense_rewards": "yes"}, **SMALL)

    class Uniform:
        def act(self, obs, mask, generator=None, deterministic=False):
            n = len(obs)
            return generator.integers(0, mask.shape[1], size=n), np.zeros(n, np.float32), np.zeros(n, np.float32)

    uniform = lambda obs, mask: rng.integers(0, game.num_actions, size=len(obs))  # noqa: E731
    for g, dense in ((game, True), (plain, False)):
        rollout, margins = collect_rollout(g, Uniform(), uniform, 200, np.random.default_rng(1), value="return")
        ends = np.flatnonzero(rollout.dones)
        assert rollout.num_episodes == 2 * len(margins)  # two agents a side: two trajectories a game
        last = rollout.rewards[ends]
        if dense:  # per-step rewards before each trajectory's last decision
            assert (rollout.rewards[~rollout.dones] != 0).any()
        else:
            assert (rollout.rewards[~rollout.dones] == 0).all()
            np.testing.assert_allclose(last, np.repeat(margins, 2), atol=1e-6)


def test_team_learning_bench_refuses_a_bad_parameter_and_prints_json_lines(capsys):
    """``experiments.team_learning``: a parameter that is not KEY=NUMBER is refused by the parser; a
    short run prints JSON lines whose scores are scores and whose counts add up."""
    import json

    from experiments import team_learning

    with pytest.raises(SystemExit) as exc:
        team_learning.main(["--param", "attack_penalty=high"])
    assert exc.value.code == 2 and "KEY=NUMBER" in capsys.readouterr().err
    assert team_learning.main(["--map-size", "12", "--updates", "6", "--envs", "2", "--hidden", "8",
                               "--batch", "256", "--param", "attack_penalty=0"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["updates"] for line in lines] == [3, 6]  # a line every third update
    for line in lines:
        assert 0.0 <= line["score_vs_opponent"] <= 1.0 and line["games"] >= 1 and line["opponent"] == "uniform"
        assert line["decisions"] >= 256 * line["updates"] and line["params"] == {"attack_penalty": 0.0}


def test_team_mean_view_follows_each_row_with_its_teams_mean_observation():
    from experiments.team_learning import team_mean_view

    game = make_game(BATTLE, 3, seed=0, teams=TEAMS, **SMALL)
    rng = np.random.default_rng(0)
    for t in range(6):
        game.step_team(battle_actions(game, t, rng)[0])
    view = team_mean_view(game)
    assert view.obs_size == 2 * game.obs_size and view.num_actions == game.num_actions
    for s in (0, 1):
        b, v = game.observe_side(s), view.observe_side(s)
        np.testing.assert_array_equal(v.obs[:, :game.obs_size], b.obs)
        for e in np.unique(b.env):
            np.testing.assert_allclose(v.obs[b.env == e, game.obs_size:], np.broadcast_to(
                b.obs[b.env == e].mean(axis=0), (int((b.env == e).sum()), game.obs_size)), atol=1e-6)


@pytest.mark.parametrize("critic", ["separate", "central"])
def test_team_learning_bench_trains_a_critic_of_its_own_and_scores_the_actor(capsys, critic):
    import json

    from experiments import team_learning

    assert team_learning.main(["--map-size", "12", "--updates", "3", "--envs", "2", "--hidden", "8", "--batch", "256",
                               "--critic", critic, "--eval-games", "4", "--opponent", "scripted"]) == 0
    train, final = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert train["critic"] == final["critic"] == critic and final["updates"] == 3
    assert train["opponent"] == "scripted" and 0.0 <= train["score_vs_opponent"] <= 1.0
    assert set(final["eval"]) == {"uniform", team_learning.SCRIPTED}
    assert all(0.0 <= r["score"] <= 1.0 and r["games"] == 4 for r in final["eval"].values())


def curriculum_config(stages, **game):
    from league.config import load_config

    return load_config({"game": {"name": BATTLE, "teams": TEAMS, "params": {"map_size": 16}, **game,
                                 "curriculum": stages}})


def test_a_curriculum_stage_is_the_game_with_its_params_until_the_learner_reaches_its_step():
    from actors.preflight import check_runnable

    cfg = curriculum_config([{"until_step": 1000, "params": {"map_size": 12}},
                             {"until_step": 5000, "params": {"map_size": 14, "attack_penalty": 0.0}}])
    assert [cfg.game.stage(s) for s in (0, 999, 1000, 4999, 5000, 10**9)] == [0, 0, 1, 1, 2, 2]
    assert cfg.game.stage_kwargs(0) == {"map_size": 12, "teams": TEAMS}
    assert cfg.game.stage_kwargs(1) == {"map_size": 14, "attack_penalty": 0.0, "teams": TEAMS}
    assert cfg.game.stage_kwargs(2) == cfg.game.kwargs == {"map_size": 16, "teams": TEAMS}
    assert check_runnable(cfg).team_size == 6
    assert curriculum_config([]).game.stage(0) == 0  # no curriculum: the game itself from the start


@pytest.mark.parametrize("stages, extra, key, words", [
    ([{"until_step": 0, "params": {"map_size": 12}}], {}, "game.curriculum[0].until_step", "must be > 0"),
    ([{"until_step": 10, "params": {}}, {"until_step": 10, "params": {}}], {}, "game.curriculum[1].until_step",
     "must be > 10"),
    ([{"until_step": 10, "params": {"teams": TEAMS}}], {}, "game.curriculum[0].params", "not its teams"),
    ([{"until_step": 10, "steps": 5}], {}, "game.curriculum[0].steps", "unknown key"),
    ([{"until_step": 10, "params": {"map_size": 8}}], {}, "game.curriculum[0].params", "at least 12"),
    ([{"until_step": 10, "params": {"map_size": 20}}], {}, "game.curriculum[0].params",
     "the stage's teams have 12 agents, more than the game's 6"),
    ([{"until_step": 10, "params": {"minimap_mode": True}}], {}, "game.curriculum[0].params",
     "a stage must keep both"),
])
def test_curriculum_config_errors_are_one_line_naming_the_key(stages, extra, key, words):
    from actors.preflight import check_runnable
    from league.config import ConfigError

    with pytest.raises(ConfigError) as info:
        check_runnable(curriculum_config(stages, **extra))
    text = str(info.value)
    assert info.value.key == key and text.startswith(f"{key}: ") and "\n" not in text
    assert words in text
