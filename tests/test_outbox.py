"""The outbox (actors/outbox.py): exactly-once bookkeeping of a sender that can be killed at any instant."""

import numpy as np

from actors.outbox import Outbox, ledgers


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
