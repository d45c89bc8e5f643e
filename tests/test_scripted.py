"""The scripted MAgent2 battle team (evaluation.scripted) and anchors on team games (evaluation.anchors).

The bot's reading of battle's observation and actions is checked against what the engine itself
reports: agents' positions (``GridWorld.get_pos``), HP on the global state, its table of attack
actions (``get_view2attack``)."""

import numpy as np
import pytest

from evaluation.anchors import check_anchor, score_against
from evaluation.scripted import ATTACK_BASE, ATTACKS, MOVES, STAY, AttackNearest

BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"
SCRIPTED = "evaluation.scripted:attack_nearest"


def battle_params(map_size: int, score: str = "survivors", max_cycles: int = 200) -> dict:
    return {"map_size": map_size, "teams": {"prefix": ["red_", "blue_"], "score": score, "max_cycles": max_cycles}}


def raw_battle(map_size: int, seed: int = 0):
    from magent2.environments import battle_v4

    env = battle_v4.parallel_env(map_size=map_size, max_cycles=300)
    obs, _ = env.reset(seed=seed)
    return env, obs


def positions(env) -> dict:
    """agent name -> (x, y), from the engine."""
    raw = env.unwrapped
    return {raw.possible_agents[i]: (int(p[0]), int(p[1])) for h in raw.handles
            for i, p in zip(raw.env.get_agent_id(h), raw.env.get_pos(h))}


def side_rows(obs: dict, agents: list[str]) -> np.ndarray:
    return np.stack([obs[a].reshape(-1) for a in agents])


def test_the_view_shows_every_agent_at_its_offset_from_the_observer():
    """view[6 + dy, 6 + dx] is the cell at offset (dx, dy), seen when within radius 6: channel 1 holds the observer's team,
    channel 3 the other team, and nothing else is there. Checked for both sides while two scripted
    teams close in on each other, so enemies are in view too."""
    env, obs = raw_battle(16)
    bot = AttackNearest(5, 3)
    enemies_seen = 0
    for _ in range(12):
        pos = positions(env)
        for a in env.agents:
            view = obs[a]
            (x, y), team = pos[a], a.split("_")[0]
            want = np.zeros((2, 13, 13))
            for b, (bx, by) in pos.items():
                dx, dy = bx - x, by - y
                if b != a and dx * dx + dy * dy <= 36:  # the view is the circle of radius 6
                    want[0 if b.split("_")[0] == team else 1, 6 + dy, 6 + dx] = 1
            want[0, 6, 6] = 1  # the observer itself, on its own team's plane
            np.testing.assert_array_equal(view[:, :, [1, 3]].transpose(2, 0, 1), want, err_msg=a)
            enemies_seen += int(want[1].sum())
        acts = {}
        for team in ("red_", "blue_"):
            mine = [a for a in env.agents if a.startswith(team)]
            acts.update(zip(mine, bot.act(side_rows(obs, mine), np.ones((len(mine), 21), bool)).tolist()))
        obs, *_ = env.step(acts)
    assert enemies_seen > 0


@pytest.mark.parametrize("action", range(len(MOVES)))
def test_each_move_action_moves_the_agent_by_its_offset(action):
    """The front red agent steps 2 right into open ground (every cell within 2 of it free), then
    takes ``action``: its position changes by MOVES[action]."""
    env, obs = raw_battle(20)
    pos = positions(env)
    front = max((a for a in env.agents if a.startswith("red_")), key=lambda a: pos[a])
    x, y = pos[front]
    acts = {a: STAY for a in env.agents}
    env.step({**acts, front: MOVES.index((2, 0))})
    assert positions(env)[front] == (x + 2, y)
    env.step({**acts, front: action})
    dx, dy = MOVES[action]
    assert positions(env)[front] == (x + 2 + dx, y + dy)


def test_attack_actions_are_the_engines_and_hit_the_neighbour_they_name():
    """The engine's table of attacks (view cell -> attack number) is ATTACKS; and played against a
    team that stands still, every attack the bot makes lands on the enemy at the cell it names:
    that enemy's HP falls by 2 of 10 per attacker (and recovers 0.1), or it dies. The standing
    team is wiped out."""
    env, obs = raw_battle(16)
    raw = env.unwrapped
    base, table = raw.env.get_view2attack(raw.handles[0])
    assert base == ATTACK_BASE == 13
    for i, (dx, dy) in enumerate(ATTACKS):
        assert table[6 + dy, 6 + dx] == i
    assert (table >= 0).sum() == 8

    bot = AttackNearest(5, 3)
    directions = set()
    for attacker, handle in (("red_", 1), ("blue_", 0)):
        env, obs = raw_battle(20)
        raw = env.unwrapped
        hp_channel = 2 + 2 * handle  # the global state's HP plane of the standing team
        for _ in range(150):
            pos = positions(env)
            mine = [a for a in env.agents if a.startswith(attacker)]
            acts = {a: STAY for a in env.agents}
            acts.update(zip(mine, bot.act(side_rows(obs, mine), np.ones((len(mine), 21), bool)).tolist()))
            targets: dict[tuple[int, int], int] = {}
            for a in mine:
                if acts[a] >= ATTACK_BASE:
                    dx, dy = ATTACKS[acts[a] - ATTACK_BASE]
                    directions.add((dx, dy))
                    cell = (pos[a][0] + dx, pos[a][1] + dy)
                    targets[cell] = targets.get(cell, 0) + 1
            standing = {p: b for b, p in pos.items() if not b.startswith(attacker)}
            assert set(targets) <= set(standing), "an attack on a cell without an enemy"
            before = raw.state()
            obs, *_ = env.step(acts)
            if raw.env.get_num(raw.handles[handle]) == 0:
                break
            after = raw.state()
            for (cx, cy), k in targets.items():
                hp = before[cx, cy, hp_channel] - 0.2 * k
                if hp > 0:
                    assert after[cx, cy, hp_channel] == pytest.approx(min(hp + 0.01, 1.0), abs=1e-5)
                else:
                    assert after[cx, cy, hp_channel - 1] == 0  # dead: gone from the map
        assert raw.env.get_num(raw.handles[handle]) == 0, f"{attacker} did not wipe out the standing team"
    assert directions == set(ATTACKS), directions  # all 8 occur: each side attacks from every side


