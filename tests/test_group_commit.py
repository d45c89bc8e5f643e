"""Group commit: several result batches applied in one transaction give the league that applying them
one by one gives (payoff, Elo, counters, stored batches); a bad or repeated batch holds back nothing."""

import numpy as np
import pytest

from league.config import load_config
from league.league import League
from league.messages import Result, ResultBatch
from league.store import LeagueStore


def league_with_pool(path):
    cfg = load_config(None, [f"run.storage={path}", "roles.league_exploiter.count=1"])
    league = League(cfg, LeagueStore(path))
    frozen = [league.add_snapshot("main_agent-0", b"w", step=10 * (i + 1))[0].agent_id for i in range(3)]
    return league, frozen


def batches(frozen, rng, n_batches=6, size=40):
    out = []
    for k in range(n_batches):
        results = []
        for _ in range(size):
            a = ["main_agent-0", "main_exploiter-0", frozen[0]][rng.integers(3)]
            b = frozen[rng.integers(len(frozen))]
            if a != b:
                results.append(Result(a, b, float(rng.integers(0, 3)) / 2))
        out.append(ResultBatch.from_results(f"w{k % 2}", k, results, 3 * len(results)))
    return out


def test_one_group_equals_the_batches_one_by_one(tmp_path):
    one, frozen = league_with_pool(tmp_path / "one")
    many, _ = league_with_pool(tmp_path / "many")
    work = batches(frozen, np.random.default_rng(0))
    assert [one.report_results(b) for b in work] == [True] * len(work)
    assert many.intake.report(work) == [True] * len(work)
    ids = sorted(set(one.learners) | set(frozen))
    assert np.allclose(one.payoff.games_matrix(ids), many.payoff.games_matrix(ids))
    for a in ids:
        for b in ids:
            if a != b:
                assert many.payoff.counts(a, b) == pytest.approx(one.payoff.counts(a, b))
        assert many.elo.rating(a) == pytest.approx(one.elo.rating(a))
    assert many.counters == one.counters
    for league in (one, many):
        stored = league.store._query("SELECT source, seq FROM results ORDER BY source, seq")
        assert stored == sorted((b.source, b.seq) for b in work)


def test_a_bad_or_repeated_batch_holds_back_nothing_else(tmp_path):
    league, frozen = league_with_pool(tmp_path)
    good = [Result("main_agent-0", frozen[0], 1.0)]
    batch = lambda seq: ResultBatch.from_results("w", seq, good, 10)  # noqa: E731
    out = league.intake.report([batch(1), ("w", 2, good, 10), batch(1), batch(3)])
    assert out[0] is True and isinstance(out[1], ValueError) and out[2] is False and out[3] is True
    assert league.counters == {"games": 2.0, "env_steps": 20.0}
    assert league.intake.report([batch(3)]) == [False]  # already stored
    reopened = League(league.cfg, LeagueStore(tmp_path))
    assert reopened.counters == {"games": 2.0, "env_steps": 20.0}


def test_a_batch_naming_its_learner_twice_counts_self_play_as_games_only(tmp_path):
    # what a rollout worker sends: agents = (learner, *opponents), and self-play lists the learner again
    league, frozen = league_with_pool(tmp_path)
    batch = ResultBatch.from_games("w", 1, ("main_agent-0", "main_agent-0", frozen[0]), np.zeros(3, dtype=np.int64),
                                   np.array([1, 1, 2]), np.array([1.0, 0.0, 1.0]), env_steps=9)
    assert league.report_results(batch)
    assert league.counters == {"games": 3.0, "env_steps": 9.0}
    assert league.payoff.counts("main_agent-0", frozen[0]) == pytest.approx((1.0, 0.0, 0.0))
