import numpy as np
import pytest

from league import AgentPool, AgentType, LeagueMatchmaker, PayoffTable, pfsp_probabilities, pfsp_weights
from league.config import Config
from league.matchmaking import LeagueView, f_hard, f_linear_capped, f_var
from league.roles import choose_match, choose_matches


def record_games(table, a_ids, b_ids, outcomes):
    """Games one by one: ``a_ids[k]`` scored ``outcomes[k]`` against ``b_ids[k]``."""
    for a, b, outcome in zip(a_ids, b_ids, outcomes):
        table.record(a, b, outcome)


def test_pfsp_weightings_equal_their_formulas():
    x = np.linspace(0, 1, 11)
    assert np.allclose(pfsp_weights(x, "hard", p=3.0), (1 - x) ** 3)
    assert np.allclose(pfsp_weights(x, "squared"), (1 - x) ** 2)
    assert np.allclose(pfsp_weights(x, "variance"), x * (1 - x))
    assert np.allclose(pfsp_weights(x, "linear"), 1 - x)
    assert np.allclose(pfsp_weights(x, "linear_capped"), np.minimum(0.5, 1 - x))
    assert np.allclose(pfsp_weights(x, lambda v: v + 1), x + 1)
    p = pfsp_probabilities([0.2, 0.5, 0.9], "hard", p=2.0)
    assert np.allclose(p, np.array([0.64, 0.25, 0.01]) / 0.9)
    assert np.allclose(pfsp_probabilities([1.0, 1.0]), [0.5, 0.5])  # all-zero weights: uniform
    with pytest.raises(ValueError, match="unknown PFSP weighting"):
        pfsp_weights([0.5], "cubic")
    with pytest.raises(ValueError, match="win rates"):
        pfsp_weights([np.nan])


def _pool_with_rates(rates):
    pool = AgentPool()
    table = PayoffTable(decay=1.0)
    ids = [pool.add(learner_id=f"l{i}").agent_id for i in range(len(rates))]
    for b, r in zip(ids, rates):
        # r = focal's win rate against b, from 100 games
        wins = int(round(r * 100))
        record_games(table, ["focal"] * 100, [b] * 100, [1.0] * wins + [0.0] * (100 - wins))
    return pool, table, ids


def test_select_opponent_frequencies_follow_pfsp_hard():
    pool, table, ids = _pool_with_rates([0.1, 0.5, 0.8])
    mm = LeagueMatchmaker(pool, table, seed=0)
    expected = f_hard(np.array([0.1, 0.5, 0.8])) / f_hard(np.array([0.1, 0.5, 0.8])).sum()
    assert np.allclose(list(mm.opponent_probabilities("focal").values()), expected)
    n = 20000
    draws = [mm.select_opponent("focal") for _ in range(n)]
    freq = np.array([draws.count(a) for a in ids]) / n
    assert np.all(np.abs(freq - expected) < 4 * np.sqrt(expected * (1 - expected) / n))


def test_nash_weights_override_pfsp_and_can_be_reverted():
    pool, table, ids = _pool_with_rates([0.1, 0.5, 0.8])
    mm = LeagueMatchmaker(pool, table, seed=1)
    mm.set_nash_weights({ids[0]: 0.25, ids[2]: 0.75})
    assert mm.opponent_probabilities("focal") == {ids[0]: 0.25, ids[1]: 0.0, ids[2]: 0.75}
    mm.set_nash_weights(None)
    assert mm.opponent_probabilities("focal")[ids[1]] > 0
    with pytest.raises(ValueError, match="finite"):
        mm.set_nash_weights({ids[0]: float("nan")})
    mm.set_weight_function(lambda x: x)  # easy-first
    probs = mm.opponent_probabilities("focal")
    assert probs[ids[2]] == pytest.approx(0.8 / 1.4)


def test_same_seed_gives_same_matches():
    pool, table, ids = _pool_with_rates([0.3, 0.4, 0.5, 0.6])
    a = LeagueMatchmaker(pool, table, seed=7)
    b = LeagueMatchmaker(pool, table, seed=7)
    assert [a.select_opponent("focal") for _ in range(50)] == [b.select_opponent("focal") for _ in range(50)]


def _league_view():
    pool = AgentPool()
    table = PayoffTable(decay=1.0)
    learners = {"main": AgentType.MAIN_AGENT, "mx": AgentType.MAIN_EXPLOITER, "lx": AgentType.LEAGUE_EXPLOITER}
    for _ in range(3):
        pool.add(agent_type=AgentType.MAIN_AGENT, learner_id="main")
    pool.add(agent_type=AgentType.MAIN_EXPLOITER, learner_id="mx")
    for a in list(learners) + pool.ids():
        table.add_agent(a)
    return LeagueView(pool=pool, win_rates=table, learners=learners, nash_weights={}), table


def test_main_agent_branch_proportions_hold():
    view, table = _league_view()
    # make every past player "forgotten": main loses to all of them
    for a in view.pool.ids():
        record_games(table, ["main"] * 10, [a] * 10, [0.0] * 10)
    cfg = Config().roles.main_agent
    rng = np.random.default_rng(0)
    n = 20000
    branches = [choose_match("main", AgentType.MAIN_AGENT, cfg, view, rng).branch for _ in range(n)]
    for name, p in (("self_play", cfg.self_play), ("pfsp", cfg.pfsp), ("forgotten", cfg.forgotten)):
        freq = branches.count(name) / n
        assert abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n), (name, freq)


