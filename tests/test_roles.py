"""Each AlphaStar role class against a pool whose win rates are known: its opponent distribution
(closed forms of the PFSP weights and the configured branch shares), its snapshot rule, its reset rule."""

import numpy as np
import pytest

from league.config import Config
from league.matchmaking import LeagueView
from league.roles import match_plan
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentType
from league.roles import LeagueExploiter, MainAgent, MainExploiter, make_role

MAIN, MX, LX = AgentType.MAIN_AGENT, AgentType.MAIN_EXPLOITER, AgentType.LEAGUE_EXPLOITER


def league_view(learners: dict[str, AgentType], snapshots: list[tuple[str, AgentType]],
                rates: dict[tuple[str, str], float]) -> LeagueView:
    """Snapshots ``(learner, type)`` in order (ids ``learner-vN``), and exact win rates: each pair of
    ``rates`` played 100 games (``rate`` of them won), every other pair none (rate 0.5)."""
    pool, table = AgentPool(), PayoffTable(decay=1.0)
    for learner, kind in snapshots:
        pool.add(agent_type=kind, learner_id=learner)
    for a in [*learners, *pool.ids()]:
        table.add_agent(a)
    for (a, b), r in rates.items():
        table.record_counts([a], [b], [100.0], [100.0 * r], [0.0], [100.0 * (1 - r)], decay=1.0)
    return LeagueView(pool=pool, win_rates=table, learners=learners, nash_weights={})


def shares(plan) -> dict[str, float]:
    """Probability of each branch name per match."""
    out: dict[str, float] = {}
    for (_, branch, _), p in plan.distribution().items():
        out[branch] = out.get(branch, 0.0) + p
    return out


def test_make_role_gives_each_agent_type_its_class():
    roles = Config().roles
    assert type(make_role(MAIN, roles.main_agent)) is MainAgent
    assert type(make_role("main_exploiter", roles.main_exploiter)) is MainExploiter
    assert type(make_role(LX, roles.league_exploiter)) is LeagueExploiter


def test_main_agent_plays_self_play_pfsp_and_forgotten_with_the_configured_shares():
    view = league_view({"main": MAIN}, [("main", MAIN)] * 3 + [("mx", MX)],
                       {("main", "main-v1"): 0.2, ("main", "main-v2"): 0.5, ("main", "main-v3"): 0.9,
                        ("main", "mx-v1"): 0.1})
    cfg = Config().roles.main_agent  # 35/50/15, f_hard p=2 ("squared"), forgotten below 0.7 (main) / 0.3 (exploiter)
    plan = MainAgent(cfg).match_plan("main", view)
    dist = plan.distribution()
    assert sum(dist.values()) == pytest.approx(1.0)
    assert shares(plan) == pytest.approx({"self_play": 0.35, "pfsp": 0.50, "forgotten": 0.15})
    assert dist[("main", "self_play", True)] == pytest.approx(0.35)
    # PFSP over the whole pool: (1 - x)^2 of 0.2, 0.5, 0.9, 0.1
    w = {"main-v1": 0.64, "main-v2": 0.25, "main-v3": 0.01, "mx-v1": 0.81}
    for a, wa in w.items():
        assert dist[(a, "pfsp", False)] == pytest.approx(0.5 * wa / 1.71)
    # forgotten: the exploiter beaten 10% (< 0.3) and the main snapshots beaten 20% and 50% (< 0.7), not 90%
    for a in ("mx-v1", "main-v1", "main-v2"):
        assert dist[(a, "forgotten", False)] == pytest.approx(0.15 * w[a] / 1.70)
    assert ("main-v3", "forgotten", False) not in dist


def test_main_agent_with_an_empty_pool_plays_only_itself():
    view = league_view({"main": MAIN}, [], {})
    assert MainAgent(Config().roles.main_agent).match_plan("main", view).distribution() == {
        ("main", "self_play", True): 1.0}