def test_the_scripted_team_beats_a_uniform_random_team():
    """Uniform random play (the scored mixture) against the scripted anchor loses nearly every
    game: the scripted side ends with more agents standing. A side that stands still instead
    ties every game (no one dies), so the bound can fail."""
    out = score_against(BATTLE, battle_params(16), [None], [1.0], SCRIPTED, games=20, seed=0)
    assert out["games"] == 20 and out["score"] <= 0.2, out


def test_a_survivors_trace_counts_the_agents_standing_and_ends_with_the_games_score():
    """``survivors_trace``: one game against the scripted team, the agents each side has standing
    at every step, the start and the end included. Nobody revives, so the counts never rise; the
    score is the game's survivors score of the traced side, whichever seat it played."""
    from evaluation.anchors import _UniformPlayer, survivors_trace

    for seat in (0, 1):
        t = survivors_trace(BATTLE, battle_params(16), _UniformPlayer(), SCRIPTED, seat=seat, seed=seat)
        rows = np.array(t["survivors"])
        assert t["seat"] == seat and t["anchor"] == SCRIPTED and rows[0].tolist() == [6, 6]
        assert (np.diff(rows, axis=0) <= 0).all() and 2 <= len(rows) <= 200 + 2
        mine, theirs = rows[-1]
        assert t["score"] == (1.0 if mine > theirs else 0.5 if mine == theirs else 0.0), t
    with pytest.raises(ValueError, match="game protocol"):
        survivors_trace("connect_four", None, _UniformPlayer(), "mcts:10")


def test_uniform_against_uniform_on_a_team_game_scores_one_half_by_the_games_score():
    """Identical random teams with seats alternated: the expected score is 1/2. With summed
    rewards decided by comparison each game is a win or a loss (a tie needs equal sums), so the
    scores are the game's 1/0 results, not rescaled returns."""
    out = score_against(BATTLE, battle_params(12, score="sum", max_cycles=30), [None], [1.0], "uniform",
                        games=200, seed=1)
    assert out["ci95"][0] <= 0.5 <= out["ci95"][1] and abs(out["score"] - 0.5) < 0.1, out
    half = (out["ci95"][1] - out["ci95"][0]) / 2
    # the interval of 0/1 results with mean ~1/2: 1.96 * 0.5 / sqrt(200) ~ 0.069
    assert half == pytest.approx(1.959964 * 0.5 / np.sqrt(200), abs=0.01), out


def test_game_score_is_the_rescaled_return_on_a_two_player_game():
    """collect_rollout(value="game_score") is the game's score: on Kuhn poker, the return
    rescaled from [-2, 2]; two runs of one seed play the same games."""
    from envs import make_game
    from evaluation.anchors import _UniformPlayer
    from policies.rollout import EpisodeMixture, collect_rollout

    got = {}
    for value in ("return", "game_score"):
        rng = np.random.default_rng(5)
        game = make_game("kuhn_poker", 8, seed=5)
        _, got[value] = collect_rollout(game, _UniformPlayer(), EpisodeMixture([None], [1.0], rng), 200, rng,
                                        value=value, seats="alternate")
    assert len(got["return"]) >= 100 and len(np.unique(got["return"])) > 2
    np.testing.assert_allclose(got["game_score"], (got["return"] + 2) / 4)


def test_check_anchor_on_a_team_game():
    params = battle_params(12)
    check_anchor("uniform", BATTLE, params)
    check_anchor(SCRIPTED, BATTLE, params)
    with pytest.raises(ValueError, match="needs a sequential OpenSpiel game") as err:
        check_anchor("mcts:10", BATTLE, params)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(ValueError, match="needs a sequential OpenSpiel game"):
        score_against(BATTLE, params, [None], [1.0], "mcts:10", games=1)
    with pytest.raises(ValueError, match="attack_nearest plays MAgent2's battle"):
        check_anchor(SCRIPTED, "rps")
    with pytest.raises(ValueError, match="returned str, which has no act"):
        check_anchor("builtins:repr", BATTLE, params)  # a factory whose result has no act(obs, mask)
    with pytest.raises(ValueError, match="failed: TypeError"):
        check_anchor("envs.matrix:MatrixNash", BATTLE, params)  # a factory that does not take the game
    with pytest.raises(ValueError, match="cannot load"):
        check_anchor("evaluation.scripted:nope", BATTLE, params)
