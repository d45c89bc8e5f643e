"""Result batches count games per ordered pair (per opponent, as rollout workers send them): the
same games, counted exactly; the same league state as game by game (one game a batch) wherever the
order of games cannot matter, and the documented exchangeable-games answer where it can (decayed
payoff, Elo)."""

import itertools
import re
import textwrap

import numpy as np
import pytest

from actors.outbox import Outbox
from league.config import load_config
from league.elo import UNIFORM_RANDOM, EloTable
from league.league import League
from league.messages import ResultBatch
from league.payoff import PayoffTable
from league.store import LeagueStore
from test_store import run_and_kill


def league_with_pool(path, decay=None, checkpoint_seconds=None, store=True):
    overrides = [f"run.storage={path}", "roles.league_exploiter.count=1"]
    if decay is not None:
        overrides.append(f"league.payoff_decay={decay}")
    if checkpoint_seconds is not None:
        overrides.append(f"league.payoff_checkpoint_seconds={checkpoint_seconds}")
    league = League(load_config(None, overrides), LeagueStore(path) if store else None)
    frozen = [league.add_snapshot("main_agent-0", b"w", step=10 * (i + 1))[0].agent_id for i in range(3)]
    return league, frozen


def random_games(agents, rng, n, pairs=None):
    """``(a, b, score)`` of ``n`` games between distinct ``agents`` (or exactly the ``pairs`` rows)."""
    a = rng.integers(0, len(agents), n)
    b = (a + 1 + rng.integers(0, len(agents) - 1, n)) % len(agents)
    if pairs is not None:  # exactly these (a, b) rows
        a, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    return a, b, rng.integers(0, 3, len(a)) / 2.0


def random_batch(agents, rng, n, seq=1, pairs=None):
    a, b, score = random_games(agents, rng, n, pairs)
    return ResultBatch.from_games("w", seq, tuple(agents), a, b, score, env_steps=5 * len(a),
                                  action_counts={"main_agent-0": np.array([3.0, 4.0])})


def report_game_by_game(league, agents, a, b, score, seq):
    """The games of one batch reported one a batch, in the order the league rates a batch's rows
    (games with a learner first, then frozen pairs); the batch's env steps and action counts come
    with them. Returns the next free seq."""
    learner = np.array([x in league.learners for x in agents])
    order = np.argsort(~(learner[a] | learner[b]), kind="stable")
    for k, g in enumerate(order.tolist()):
        counts = {"main_agent-0": np.array([3.0, 4.0])} if k == 0 else None
        assert league.report_results(ResultBatch.from_games("g", seq, tuple(agents), a[g:g + 1], b[g:g + 1],
                                                            score[g:g + 1], 5, counts))
        seq += 1
    return seq


def test_games_are_counted_per_pair_keeping_every_game_and_every_count():
    rng = np.random.default_rng(0)
    agents = ("main_agent-0", "x", "y", "z")
    a, b, score = random_games(agents, rng, 500)
    pairs = ResultBatch.from_games("w", 1, agents, a, b, score)
    assert len(pairs) == 500
    assert len(pairs.a) == len(set(zip(a.tolist(), b.tolist())))
    for i, j, g, w, d, s in zip(pairs.a, pairs.b, pairs.games, pairs.wins, pairs.draws, pairs.score):
        mine = (a == i) & (b == j)
        assert (g, w, d) == (mine.sum(), (score[mine] == 1).sum(), (score[mine] == 0.5).sum())
        assert s == pytest.approx(score[mine].sum())
    rows = [pairs.pair_counts()[k].tolist() for k in range(6)]
    assert rows == [x.tolist() for x in (pairs.a, pairs.b, pairs.games, pairs.wins, pairs.draws, pairs.score)]


@pytest.mark.parametrize("games, wins, draws, score, what", [
    ([0], [0], [0], [0.0], "games >= 1"),
    ([2], [2], [1], [2.5], "wins + draws <= games"),
    ([2], [1], [0], [0.2], "score must be the sum"),  # a win scores more than 1/2
    ([2], [0], [1], [1.5], "score must be the sum"),  # a draw and a loss score at most 1
    ([1.5], [0], [0], [0.0], "integer counts"),
    ([1, 1], [0], [0], [0.0], "one entry per row"),
])
def test_bad_counts_are_rejected_naming_the_rule(games, wins, draws, score, what):
    with pytest.raises(ValueError, match=re.escape(what)):
        ResultBatch("w", 1, ("a", "b"), [0], [1], games, wins, draws, score)


