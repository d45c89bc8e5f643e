import numpy as np
import pytest

from league import AgentPool, AgentType, LeagueStore, MatchDatabase, PayoffTable, StoreError


def test_pool_add_get_list_filter_remove():
    pool = AgentPool()
    a = pool.add(agent_type=AgentType.MAIN_AGENT, learner_id="main-0", step=100, metadata={"k": 1})
    b = pool.add(agent_type="main_exploiter", learner_id="mx-0", parent_id=a.agent_id)
    c = pool.add(agent_type=AgentType.MAIN_AGENT, learner_id="main-0", step=200)
    assert (a.agent_id, a.version, c.version) == ("main-0-v1", 1, 2)
    assert a.id == a.agent_id and b.parent_id == a.agent_id and a.metadata == {"k": 1}
    assert [r.agent_id for r in pool.list(AgentType.MAIN_AGENT)] == ["main-0-v1", "main-0-v2"]
    assert [r.agent_id for r in pool.list(learner_id="mx-0")] == ["mx-0-v1"]
    assert pool.latest("main-0").agent_id == "main-0-v2"
    pool.remove(b.agent_id)
    assert len(pool) == 2
    with pytest.raises(ValueError, match="unknown agent id"):
        pool.get("nope")
    with pytest.raises(ValueError, match="unknown agent type"):
        pool.add(agent_type="coach")


def test_pool_eviction_keeps_nash_support_and_each_learners_latest():
    pool = AgentPool(max_size=3)
    ids = [pool.add(learner_id="l0").agent_id for _ in range(3)]
    pool.protect([ids[0]])  # carries Nash weight
    pool.add(learner_id="l1")
    # oldest evictable is l0-v2 (v1 is protected, v3 is l0's latest)
    assert pool.ids() == ["l0-v1", "l0-v3", "l1-v1"]
    pool.add(learner_id="l1")
    assert pool.ids() == ["l0-v1", "l0-v3", "l1-v2"]


def test_pool_manifest_is_a_league_store_that_reopens_with_the_same_records(tmp_path):
    path = tmp_path / "pool.json"
    pool = AgentPool(pool_manifest=path, max_size=2)
    a = pool.add(snapshot_path="x.pt", agent_type=AgentType.LEAGUE_EXPLOITER, metadata={"a": [1, 2]})
    pool.add(agent_type=AgentType.MAIN_AGENT)
    pool.add(agent_type=AgentType.MAIN_AGENT)  # evicts the oldest, a
    again = AgentPool(pool_manifest=path)
    assert [r.to_dict() for r in again.list()] == [r.to_dict() for r in pool.list()]
    assert a.agent_id not in again and len(again) == 2
    again.remove("main_agent-v2")
    assert AgentPool(pool_manifest=path).ids() == ["main_agent-v1"]
    with LeagueStore(path, create=False) as store:  # the league's own store, read as any other
        assert [r.agent_id for r in store.agents()] == ["main_agent-v1"]
    other = tmp_path / "other.json"
    other.write_text("{not json")
    with pytest.raises(StoreError, match="not a readable nash-league store"):
        AgentPool(pool_manifest=other)


def test_win_rate_counts_draws_as_half_and_uses_prior_without_games():
    t = PayoffTable(decay=1.0)
    for o in (1.0, 1.0, 0.5, 0.0):
        t.record("a", "b", o)
    assert t.counts("a", "b") == (2.0, 1.0, 1.0)
    assert t.counts("b", "a") == (1.0, 1.0, 2.0)
    assert t.win_rate("a", "b") == pytest.approx(2.5 / 4)
    assert t.win_rate("b", "a") == pytest.approx(1.5 / 4)
    t.add_agent("c")
    assert t.win_rate("a", "c") == 0.5
    smoothed = PayoffTable(decay=1.0, prior=0.5, prior_games=2.0)
    smoothed.record("a", "b", 1.0)
    assert smoothed.win_rate("a", "b") == pytest.approx((1 + 1) / 3)


def test_decay_matches_alphastar_sequential_update():
    d = 0.99
    t = PayoffTable(decay=d)
    outcomes = [1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.5]
    for first, second, o in zip(["a", "b", "a", "a", "b", "a", "b"], ["b", "a", "b", "b", "a", "b", "a"], outcomes):
        t.record(first, second, o)
    # reference: AlphaStar's Payoff._update, one result at a time, from a's side
    w = dr = l = 0.0
    for first, o in zip(["a", "b", "a", "a", "b", "a", "b"], outcomes):
        s = o if first == "a" else 1.0 - o
        w, dr, l = w * d, dr * d, l * d
        if s == 0.5:
            dr += 1
        else:
            w, l = w + s, l + 1 - s
    assert t.counts("a", "b") == pytest.approx((w, dr, l), abs=1e-12)
    assert t.counts("b", "a") == pytest.approx((l, dr, w), abs=1e-12)


