"""A rollout worker's play without Ray (policies.lanes): matches played in the order drawn, groups of
k episodes that go out whole and play one learner version, and exact bookkeeping of every game and
transition, with a real game, real policies and in-process opponents."""

import numpy as np
import pytest
import torch

from actors.opponents import InProcessOpponents
from envs import make_game
from league.matchmaking import MatchPlan, MatchSampler, PlanBranch
from league.messages import MatchAssignments
from policies.lanes import NOT_PLAYED, Groups, Lanes, MatchQueue
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_to_bytes

LEARNER = "main_agent-0"
SNAPSHOTS = ("main_agent-0-v1", "main_agent-0-v2", "mx-v1")


def plan() -> MatchPlan:
    """Self-play (live) one time in four, else one of three snapshots by the weights 1:2:3."""
    return MatchPlan(LEARNER, (PlanBranch(1.0, (LEARNER,), None, True, "self_play"),
                               PlanBranch(3.0, SNAPSHOTS, np.cumsum([1.0, 2.0, 3.0]), False, "pfsp")), True)


def sampler(seed: int) -> MatchSampler:
    s = MatchSampler(LEARNER, np.random.default_rng(seed), refresh_seconds=1.0)
    s.update(plan())
    return s


def test_a_match_queue_plays_the_matches_in_the_order_drawn():
    queue = MatchQueue(sampler(0).draw, batch=7)
    taken = [queue.take(n) for n in (3, 5, 10, 1)]  # 19 matches: three draws of 7, the last one cut
    reference = sampler(0)
    drawn = [reference.draw(7) for _ in range(3)]
    assert [m for t in taken for m in t] == [m for d in drawn for m in d][:19]
    whole = MatchAssignments.concat(drawn)
    assert queue.branches == whole.branch_counts() and sum(queue.branches.values()) == 21
    # codes name the same opponents, whichever draw a part came from
    for t in taken:
        assert [queue.names[c] for c in queue.codes(t).tolist()] == [m.opponent_id for m in t]
    with pytest.raises(ValueError):
        MatchQueue(sampler(0).draw, batch=0)


def test_a_repeating_match_queue_plays_each_drawn_tuple_that_many_times_in_a_row():
    reference = sampler(5)
    # k = 1: each drawn match three times; draws of ceil(10 / 3) = 4 matches make 12 at a time
    queue = MatchQueue(sampler(5).draw, batch=10, repeat=3)
    taken = [m.opponent_id for m in queue.take(20)]
    drawn = [m.opponent_id for d in (reference.draw(4), reference.draw(4)) for m in d]
    assert taken == [o for o in drawn for _ in range(3)][:20]
    assert sum(queue.branches.values()) == 24  # episodes queued, by branch
    # k = 2: each drawn pair (a group's two opponents) three times, pairs kept whole
    reference = sampler(6)
    queue = MatchQueue(sampler(6).draw, batch=12, repeat=3, k=2)
    taken = [m.opponent_id for m in queue.take(12)]
    pairs = [m.opponent_id for m in reference.draw(4)]
    assert taken == pairs[0:2] * 3 + pairs[2:4] * 3
    groups = Groups(2, first_id=0, matches=MatchQueue(sampler(6).draw, batch=12, repeat=3, k=2))
    slots = groups.start(12, version=1)
    assert [groups.matches.names[c] for c in groups.opponent[slots].tolist()] == taken
    for bad in ({"repeat": 0}, {"k": 0}):
        with pytest.raises(ValueError):
            MatchQueue(sampler(0).draw, batch=4, **bad)


def test_repeated_opponents_keep_their_share_of_the_episodes():
    """Repetition changes which episodes share an opponent, not how often each is played."""
    n = 60_000
    once = MatchQueue(sampler(7).draw, batch=64).take(n)
    repeated = MatchQueue(sampler(8).draw, batch=64, repeat=16).take(n)
    share = lambda m: {o: float(np.mean(np.asarray(m.opponents)[m.opponent] == o)) for o in (LEARNER, *SNAPSHOTS)}
    expected = {LEARNER: 0.25, SNAPSHOTS[0]: 0.125, SNAPSHOTS[1]: 0.25, SNAPSHOTS[2]: 0.375}  # plan(): 1:3, 1:2:3
    for got in (share(once), share(repeated)):
        assert got == pytest.approx(expected, abs=0.025)


