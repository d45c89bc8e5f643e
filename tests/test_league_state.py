"""The League object (what the coordinator actor wraps), without Ray."""


import numpy as np
import pytest

from league.config import load_config
from league.league import League
from league.messages import MatchAssignments, ProgressDecision, Result, ResultBatch
from league.store import LeagueStore


def batch(results, source="w0", seq=1, env_steps=0, action_counts=None):
    return ResultBatch.from_results(source, seq, results, env_steps, action_counts)


@pytest.fixture
def cfg(tmp_path):
    return load_config(None, [f"run.storage={tmp_path}", "roles.league_exploiter.count=1",
                              "roles.main_exploiter.snapshot_every_steps=100",
                              "roles.main_exploiter.min_steps_before_snapshot=10"])


def test_results_are_idempotent_and_survive_reopen(cfg):
    store = LeagueStore(cfg.run.storage)
    league = League(cfg, store)
    rec, _ = league.add_snapshot("main_agent-0", b"w", step=10)
    results = [Result("main_agent-0", rec.agent_id, 1.0), Result("main_agent-0", rec.agent_id, 0.0),
               Result("main_agent-0", "main_agent-0", 0.5)]
    assert league.report_results(batch(results, env_steps=30))
    assert not league.report_results(batch(results, env_steps=30))  # retry after a lost reply
    assert league.counters == {"games": 3.0, "env_steps": 30.0}
    # a win and a loss, each with the mean of the decay weights of two games (PayoffTable.record_counts)
    mean = (1 - 0.99 ** 2) / (0.01 * 2)
    assert league.payoff.counts("main_agent-0", rec.agent_id) == pytest.approx((mean, 0.0, mean))
    store.close()
    again = League(cfg, LeagueStore(cfg.run.storage))
    assert again.counters == {"games": 3.0, "env_steps": 30.0}
    assert again.payoff.counts("main_agent-0", rec.agent_id) == pytest.approx((mean, 0.0, mean))
    assert again.pool.ids() == [rec.agent_id]
    assert again.elo.rating("main_agent-0") == pytest.approx(league.elo.rating("main_agent-0"))