def test_main_agent_forgets_nothing_plays_pfsp_in_the_forgotten_share():
    view = league_view({"main": MAIN}, [("main", MAIN)] * 2, {("main", "main-v1"): 0.8, ("main", "main-v2"): 0.9})
    plan = MainAgent(Config().roles.main_agent).match_plan("main", view)
    assert shares(plan) == pytest.approx({"self_play": 0.35, "pfsp": 0.65})
    assert plan.distribution()[("main-v1", "pfsp", False)] == pytest.approx(0.65 * 0.04 / 0.05)


def test_main_agent_splits_self_play_over_main_agents_and_takes_a_curriculum_against_one_it_loses_to():
    # m0 beats m1 40% (> live_threshold 0.3: live) and m2 10% (below: f_var PFSP over m2's snapshots)
    view = league_view({"m0": MAIN, "m1": MAIN, "m2": MAIN}, [("m2", MAIN), ("m2", MAIN)],
                       {("m0", "m1"): 0.4, ("m0", "m2"): 0.1, ("m0", "m2-v1"): 0.5, ("m0", "m2-v2"): 0.2})
    dist = MainAgent(Config().roles.main_agent).match_plan("m0", view).distribution()
    assert sum(dist.values()) == pytest.approx(1.0)
    assert dist[("m0", "self_play", True)] == pytest.approx(0.35 / 3)
    assert dist[("m1", "self_play", True)] == pytest.approx(0.35 / 3)
    var = {"m2-v1": 0.25, "m2-v2": 0.16}  # x (1 - x)
    for a, v in var.items():
        assert dist[(a, "self_play_pfsp", False)] == pytest.approx(0.35 / 3 * v / 0.41)
    assert ("m2", "self_play", True) not in dist


def test_main_exploiter_plays_each_main_agent_live_or_its_snapshots_as_a_curriculum():
    # beats m1 50% (> live_threshold 0.1: live), m2 5% (below: f_var PFSP over m2's snapshots)
    view = league_view({"m1": MAIN, "m2": MAIN, "mx": MX}, [("m2", MAIN), ("m2", MAIN), ("m1", MAIN)],
                       {("mx", "m1"): 0.5, ("mx", "m2"): 0.05, ("mx", "m2-v1"): 0.3, ("mx", "m2-v2"): 0.6})
    role = MainExploiter(Config().roles.main_exploiter)
    dist = role.match_plan("mx", view).distribution()
    assert sum(dist.values()) == pytest.approx(1.0)
    assert dist[("m1", "vs_main", True)] == pytest.approx(0.5)
    assert dist[("m2-v1", "vs_main_pfsp", False)] == pytest.approx(0.5 * 0.21 / 0.45)
    assert dist[("m2-v2", "vs_main_pfsp", False)] == pytest.approx(0.5 * 0.24 / 0.45)
    assert not any(a == "m1-v1" for a, _, _ in dist)  # nothing else of the pool
    assert role.snapshot_targets("mx", view) == ["m1", "m2"]


def test_main_exploiter_without_main_agents_plays_the_league_exploiters_rule():
    view = league_view({"mx": MX}, [("gone", MAIN), ("gone", MAIN)], {("mx", "gone-v1"): 0.2, ("mx", "gone-v2"): 0.6})
    dist = MainExploiter(Config().roles.main_exploiter).match_plan("mx", view).distribution()
    # PFSP with the main exploiter's own weighting, f_var
    assert dist == pytest.approx({("gone-v1", "pfsp", False): 0.16 / 0.40, ("gone-v2", "pfsp", False): 0.24 / 0.40})


def test_league_exploiter_plays_pfsp_over_the_whole_pool_and_targets_all_but_its_own_snapshots():
    view = league_view({"main": MAIN, "lx": LX}, [("main", MAIN), ("main", MAIN), ("lx", LX)],
                       {("lx", "main-v1"): 0.2, ("lx", "main-v2"): 0.7, ("lx", "lx-v1"): 0.6})
    role = LeagueExploiter(Config().roles.league_exploiter)
    dist = role.match_plan("lx", view).distribution()
    w = {"main-v1": 0.5, "main-v2": 0.3, "lx-v1": 0.4}  # min(0.5, 1 - x)
    assert dist == pytest.approx({(a, "pfsp", False): wa / 1.2 for a, wa in w.items()})
    assert role.snapshot_targets("lx", view) == ["main-v1", "main-v2"]
    empty = league_view({"main": MAIN, "lx": LX}, [], {})
    assert role.match_plan("lx", empty).distribution() == {("main", "vs_main", True): 1.0}


