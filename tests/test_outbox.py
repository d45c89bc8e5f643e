"""The outbox (actors/outbox.py): exactly-once bookkeeping of a sender that can be killed at any instant."""

import numpy as np
import pytest

from actors.outbox import DeliveryLog, Outbox, ledgers
from league.messages import EpisodeGroups
from league.objectives import groups_of


def test_a_restarted_sender_never_reuses_a_sequence_number_and_resends_what_it_staged(tmp_path):
    box = Outbox(tmp_path, "worker:w:0")
    first = box.next_seq()
    box.stage(first, {"score": np.array([1.0, 0.0, 0.5]), "agents": np.array(["a", "b"])})
    box.acked(first, 3)
    second = box.next_seq()
    box.stage(second, {"score": np.array([1.0, 1.0]), "agents": np.array(["a", "c"])})
    # killed here, after sending `second` and before its acknowledgement

    again = Outbox(tmp_path, "worker:w:0")
    seq, arrays = again.pending()
    assert seq == second and arrays["score"].tolist() == [1.0, 1.0] and arrays["agents"].tolist() == ["a", "c"]
    assert again.next_seq() == second + 1
    again.acked(second, 2)
    again.acked(second, 2)  # a repeated acknowledgement is booked once
    assert again.pending() is None
    assert (again.items, again.ledger["batches"]) == (5, 2)
    [ledger] = ledgers(tmp_path)
    assert (ledger["source"], ledger["items"], ledger["pending"]) == ("worker:w:0", 5, False)


def test_a_sender_killed_between_booking_and_dropping_a_message_books_it_once(tmp_path):
    box = Outbox(tmp_path, "worker:w:0")
    seq = box.next_seq()
    box.stage(seq, {"score": np.array([1.0, 0.0])})
    staged = box.pending_path.read_bytes()
    box.acked(seq, 2)
    box.pending_path.write_bytes(staged)  # the kill fell after the ledger was written, before the drop

    again = Outbox(tmp_path, "worker:w:0")
    assert again.pending()[0] == seq  # re-sent (the coordinator answers a repeat as stored) ...
    again.acked(seq, 2)
    assert again.pending() is None and (again.items, again.ledger["batches"]) == (2, 1)  # ... booked once
    assert again.next_seq() > seq


def test_a_rejected_message_is_dropped_and_not_counted(tmp_path):
    box = Outbox(tmp_path, "evaluator:0")
    seq = box.next_seq()
    box.stage(seq, {"score": np.array([0.5])})
    box.drop()
    assert box.pending() is None and box.items == 0
    assert Outbox(tmp_path, "evaluator:0").next_seq() > seq - 1


def test_an_unreadable_pending_file_counts_as_never_sent(tmp_path):
    box = Outbox(tmp_path, "learner:main_agent-0")
    box.pending_path.write_bytes(b"PK\x03\x04 torn")
    assert Outbox(tmp_path, "learner:main_agent-0").pending() is None


# -- group deliveries (objective.k_opponents): games, transitions and groups staged as one ----------

K = 3


def make_delivery(source: str, seq: int, first_group: int, n_groups: int, rng: np.random.Generator):
    """A grouped worker's delivery on biased RPS (one decision per episode): ``n_groups`` groups of K
    episodes against two opponents, the learner acting in all but the first episode of each group."""
    from league.messages import EpisodeGroups, ResultBatch
    from policies.rollout import Rollout

    names = ["main_agent-0", "main_agent-0:1"]
    opponent = rng.integers(0, 2, size=(n_groups, K))
    outcomes = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], size=(n_groups, K))
    played = np.ones((n_groups, K), dtype=bool)
    played[:, 0] = False
    n = int(played.sum())
    rollout = Rollout(obs=np.tile([1.0, 0.0], (n, 1)), mask=np.ones((n, 3)), actions=rng.integers(0, 3, n),
                      logp=np.full(n, -1.1), values=np.zeros(n), rewards=outcomes[played], dones=np.ones(n))
    groups = EpisodeGroups(source, first_group + np.arange(n_groups), np.full(n_groups, 7), tuple(names), opponent,
                           outcomes, played, np.where(played, 7, -1), seq=seq)
    scores = np.where(outcomes > 0, 1.0, np.where(outcomes == 0, 0.5, 0.0))
    batch = ResultBatch.learner_games(source, seq, "main_agent-0", names, opponent.reshape(-1), scores.reshape(-1),
                                      env_steps=2 * n_groups * K, action_counts={"main_agent-0": np.ones(3)})
    return batch, rollout, groups


