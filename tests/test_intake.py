"""league/intake.py: result batches and exact scores into the tables and the store, and the
tables' checkpoints, without a League around them."""

import numpy as np
import pytest

from league.elo import EloTable
from league.intake import ResultIntake, TableCheckpoints
from league.messages import ResultBatch
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord, AgentType
from league.store import LeagueStore

LEARNERS = {"learner": None}


def parts(store=None, checkpoint_seconds=3600.0, frozen=("s1", "s2")):
    pool = AgentPool()
    payoff, elo = PayoffTable(decay=0.9), EloTable(k=16)
    for x in frozen:
        pool.insert(AgentRecord(x, 1, AgentType.MAIN_AGENT))
    for x in (*frozen, *LEARNERS):
        payoff.add_agent(x)
        elo.add(x)
    return ResultIntake(payoff, elo, pool, LEARNERS, store, checkpoint_seconds)


def test_checkpoints_hand_out_each_changed_row_once_and_take_back_a_failed_write():
    payoff, elo = PayoffTable(decay=1.0), EloTable()
    payoff.record("b", "a", 1.0)
    payoff.record("a", "c", 0.0)
    elo.add("a", 1100.0)
    tables = TableCheckpoints(payoff, elo)
    tables.pairs_changed([("b", "a"), ("a", "c"), ("a", "gone")])
    tables.ratings_changed(["a", "gone"])
    taken = tables.take()
    # one row per unordered pair, from the first id's side (a < b), only agents the tables hold
    assert taken == ([("a", "b", 0.0, 0.0, 1.0), ("a", "c", 0.0, 0.0, 1.0)], [("a", 1100.0, 0)])
    assert tables.take() == ([], [])

    def failing(rows):
        raise OSError("disk full")

    tables.pairs_changed([("a", "b")])
    with pytest.raises(OSError):
        tables.write(failing)
    assert tables.take() == ([("a", "b", 0.0, 0.0, 1.0)], [])  # given back: written with the next checkpoint


def test_a_batch_counts_every_game_and_rates_only_known_distinct_agents():
    intake = parts()
    agents = ("learner", "s1", "s2", "evicted")
    # learner vs s1: 4 games (2 won, 1 drawn); s1 vs s2: 3 games; learner vs itself; learner vs evicted
    batch = ResultBatch("w", 1, agents, [0, 1, 0, 0], [1, 2, 0, 3], [4, 3, 2, 5], [2, 1, 1, 5], [1, 0, 0, 0],
                        [2.5, 1.0, 1.0, 5.0], env_steps=70, action_counts={"learner": [1.0, 3.0], "s1": [2.0]})
    assert intake.report([batch]) == [True]
    assert intake.counters == {"games": 14.0, "env_steps": 70.0}
    assert intake.frozen_results == 3
    assert intake.payoff.counts("s1", "s2") == (1.0, 0.0, 2.0)  # frozen: never decays, exact
    mean = (1 - 0.9 ** 4) / (0.1 * 4)  # live: each game the mean of the decay weights of 4 games
    assert intake.payoff.counts("learner", "s1") == pytest.approx((2 * mean, mean, mean))
    assert intake.payoff.games("learner", "learner") == 0 and "evicted" not in intake.payoff
    assert intake.elo.games["learner"] == 4 and "evicted" not in intake.elo.ratings
    assert intake.diversity.agent_ids == ["learner"]  # only learners have a behaviour


def test_a_group_is_applied_one_batch_a_step_and_stored_by_its_write(tmp_path):
    store = LeagueStore(tmp_path)
    intake = parts(store, checkpoint_seconds=0.0)
    one = ResultBatch.from_results("w", 1, [("learner", "s1", 1.0)], env_steps=5)
    two = ResultBatch.from_results("w", 2, [("s1", "s2", 0.5)])
    steps = list(intake.apply([one, "not a batch", two, one]))
    assert steps[:2] == [None, None] and len(steps) == 3  # a step per applied batch, then the write
    outcomes, write = steps[-1]
    assert outcomes[0] is True and isinstance(outcomes[1], ValueError) and outcomes[2:] == [True, False]
    assert not store.has_batch("w", 1)  # applied in memory, not yet stored: nobody is told yet
    write()
    assert store.has_batch("w", 1) and store.has_batch("w", 2) and store.result_count() == 2
    assert store.tables_through() == 2 and dict(((a, b), w) for a, b, w, _, _ in store.payoff_rows()) == {
        ("learner", "s1"): 1.0, ("s1", "s2"): 0.0}
    assert intake.report([one]) == [False]  # stored before: once per (source, seq)


def test_a_failed_write_leaves_the_rows_to_the_next_checkpoint(tmp_path):
    store = LeagueStore(tmp_path)
    intake = parts(store, checkpoint_seconds=0.0)
    *_, (outcomes, write) = intake.apply([ResultBatch.from_results("w", 1, [("learner", "s1", 1.0)])])
    store.close()
    with pytest.raises(Exception):
        write()
    assert intake.tables.take()[0] == [("learner", "s1", *intake.payoff.counts("learner", "s1"))]


def test_a_replay_of_the_batches_after_the_checkpoint_gives_the_tables_in_memory(tmp_path):
    store = LeagueStore(tmp_path)
    intake = parts(store)  # no timed checkpoint: every batch is left to replay
    rng = np.random.default_rng(0)
    agents = ("learner", "s1", "s2")
    for seq in range(1, 6):
        a = rng.integers(0, 3, 200)
        b = (a + rng.integers(1, 3, 200)) % 3
        assert intake.report([ResultBatch.from_games("w", seq, agents, a, b, rng.integers(0, 3, 200) / 2.0)])
    assert store.tables_through() == 0
    again = parts(store)
    assert again.replay(store) == 5
    for x in agents:
        assert again.elo.ratings[x] == intake.elo.ratings[x]
        for y in agents:
            if x != y:
                assert again.payoff.counts(x, y) == intake.payoff.counts(x, y)


def test_exact_scores_set_frozen_pairs_and_checkpoint_the_tables(tmp_path):
    store = LeagueStore(tmp_path)
    intake = parts(store)
    intake.report([ResultBatch.from_results("w", 1, [("learner", "s1", 1.0)])])
    assert store.tables_through() == 0
    assert intake.record_exact([("s1", "s2", 0.75), ("s1", "evicted", 1.0), ("s2", "s2", 0.5)], weight=100) == 1
    assert intake.payoff.counts("s1", "s2") == (75.0, 0.0, 25.0) and intake.frozen_results == 1
    assert store.tables_through() == 1  # the batch before the exact scores is in the checkpoint
    with pytest.raises(ValueError, match=r"score must be in \[0, 1\]"):
        intake.record_exact([("s1", "s2", 1.5)])