def test_one_game_per_pair_gives_the_league_of_game_by_game(tmp_path):
    rng = np.random.default_rng(1)
    one, frozen = league_with_pool(tmp_path / "games")
    two, _ = league_with_pool(tmp_path / "pairs")
    agents = ("main_agent-0", "main_exploiter-0", *frozen)
    pairs = [(i, j) for i in range(len(agents)) for j in range(i + 1, len(agents))]  # each unordered pair once
    seq = 1
    for batch_seq in range(1, 4):
        a, b, score = random_games(agents, rng, 0, pairs=[pairs[k][::rng.choice([1, -1])]
                                                          for k in rng.permutation(len(pairs))])
        seq = report_game_by_game(one, agents, a, b, score, seq)
        assert two.report_results(ResultBatch.from_games("w", batch_seq, agents, a, b, score, 5 * len(a),
                                                         {"main_agent-0": np.array([3.0, 4.0])}))
    ids = [*one.learners, *frozen]
    for x in ids:
        assert two.elo.rating(x) == pytest.approx(one.elo.rating(x), abs=1e-9)
        for y in ids:
            if x != y:
                assert two.payoff.counts(x, y) == pytest.approx(one.payoff.counts(x, y), abs=1e-12)
    assert two.counters == one.counters and two.results_since_solve == one.results_since_solve
    assert two.store.result_count() == one.store.result_count() == 3 * len(pairs)
    assert two.diversity.state("main_agent-0") == one.diversity.state("main_agent-0")


def test_many_games_per_pair_are_counted_exactly(tmp_path):
    rng = np.random.default_rng(2)
    one, frozen = league_with_pool(tmp_path / "games", store=False)
    two, _ = league_with_pool(tmp_path / "pairs")
    agents = ("main_agent-0", "main_exploiter-0", *frozen)
    seq = 1
    for batch_seq in range(1, 6):
        a, b, score = random_games(agents, rng, 400)
        seq = report_game_by_game(one, agents, a, b, score, seq)
        batch = ResultBatch.from_games("w", batch_seq, agents, a, b, score, 5 * len(a),
                                       {"main_agent-0": np.array([3.0, 4.0])})
        assert two.report_results(batch)
        assert not two.report_results(batch)  # a retry is stored once
    assert two.store.result_count() == 2000
    assert two.counters == one.counters and two.results_since_solve == one.results_since_solve
    for x in frozen:  # frozen pairs never decay: the meta-game's counts are exact
        for y in frozen:
            if x != y:
                assert two.payoff.counts(x, y) == pytest.approx(one.payoff.counts(x, y), abs=1e-9)
    for x in one.learners:  # decayed: the number of (decayed) games is exact
        for y in frozen:
            assert sum(two.payoff.counts(x, y)) == pytest.approx(sum(one.payoff.counts(x, y)), rel=1e-12)
    reopened = League(two.cfg, LeagueStore(tmp_path / "pairs"))
    assert reopened.payoff.counts("main_agent-0", frozen[0]) == pytest.approx(two.payoff.counts("main_agent-0",
                                                                                                 frozen[0]))


def test_decayed_counts_are_the_mean_over_the_orders_of_the_games():
    scores = [1.0, 0.5, 0.0, 1.0]
    mean = np.zeros(3)
    orders = list(itertools.permutations(scores))
    for order in orders:
        t = PayoffTable(decay=0.9)
        t.set_counts("a", "b", 2.0, 1.0, 3.0)
        for outcome in order:
            t.record("a", "b", outcome)
        mean += np.array(t.counts("a", "b")) / len(orders)
    t = PayoffTable(decay=0.9)
    t.set_counts("a", "b", 2.0, 1.0, 3.0)
    t.record_counts(["b"], ["a"], [4], [1.0], [1.0], [2.0])  # from b's side: 1 win, 1 draw, 2 losses
    assert t.counts("a", "b") == pytest.approx(tuple(mean), abs=1e-12)


