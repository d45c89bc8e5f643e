"""Match plans: a worker drawing from the coordinator's plan with a random stream gets exactly the
matches ``next_matches`` would draw with that stream; the coordinator remakes a plan when the pool or
the Nash change, and while results arrive at most every ``league.match_plan_seconds``."""

import numpy as np
import pytest

from league.config import load_config
from league.league import League
from league.matchmaking import MatchSampler
from league.messages import ResultBatch
from league.store import LeagueStore


def league_with_pool(path, *overrides):
    cfg = load_config(None, [f"run.storage={path}", "roles.league_exploiter.count=1", "league.match_plan_seconds=5",
                             *overrides])
    league = League(cfg, LeagueStore(path))
    for i in range(4):
        league.add_snapshot("main_agent-0", b"w", step=10 * (i + 1))
        league.add_snapshot("main_exploiter-0", b"w", step=10 * (i + 1))
    return league


def same(x, y):
    return (x.learner_id, x.opponents, x.live.tolist(), x.opponent.tolist(), x.branches, x.branch.tolist()) == \
           (y.learner_id, y.opponents, y.live.tolist(), y.opponent.tolist(), y.branches, y.branch.tolist())


@pytest.mark.parametrize("sampling", ["alphastar", "pfsp", "nash", "latest", "self"])
def test_a_plan_draws_what_next_matches_draws(tmp_path, sampling):
    league = league_with_pool(tmp_path, f"roles.main_agent.sampling={sampling}")
    for learner_id in league.learners:
        plan = league.match_plan(learner_id, now=0.0)
        league.rng = np.random.default_rng(7)
        assert same(plan.draw(np.random.default_rng(7), 300), league.next_matches(learner_id, 300))
        total = sum(plan.distribution().values())
        assert total == pytest.approx(1.0)


def test_plans_are_remade_when_the_league_changes(tmp_path):
    league = league_with_pool(tmp_path)
    plan = league.match_plan("main_agent-0", now=100.0)
    assert league.match_plan("main_agent-0", plan.version, now=100.0) is None
    batch = ResultBatch("w", 1, ("main_agent-0", league.pool.ids()[0]), [0], [1], [10], [10], [0], [10.0])
    league.report_results(batch)
    # results move the win rates: a new plan, but not before match_plan_seconds (5) have passed
    assert league.match_plan("main_agent-0", plan.version, now=104.0) is None
    later = league.match_plan("main_agent-0", plan.version, now=105.0)
    assert later is not None and later.version != plan.version
    assert league.match_plan("main_agent-0", later.version, now=200.0) is None  # nothing new since
    league.add_snapshot("main_agent-0", b"w", step=1000)  # the pool changed: at once
    newest = league.match_plan("main_agent-0", later.version, now=200.0)
    assert newest is not None
    assert league.pool.latest("main_agent-0").agent_id in {o for b in newest.branches for o in b.opponents}
    # another life of the coordinator never repeats a version
    again = League(league.cfg, LeagueStore(tmp_path))
    assert again.match_plan("main_agent-0", newest.version, now=200.0) is not None


def test_a_sampler_draws_from_the_plan_it_was_given(tmp_path):
    league = league_with_pool(tmp_path)
    sampler = MatchSampler("main_agent-0", np.random.default_rng(3), refresh_seconds=1.0)
    assert sampler.due(0.0)
    with pytest.raises(RuntimeError):
        sampler.draw(4)
    with pytest.raises(ValueError, match="main_exploiter-0"):
        sampler.update(league.match_plan("main_exploiter-0"))
    plan = league.match_plan("main_agent-0", now=10.0)
    sampler.asked(10.0)
    sampler.update(plan)
    sampler.update(None)  # "yours is current"
    assert sampler.version == plan.version and not sampler.due(10.5) and sampler.due(11.0)
    assert same(sampler.draw(50), plan.draw(np.random.default_rng(3), 50))
    with pytest.raises(ValueError, match="unknown learner"):
        league.match_plan("nobody")


@pytest.mark.parametrize("size, n", [(1, 1), (5, 3), (1004, 512), (40, 10_000)])
def test_a_draws_compaction_is_numpys_unique(size, n):
    """A draw lists the opponents it used and each match's index among them; the sort-free
    compaction gives exactly what ``np.unique(..., return_inverse=True)`` gives."""
    from league.matchmaking import _compact

    codes = np.random.default_rng(size + n).integers(0, size, n)
    used, inverse = _compact(codes, size)
    ref_used, ref_inverse = np.unique(codes, return_inverse=True)
    assert used.tolist() == ref_used.tolist() and inverse.tolist() == ref_inverse.reshape(-1).tolist()
    assert inverse.dtype == np.int64 and (used[inverse] == codes).all()