def test_groups_hand_out_k_slots_per_group_with_one_version_and_complete_whole_groups():
    queue = MatchQueue(sampler(1).draw, batch=5)
    groups = Groups(3, first_id=100, matches=queue)
    slots = groups.start(4, version=7)  # one full group and one slot of the next
    assert groups.id[slots // 3].tolist() == [100, 100, 100, 101] and (slots % 3).tolist() == [0, 1, 2, 0]
    reference = sampler(1)
    first_six = [m.opponent_id for m in MatchAssignments.concat([reference.draw(5), reference.draw(5)])][:6]
    assert [queue.names[c] for c in groups.opponent[slots].tolist()] == first_six[:4]
    # the learner moved on to version 8: the open group keeps 7, the next group plays 8
    slots2 = groups.start(3, version=8)
    assert groups.id[slots2 // 3].tolist() == [101, 101, 102] and (slots2 % 3).tolist() == [1, 2, 0]
    assert groups.version[slots2 // 3].tolist() == [7, 7, 8] and groups.versions() == {7, 8}
    assert [queue.names[c] for c in groups.opponent[slots2[:2]].tolist()] == first_six[4:6]
    # group 100 completes only when its third episode ends, whatever the order
    g100 = slots[:3]
    assert len(groups.finish(g100[[2, 0]], [12, 10], [1.0, -1.0], [1.0, 0.0], [1, 1])) == 0
    done = groups.finish(g100[[1]], [11], [2.0], [1.0], [0])
    assert done.ids.tolist() == [100] and done.version.tolist() == [7]
    assert done.episode.tolist() == [[10, 11, 12]] and done.returns.tolist() == [[-1.0, 2.0, 1.0]]
    assert done.decisions.tolist() == [[1, 0, 1]] and done.opponent.tolist() == [groups.opponent[g100].tolist()]
    assert groups.versions() == {7, 8} and len(groups) == 2
    groups.finish(slots2[[0]], [13], [0.0], [0.5], [1])
    with pytest.raises(ValueError, match="finished twice"):
        groups.finish(slots2[[0]], [13], [0.0], [0.5], [1])
    # complete groups' rows are taken again: the table stays as large as the running groups need
    for i in range(200):
        s = groups.start(3, version=9)
        groups.finish(s, [i] * 3, [0.0] * 3, [0.5] * 3, [1] * 3)
    assert groups.next_id == 303 and len(groups) == 3 and len(groups.id) == 16


def test_with_k_1_every_finished_episode_completes_its_own_group_in_the_order_given():
    groups = Groups(1, first_id=0, matches=MatchQueue(sampler(2).draw, batch=64))
    slots = groups.start(6, version=3)
    assert len(set(slots.tolist())) == 6 and groups.open == -1 and groups.id[slots].tolist() == list(range(6))
    order = [4, 1, 5]
    done = groups.finish(slots[order], [40, 10, 50], [1.0, -1.0, 0.0], [1.0, 0.0, 0.5], [2, 3, 0])
    assert done.ids.tolist() == order and done.episode.reshape(-1).tolist() == [40, 10, 50]
    assert done.scores.reshape(-1).tolist() == [1.0, 0.0, 0.5] and len(groups) == 3


class Harness:
    """A worker's lanes on Kuhn poker: the learner's policies by version, the plan's snapshots as
    frozen opponents in process, the learner's newest policy as its live self."""

    def __init__(self, k: int, keep_groups: bool, envs: int = 24, lanes: int = 2, game: str = "kuhn_poker",
                 self_id: str | None = None, search=None, served=None, learner=None, opening_plies: int = 0,
                 **kwargs):
        torch.manual_seed(0)
        one = make_game(game, 1, **kwargs)
        spec = PolicySpec(one.obs_size, one.num_actions, (16,))
        self.policies = {v: ActorCritic(spec) for v in (1, 2)}
        snapshots = {a: policy_to_bytes(ActorCritic(spec)) for a in SNAPSHOTS}
        self.opponents = InProcessOpponents(snapshots.__getitem__, capacity=8, seed=0)
        games = [make_game(game, envs // lanes, seed=i, **kwargs) for i in range(lanes)]
        self.live_asked: list[str] = []
        self.lanes = Lanes(games, k, MatchQueue(sampler(3).draw, batch=32), self.opponents, self.live_policy,
                           np.random.default_rng(4), lambda n: make_game(game, envs // lanes, seed=100 + n, **kwargs),
                           keep_groups=keep_groups, self_id=self_id, search=search, opening_plies=opening_plies)
        # ``served(policy)``: the learner's version 1 as a worker holds a served one; ``learner``: in its place
        if learner is not None:
            self.policies[1] = learner
        self.lanes.set_learner(1, self.policies[1] if served is None else served(self.policies[1]))
        self.lanes.start(first_group_id=1000)

    def live_policy(self, agent_id):
        self.live_asked.append(agent_id)
        return self.lanes.held[self.lanes.version]


def logp_under(policy, rollout) -> np.ndarray:
    with torch.no_grad():
        logits, _ = policy(torch.as_tensor(rollout.obs), torch.as_tensor(rollout.mask))
        logp = torch.log_softmax(logits, dim=-1)
    return logp[torch.arange(len(rollout)), torch.as_tensor(rollout.actions)].numpy()


def test_grouped_lanes_hand_out_whole_groups_each_played_by_one_learner_version():
    h = Harness(k=3, keep_groups=True)
    lanes = h.lanes
    for _ in range(15):
        lanes.step()
    lanes.set_learner(2, h.policies[2])  # new weights: running groups keep version 1
    for _ in range(15):
        lanes.step()
    lanes.finish_prepared()
    rollout, groups = lanes.take_groups("worker:x", seq=5)
    batch = lanes.take_batch("worker:x", 5, LEARNER)
    running = lanes.groups.finished.reshape(-1, 3)[lanes.groups.in_use].sum()
    assert lanes.counts["episodes"] == 3 * len(groups) + running  # every finished episode: in a group
    assert len(batch) == 3 * len(groups) and groups.k == 3 and groups.seq == 5
    assert set(groups.version.tolist()) == {1, 2}
    # the games reported are the groups' games, opponent by opponent
    per_opponent = {batch.agents[b]: g for b, g in zip(batch.b.tolist(), batch.games.tolist())}
    assert per_opponent == {o: int((groups.opponent == i).sum()) for i, o in enumerate(groups.opponents)}
    assert set(groups.opponents) <= {LEARNER, *SNAPSHOTS} and LEARNER in h.live_asked
    # the learner's check: played episodes, group by group and slot by slot, are the rollout's episodes
    assert groups.episodes == rollout.num_episodes
    np.testing.assert_allclose(groups.outcomes[groups.played], rollout.episode_returns(), atol=1e-6)
    assert (groups.acted == np.where(groups.played, groups.version[:, None], NOT_PLAYED)).all()
    # every decision was made by its group's version: its log-probability is that policy's
    ends = np.flatnonzero(rollout.dones)
    version_of_episode = np.broadcast_to(groups.version[:, None], groups.played.shape)[groups.played]
    version = np.repeat(version_of_episode, np.diff(np.concatenate([[-1], ends])))
    for v, policy in h.policies.items():
        sel = version == v
        assert sel.any()
        np.testing.assert_allclose(logp_under(policy, rollout)[sel], rollout.logp[sel], atol=1e-5)
    assert set(lanes.held) == lanes.groups.versions() | {2}
    # nothing is handed out twice
    again, empty = lanes.take_groups("worker:x", seq=6)
    assert again is None and len(empty) == 0 and len(lanes.take_batch("worker:x", 6, LEARNER)) == 0


def test_plain_lanes_report_every_finished_episode_and_its_transitions():
    h = Harness(k=1, keep_groups=False)
    lanes = h.lanes
    decisions = 0
    for _ in range(20):
        lanes.step()
        decisions += sum(len(lane.learner) for lane in lanes.lanes)
    lanes.finish_prepared()
    running = sum(int(lane.decisions.sum()) for lane in lanes.lanes)
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    assert len(batch) == lanes.counts["episodes"] > 0 and lanes.completed == []
    assert len(rollout) == decisions - running  # every decision of a finished episode, once
    assert batch.env_steps == lanes.counts["env_steps"] == 20 * 24
    assert batch.action_counts[LEARNER].sum() == decisions
    scores = batch.score.sum() / len(batch)
    assert 0.0 <= scores <= 1.0


class FirstLegal:
    """A deterministic policy: the lowest legal move."""

    def act(self, obs, mask, generator=None):
        n = len(mask)
        return np.argmax(np.asarray(mask) > 0, axis=1), np.zeros(n, np.float32), np.zeros(n, np.float32)


def self_play_positions(opening_plies: int) -> tuple[set, dict]:
    """Tic-tac-toe lanes whose learner (and so its live self) plays ``FirstLegal``: the positions it
    recorded in games against itself, and what the run counted."""
    h = Harness(k=1, keep_groups=False, game="tic_tac_toe", self_id=LEARNER, learner=FirstLegal(),
                opening_plies=opening_plies)
    lanes = h.lanes
    made = random = 0
    openings = {}  # episode -> its random opening, games against itself
    for _ in range(60):
        for lane in lanes.lanes:
            own = lane.live & (lane.opponent == lanes.self_code)
            openings.update(zip(lane.episode[own].tolist(), lane.opening[own].tolist()))
            assert (lane.opening[~own] == 0).all()  # games against others open as they are played
        lanes.step()
        for lane in lanes.lanes:
            rows = lane.learner.rows
            expected = lane.ply[rows] < lane.opening[rows]
            assert (lane.learner_opening == expected).all() if opening_plies else not expected.any()
            made, random = made + len(rows), random + int(lane.learner_opening.sum())
    lanes.finish_prepared()
    assert lanes.counts["game_errors"] == 0  # every random move was legal
    key, obs, mask, actions, *_, self_play, _ = (np.concatenate(c) for c in zip(*lanes.recorder.chunks))
    assert len(key) == made - random  # every decision recorded but those of the random openings
    own = self_play.astype(bool)
    # outside its openings the learner played its own (lowest legal) move, in every recorded decision
    assert (actions[own] == np.argmax(mask[own] > 0, axis=1)).all()
    return {o.tobytes() for o in obs[own]}, {"openings": list(openings.values()), "random": random}


def test_self_play_games_open_with_random_moves_whose_decisions_are_not_recorded():
    """A deterministic learner against itself meets one game's positions; with random openings of 0-3
    moves (both seats'), many more, and none of its random moves is trained on."""
    plain, counted = self_play_positions(0)
    assert len(plain) <= 9 and counted["random"] == 0 and set(counted["openings"]) == {0}
    opened, counted = self_play_positions(3)
    assert len(opened) > 40 and counted["random"] > 0
    drawn = np.bincount(counted["openings"], minlength=4)
    assert len(drawn) == 4 and (drawn > 0).all()  # drawn from 0-3, each of them


def test_a_search_learners_decisions_are_searched_and_carry_their_targets():
    """Tic-tac-toe with 16 simulations: every decision's target is a distribution over its legal
    moves, the move played is one of them, and a move that wins at once is played where one exists."""
    from league.config import SearchLearnerConfig
    from policies.expert import MoveSearch

    game = make_game("tic_tac_toe", 12, seed=0)
    search = MoveSearch(game, 12, SearchLearnerConfig(simulations=16, considered=9), (-1.0, 1.0),
                        np.random.default_rng(0))
    h = Harness(k=1, keep_groups=False, game="tic_tac_toe", search=search)
    for _ in range(40):
        h.lanes.step()
    h.lanes.finish_prepared()
    rollout = h.lanes.recorder.take()
    assert rollout is not None and rollout.searched and len(rollout) > 20
    np.testing.assert_allclose(rollout.targets.sum(1), 1.0, atol=1e-5)
    assert not (rollout.targets > 0)[~rollout.mask].any() and rollout.mask[np.arange(len(rollout)), rollout.actions].all()
    assert search.positions >= len(rollout)
    # where a move wins at once (three in a row for the mover: the game's own returns say so), the move
    # played wins too: at once, or by force (a win its remembered proofs hold; OpenSpiel's alpha-beta)
    import pyspiel
    from open_spiel.python.algorithms.minimax import alpha_beta_search

    ttt = pyspiel.load_game("tic_tac_toe")
    checked = 0
    for obs, mask, action in zip(rollout.obs, rollout.mask, rollout.actions):
        board = obs.reshape(3, 9)  # planes: empty, o (player 1), x (player 0)
        mover = 0 if board[2].sum() == board[1].sum() else 1
        state = ttt.new_initial_state()
        xs, os_ = np.flatnonzero(board[2]).tolist(), np.flatnonzero(board[1]).tolist()
        for i in range(max(len(xs), len(os_))):  # any order of a position's moves reaches it
            if i < len(xs):
                state.apply_action(xs[i])
            if i < len(os_):
                state.apply_action(os_[i])
        if state.is_terminal() or state.current_player() != mover:
            continue
        wins = [a for a in np.flatnonzero(mask).tolist() if (c := state.child(a)).is_terminal() and c.returns()[mover] > 0]
        if wins:
            checked += 1
            played = state.child(int(action))
            assert int(action) in wins or alpha_beta_search(ttt, state=played, maximizing_player_id=mover)[0] == 1.0
    assert checked > 0


def test_a_search_that_raises_is_rebuilt_and_its_lane_restarted_as_after_a_game_error():
    from league.config import SearchLearnerConfig
    from policies.expert import MoveSearch

    class RaisesOnce:
        """A user's game raising once inside the search (its positions' copies)."""

        def __init__(self):
            self.inner = MoveSearch(make_game("tic_tac_toe", 12, seed=0), 12, SearchLearnerConfig(simulations=8,
                                    considered=4), (-1.0, 1.0), np.random.default_rng(0))
            self.calls = self.rebuilds = 0

        def rebuild(self):
            self.rebuilds += 1
            self.inner.rebuild()

        def __call__(self, policy, game, envs):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("restore_state failed")
            return self.inner(policy, game, envs)

    search = RaisesOnce()
    h = Harness(k=1, keep_groups=False, game="tic_tac_toe", search=search)
    for _ in range(30):
        h.lanes.step()
    h.lanes.finish_prepared()
    assert search.rebuilds == 1 and h.lanes.counts["game_errors"] == 1
    rollout = h.lanes.recorder.take()
    batch = h.lanes.take_batch("worker:x", 1, LEARNER)
    assert len(batch) == h.lanes.counts["episodes"] > 0  # the league went on, every finished game reported
    assert rollout.searched and len(rollout) > 0


class AskedForLeaves:
    """A search learner's version served as the Serve deployment serves it (``ServedPolicy``):
    ``evaluate`` answers a search's leaves with the version's network; the ``fail``-th raises
    ``UnansweredEvaluation``, as a version the deployment cannot load does."""

    def __init__(self, policy, fail: int | None = None):
        self.policy, self.fail, self.calls = policy, fail, 0

    def submit(self, obs, mask):
        raise AssertionError("a search learner's moves are searched, never asked for")

    def evaluate(self, obs, mask):
        from policies.expert import UnansweredEvaluation

        self.calls += 1
        if self.calls == self.fail:
            raise UnansweredEvaluation("main_agent-0 version 1: no longer kept")
        return self.policy.evaluate(obs, mask)

    def act(self, obs, mask, generator=None):  # as its own live opponent
        return self.policy.act(obs, mask, generator=generator)


def searched_lanes(served: bool, fail: int | None = None, steps: int = 30):
    from league.config import SearchLearnerConfig
    from policies.expert import MoveSearch

    search = MoveSearch(make_game("tic_tac_toe", 12, seed=0), 12, SearchLearnerConfig(simulations=8, considered=4),
                        (-1.0, 1.0), np.random.default_rng(0))
    h = Harness(k=1, keep_groups=False, game="tic_tac_toe", search=search,
                served=(lambda policy: AskedForLeaves(policy, fail)) if served else None)
    started = search.search  # the batched search (and its remembered proofs) the lanes begin with
    for _ in range(steps):
        h.lanes.step()
    h.lanes.finish_prepared()
    return h, search, started


def test_a_served_search_learner_plays_the_moves_and_targets_of_its_network_in_process():
    """The same seeds, the search's leaves evaluated by the served version or by the network in the
    worker: the same games, moves and targets, every searched decision counted as served."""
    (h_in, search_in, _), (h_served, search_served, _) = searched_lanes(False), searched_lanes(True)
    ours, theirs = h_in.lanes.recorder.take(), h_served.lanes.recorder.take()
    assert ours is not None and len(ours) > 20
    for field in ("obs", "actions", "targets", "dones"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field))
    np.testing.assert_allclose(ours.values, theirs.values, atol=1e-6)
    assert h_in.lanes.counts["served"] == 0
    assert h_served.lanes.counts["served"] == search_served.positions == search_in.positions > 0
    assert h_served.lanes.counts["served_errors"] == 0


def test_a_served_search_left_unanswered_drops_its_lanes_episodes_and_the_league_goes_on():
    h, search, started = searched_lanes(True, fail=40)
    lanes = h.lanes
    assert lanes.counts["served_errors"] == 1 and lanes.counts["game_errors"] == 0
    # the game did not raise: the same search goes on, with the proofs it remembered
    assert search.search is started and len(started.table) > 0
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    assert len(batch) == lanes.counts["episodes"] > 0 and rollout.searched and len(rollout) > 0


class Asked:
    """A learner version whose moves are asked for and answered later, as the Serve deployment
    answers a served rollout policy (``serve.opponents.ServedPolicy``): ``submit`` keeps the
    request, ``result`` answers it with the version's network (the ``fail``-th answer raises)."""

    def __init__(self, policy, log: list, fail: int | None = None, life: str = "a"):
        self.policy, self.log, self.fail, self.life = policy, log, fail, life
        self.gone = False  # its learner restarted: every answer raises, as the deployment's does
        self.rng = np.random.default_rng(9)

    def submit(self, obs, mask):
        self.log.append(("submit", len(obs)))
        return obs.copy(), mask.copy()

    def result(self, pending):
        self.log.append(("result", len(pending[0])))
        if sum(kind == "result" for kind, _ in self.log) == self.fail:
            raise LookupError("main_agent-0 version 1: no longer kept")
        if self.gone:
            raise LookupError(f"main_agent-0 restarted: version 8 of life {self.life} is gone")
        return self.policy.act(*pending, generator=self.rng)

    def act(self, obs, mask, generator=None):  # as a live opponent: asked and waited for (ServedPolicy.act)
        return self.policy.act(obs, mask, generator=self.rng)


def test_a_served_policy_is_asked_in_one_step_and_answers_in_the_next_with_its_versions_moves():
    h = Harness(k=3, keep_groups=True)
    lanes, log = h.lanes, []
    served = {v: Asked(p, log) for v, p in h.policies.items()}
    lanes.set_learner(1, served[1])  # version 1 given again: replaced
    for _ in range(12):
        lanes.step()
    lanes.set_learner(2, served[2])  # running groups keep asking version 1
    for _ in range(12):
        lanes.step()
    lanes.finish_prepared()
    rollout, groups = lanes.take_groups("worker:x", seq=1)
    # every request answered once, after the lane's other requests went out
    assert [n for kind, n in log if kind == "submit"] == [n for kind, n in log if kind == "result"]
    assert sum(n for kind, n in log if kind == "result") >= len(rollout) > 0
    assert set(groups.version.tolist()) == {1, 2} and lanes.counts["served_errors"] == 0
    ends = np.flatnonzero(rollout.dones)
    version_of_episode = np.broadcast_to(groups.version[:, None], groups.played.shape)[groups.played]
    version = np.repeat(version_of_episode, np.diff(np.concatenate([[-1], ends])))
    for v, policy in h.policies.items():  # each decision's log-probability is its group's version's
        sel = version == v
        np.testing.assert_allclose(logp_under(policy, rollout)[sel], rollout.logp[sel], atol=1e-5)
    assert lanes.action_counts.sum() == lanes.counts["served"] == sum(n for kind, n in log if kind == "result")


def test_a_served_answer_that_fails_drops_its_lanes_episodes_and_the_league_goes_on():
    h = Harness(k=1, keep_groups=False)
    lanes, log = h.lanes, []
    lanes.set_learner(1, Asked(h.policies[1], log, fail=3))
    for _ in range(30):
        lanes.step()
    lanes.finish_prepared()
    assert lanes.counts["served_errors"] == 1 and lanes.counts["game_errors"] == 0
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    assert len(batch) == lanes.counts["episodes"] > 0  # every finished game reported, none of the dropped
    np.testing.assert_allclose(logp_under(h.policies[1], rollout), rollout.logp, atol=1e-5)


class UnansweredOpponents:
    """Frozen opponents asked for their moves and answered later, as the Serve deployment answers
    them (``serve.opponents.ServedOpponents``); the ``fail``-th answer raises ``TimeoutError``, as
    a request to a replica whose node died does once its wait runs out."""

    def __init__(self, opponents, fail: int):
        self.opponents, self.fail, self.answers = opponents, fail, 0

    def submit(self, agent_ids, codes, obs, mask):
        return agent_ids, codes, obs.copy(), mask.copy()

    def result(self, pending):
        self.answers += 1
        if self.answers == self.fail:
            raise TimeoutError("the opponents' replica did not answer within 120 s")
        return self.opponents.result(self.opponents.submit(*pending))


def test_served_opponents_left_unanswered_drop_their_lanes_episodes_and_the_league_goes_on():
    h = Harness(k=1, keep_groups=False)
    lanes = h.lanes
    lanes.opponents = UnansweredOpponents(h.opponents, fail=5)
    for _ in range(30):
        lanes.step()
    lanes.finish_prepared()
    assert lanes.opponents.answers > 5  # asked again after the one left unanswered
    assert lanes.counts["served_errors"] == 1 and lanes.counts["game_errors"] == 0
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    assert len(batch) == lanes.counts["episodes"] > 0  # every finished game reported, none of the dropped
    np.testing.assert_allclose(logp_under(h.policies[1], rollout), rollout.logp, atol=1e-5)


def test_a_restarted_learners_new_life_takes_over_the_groups_that_played_its_former_lifes_versions():
    # the learner restarts from a checkpoint at a lower version: the groups that play its former life's
    # versions 1 and 8 are answered by no one, until the new life (version 5) takes them over
    h = Harness(k=3, keep_groups=True)
    lanes, log = h.lanes, []
    former = [Asked(h.policies[1], log, life="a"), Asked(h.policies[2], log, life="a")]
    lanes.set_learner(1, former[0])
    for _ in range(6):
        lanes.step()
    lanes.set_learner(8, former[1])
    for _ in range(6):
        lanes.step()
    assert 8 in lanes.groups.versions()
    for policy in former:
        policy.gone = True
    for _ in range(3):
        lanes.step()
    assert lanes.counts["served_errors"] > 0
    lanes.set_learner(5, Asked(h.policies[2], log, life="b"))
    assert set(lanes.held) == {5} and lanes.groups.versions() == {5}
    errors, served = lanes.counts["served_errors"], lanes.counts["served"]
    for _ in range(24):
        lanes.step()
    lanes.finish_prepared()
    # at most the requests already out to the former life fail; the games go on and finish
    assert lanes.counts["served_errors"] - errors <= len(lanes.lanes)
    assert lanes.counts["served"] > served
    rollout, groups = lanes.take_groups("worker:x", seq=1)
    assert (groups.version == 5).sum() > 0 and set(groups.version.tolist()) <= {1, 8, 5}


BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"


def play_team_steps(lanes, n: int) -> tuple[int, int, int]:
    """``n`` steps of every lane, then the step prepared: the learner's decisions made, the most
    rows of one env in one step, and the decisions of the episodes still running."""
    decisions, most = 0, 0
    for _ in range(n):
        lanes.step()
        for lane in lanes.lanes:
            decisions += len(lane.learner)
            if len(lane.learner):
                most = max(most, int(np.bincount(lane.learner.rows).max()))
    lanes.finish_prepared()
    return decisions, most, sum(int(lane.decisions.sum()) for lane in lanes.lanes)


def test_team_lanes_give_each_agent_its_own_trajectory_and_each_game_one_result():
    """MAgent2 battle, two agents a side: every acting agent of the learner's side is a row of the
    learner's decisions and has a trajectory of its own, ending with its team's margin; the
    opponent's agents of a lane go out in one request; each game is one result."""
    pytest.importorskip("magent2")
    h = Harness(k=1, keep_groups=False, envs=6, lanes=2, game=BATTLE, teams={"prefix": ["red_", "blue_"],
                "score": "survivors", "max_cycles": 12}, map_size=12)
    lanes = h.lanes
    assert lanes.team_size == 2
    submitted = []
    submit = h.opponents.submit
    h.opponents.submit = lambda ids, codes, obs, mask: submitted.append(len(obs)) or submit(ids, codes, obs, mask)
    decisions, most, running = play_team_steps(lanes, 40)
    assert most == 2  # both agents of the learner's side decide in one env on one step
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    episodes = lanes.counts["episodes"]
    assert len(batch) == episodes >= 6 * 3 and lanes.counts["env_steps"] == 40 * 6
    assert len(rollout) == decisions - running  # every agent's decision of a finished episode, once
    # two trajectories per finished episode (no agent of this map dies before acting), each ending in
    # the same reward as its teammate's: the team's margin of survivors, halved
    assert rollout.num_episodes == 2 * episodes
    ends = rollout.rewards[rollout.dones]
    np.testing.assert_array_equal(ends[0::2], ends[1::2])
    assert set(np.unique(ends * 2).tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    # a game's score is 1, 0.5 or 0 (more survivors, as many, fewer): per pair, halves summed
    np.testing.assert_array_equal(batch.score * 2, np.round(batch.score * 2))
    assert 0 <= batch.score.sum() <= len(batch)
    # frozen opponents' rows went out in at most one request per lane per step, several agents each
    assert 0 < len(submitted) <= 40 * 2 and max(submitted) > 3


def test_a_curriculum_stage_plays_smaller_teams_and_reports_no_game():
    """Lanes on battle at 6 a side switch to 2 a side (a curriculum stage): the running episodes are
    dropped, every finished stage episode's decisions reach the learner as one trajectory per agent
    and no stage game is reported; back on the game itself, its games are."""
    pytest.importorskip("magent2")
    teams = {"prefix": ["red_", "blue_"], "score": "survivors", "max_cycles": 12}
    h = Harness(k=1, keep_groups=False, envs=4, lanes=2, game=BATTLE, teams=teams, map_size=16)
    lanes = h.lanes
    assert lanes.team_size == 6
    for _ in range(5):  # 4 steps taken, the 5th prepared: no episode of 12 steps ends
        lanes.step()
    lanes.set_games([make_game(BATTLE, 2, seed=50 + i, teams=teams, map_size=12) for i in range(2)], report_games=False)
    assert lanes.counts["episodes"] == 0 and lanes.recorder.take() is None  # the prepared step taken, then dropped
    decisions, most, running = play_team_steps(lanes, 40)
    assert most == 2
    rollout = lanes.recorder.take()
    batch = lanes.take_batch("worker:x", 1, LEARNER)
    stage_episodes = lanes.counts["episodes"]
    assert stage_episodes >= 4 * 3 and len(rollout) == decisions - running
    assert rollout.num_episodes == 2 * stage_episodes  # one trajectory per agent of the stage's teams
    assert len(batch) == 0 and batch.env_steps == lanes.counts["env_steps"] == 45 * 4  # env steps go on
    with pytest.raises(ValueError, match="cannot replace"):
        lanes.set_games([make_game("kuhn_poker", 2, seed=i) for i in range(2)], report_games=True)
    lanes.set_games([make_game(BATTLE, 2, seed=60 + i, teams=teams, map_size=16) for i in range(2)], report_games=True)
    for _ in range(30):
        lanes.step()
    lanes.finish_prepared()
    batch = lanes.take_batch("worker:x", 2, LEARNER)
    assert len(batch) == lanes.counts["episodes"] - stage_episodes > 0  # the game's own games, each reported