def test_elo_of_one_game_a_pair_is_the_sequential_update():
    a, b, s = ["p", "q", "r", "p"], ["q", "r", UNIFORM_RANDOM, "r"], [1.0, 0.5, 0.0, 0.25]
    one, two = EloTable(k=24), EloTable(k=24)
    for x, y, score in zip(a, b, s):
        one.update(x, y, score)
    assert two.update_pairs(a, b, [1, 1, 1, 1], s) == {"p", "q", "r"}
    assert two.ratings == pytest.approx(one.ratings) and two.games == one.games
    assert two.rating(UNIFORM_RANDOM) == 1000.0


@pytest.mark.parametrize("p, anchored", [(0.7, False), (0.3, True), (0.5, False)])
def test_elo_of_many_games_closes_on_the_rating_that_expects_the_score(p, anchored):
    """n games at mean score s move the gap toward 400 log10(s / (1 - s)), where E = s, without
    overshooting it (one batch takes at most the Newton step of E); batch after batch the gap settles
    there: the fixed point of sequential game-by-game Elo at that score."""
    n = 3000
    opponent = UNIFORM_RANDOM if anchored else "q"
    target = 400 * np.log10(p / (1 - p))
    pairs = EloTable(k=16)
    gaps = []
    for _ in range(6):
        pairs.update_pairs(["p"], [opponent], [n], [p * n])
        gaps.append(pairs.rating("p") - pairs.rating(opponent))
    assert all(abs(g) <= abs(target) + 1e-9 for g in gaps)  # monotone toward the target, never past it
    assert all(abs(y - target) <= abs(x - target) + 1e-9 for x, y in zip(gaps, gaps[1:]))
    assert gaps[-1] == pytest.approx(target, abs=1e-3 * abs(target) + 1e-9)
    assert pairs.games["p"] == 6 * n


def reference_pair_elo(ratings: dict, moving: set, pairs, k: float) -> dict:
    """Elo over (a, b, games, score sum) rows, pair after pair, as docs/design.md states it: the
    step of n games linearised around the expected score, never past the gap that expects the
    pair's mean score (smoothed by half a game)."""
    import math

    from league.elo import _expected

    r, slope = dict(ratings), math.log(10.0) / 400.0
    for a, b, n, total in pairs:
        movers = (a in moving) + (b in moving)
        if a == b or not movers:
            continue
        e, s = _expected(r[b] - r[a]), total / n
        if n == 1:
            gap = movers * k * (s - e)
        else:
            ch = movers * k * e * (1 - e) * slope
            gap = movers * k * n * (s - e) if ch < 1e-12 else (s - e) / (ch / (movers * k)) * (1 - (1 - ch) ** n)
            s = min(max(s, 0.5 / n), 1 - 0.5 / n)
            beyond = 400 * math.log10(s / (1 - s)) - (r[a] - r[b])
            gap = max(gap, min(beyond, 0.0)) if gap < 0 else min(gap, max(beyond, 0.0))
        share = gap / movers
        r[a] += share if a in moving else 0.0
        r[b] -= share if b in moving else 0.0
    return r