def test_win_rates_for_is_vectorized_and_matrix_is_consistent():
    rng = np.random.default_rng(0)
    t = PayoffTable(decay=0.99)
    ids = [f"p{i}" for i in range(6)]
    for _ in range(300):
        i, j = rng.choice(6, 2, replace=False)
        t.record(ids[i], ids[j], float(rng.integers(0, 3)) / 2)
    m = t.matrix(ids)
    assert np.allclose(m + m.T, 1.0)  # constant-sum: W[a,b] + W[b,a] = 1
    assert np.allclose(t.win_rates_for("p0", ids[1:]), [t.win_rate("p0", b) for b in ids[1:]])


@pytest.mark.parametrize("bad, match", [
    (dict(a="a", b="b", outcome=1.5), "in \\[0, 1\\]"),
    (dict(a="a", b="b", outcome=float("nan")), "in \\[0, 1\\]"),
    (dict(a="a", b="a", outcome=1.0), "against itself"),
])
def test_payoff_rejects_bad_results(bad, match):
    t = PayoffTable()
    with pytest.raises(ValueError, match=match):
        t.record(bad["a"], bad["b"], bad["outcome"])
    assert t.ids == []  # nothing half-applied


def test_payoff_rejects_bad_decay_and_unknown_ids():
    with pytest.raises(ValueError, match="decay"):
        PayoffTable(decay=-0.5)
    with pytest.raises(ValueError, match="decay"):
        PayoffTable(decay=0.0)
    with pytest.raises(ValueError, match="unknown agent id 'ghost'"):
        PayoffTable().win_rate("ghost", "x")


def test_match_database_reopens_from_its_store_with_the_same_win_rates(tmp_path):
    path = tmp_path / "matches.jsonl"
    db = MatchDatabase(db_path=path)
    for a, b, outcome in [("a", "b", 1.0), ("a", "b", 0.0), ("b", "a", 0.0), ("a", "c", 0.7)]:
        db.record(a, b, outcome)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        db.record("a", "b", 1.5)  # refused, and not stored
    again = MatchDatabase(db_path=path)
    assert again.win_rate("a", "b") == pytest.approx(2 / 3)
    assert again.win_rate("a", "c") == pytest.approx(0.7)  # a fractional outcome: 0.7 wins, 0.3 losses
    assert again.win_rate("a", "unseen") == 0.5
    again.record("c", "a", 1.0)
    assert MatchDatabase(db_path=path).win_rate("a", "c") == pytest.approx(0.35)
    with LeagueStore(path, create=False) as store:
        assert store.result_count() == 5


def test_removing_an_agent_keeps_every_other_pairs_counts_exactly():
    """Removal shifts the later agents' rows and columns in place: every remaining pair keeps its
    wins, draws and losses, in both orders, and an agent added afterwards starts with no games."""
    rng = np.random.default_rng(0)
    table = PayoffTable(decay=1.0)
    ids = [f"a{i}" for i in range(20)]  # past the arrays' first capacity (16), so they have grown once
    for a in ids:
        table.add_agent(a)
    for _ in range(2000):
        a, b = rng.choice(ids, 2, replace=False)
        table.record(str(a), str(b), float(rng.choice([0.0, 0.5, 1.0])))
    before = {(a, b): table.counts(a, b) for a in ids for b in ids if a != b}
    for gone in ("a3", "a19", "a0"):  # the middle, the last, the first
        table.remove_agent(gone)
        ids.remove(gone)
        assert table.ids == ids
        assert {(a, b): table.counts(a, b) for a in ids for b in ids if a != b} == {
            (a, b): v for (a, b), v in before.items() if a in ids and b in ids}
        assert np.array_equal(table.games_matrix(ids), np.array([[sum(before[a, b]) if a != b else 0.0 for b in ids]
                                                                for a in ids]))
    table.add_agent("new")
    assert table.games_matrix(["new"], ids).sum() == 0 and table.games_matrix(ids, ["new"]).sum() == 0


def test_the_games_kept_as_counts_are_written_are_each_pairs_wins_draws_and_losses():
    """``games_matrix`` reads games kept alongside the counts: after decayed batches, restored
    counts, growth past the first capacity and removals, each entry is the pair's wins + draws +
    losses, exactly."""
    rng = np.random.default_rng(1)
    table = PayoffTable(decay=0.97, capacity=4)
    ids = [f"a{i}" for i in range(30)]
    for _ in range(20):
        k = 50
        a, b = rng.integers(0, 30, k), rng.integers(0, 30, k)
        keep = a != b
        wins = rng.random(keep.sum())
        table.record_counts([ids[i] for i in a[keep]], [ids[i] for i in b[keep]], np.ones(keep.sum()),
                            wins, np.zeros(keep.sum()), 1.0 - wins)
    table.set_counts("a1", "a2", 3.0, 1.0, 2.0)
    for gone in ("a7", "a29"):
        table.remove_agent(gone)
    ids = table.ids
    expected = np.array([[sum(table.counts(a, b)) if a != b else 0.0 for b in ids] for a in ids])
    assert np.array_equal(table.games_matrix(ids), expected)
    assert table.games_matrix(["a1"], ["a2"])[0, 0] == 6.0