def test_a_staged_delivery_comes_back_whole_after_a_restart_and_a_plain_batch_without_groups(tmp_path):
    from dataclasses import fields

    box = Outbox(tmp_path, "worker:main_agent-0:0")
    seq = box.next_seq()
    batch, rollout, groups = make_delivery(box.source, seq, 100, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="number"):
        box.stage_delivery(batch, rollout, EpisodeGroups(**{**groups.__dict__, "seq": seq + 1}))
    box.stage_delivery(batch, rollout, groups)

    again = Outbox(tmp_path, "worker:main_agent-0:0")  # a restarted worker (nothing is unpickled)
    b, r, g = again.pending_delivery()
    assert (b.source, b.seq, b.agents, b.env_steps) == (batch.source, seq, batch.agents, batch.env_steps)
    for name in ("a", "b", "games", "wins", "draws", "score"):
        assert getattr(b, name).tolist() == getattr(batch, name).tolist(), name
    assert b.action_counts["main_agent-0"].tolist() == [1.0, 1.0, 1.0]
    for f in fields(rollout):
        assert getattr(r, f.name).tobytes() == getattr(rollout, f.name).tobytes(), f.name
    assert (g.source, g.seq, g.opponents) == (groups.source, seq, groups.opponents)
    for name in ("ids", "version", "opponent", "outcomes", "played", "acted"):
        assert getattr(g, name).tolist() == getattr(groups, name).tolist(), name
    assert again.next_seq() > seq
    again.acked(seq, len(b))
    assert again.pending_delivery() is None and again.items == 4 * K

    plain = again.next_seq()
    again.stage_batch(make_delivery(again.source, plain, 200, 1, np.random.default_rng(1))[0])
    b, r, g = Outbox(tmp_path, "worker:main_agent-0:0").pending_delivery()
    assert (b.seq, len(b), r, g) == (plain, K, None, None)


def test_the_delivery_log_takes_each_number_once_per_source_within_its_window():
    log = DeliveryLog(window=3)
    assert [log.take("w0", s, 2) for s in (1, 2, 1, 3)] == [True, True, False, True]
    assert log.take("w1", 1, 5)  # another source's number 1
    assert (log.taken, log.groups, log.repeats) == (4, 11, 1)
    assert log.take("w0", 4, 2) and log.recent("w0") == {2: 2, 3: 2, 4: 2}  # number 1 left the window
    assert not log.take("w0", 3, 2)


class Learner:
    """The learner's intake of group deliveries as actors/learner.py does it: a DeliveryLog, then the
    groups with their trajectories (league.objectives.groups_of) in the order they arrived."""

    def __init__(self):
        self.log = DeliveryLog()
        self.groups = []

    def submit(self, rollout, groups):
        if self.log.take(groups.source, groups.seq, len(groups)):
            self.groups += groups_of(rollout, [groups])


@pytest.mark.parametrize("cut", ["staged", "stored", "taken", "both"])
def test_a_delivery_cut_anywhere_by_a_kill_reaches_the_store_and_the_learner_exactly_once(tmp_path, cut):
    """A worker stages a delivery and is killed: before sending it (``staged``), after the coordinator
    stored it (``stored``), after the learner took it (``taken``), or after both did but before it booked
    the replies (``both``). Its next life re-sends what it finds staged and goes on. Exact: the games
    stored are K per group the learner took, each group taken once, and the ledger counts the games stored."""
    from league.config import load_config
    from league.league import League
    from league.store import LeagueStore

    cfg = load_config(None, [f"run.storage={tmp_path / 'run'}"])
    store = LeagueStore(cfg.run.storage)
    coordinator, learner = League(cfg, store), Learner()
    coordinator.add_snapshot("main_agent-0", b"w", step=1)  # opponent main_agent-0:1
    rng = np.random.default_rng(3)
    source = "worker:main_agent-0:0"

    def deliver(box, batch, rollout, groups, to_coordinator=True, to_learner=True, book=True):
        if to_coordinator:
            coordinator.report_results(batch)
        if to_learner:
            learner.submit(rollout, groups)
        if book:
            box.acked(batch.seq, len(batch))

    box = Outbox(tmp_path, source)
    seq = box.next_seq()
    first = make_delivery(source, seq, 0, 5, rng)
    box.stage_delivery(*first)
    deliver(box, *first)
    seq = box.next_seq()
    cut_off = make_delivery(source, seq, 5, 4, rng)
    box.stage_delivery(*cut_off)
    deliver(box, *cut_off, to_coordinator=cut in ("stored", "both"), to_learner=cut in ("taken", "both"), book=False)
    del box  # killed

    box = Outbox(tmp_path, source)
    deliver(box, *box.pending_delivery())
    seq = box.next_seq()
    last = make_delivery(source, seq, 9, 3, rng)
    box.stage_delivery(*last)
    deliver(box, *last)

    ids = [g.group_id for g in learner.groups]
    assert ids == list(range(12))  # every group once, in order
    assert learner.log.repeats == (1 if cut in ("taken", "both") else 0)
    assert store.result_count() == K * 12 == box.items
    assert store.counters()["games"] == K * 12
    sent = [first, cut_off, last]
    for got, (_, rollout, groups) in zip([learner.groups[:5], learner.groups[5:9], learner.groups[9:]], sent):
        assert [g.outcomes.tolist() for g in got] == groups.outcomes.tolist()
        assert np.concatenate([t.rewards for g in got for t in g.trajectories if t is not None]).tolist() \
            == rollout.rewards.tolist()
    store.close()
