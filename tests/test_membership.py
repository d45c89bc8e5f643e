"""league/membership.py: an agent enters and leaves the pool, the payoff and the Elo tables together."""

import pytest

from league.elo import EloTable
from league.intake import TableCheckpoints
from league.membership import Membership
from league.payoff import PayoffTable
from league.pool import AgentPool, AgentRecord, AgentType
from league.store import LeagueStore


def membership(store=None, max_size=2):
    payoff, elo = PayoffTable(decay=1.0), EloTable()
    m = Membership(AgentPool(max_size=max_size), payoff, elo, TableCheckpoints(payoff, elo), store)
    m.add_learner("learner")
    return m


def seed(agent_id):
    return AgentRecord(agent_id, 1, AgentType.MAIN_AGENT)


def test_an_evicted_agent_leaves_pool_payoff_and_elo_together(tmp_path):
    m = membership(LeagueStore(tmp_path))
    for x in ("a", "b"):
        assert m.admit(seed(x)) == []
        m.commit(seed(x), b"w", [])
    m.payoff.record("learner", "a", 1.0)
    evicted = m.admit(seed("c"), rating=1234.0)  # the pool holds 2: the oldest goes
    assert [r.agent_id for r in evicted] == ["a"]
    for table in (m.pool, m.payoff, m.elo.ratings):
        assert "a" not in table and "c" in table
    assert m.elo.rating("c") == 1234.0
    m.commit(seed("c"), b"w", evicted)
    assert m.version == 3
    assert [r.agent_id for r in m.store.agents()] == ["b", "c"]
    assert [r.agent_id for r in m.store.agents(include_removed=True)] == ["a", "b", "c"]
    assert ("c", 1234.0, 0) in m.store.elo_rows()  # its rating checkpointed with its admission
    with pytest.raises(KeyError):
        m.store.snapshot_blob("a")


def test_a_protected_agent_is_not_evicted():
    m = membership()
    for x in ("a", "b"):
        m.admit(seed(x))
    m.pool.protect({"a": 1.0})
    assert [r.agent_id for r in m.admit(seed("c"))] == ["b"]
    assert "a" in m.payoff and "b" not in m.payoff


def test_a_reset_learner_forgets_its_payoff_in_memory_and_in_the_store(tmp_path):
    m = membership(LeagueStore(tmp_path), max_size=None)
    m.admit(seed("a"))
    m.payoff.record("learner", "a", 1.0)
    m.tables.pairs_changed([("learner", "a")])
    m.commit(seed("a"), b"w", [])
    assert m.store.payoff_rows() == [("a", "learner", 0.0, 0.0, 1.0)]  # a < b, from a's side
    m.admit(seed("b"))
    m.clear_payoff("learner")
    assert m.payoff.games("learner", "a") == 0 and "learner" in m.payoff
    m.commit(seed("b"), b"w", [], cleared=["learner"])
    assert m.store.payoff_rows() == []


def test_restore_gives_back_the_pool_its_rows_and_its_version(tmp_path):
    m = membership(LeagueStore(tmp_path))
    for x in ("a", "b", "c"):
        r = seed(x)
        evicted = m.admit(r)
        m.payoff.record("learner", x, 1.0)
        m.tables.pairs_changed([("learner", x)])
        m.commit(r, b"w", evicted)
    again = membership(m.store)
    again.restore(m.store, ["learner"])
    assert again.pool.ids() == ["b", "c"] and again.version == 3
    assert again.payoff.counts("learner", "c") == (1.0, 0.0, 0.0)
    assert "a" not in again.payoff