@pytest.mark.parametrize("seed", range(6))
def test_elo_of_pairs_is_the_reference_arithmetic_exactly(seed):
    """The coordinator's Elo loop (written out for speed) gives, to the last bit, the ratings of the
    plain formula: one game, many games, all-or-nothing scores, clamped steps, an anchored agent."""
    rng = np.random.default_rng(seed)
    names = ["main_agent-0", *(f"s{i}" for i in range(30)), UNIFORM_RANDOM]
    table = EloTable(k=16)
    for _ in range(4):
        m = int(rng.integers(1, 120))
        a, b = rng.integers(0, len(names), m), rng.integers(0, len(names), m)
        a[: m // 2] = 0  # most rows are the learner's, as in a worker's report
        keep = a != b
        a, b = a[keep], b[keep]
        games = rng.integers(1, [2, 30, 10 ** 5][seed % 3], len(a))
        scores = np.where(rng.random(len(a)) < 0.3, rng.choice([0.0, 1.0], len(a)), rng.random(len(a))) * games
        for x in names:
            table.add(x)
        before = dict(table.ratings)
        want = reference_pair_elo(before, {x for x in names if x not in table.anchors},
                                  [(names[i], names[j], int(n), float(t)) for i, j, n, t in zip(a, b, games, scores)],
                                  table.k)
        table.update_pair_codes(names, a, b, games, scores)
        assert table.ratings == want


def test_a_staged_pair_batch_comes_back_whole(tmp_path):
    batch = random_batch(("main_agent-0", "x", "y"), np.random.default_rng(5), 50)
    box = Outbox(tmp_path, "w")
    box.stage(batch.seq, {})  # replaced by the batch below
    box.stage_batch(batch)
    back = box.pending_batch()
    assert len(back) == 50 and back.env_steps == batch.env_steps
    for name in ("a", "b", "games", "wins", "draws", "score"):
        assert getattr(back, name).tolist() == getattr(batch, name).tolist()


def test_a_workers_report_is_its_games_per_opponent():
    rng = np.random.default_rng(6)
    names = ["main_agent-0", "x", "y", "z"]  # the worker's codes; its learner may be its own opponent
    codes, scores = rng.integers(0, 4, 300), rng.integers(0, 3, 300) / 2.0
    report = ResultBatch.learner_games("w", 4, "main_agent-0", names, codes, scores, 900)
    games = ResultBatch.from_games("w", 4, ("main_agent-0", *names), np.zeros(300, dtype=np.int64), codes + 1, scores,
                                   900)
    assert len(report) == 300 and report.env_steps == 900

    def rows(batch):
        names = batch.agents
        return sorted((names[i], names[j], g, w, d, pytest.approx(sc)) for i, j, g, w, d, sc in zip(
            *(x.tolist() for x in batch.pair_counts())))
    assert rows(report) == rows(games)


def assert_same_league(got, want):
    """Exactly (==) the same payoff, Elo, counters and pool: what a restart must give back."""
    ids = [*want.learners, *want.pool.ids()]
    assert [*got.learners, *got.pool.ids()] == ids
    for x in ids:
        assert (got.elo.rating(x), got.elo.games.get(x)) == (want.elo.rating(x), want.elo.games.get(x)), x
        for y in ids:
            if x != y:
                assert got.payoff.counts(x, y) == want.payoff.counts(x, y), (x, y)
    assert got.counters == want.counters


def test_a_restart_replays_the_batches_after_the_last_checkpoint_exactly(tmp_path):
    """Tables are checkpointed on a timer (never, here) and with every change to the pool or to payoff
    rows; a league reopened without a final checkpoint replays
    the batches stored after the last one and is exactly the league that was in memory."""
    rng = np.random.default_rng(7)
    league, frozen = league_with_pool(tmp_path, checkpoint_seconds=3600)
    store = league.store
    seq = 0

    def report(n):
        nonlocal seq
        agents = (*league.learners, *league.pool.ids())
        for _ in range(n):
            seq += 1
            assert league.report_results(random_batch(agents, rng, 400, seq))

    report(3)
    assert store.tables_through() == 0  # 3 batches to replay
    assert league.record_exact_many([(frozen[0], frozen[1], 0.75)]) == 1
    assert store.tables_through() == 3
    report(3)
    assert store.tables_through() == 3
    report(2)
    record, reset = league.add_snapshot("main_exploiter-0", b"w", step=50)  # always resets
    assert reset and store.tables_through() == 8
    report(3)  # the new snapshot among the opponents
    assert store.tables_through() == 8 and store.result_count() == 11 * 400
    assert_same_league(League(league.cfg, LeagueStore(tmp_path)), league)
    assert league.payoff.games("main_exploiter-0", record.agent_id) > 0  # the reset learner played again
    league.checkpoint()  # as at shutdown: nothing left to replay
    assert store.tables_through() == 11
    assert_same_league(League(league.cfg, LeagueStore(tmp_path)), league)


REPORTER = textwrap.dedent("""
    import sys
    import numpy as np
    from league.config import load_config
    from league.league import League
    from league.messages import ResultBatch
    from league.store import LeagueStore

    def open_league(path, store=True):
        cfg = load_config(None, [f"run.storage={path}", "roles.league_exploiter.count=1",
                                 "league.payoff_checkpoint_seconds=0.05"])
        league = League(cfg, LeagueStore(path) if store else None)
        if not league.pool_size():
            for i in range(3):
                league.add_snapshot("main_agent-0", b"w", step=10 * (i + 1))
        return league

    def batch(league, seq):
        rng = np.random.default_rng(seq)
        agents = (*league.learners, *league.pool.ids())
        a = rng.integers(0, len(agents), 300)
        b = (a + 1 + rng.integers(0, len(agents) - 1, 300)) % len(agents)
        return ResultBatch.from_games("w", seq, agents, a, b, rng.integers(0, 3, 300) / 2.0)

    if __name__ == "__main__":
        league, start = open_league(sys.argv[1]), int(sys.argv[2])
        for seq in range(start, start + 100000):
            league.report_results(batch(league, seq))
            print(seq, flush=True)
""")


def test_a_killed_league_reopens_to_the_league_of_its_stored_batches(tmp_path):
    """SIGKILL at any moment (mid-batch, mid-checkpoint), then reopen and go on: the league is
    exactly the one that applying every stored batch once, in order, gives; every acknowledged
    batch is stored once."""
    script = tmp_path / "reporter.py"
    script.write_text(REPORTER)
    rng = np.random.default_rng(8)
    acked, start, replays = [], 1, []
    for _ in range(4):
        acked += run_and_kill(script, tmp_path / "run", start, int(rng.integers(20, 80)))
        start = max(acked) + 1
        with LeagueStore(tmp_path / "run") as store:  # batches the next start replays
            replays.append((store.tables_through(), len(list(store.results_after(store.tables_through())))))
    namespace: dict = {}
    exec(REPORTER, namespace)
    reopened = namespace["open_league"](tmp_path / "run")
    stored = [seq for (seq,) in reopened.store._query("SELECT seq FROM results ORDER BY id")]
    assert stored == list(range(1, len(stored) + 1)) and set(acked) <= set(stored)
    # checkpoints came between kills, and restarts had batches to replay
    assert max(through for through, _ in replays) > 0 and max(n for _, n in replays) > 0
    reference = namespace["open_league"](tmp_path / "reference", store=False)
    for seq in stored:
        reference.report_results(namespace["batch"](reference, seq))
    assert_same_league(reopened, reference)
    assert reopened.store.result_count() == 300 * len(stored)


@pytest.mark.parametrize("start, score, n", [(3000.0, 0.0, 5000), (-2000.0, 1.0, 100_000), (5000.0, 0.2, 1000)])
def test_elo_of_many_upset_games_stays_near_the_sequential_update(start, score, n):
    """A pair rated far apart that plays against its ratings: where E is flat the linearised step
    would move K per game for every game (a coordinator's batch of 10^5 games moved a gap by ~10^6
    and the next report overflowed a float). The step stops at the gap that expects the score
    (smoothed by half a game), within 500 points of game-by-game Elo and on its side of the start."""
    seq, pairs = EloTable(k=16), EloTable(k=16)
    for table in (seq, pairs):
        table.add("a", 1000.0 + start)
        table.add("b", 1000.0)
    for _ in range(n):
        seq.update("a", "b", score)
    pairs.update_pairs(["a"], ["b"], [n], [score * n])
    want, got = seq.rating("a") - seq.rating("b"), pairs.rating("a") - pairs.rating("b")
    assert abs(got - want) < 500 and (got - start) * (want - start) > 0


def test_a_cycle_of_sure_wins_keeps_every_rating_finite():
    """Rock, paper and scissors as pure strategies: each beats the next every game. Report after
    report of 10^5 games a pair, the ratings stay finite and within a few thousand points."""
    elo, cycle = EloTable(k=16), ["rock", "scissors", "paper"]
    for _ in range(200):
        elo.update_pairs(cycle, cycle[1:] + cycle[:1], [100_000] * 3, [100_000.0] * 3)
    assert all(np.isfinite(r) and abs(r - 1000.0) < 5000 for r in elo.ratings.values())
