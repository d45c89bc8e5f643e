"""league/publication.py: the meta-game Nash, the published mixture and their protection from eviction."""

import numpy as np
import pytest

from league.elo import EloTable
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord, AgentType
from league.publication import Publication
from league.store import LeagueStore

RPS = ("rock", "paper", "scissors")


def publication(store=None, publish="nash", max_size=None):
    pool, payoff, elo = AgentPool(max_size=max_size), PayoffTable(decay=1.0), EloTable()
    for x in RPS:
        pool.insert(AgentRecord(x, 1, AgentType.MAIN_AGENT))
        payoff.add_agent(x)
    # rock-paper-scissors as measured win rates: each beats the next with certainty
    for a, b in (("paper", "rock"), ("scissors", "paper"), ("rock", "scissors")):
        payoff.set_counts(a, b, 100.0, 0.0, 0.0)
    return Publication(pool, payoff, elo, {"learner": "main_agent"}, publish, store)


def test_the_meta_game_nash_of_rock_paper_scissors_is_uniform_and_protected(tmp_path):
    p = publication(LeagueStore(tmp_path))
    state = p.solve(pool_version=3, frozen_results=10)
    assert state.ids == list(RPS) and state.weights == pytest.approx([1 / 3] * 3, abs=1e-6)
    assert state.meta_exploitability == pytest.approx(0.0, abs=1e-6) and state.pool_version == 3
    assert p.nash is p.meta_nash is state and p.results_at_solve == 10
    assert p.pool.evictable() == []  # every member carries Nash weight
    assert p.store.latest_nash()["weights"] == pytest.approx([1 / 3] * 3, abs=1e-6)
    assert [row[1] for row in p.store.elo_history()] == ["learner"]


def test_a_solve_is_due_when_the_pool_changed_or_results_came(tmp_path):
    p = publication()
    p.adopt(p.job(pool_version=1)(), frozen_results=5)
    assert not p.due(now=p.meta_nash.solved_at + 1, pool_version=1, frozen_results=5, every_results=10,
                     every_seconds=60)
    assert p.due(now=p.meta_nash.solved_at + 1, pool_version=2, frozen_results=5, every_results=10, every_seconds=60)
    assert p.due(now=p.meta_nash.solved_at + 1, pool_version=1, frozen_results=15, every_results=10, every_seconds=60)
    assert not p.due(now=p.meta_nash.solved_at + 1, pool_version=1, frozen_results=6, every_results=10,
                     every_seconds=60)
    assert p.due(now=p.meta_nash.solved_at + 61, pool_version=1, frozen_results=6, every_results=10, every_seconds=60)
    empty = Publication(AgentPool(), PayoffTable(), EloTable(), {}, "nash")
    assert not empty.due(now=0.0, pool_version=5, frozen_results=100, every_results=1, every_seconds=0.0)


def test_only_measured_agents_enter_the_meta_game():
    p = publication()
    p.solve(pool_version=1, frozen_results=0)
    p.pool.insert(AgentRecord("fresh", 1, AgentType.MAIN_AGENT))
    p.payoff.add_agent("fresh")
    p.payoff.set_counts("fresh", "rock", 1.0, 0.0, 0.0)  # not measured against paper or scissors
    assert p.measured_ids() == list(RPS)
    ids, matrix = p.payoff_matrix()
    assert matrix[ids.index("paper"), ids.index("rock")] == 1.0


def league_of_old_snapshots(n_old=6):
    """A pool of ``n_old`` snapshots, each beaten by the next with certainty and every pair
    measured; then a newer one measured only against the Nash's member: the newest old one."""
    pool, payoff = AgentPool(), PayoffTable(decay=1.0)
    ids = [f"v{i}" for i in range(n_old)]
    for a in ids:
        pool.insert(AgentRecord(a, 1, AgentType.MAIN_AGENT))
        payoff.add_agent(a)
    for i, a in enumerate(ids):
        for b in ids[:i]:
            payoff.set_counts(a, b, 16.0, 0.0, 0.0)  # newer beats older
    return Publication(pool, payoff, EloTable(), {}, "nash"), ids


def test_a_new_snapshot_enters_once_measured_against_the_nash_members():
    p, ids = league_of_old_snapshots()
    assert p.solve(pool_version=1, frozen_results=0).support() == pytest.approx({ids[-1]: 1.0})
    p.pool.insert(AgentRecord("new", 1, AgentType.MAIN_AGENT))
    p.payoff.add_agent("new")
    assert p.measured_ids() == ids  # not measured against anyone: outside
    p.payoff.set_counts("new", ids[-1], 16.0, 0.0, 0.0)  # beats the Nash's one member in all 16 games
    # it enters though it never met the five older ones, which wait outside until measured against it
    assert p.measured_ids() == [ids[-1], "new"]
    state = p.solve(pool_version=2, frozen_results=16)
    assert state.support() == pytest.approx({"new": 1.0})
    p.payoff.set_counts(ids[0], "new", 16.0, 0.0, 0.0)  # the oldest turns out to beat the new one
    assert p.measured_ids() == [ids[0], ids[-1], "new"]  # the pair completes a rock-paper-scissors cycle
    state = p.solve(pool_version=2, frozen_results=32)
    assert state.weights == pytest.approx([1 / 3] * 3, abs=1e-6)