@pytest.mark.parametrize("agent_type", [MAIN, MX, LX])
def test_match_plan_of_matchmaking_is_the_role_objects_plan(agent_type):
    view = league_view({"main": MAIN, "mx": MX, "lx": LX}, [("main", MAIN), ("mx", MX)],
                       {("main", "main-v1"): 0.3, ("mx", "main"): 0.05, ("lx", "mx-v1"): 0.8})
    learner = {MAIN: "main", MX: "mx", LX: "lx"}[agent_type]
    cfg = Config().role(agent_type)
    assert match_plan(learner, agent_type, cfg, view).distribution() == make_role(agent_type, cfg).match_plan(
        learner, view).distribution()


def test_main_agent_snapshots_every_n_steps_whatever_it_beats():
    role = MainAgent(Config().roles.main_agent)
    n = role.cfg.snapshot_every_steps
    assert role.should_snapshot(n).reason == "steps"
    assert not role.should_snapshot(n - 1, [1.0], [10_000]).snapshot
    assert role.snapshot_targets("main", league_view({"main": MAIN}, [("main", MAIN)], {})) == []


@pytest.mark.parametrize("cls, name", [(MainExploiter, "main_exploiter"), (LeagueExploiter, "league_exploiter")])
def test_exploiters_snapshot_early_once_they_beat_every_target(cls, name):
    role = cls(getattr(Config().roles, name))
    cfg = role.cfg
    early, enough = cfg.min_steps_before_snapshot, cfg.min_games_for_snapshot
    assert role.should_snapshot(cfg.snapshot_every_steps).reason == "steps"
    assert role.should_snapshot(early, [0.71, 0.9], [enough, enough]).reason == "win_rate"
    assert not role.should_snapshot(early, [0.71, 0.7], [enough, enough]).snapshot  # 0.7 is not beating it > 70%
    assert not role.should_snapshot(early - 1, [0.9], [enough]).snapshot  # too early
    assert not role.should_snapshot(early, [0.9], [enough - 1]).snapshot  # too few games
    assert not role.should_snapshot(early, [], []).snapshot  # no target


def test_main_agent_never_resets_and_draws_no_random_number():
    role, rng = MainAgent(Config().roles.main_agent), np.random.default_rng(0)
    state = rng.bit_generator.state
    assert not any(role.should_reset(rng) for _ in range(100))
    assert rng.bit_generator.state == state


def test_main_exploiter_always_resets_and_league_exploiter_with_probability_a_quarter():
    roles, rng = Config().roles, np.random.default_rng(0)
    state = rng.bit_generator.state
    assert all(MainExploiter(roles.main_exploiter).should_reset(rng) for _ in range(100))
    assert rng.bit_generator.state == state  # p = 1: no random number drawn
    n = 20000
    freq = sum(LeagueExploiter(roles.league_exploiter).should_reset(rng) for _ in range(n)) / n
    assert abs(freq - 0.25) < 4 * np.sqrt(0.25 * 0.75 / n)


def test_reset_target_is_a_snapshot_id_or_the_newest_snapshot_of_a_role():
    view = league_view({"main": MAIN}, [("main", MAIN), ("mx", MX), ("main", MAIN)], {})
    cfg = Config().roles.league_exploiter
    assert LeagueExploiter(cfg).reset_target(view.pool) is None  # a fresh initialisation
    cfg.reset_to = "main_agent"
    assert LeagueExploiter(cfg).reset_target(view.pool) == "main-v2"
    cfg.reset_to = "league_exploiter"
    assert LeagueExploiter(cfg).reset_target(view.pool) is None  # none yet
    cfg.reset_to = "mx-v1"
    assert LeagueExploiter(cfg).reset_target(view.pool) == "mx-v1"
    assert MainAgent(Config().roles.main_agent).reset_target(view.pool) is None