def test_main_exploiter_plays_live_main_then_curriculum_over_its_snapshots():
    view, table = _league_view()
    cfg = Config().roles.main_exploiter
    rng = np.random.default_rng(0)
    m = choose_match("mx", AgentType.MAIN_EXPLOITER, cfg, view, rng)
    assert (m.opponent_id, m.live) == ("main", True)  # 0.5 > 0.1
    record_games(table, ["mx"] * 20, ["main"] * 20, [0.0] * 20)  # now it never wins
    picks = {choose_match("mx", AgentType.MAIN_EXPLOITER, cfg, view, rng).opponent_id for _ in range(200)}
    assert picks == {"main-v1", "main-v2", "main-v3"}


def test_sampling_modes_nash_latest_self():
    view, _ = _league_view()
    rng = np.random.default_rng(0)
    cfg = Config().roles.league_exploiter
    cfg.sampling = "nash"
    view.nash_weights = {"main-v2": 1.0}
    assert {choose_match("lx", AgentType.LEAGUE_EXPLOITER, cfg, view, rng).opponent_id for _ in range(20)} == {"main-v2"}
    cfg.sampling = "latest"
    assert choose_match("main", AgentType.MAIN_AGENT, cfg, view, rng).opponent_id == "main-v3"
    cfg.sampling = "self"
    m = choose_match("main", AgentType.MAIN_AGENT, cfg, view, rng)
    assert (m.opponent_id, m.live) == ("main", True)


@pytest.mark.parametrize("sampling, weights", [("pfsp", None), ("nash", {"main-v1": 0.2, "main-v3": 0.5, "mx-v1": 0.3})])
def test_batched_draws_follow_the_rule_distribution(sampling, weights):
    """choose_matches(n) draws i.i.d. from the same distribution as n calls of choose_match."""
    from scipy.stats import chisquare

    view, table = _league_view()
    for a, score in zip(view.pool.ids(), (0.2, 0.5, 0.7, 0.9)):
        record_games(table, ["lx"] * 50, [a] * 50, [score] * 50)
    view.nash_weights = weights or {}
    cfg = Config().roles.league_exploiter
    cfg.sampling = sampling
    ids = view.pool.ids()
    if weights is None:
        expected = pfsp_probabilities(table.win_rates_for("lx", ids), cfg.pfsp_weighting, cfg.pfsp_exponent)
    else:
        expected = np.array([weights.get(a, 0.0) for a in ids])
    n = 20000
    matches = choose_matches("lx", AgentType.LEAGUE_EXPLOITER, cfg, view, np.random.default_rng(1), n)
    assert {m.branch for m in matches} == {sampling} and not any(m.live for m in matches)
    counts = np.array([sum(m.opponent_id == a for m in matches) for a in ids])
    assert counts[expected == 0].sum() == 0
    keep = expected > 0
    assert chisquare(counts[keep], expected[keep] * n).pvalue > 1e-4


def test_batched_alphastar_draws_keep_the_branch_proportions():
    view, table = _league_view()
    cfg = Config().roles.main_agent
    matches = choose_matches("main", AgentType.MAIN_AGENT, cfg, view, np.random.default_rng(0), 4000)
    freq = sum(m.branch == "self_play" for m in matches) / 4000
    assert abs(freq - cfg.self_play) < 4 * np.sqrt(cfg.self_play * (1 - cfg.self_play) / 4000)


def test_capped_and_variance_helpers():
    assert f_var(0.5) == 0.25 and f_linear_capped(0.1) == 0.5


@pytest.mark.parametrize("role", [AgentType.MAIN_AGENT, AgentType.MAIN_EXPLOITER, AgentType.LEAGUE_EXPLOITER])
def test_matches_cut_and_joined_are_the_same_matches(role):
    """A worker queues draws and plays them in parts: cutting draws and joining the parts keeps every
    match (opponent, liveness, branch) in order, whatever opponents and branches each part lists."""
    from league.messages import MatchAssignments

    view, table = _league_view()
    record_games(table, ["mx"] * 20, ["main"] * 20, [0.0] * 20)  # the exploiter's curriculum branch is live
    learner = {AgentType.MAIN_AGENT: "main", AgentType.MAIN_EXPLOITER: "mx", AgentType.LEAGUE_EXPLOITER: "lx"}[role]
    cfg = getattr(Config().roles, role.value)
    first = choose_matches(learner, role, cfg, view, np.random.default_rng(5), 300)
    view.nash_weights = {"main-v1": 1.0}
    cfg.sampling = "nash"  # a second plan: other opponents and another branch
    second = choose_matches(learner, role, cfg, view, np.random.default_rng(6), 200)
    whole = list(first) + list(second)
    assert len(whole) == 500 and all(m.learner_id == learner for m in whole)
    cuts = [0, 1, 150, 300, 301, 420, 500]
    parts = [(first if a < 300 else second).part(a - (0 if a < 300 else 300), b - (0 if a < 300 else 300))
             for a, b in zip(cuts, cuts[1:])]
    joined = MatchAssignments.concat(parts)
    assert list(joined) == whole
    assert sorted(joined.opponents) == sorted({m.opponent_id for m in whole})
    assert sum(joined.branch_counts().values()) == 500 and joined.branch_counts()["nash"] == 200