def test_self_play_as_a_worker_reports_it_counts_but_carries_no_payoff(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    rec, _ = league.add_snapshot("main_agent-0", b"w", step=1)
    # the worker's form: its learner first, then the opponents it met (itself included)
    sent = ResultBatch.from_games("w0", 1, ("main_agent-0", "main_agent-0", rec.agent_id), np.zeros(3, dtype=np.int64),
                                  np.array([1, 1, 2]), np.array([0.5, 1.0, 1.0]), env_steps=9)
    assert league.report_results(sent)
    assert league.counters == {"games": 3.0, "env_steps": 9.0}
    assert league.payoff.games("main_agent-0", rec.agent_id) == pytest.approx(1.0)
    assert league.payoff.games("main_agent-0", "main_agent-0") == 0


def test_bad_results_change_nothing(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    with pytest.raises(ValueError, match="score"):
        league.report_results(batch([Result("main_agent-0", "x", 0.2), Result("main_agent-0", "y", 7.0)]))
    with pytest.raises(ValueError, match="ResultBatch"):
        league.report_results([Result("main_agent-0", "x", 0.2)])
    assert league.counters["games"] == 0
    with pytest.raises(ValueError, match="unknown learner"):
        league.next_matches("nobody", 3)
    with pytest.raises(ValueError, match="number of matches"):
        league.next_matches("main_agent-0", 0)


def test_next_matches_are_columns_of_the_role_rule(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    m = league.next_matches("main_agent-0", 50)
    assert isinstance(m, MatchAssignments) and len(m) == 50
    # an empty pool leaves the main agent only its live self
    assert m.opponents == ("main_agent-0",) and m.live.tolist() == [True]
    assert m.opponent.tolist() == [0] * 50
    assert sum(m.branch_counts().values()) == 50


def test_diversity_survives_a_restart_from_the_store(cfg):
    store = LeagueStore(cfg.run.storage)
    league = League(cfg, store)
    league.report_results(batch([], "w0", 1, 10, {"main_agent-0": [30, 10, 0]}))
    league.report_results(batch([], "w1", 1, 10, {"main_exploiter-0": [0, 10, 30]}))
    league.report_results(batch([], "w0", 2, 10, {"main_agent-0": [10, 30, 0]}))
    # main agent: mean histogram (0.5, 0.5, 0); exploiter (0, 0.25, 0.75):
    # cosine = 0.125 / (sqrt(0.5) * sqrt(0.625))
    want = 1.0 - 0.125 / (np.sqrt(0.5) * np.sqrt(0.625))
    assert league.diversity_score() == pytest.approx(want, abs=1e-12)
    assert league.status()["diversity_score"] == pytest.approx(want, abs=1e-12)
    store.close()
    again = League(cfg, LeagueStore(cfg.run.storage))
    assert again.diversity_score() == pytest.approx(want, abs=1e-12)
    # a retried batch does not count twice
    assert not again.report_results(batch([], "w0", 2, 10, {"main_agent-0": [10, 30, 0]}))
    assert again.diversity_score() == pytest.approx(want, abs=1e-12)


def test_read_models_describe_the_league(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    a, _ = league.add_snapshot("main_agent-0", b"a", step=1)
    b, _ = league.add_snapshot("main_agent-0", b"b", step=2)
    league.record_exact(a.agent_id, b.agent_id, 0.75)
    league.solve_nash()
    nash = league.nash_view()
    assert nash.ids == [a.agent_id] and nash.weights.tolist() == pytest.approx([1.0])
    assert nash.roles == ["main_agent"] and nash.elo == [league.elo.rating(a.agent_id)]
    assert nash.to_dict()["agents"][0]["agent_id"] == a.agent_id
    # the evidence under it: both agents in the meta-game, measured exactly (the weight of 10^6 games)
    assert (nash.measured_agents, nash.pool_agents, nash.min_pair_games) == (2, 2, 1e6)
    assert nash.to_dict()["min_pair_games"] == 1e6
    assert [p["agent_id"] for p in league.pool_view()] == [a.agent_id, b.agent_id]
    payoff = league.payoff_view()
    assert payoff["ids"] == [a.agent_id, b.agent_id]
    assert payoff["win_rates"][0][1] == pytest.approx(0.75)
    assert league.role_of("main_exploiter-0") == "main_exploiter" and league.role_of("nobody") is None
    assert league.role_of(a.agent_id) == "main_agent"  # a snapshot has its learner's role
    assert set(league.learner_views()) == {"main_agent-0", "main_exploiter-0", "league_exploiter-0"}


def test_main_exploiter_snapshots_on_beating_the_main_agent_and_always_resets(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    assert not league.learner_progress("main_exploiter-0", 1, 50).snapshot
    league.report_results(batch([Result("main_exploiter-0", "main_agent-0", 1.0)] * 30, "w"))
    decision = league.learner_progress("main_exploiter-0", 2, 50)
    assert decision == ProgressDecision(True, "win_rate")
    record, reset = league.add_snapshot("main_exploiter-0", b"w", step=50)
    assert reset and league.learners["main_exploiter-0"].resets == 1
    # a reset learner starts with a clean payoff record
    assert league.payoff.games("main_exploiter-0", "main_agent-0") == 0
    assert league.store.events("reset")[0]["after"] == record.agent_id
    # ... also after a restart: the store forgot the reset learner's rows
    again = League(league.cfg, league.store)
    assert again.payoff.games("main_exploiter-0", "main_agent-0") == 0
    assert all(a < b for a, b, *_ in league.store.payoff_rows())  # one orientation per pair


def test_nash_rests_on_measured_pairs_only(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    a, _ = league.add_snapshot("main_agent-0", b"a", step=1)
    b, _ = league.add_snapshot("main_agent-0", b"b", step=2)
    c, _ = league.add_snapshot("main_agent-0", b"c", step=3)
    # rock-paper-scissors among a, b, c, measured exactly; a fourth agent unmeasured
    league.record_exact(a.agent_id, b.agent_id, 1.0)
    league.record_exact(b.agent_id, c.agent_id, 1.0)
    league.record_exact(c.agent_id, a.agent_id, 1.0)
    league.add_snapshot("main_agent-0", b"d", step=4)
    nash = league.solve_nash()
    assert nash.ids == [a.agent_id, b.agent_id, c.agent_id]
    assert np.allclose(nash.weights, 1 / 3, atol=1e-6)
    assert nash.entropy == pytest.approx(np.log(3))
    assert league.store.latest_nash()["weights"] == pytest.approx(nash.weights)


def test_exact_payoffs_are_stored_in_one_go_and_survive_reopen(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    ids = [league.add_snapshot("main_agent-0", b"x", step=i)[0].agent_id for i in range(3)]
    kept = league.record_exact_many([(ids[0], ids[1], 0.25), (ids[1], ids[2], 0.75), (ids[0], "evicted", 0.5)])
    assert kept == 2
    with pytest.raises(ValueError, match="score"):
        league.record_exact_many([(ids[0], ids[2], 1.5)])
    league.store.close()
    again = League(cfg, LeagueStore(cfg.run.storage))
    assert again.payoff.win_rates_for(ids[0], [ids[1]])[0] == pytest.approx(0.25)
    assert again.payoff.win_rates_for(ids[2], [ids[1]])[0] == pytest.approx(0.25)
    assert again.payoff.games_matrix([ids[0], ids[2]])[0, 1] == 0  # never measured, never invented


def test_evaluation_pairs_prefer_unmeasured(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    ids = [league.add_snapshot("main_agent-0", b"x", step=i)[0].agent_id for i in range(3)]
    league.record_exact(ids[0], ids[1], 0.5)
    assert set(league.evaluation_pairs(2)) == {(ids[0], ids[2]), (ids[1], ids[2])}
    assert set(league.evaluation_pairs(10, unmeasured_only=True)) == {(ids[0], ids[2]), (ids[1], ids[2])}
    league.record_exact_many([(ids[0], ids[2], 0.5), (ids[1], ids[2], 0.5)])
    assert league.evaluation_pairs(10, unmeasured_only=True) == []  # an exact evaluator then rests
    assert len(league.evaluation_pairs(10)) == 3


def test_evaluation_measures_new_snapshots_against_the_nash_first(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    ids = [league.add_snapshot("main_agent-0", b"x", step=i)[0].agent_id for i in range(4)]
    # v0 beats the rest; every pair measured
    league.record_exact_many([(ids[i], ids[j], 1.0 if i == 0 else 0.5) for i in range(4) for j in range(i + 1, 4)])
    assert league.solve_nash().support() == pytest.approx({ids[0]: 1.0})
    new = [league.add_snapshot("main_agent-0", b"x", step=10 + i)[0].agent_id for i in range(2)]
    # agent by agent in the order the meta-game takes them (the Nash's member, then newest first),
    # each against those before it: the two new ones meet the Nash's member within two pairs
    assert league.evaluation_pairs(3) == [(ids[0], new[1]), (ids[0], new[0]), (new[0], new[1])]
    assert league.evaluation_pairs(100, unmeasured_only=True) == (
        [(ids[0], new[1]), (ids[0], new[0]), (new[0], new[1]), (ids[3], new[1]), (ids[3], new[0]),
         (ids[2], new[1]), (ids[2], new[0]), (ids[1], new[1]), (ids[1], new[0])])
    league.record_exact(new[1], ids[0], 0.9)
    assert league.measured_ids() == [ids[0], new[1]]  # in as soon as it met the Nash's member
    assert league.solve_nash().support() == pytest.approx({new[1]: 1.0})
    nash = league.nash_view()
    assert (nash.measured_agents, nash.pool_agents, nash.min_pair_games) == (2, 6, 1e6)


def test_stored_batches_are_counts_per_pair(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    rec, _ = league.add_snapshot("main_agent-0", b"w", step=1)
    league.report_results(batch([Result("main_agent-0", rec.agent_id, s) for s in (1.0, 0.5, 0.0, 0.75)], "w",
                                env_steps=8))
    (stored,) = league.store.results_after()
    assert stored.agents == ("main_agent-0", rec.agent_id)
    assert (stored.source, stored.seq, stored.env_steps) == ("w", 1, 8)
    assert [stored.a.tolist(), stored.b.tolist(), stored.games.tolist(), stored.wins.tolist(),
            stored.draws.tolist(), stored.score.tolist()] == [[0], [1], [4], [2], [1], [2.25]]


def test_nash_job_solves_the_current_meta_game_off_the_league(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    assert league.nash_job() is None  # nothing measured yet
    a, b, c = (league.add_snapshot("main_agent-0", x, step=i)[0].agent_id for i, x in enumerate((b"a", b"b", b"c")))
    league.record_exact_many([(a, b, 1.0), (b, c, 1.0), (c, a, 1.0)])
    job = league.nash_job()
    league.record_exact(a, b, 0.0)  # a change after the job was made does not reach it
    state = job()
    assert state.ids == [a, b, c] and np.allclose(state.weights, 1 / 3, atol=1e-6)
    league.set_nash(state)
    assert league.nash_view().ids == [a, b, c]


def test_a_repeated_snapshot_request_gets_the_first_snapshot_back(tmp_path):
    """A learner killed after the coordinator stored its snapshot, and before it saw the
    reply, sends the same numbered request again: one snapshot, the same answer."""
    from league.config import load_config
    from league.league import League
    from league.store import LeagueStore

    cfg = load_config("configs/smoke.yaml", [f"run.storage={tmp_path}"])
    with LeagueStore(tmp_path) as store:
        league = League(cfg, store)
        record, reset = league.add_snapshot("main_agent-0", b"weights", 100, {"updates": 1}, request=7)
        assert league.snapshot_for_request("main_agent-0", 7).agent_id == record.agent_id
        assert league.snapshot_for_request("main_agent-0", 8) is None
        assert league.snapshot_for_request("main_exploiter-0", 7) is None
        restarted = League(cfg, store)
        again = restarted.snapshot_for_request("main_agent-0", 7)
        assert (again.agent_id, again.metadata["reset"]) == (record.agent_id, reset)
        assert len(store.agents()) == 1


def test_an_exploiter_with_a_role_as_reset_to_restarts_from_that_roles_latest_snapshot(tmp_path):
    cfg = load_config(None, [f"run.storage={tmp_path}", "roles.league_exploiter.count=1",
                             "roles.league_exploiter.reset_probability=1.0", "roles.league_exploiter.reset_to=main_agent"])
    league = League(cfg, LeagueStore(cfg.run.storage))
    # no main snapshot yet: a fresh initialisation
    _, reset = league.add_snapshot("league_exploiter-0", b"x", step=10)
    assert reset and league.learners["league_exploiter-0"].parent_id is None
    league.add_snapshot("main_agent-0", b"a", step=10)
    newest, _ = league.add_snapshot("main_agent-0", b"b", step=20)
    record, reset = league.add_snapshot("league_exploiter-0", b"y", step=30)
    assert reset and league.learners["league_exploiter-0"].parent_id == newest.agent_id
    assert record.metadata["reset_to"] == newest.agent_id  # what the coordinator answers, also to a repeat


def test_a_published_mixture_replaces_the_meta_nash_until_the_next_publication(cfg):
    """evaluator.publish: least_exploitable. The evaluator's mixture is what the league publishes
    (and stores, and protects from eviction); meta-game solves go on beside it without replacing it,
    and decide alone when the next solve is due. Its meta-exploitability is measured on the
    meta-game: here rock-paper-scissors, where the published (1/2, 1/2, 0) loses 1/4 to the best member."""
    league = League(cfg, LeagueStore(cfg.run.storage))
    a, b, c = (league.add_snapshot("main_agent-0", x, step=i)[0].agent_id for i, x in enumerate((b"a", b"b", b"c")))
    league.record_exact_many([(a, b, 1.0), (b, c, 1.0), (c, a, 1.0)])
    meta = league.solve_nash()
    assert league.nash_view().method == meta.method and league.meta_nash is meta
    published = league.set_published([a, b, c, "evicted-long-ago"], [2.0, 2.0, 0.0, 1.0], league.pool_version)
    assert published.ids == [a, b, c] and published.weights == pytest.approx([0.5, 0.5, 0.0])
    assert published.meta_exploitability == pytest.approx(0.25)
    assert league.nash_view().method == "least_exploitable" and league.store.latest_nash()["method"] == "least_exploitable"
    assert not league.nash_due(meta.solved_at + 1.0)  # the meta-game solve is current
    again = league.solve_nash()
    assert league.meta_nash is again and league.nash is published  # a solve does not unpublish
    assert set(league.pool._protected) == {a, b, c}
    with pytest.raises(ValueError, match="weight"):
        league.set_published([a, b], [1.0, float("nan")], league.pool_version)
    with pytest.raises(ValueError, match="in the pool"):
        league.set_published(["nobody"], [1.0], league.pool_version)
    league.store.close()
    cfg.evaluator.publish = "least_exploitable"
    resumed = League(cfg, LeagueStore(cfg.run.storage))
    assert resumed.nash_view().method == "least_exploitable" and resumed.nash.weights == pytest.approx([0.5, 0.5, 0.0])
    resumed.solve_nash()  # resumed publishing the least exploitable mixture: a solve keeps it published
    assert resumed.nash_view().method == "least_exploitable"
    resumed.store.close()
    cfg.evaluator.publish = "nash"
    reopened = League(cfg, LeagueStore(cfg.run.storage))
    assert reopened.nash_view().method == "least_exploitable"  # what was published last, until the next solve
    reopened.solve_nash()  # resumed with publish: nash, the meta-game Nash is published again
    assert reopened.nash_view().method == meta.method


def test_each_learner_shows_the_curriculum_stage_of_its_step(tmp_path):
    from actors.progress import progress_line

    cfg = load_config(None, [f"run.storage={tmp_path}", "roles.main_exploiter.count=0", "roles.league_exploiter.count=0",
                             "game.curriculum=[{until_step: 100, params: {}}, {until_step: 300, params: {}}]"])
    league = League(cfg, LeagueStore(cfg.run.storage))
    stages = []
    for step in (0, 99, 100, 299, 300):
        league.learner_progress("main_agent-0", 1, step)
        stages.append(league.status()["learners"]["main_agent-0"]["curriculum_stage"])
    assert stages == [0, 0, 1, 1, 2]
    assert progress_line(league.status(), 0.0, 1.0).endswith("curriculum stage 2")
    plain = League(load_config(None, [f"run.storage={tmp_path}/plain"]), LeagueStore(f"{tmp_path}/plain"))
    assert all("curriculum_stage" not in v for v in plain.status()["learners"].values())


def test_a_stop_snapshots_a_main_agent_that_trained_since_its_last_snapshot_and_no_exploiter(cfg):
    league = League(cfg, LeagueStore(cfg.run.storage))
    assert not league.final_snapshot_due("main_agent-0", 0)  # never trained: nothing to add
    assert league.final_snapshot_due("main_agent-0", 40)
    league.add_snapshot("main_agent-0", b"w", step=40)
    assert not league.final_snapshot_due("main_agent-0", 40)  # its last weights are in the pool already
    assert league.final_snapshot_due("main_agent-0", 41)
    # an exploiter's weights are a search in progress for the main agents' weaknesses: not the league's product
    assert not league.final_snapshot_due("main_exploiter-0", 500)
    assert not league.final_snapshot_due("league_exploiter-0", 500)
    # after a restart the league knows where each learner's last snapshot was
    again = League(league.cfg, league.store)
    assert not again.final_snapshot_due("main_agent-0", 40) and again.final_snapshot_due("main_agent-0", 41)


def test_a_coordinator_without_seed_snapshots_starts_without_torch(tmp_path):
    """The coordinator needs torch only to check seed snapshots: without them its process starts
    without the ~3 CPU-seconds of importing it (a league restarts its coordinator after a kill)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom league.config import load_config\nfrom actors.coordinator import LeagueCoordinatorImpl\n"
            f"cfg = load_config('configs/smoke.yaml', ['run.storage={tmp_path / 'run'}'])\n"
            "coordinator = LeagueCoordinatorImpl(cfg)\n"
            "print('TORCH', 'torch' in sys.modules, coordinator.league.pool_size())")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "TORCH False 0"