def test_a_published_mixture_stays_published_over_meta_game_solves(tmp_path):
    p = publication(LeagueStore(tmp_path), publish="least_exploitable", max_size=3)
    state = p.publish_least_exploitable(["rock", "gone", "paper"], [0.5, 0.3, 0.2], pool_version=3)
    assert state.ids == ["rock", "paper"] and state.weights == pytest.approx([5 / 7, 2 / 7])  # renormalised
    # its meta-exploitability: the best pure reply's expected win rate - 1/2 against it (rows: RPS)
    assert state.meta_exploitability == pytest.approx(max(np.array([[0, -0.5], [0.5, 0], [-0.5, 0.5]])
                                                         @ np.array([5 / 7, 2 / 7])))
    solved = p.solve(pool_version=3, frozen_results=1)
    assert p.nash is state and p.meta_nash is solved  # the solve is kept, not published
    assert p.store.latest_nash()["method"] == "least_exploitable"
    p.pool.insert(AgentRecord("new", 1, AgentType.MAIN_AGENT))
    # rock and paper carry weight in the published mixture, scissors in the meta-game Nash
    assert [r.agent_id for r in p.pool.evict()] == ["new"]
    again = publication(p.store, publish="least_exploitable")
    again.restore(p.store)
    assert again.published is not None and again.nash.ids == ["rock", "paper"]
    other = publication(p.store, publish="nash")
    other.restore(p.store)
    assert other.published is None and other.nash.ids == ["rock", "paper"]


@pytest.mark.parametrize("ids, weights, match", [
    (["rock"], [0.5, 0.5], "one finite weight"), (["rock"], [np.nan], "one finite weight"),
    (["rock"], [-1.0], "one finite weight"), (["gone"], [1.0], "no member of the published mixture"),
])
def test_a_bad_published_mixture_is_refused(ids, weights, match):
    p = publication()
    with pytest.raises(ValueError, match=match):
        p.publish_least_exploitable(ids, weights, pool_version=1)
    assert p.published is None


def test_a_published_member_stays_a_candidate_while_newer_snapshots_have_not_met_it():
    """The LP works on exact profiles, so its candidates come from the pool: a published member
    that left the meta-game (``measured_ids``) while the newest snapshots wait to be measured
    against it stays feasible, and the published NashConv cannot rise."""
    p = publication(publish="least_exploitable")
    p.solve(pool_version=1, frozen_results=0)
    for fresh in ("old", "new"):
        p.pool.insert(AgentRecord(fresh, 1, AgentType.MAIN_AGENT))
        p.payoff.add_agent(fresh)
    for x in RPS:  # both measured against the meta-game's members; "new" not yet against "old"
        p.payoff.set_counts("old", x, 10.0, 5.0, 0.0)
        p.payoff.set_counts("new", x, 10.0, 5.0, 0.0)
    p.publish_least_exploitable(["old", "rock"], [0.7, 0.3], pool_version=2)
    assert p.measured_ids() == [*RPS, "new"]  # "old" waits outside the meta-game
    assert p.lp_candidates(3) == ["rock", "old", "new"]  # pool order: the members, then the newest
    assert p.lp_candidates(1) == ["old"]  # members before any other snapshot when the limit bites


def test_lp_candidates_are_the_published_members_then_the_newest_in_pool_order():
    from league.publication import lp_candidates

    measured = [f"a{i}" for i in range(10)]  # oldest first
    assert lp_candidates(measured, ["a2", "a5"], 4) == ["a2", "a5", "a8", "a9"]
    assert lp_candidates(measured, ["gone", "a1"], 3) == ["a1", "a8", "a9"]  # an evicted member drops out
    assert lp_candidates(measured, [], 20) == measured
    assert lp_candidates(measured, ["a1", "a2", "a3"], 2) == ["a1", "a2"]  # members beyond the limit too
    assert lp_candidates([], ["a1"], 5) == []


def test_the_least_exploitable_mixture_over_bounded_candidates_never_gets_more_exploitable():
    """Re-solved as the pool grows over at most 4 candidates (the published members, then the
    newest), Kuhn's exact NashConv never rises from one solve to the next (the published mixture
    stays feasible), and with room for every snapshot it equals the LP over all of them."""
    import torch

    from envs import make_game
    from league.publication import lp_candidates
    from evaluation.exploitability import least_exploitable_mixture, seat_profile
    from policies.net import ActorCritic, PolicySpec

    game = make_game("kuhn_poker", 2)
    torch.manual_seed(4)
    profiles = {}
    for i in range(12):
        model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
        with torch.no_grad():
            model.policy_head.weight.mul_(3.0)
        profiles[f"a{i}"] = [seat_profile(game, model, seat) for seat in (0, 1)]

    def solve(ids):
        weights, value = least_exploitable_mixture(game, *[np.stack([profiles[a][s] for a in ids]) for s in (0, 1)])
        return [a for a, w in zip(ids, weights) if w > 1e-12], value

    published, values = [], []
    for n in range(1, 13):
        measured = [f"a{i}" for i in range(n)]
        published, value = solve(lp_candidates(measured, published, 4))
        values.append(value)
    assert all(later <= earlier + 1e-9 for earlier, later in zip(values, values[1:]))
    assert solve(lp_candidates(list(profiles), [], 12))[1] == pytest.approx(solve(list(profiles))[1], abs=1e-12)
