"""A rollout worker's play, without Ray: its lanes of environments, the matches they play and the
groups its learner's episodes are played in.

A *lane* is a sub-vector of environments (``rollout.lanes`` per worker): while one lane's opponent
request is out (served inference), the worker steps another. Each environment plays one match at a
time, the learner in a random seat against the match's opponent: a learner playing with its
current weights (live) or a frozen snapshot, whose decisions of the whole lane go out as one
request to the opponents' inference (``actors.opponents``, ``serve.opponents``). The matches come
from the coordinator's plan for the learner (``league.matchmaking.MatchSampler``) through a
``MatchQueue``, first drawn first played, as ``league.messages.MatchAssignments``.

The learner's episodes are played in groups of k (``objective.k_opponents``, league.objectives):
a new episode takes the next slot of the open group; a group opens with k matches and the learner
version of that moment, whose policy plays all of the group's episodes (``Groups``). A group is
complete when its k episodes finished; only then are its games counted and its episodes'
transitions handed on, so no group goes out in part. Without a multi-opponent objective k = 1:
every episode is a group of its own, played by the version it started with.

In a team game (``envs.teams``) a side is a team of agents that share its policy: the learner's
side's acting agents are all rows of the learner's decisions, each agent's decisions its own
trajectory (``EpisodeRecorder``), and the opponent's agents all go out in the lane's one request.
A two-player game is a game of teams of one, on this same path.

``Lanes.step`` plays one vector step of every lane. The worker (actors/rollout.py) adds what needs
Ray: the plan's long poll, the learner's weights, and sending what ``Lanes`` hands out (a
``ResultBatch`` of the complete groups' games, their transitions as a ``Rollout`` and, for
grouped objectives, their ``EpisodeGroups``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from envs.base import VectorGame, uniform_legal
from league.messages import EpisodeGroups, MatchAssignments, ResultBatch, ResultColumns
from policies.expert import UnansweredEvaluation
from policies.rollout import Decisions, EpisodeRecorder, Rollout, TwoSeatPlay, count_decisions

log = logging.getLogger(__name__)

NOT_PLAYED = -1  # ``EpisodeGroups.acted`` of an episode in which the learner had no decision


class MatchQueue:
    """Matches drawn from the learner's plan and not yet played, first drawn first played.

    ``draw(n)`` draws ``n`` matches from the plan held (``MatchSampler.draw``); the queue draws
    about ``batch`` at a time. With ``repeat`` > 1 each drawn tuple of k matches (a group's, k =
    ``objective.k_opponents``) is queued ``repeat`` times in a row (``rollout.episodes_per_opponent``):
    the episodes that start together share their opponents, so a vector step asks for fewer distinct
    frozen policies (each one a forward pass) while every opponent keeps its share of the episodes.
    ``branches`` counts the matches queued per matchmaking branch; ``names`` and ``codes`` give each
    opponent id a small int code, so that lanes keep ints, not strings.
    """

    def __init__(self, draw: Callable[[int], MatchAssignments], batch: int, repeat: int = 1, k: int = 1):
        if batch < 1:
            raise ValueError(f"a match queue draws at least one match at a time, got {batch}")
        if repeat < 1 or k < 1:
            raise ValueError(f"a match queue repeats each draw at least once, in tuples of at least one; "
                             f"got repeat={repeat}, k={k}")
        self._draw, self.batch, self.repeat, self.k = draw, int(batch), int(repeat), int(k)
        self._head: MatchAssignments | None = None  # the last draw; its matches from _pos on are queued
        self._pos = 0
        self.branches: dict[str, int] = {}
        self.names: list[str] = []  # opponent ids by code
        self._codes: dict[str, int] = {}
        self._tables: dict[tuple[str, ...], np.ndarray] = {}  # a draw's opponent list -> their codes

    def take(self, n: int) -> MatchAssignments:
        """The next ``n`` (>= 1) matches."""
        parts = []
        while n > 0:
            if self._head is None or self._pos == len(self._head):
                self._head, self._pos = self._repeated(self._draw(self._per_draw())), 0
                if not len(self._head):
                    raise RuntimeError("the match plan drew no matches")
                for name, count in self._head.branch_counts().items():
                    self.branches[name] = self.branches.get(name, 0) + count
            cut = min(n, len(self._head) - self._pos)
            parts.append(self._head.part(self._pos, self._pos + cut))
            self._pos += cut
            n -= cut
        return parts[0] if len(parts) == 1 else MatchAssignments.concat(parts)

    def _per_draw(self) -> int:
        """Matches to draw so that, repeated, they make about ``batch``: whole tuples of k."""
        if self.repeat == 1:
            return self.batch
        return max(1, -(-self.batch // (self.repeat * self.k))) * self.k

    def _repeated(self, drawn: MatchAssignments) -> MatchAssignments:
        """Each tuple of k consecutive matches ``repeat`` times in a row: the next ``repeat`` groups
        (episodes, for k = 1) play the same opponents."""
        if self.repeat == 1:
            return drawn
        index = np.arange(-(-len(drawn) // self.k) * self.k).reshape(-1, self.k)
        index = np.repeat(index, self.repeat, axis=0).reshape(-1)
        return drawn.take(index[index < len(drawn)])

    def codes(self, matches: MatchAssignments) -> np.ndarray:
        """The code of each match's opponent."""
        table = self._tables.get(matches.opponents)
        if table is None:
            if len(self._tables) >= 64:  # plans change; keep the lists of the recent ones
                self._tables.clear()
            table = self._tables[matches.opponents] = np.array([self.code(o) for o in matches.opponents],
                                                                dtype=np.int64)
        return table[matches.opponent]

    def code(self, agent_id: str) -> int:
        code = self._codes.get(agent_id)
        if code is None:
            code = self._codes[agent_id] = len(self.names)
            self.names.append(agent_id)
        return code


@dataclass
class CompletedGroups:
    """Groups whose k episodes all finished, as columns (G groups): ids, the learner version each
    played, and per episode (G, k): the opponent's code (``MatchQueue.names``), the episode id, the
    learner's return, score in [0, 1] and number of decisions."""

    ids: np.ndarray
    version: np.ndarray
    opponent: np.ndarray
    episode: np.ndarray
    returns: np.ndarray
    scores: np.ndarray
    decisions: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


class Groups:
    """Which group and slot each new episode joins, and the groups whose k episodes all finished.

    A new episode takes the next free slot of the open group; when none is left, a group opens
    with k matches from the queue and the learner version given. The k episodes of a group may
    start on different steps and in any environments. Running groups are rows of a table (at most
    one per running episode, plus the open group), a row's k slots at ``row * k + slot`` of the
    per-episode columns; a complete group's row is reused. Group ids are never reused: they count
    up from ``first_id``.
    """

    ROW_COLUMNS = ("in_use", "id", "version", "started")  # per group
    SLOT_COLUMNS = ("opponent", "live", "finished", "episode", "returns", "scores", "decisions")  # per episode

    def __init__(self, k: int, first_id: int, matches: MatchQueue):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k, self.next_id, self.matches = int(k), int(first_id), matches
        self.open = -1  # the row of the group whose slots are still being handed out
        self._free = np.zeros(0, dtype=np.int64)  # a stack of free rows: _free[:_top]
        self._top = 0
        self.in_use = np.zeros(0, dtype=bool)
        self.id = np.zeros(0, dtype=np.int64)
        self.version = np.zeros(0, dtype=np.int64)
        self.started = np.zeros(0, dtype=np.int64)  # slots handed out
        self.opponent = np.zeros(0, dtype=np.int64)  # the opponent's code (MatchQueue.names)
        self.live = np.zeros(0, dtype=bool)
        self.finished = np.zeros(0, dtype=bool)
        self.episode = np.zeros(0, dtype=np.int64)
        self.returns = np.zeros(0)
        self.scores = np.zeros(0)
        self.decisions = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        """Running groups."""
        return int(self.in_use.sum())

    def versions(self) -> set[int]:
        """Versions that running groups play (the worker keeps their policies)."""
        return set(np.unique(self.version[self.in_use]).tolist())

    def start(self, n: int, version: int) -> np.ndarray:
        """Slots for ``n`` new episodes, as ``row * k + slot``: the opponent of an episode is
        ``opponent[slot]``, live when ``live[slot]``; its group plays ``version[slot // k]``."""
        k = self.k
        first = 0
        head = np.zeros(0, dtype=np.int64)
        if self.open >= 0:
            s = int(self.started[self.open])
            first = min(n, k - s)
            head = self.open * k + np.arange(s, s + first)
            self.started[self.open] += first
            if self.started[self.open] == k:
                self.open = -1
        rest = n - first
        if not rest:
            return head
        m = -(-rest // k)
        new = self._rows(m)
        matches = self.matches.take(m * k)
        self.id[new] = np.arange(self.next_id, self.next_id + m)
        self.next_id += m
        self.version[new] = version
        self.started[new] = k
        slots = (new[:, None] * k + np.arange(k)).reshape(-1)
        self.opponent[slots] = self.matches.codes(matches)
        self.live[slots] = matches.live[matches.opponent]
        self.finished[slots] = False
        if rest < m * k:  # the last group opens with slots left
            self.open = int(new[-1])
            self.started[self.open] = rest - (m - 1) * k
        slots = slots[:rest]
        return np.concatenate([head, slots]) if first else slots

    def finish(self, slots, episodes, returns, scores, decisions) -> CompletedGroups:
        """Episodes that ended in ``slots`` (``row * k + slot``); the groups they completed, in
        order of the episode that completed each."""
        slots = np.asarray(slots, dtype=np.int64)
        k = self.k
        if self.finished[slots].any():  # (an env holds its slot alone: no slot twice in one call)
            i = int(np.flatnonzero(self.finished[slots])[0])
            raise ValueError(f"episode slot {slots[i] % k} of group {self.id[slots[i] // k]} finished twice")
        self.finished[slots] = True
        self.episode[slots], self.returns[slots], self.scores[slots], self.decisions[slots] = \
            episodes, returns, scores, decisions
        if k == 1:  # a group of one completes with its episode
            done = slots
        else:  # each group once, in order of its last episode here
            rows = slots // k
            last, index = np.unique(rows[::-1], return_index=True)
            touched = last[np.argsort(len(rows) - 1 - index, kind="stable")]
            done = touched[(self.started[touched] == k) & self.finished.reshape(-1, k)[touched].all(axis=1)]
        self.in_use[done] = False
        self._free[self._top:self._top + len(done)] = done
        self._top += len(done)
        per_episode = (done[:, None] * k + np.arange(k)).reshape(-1) if k > 1 else done
        return CompletedGroups(self.id[done], self.version[done],
                               *(getattr(self, c)[per_episode].reshape(-1, k)
                                 for c in ("opponent", "episode", "returns", "scores", "decisions")))

    def _rows(self, m: int) -> np.ndarray:
        """``m`` free rows of the table, grown when it is full."""
        if self._top < m:
            size = len(self.id)
            grow = max(m - self._top, size, 16)
            self._free = np.concatenate([np.arange(size + grow - 1, size - 1, -1), self._free[:self._top],
                                         np.zeros(size, dtype=np.int64)])
            self._top += grow
            for name in self.ROW_COLUMNS:
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros(grow, dtype=old.dtype)]))
            for name in self.SLOT_COLUMNS:
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros(grow * self.k, dtype=old.dtype)]))
        self._top -= m
        rows = self._free[self._top:self._top + m].copy()
        self.in_use[rows] = True
        return rows


class Lane:
    """A sub-vector of environments: for each, the running episode, the learner's decisions in it,
    its slot in a group (``Groups``), the learner version that group plays and its opponent; and
    the step prepared (the learner's actions chosen, the opponents' request out) but not taken."""

    def __init__(self, game: VectorGame, rng: np.random.Generator):
        E = game.num_envs
        self.game = game
        self.play = TwoSeatPlay(game, rng.integers(0, 2, size=E))  # the learner's seat per env
        self.episode = np.zeros(E, dtype=np.int64)
        self.decisions = np.zeros(E, dtype=np.int64)
        self.ply = np.zeros(E, dtype=np.int64)  # moves made in the running episode, both seats'
        self.opening = np.zeros(E, dtype=np.int64)  # its first moves played at random (``opening_plies``)
        self.learner_opening = np.zeros(0, dtype=bool)  # the learner's decisions of the step played at random
        # (empty when no game opens at random)
        self.slot = np.zeros(E, dtype=np.int64)  # row * k + slot in Groups
        self.version = np.zeros(E, dtype=np.int64)
        self.opponent = np.zeros(E, dtype=np.int64)  # the opponent's code (MatchQueue.names)
        self.live = np.zeros(E, dtype=bool)
        self.prepared = False
        self.learner: Decisions | None = None  # the learner's decisions of the prepared step
        self.learner_actions = np.zeros(0, dtype=np.int64)
        self.learner_logp = np.zeros(0, dtype=np.float32)
        self.learner_values = np.zeros(0, dtype=np.float32)
        self.learner_targets: np.ndarray | None = None  # the search's improved policies (a search learner)
        self.learner_pending: list = []  # a served policy's requests out: (rows, policy, handle) a version
        self.others: Decisions | None = None  # the opponents' decisions
        self.others_actions = np.zeros(0, dtype=np.int64)  # their actions known so far
        self.served = np.zeros(0, dtype=np.int64)  # rows of ``others`` whose actions ``pending`` brings
        self.pending: Any = None  # the opponents' request in flight


class Lanes:
    """A worker's lanes, the learner's play in them, and what finished: the games of complete
    groups (``results``), their transitions (``recorder``) and, for ``EpisodeGroups``, the groups.

    ``opponents`` answers frozen opponents' decisions (``submit(agent_ids, codes, obs, mask)`` then
    ``result(handle)``); ``live_policy(agent_id)`` is the policy a live opponent plays now;
    ``rebuild(n)`` builds a lane's game anew after its ``n``-th error. The learner's policies come
    with ``set_learner(version, policy)``; a group plays the version newest when it opened.
    ``keep_groups``: the complete groups are kept for ``take_groups`` (a learner with a grouped
    objective takes them with their transitions); otherwise the transitions go alone
    (``recorder.take()``). ``self_id``: the learner's own id; its decisions in games against
    itself, live, are marked ``self_play`` in the transitions.
    """

    def __init__(self, games: list[VectorGame], k: int, matches: MatchQueue, opponents, live_policy: Callable,
                 rng: np.random.Generator, rebuild: Callable[[int], VectorGame], keep_groups: bool,
                 name: str = "lanes", self_id: str | None = None, search: Callable | None = None,
                 opening_plies: int = 0):
        self.lanes = [Lane(g, rng) for g in games]
        self.opening_plies = int(opening_plies)
        self.search = search
        self.self_code = -1 if self_id is None else matches.code(self_id)
        self.keep_groups = keep_groups
        self.k, self.matches, self.opponents, self.live_policy = k, matches, opponents, live_policy
        self.rng, self.rebuild, self.name = rng, rebuild, name
        self.num_actions, self.obs_size = games[0].num_actions, games[0].obs_size
        self.team_size = games[0].team_size
        self.version = -1
        self.report_games = True  # False: finished games are not in ``results`` (a curriculum stage's)
        self.held: dict[int, Any] = {}  # learner version -> policy, while a group plays it
        # since the worker started; served: the learner's moves a served policy answered, served_errors:
        # the steps it did not answer (their lanes restarted)
        self.counts = {"env_steps": 0, "episodes": 0, "game_errors": 0, "served": 0, "served_errors": 0}

    def set_learner(self, version: int, policy) -> None:
        """The learner's newest weights: groups that open from now on play them (a version given again
        is replaced: a restarted learner publishes its numbers again). A served policy of another life
        than the held ones' (the learner restarted) takes over their groups: no version of a former
        life is answered any more, so those groups play this version from now on."""
        self.version = int(version)
        life = getattr(policy, "life", None)
        if life is not None:
            gone = [v for v, p in self.held.items() if getattr(p, "life", life) != life]
            for v in gone:
                del self.held[v]
                if hasattr(self, "groups"):
                    self.groups.version[self.groups.version == v] = self.version
                for lane in self.lanes:
                    lane.version[lane.version == v] = self.version
        self.held[self.version] = policy

    def start(self, first_group_id: int) -> None:
        """Every environment starts a new episode in a new group; nothing finished is held."""
        if self.version not in self.held:
            raise RuntimeError("no learner policy yet: set_learner() first")
        self.groups = Groups(self.k, first_group_id, self.matches)
        self.recorder = EpisodeRecorder(self.team_size)
        self.results = ResultColumns()
        self.completed: list[CompletedGroups] = []  # complete groups whose transitions are in the recorder
        self.action_counts = np.zeros(self.num_actions)
        self.env_steps = 0  # since the last take_batch
        self._next_episode = 0
        for lane in self.lanes:
            E = lane.game.num_envs
            self._start_episodes(lane, np.arange(E))
            lane.decisions[:] = 0
            lane.pending, lane.prepared = None, False

    def step(self) -> None:
        """One vector step of every lane: take the step prepared, then prepare the next."""
        for lane in self.lanes:
            if lane.prepared:
                self._finish(lane)
            self._prepare(lane)

    def finish_prepared(self) -> None:
        """Take the steps prepared (the opponents' requests out): before the worker stops."""
        for lane in self.lanes:
            if lane.prepared:
                self._finish(lane)

    def set_games(self, games: list[VectorGame], report_games: bool) -> None:
        """Play ``games`` from now on, one per lane (a curriculum's next stage): the steps prepared
        are taken, then each lane's running episodes are dropped, as after a game's error, and start
        again in the new game with the same opponents. ``report_games``: whether the games that
        finish from now on go to ``results`` (their transitions go to the learner either way).
        A new game keeps the observation, the actions and the environments of the old; its teams
        may be smaller than ``team_size``, never larger."""
        for lane, game in zip(self.lanes, games, strict=True):
            if (game.num_envs, game.obs_size, game.num_actions) != (lane.game.num_envs, self.obs_size,
                                                                   self.num_actions) or game.team_size > self.team_size:
                raise ValueError(f"{game.name}: {game.num_envs} envs of {game.obs_size} observations, "
                                 f"{game.num_actions} actions and teams of {game.team_size} cannot replace "
                                 f"{lane.game.num_envs} envs of {self.obs_size}, {self.num_actions} and {self.team_size}")
        self.finish_prepared()
        for lane, game in zip(self.lanes, games):
            lane.game = game
            lane.play = TwoSeatPlay(game, lane.play.seat)
            self._restart(lane)
        self.report_games = report_games

    # -- what finished ------------------------------------------------------------------
    def take_batch(self, source: str, seq: int, learner_id: str) -> ResultBatch:
        """The complete groups' games since the last batch, with the env steps and the learner's
        action counts since then, as one per-pair ``ResultBatch``."""
        batch = self.results.take(source, seq, learner_id, self.matches.names, self.env_steps,
                                  {learner_id: self.action_counts})
        self.env_steps, self.action_counts = 0, np.zeros(self.num_actions)
        return batch

    def take_groups(self, source: str, seq: int | None) -> tuple[Rollout | None, EpisodeGroups]:
        """The transitions of the complete groups since the last take and the groups: their played
        episodes, group by group and slot by slot, are the rollout's episodes in order."""
        rollout = self.recorder.take()
        done, self.completed = self.completed, []
        k = self.k
        if done:
            ids, version = np.concatenate([d.ids for d in done]), np.concatenate([d.version for d in done])
            opponent, returns, decisions = (np.concatenate([getattr(d, f) for d in done]).reshape(-1, k)
                                            for f in ("opponent", "returns", "decisions"))
        else:
            ids = version = np.zeros(0, dtype=np.int64)
            opponent = decisions = np.zeros((0, k), dtype=np.int64)
            returns = np.zeros((0, k))
        used, local = np.unique(opponent, return_inverse=True)
        played = decisions > 0
        acted = np.where(played, version[:, None], NOT_PLAYED)  # a group's version made all its decisions
        groups = EpisodeGroups(source, ids, version, tuple(self.matches.names[c] for c in used.tolist()),
                               local.reshape(-1, k), returns, played, acted, seq=seq)
        if rollout is None and len(groups):  # the learner had no decision in any of these groups' episodes
            rollout = Rollout.empty(self.obs_size, self.num_actions)
        return rollout, groups

    def has_news(self) -> bool:
        """Finished games or env steps not yet taken."""
        return len(self.results) > 0 or self.env_steps > 0

    # -- one step ---------------------------------------------------------------------
    def _start_episodes(self, lane: Lane, rows: np.ndarray) -> None:
        """New episodes in ``rows`` take group slots and their matches."""
        slots = self.groups.start(rows.size, self.version)
        lane.slot[rows] = slots
        lane.opponent[rows], lane.live[rows] = self.groups.opponent[slots], self.groups.live[slots]
        lane.version[rows] = self.groups.version[slots // self.k]
        lane.episode[rows] = np.arange(self._next_episode, self._next_episode + rows.size)
        self._next_episode += rows.size
        self._open(lane, rows)
        if len(self.held) > 1:
            keep = self.groups.versions() | {self.version}
            self.held = {v: p for v, p in self.held.items() if v in keep}

    def _open(self, lane: Lane, rows: np.ndarray) -> None:
        """The episodes of ``rows`` start: how many of their first moves are random (games against
        the learner itself, with ``opening_plies``)."""
        lane.ply[rows] = 0
        lane.opening[rows] = 0
        if self.opening_plies:
            own = self._against_self(lane, rows)
            lane.opening[rows[own]] = self.rng.integers(0, self.opening_plies + 1, size=int(own.sum()))

    def _random_moves(self, lane: Lane, decisions: Decisions, actions: np.ndarray) -> np.ndarray:
        """Where ``decisions`` are in their episode's random opening: which (the returned mask), and
        ``actions`` there replaced by uniformly random legal moves."""
        opening = lane.ply[decisions.rows] < lane.opening[decisions.rows]
        if opening.any():
            actions[opening] = uniform_legal(self.rng, decisions.mask[opening])
        return opening

    def _against_self(self, lane: Lane, rows: np.ndarray) -> np.ndarray:
        """Which of the environments ``rows`` play the learner against itself, live."""
        return lane.live[rows] & (lane.opponent[rows] == self.self_code)

    def _prepare(self, lane: Lane, retried: bool = False) -> None:
        """Choose the learner's actions and send the opponents' request of one lane.

        All frozen-opponent decisions of the lane (both seats, every opponent) go out as one
        request; live opponents (learners' current weights) act here. A search that raises (a user's
        game's own code, in its positions' copies) is rebuilt and the lane restarted, as after the
        game's other errors; ``retried``: this is that second try, whose error goes up."""
        try:
            learner, others = lane.play.decisions()
        except Exception as exc:  # the game's own code (a user's game may raise): drop, restart, go on
            self._recover(lane, "observing", exc)
            learner, others = lane.play.decisions()
        lane.learner, lane.others = learner, others
        lane.learner_actions = np.zeros(0, dtype=np.int64)
        lane.learner_opening = np.zeros(0, dtype=bool)
        if len(learner):
            try:
                acted = self._learner_act(lane, learner)
            except UnansweredEvaluation as exc:  # a served search's leaves: as a served move unanswered
                # (the game did not raise: the search and its remembered proofs stay; each run starts anew)
                self._recover(lane, "serving", exc, source="the learner's served policy", count="served_errors")
                return
            except Exception as exc:
                if self.search is None or retried:
                    raise
                # a user's game raised while its positions were copied or stepped: its search starts
                # anew, the lane's running episodes are dropped as after any error of the game's
                self.search.rebuild()
                self._recover(lane, "searching", exc)
                return self._prepare(lane, retried=True)
            if acted is not None:  # None: a served policy's answer is taken in _finish
                self._take_learner_actions(lane, *acted)
            count_decisions(lane.decisions, learner.rows, self.team_size)
        lane.others_actions = np.zeros(len(others), dtype=np.int64)
        lane.prepared = True
        lane.pending = None
        if not len(others):
            lane.served = np.zeros(0, dtype=np.int64)
            return
        codes = lane.opponent[others.rows]
        live = lane.live[others.rows]
        names = self.matches.names
        for code in np.unique(codes[live]).tolist():
            sel = np.flatnonzero(live & (codes == code))
            policy = self.live_policy(names[code])
            lane.others_actions[sel] = policy.act(others.obs[sel], others.mask[sel], generator=self.rng)[0]
        lane.served = np.flatnonzero(~live)
        if lane.served.size:
            used, local = np.unique(codes[lane.served], return_inverse=True)
            lane.pending = self.opponents.submit([names[c] for c in used.tolist()], local.reshape(-1),
                                                 others.obs[lane.served], others.mask[lane.served])

    def _learner_act(self, lane: Lane, learner: Decisions):
        """The learner's actions, log-probabilities and values, each env's by the policy version its
        group plays. A served policy (``submit``/``result``, ``rollout.policy_inference: serve``) is
        asked here, one request a version, and answers in ``_finish``: None is returned."""
        if self.search is not None:
            return self._learner_search(lane, learner)
        versions = lane.version[learner.rows]
        first = versions[0]
        if (versions == first).all():
            parts = [(slice(None), self.held[int(first)])]
        else:
            parts = [(np.flatnonzero(versions == v), self.held[v]) for v in np.unique(versions).tolist()]
        if hasattr(parts[0][1], "submit"):
            lane.learner_pending = [(rows, policy, policy.submit(learner.obs[rows], learner.mask[rows]))
                                    for rows, policy in parts]
            return None
        if len(parts) == 1:
            return parts[0][1].act(learner.obs, learner.mask, generator=self.rng)
        return self._gather(len(learner), [(rows, policy.act(learner.obs[rows], learner.mask[rows], generator=self.rng))
                                           for rows, policy in parts])

    @staticmethod
    def _gather(n: int, parts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One (actions, logp, values) of ``n`` rows from each part's rows' own."""
        a, logp, v = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
        for rows, (a_part, logp_part, v_part) in parts:
            a[rows], logp[rows], v[rows] = a_part, logp_part, v_part
        return a, logp, v

    def _take_learner_actions(self, lane: Lane, actions, logp, values) -> None:
        if self.opening_plies:
            actions = np.array(actions, dtype=np.int64)
            lane.learner_opening = self._random_moves(lane, lane.learner, actions)
        lane.learner_actions, lane.learner_logp, lane.learner_values = actions, logp, values
        self.action_counts += np.bincount(actions, minlength=self.num_actions)

    def _take_served(self, lane: Lane) -> bool:
        """The served policy's answers of the lane's prepared step, or False when one did not come (an
        unknown or dropped version, the deployment restarting): the lane's running episodes are then
        dropped and restarted, as after a game's error."""
        pending, lane.learner_pending = lane.learner_pending, []
        try:
            answers = [(rows, policy.result(handle)) for rows, policy, handle in pending]
        except Exception as exc:
            self._recover(lane, "serving", exc, source="the learner's served policy", count="served_errors")
            return False
        self._take_learner_actions(lane, *self._gather(len(lane.learner), answers))
        self.counts["served"] += len(lane.learner)
        return True

    def _learner_search(self, lane: Lane, learner: Decisions):
        """The learner's searched moves: each env's searched with the version its group plays; the
        improved policies go to ``lane.learner_targets``."""
        versions = lane.version[learner.rows]
        n = len(learner)
        a, logp, v = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
        targets = np.zeros((n, self.num_actions), dtype=np.float32)
        for version in np.unique(versions).tolist():
            sel = np.flatnonzero(versions == version)
            policy = self.held[version]
            found = self.search(policy, lane.game, learner.rows[sel])
            a[sel], v[sel], targets[sel] = found.action, found.value, found.policy
            if hasattr(policy, "submit"):  # its leaves were evaluated in the Serve deployment
                self.counts["served"] += len(sel)
        logp[:] = np.log(np.maximum(targets[np.arange(n), a], 1e-12))
        lane.learner_targets = targets
        return a, logp, v

    def _finish(self, lane: Lane) -> None:
        """Collect the opponents' actions of one lane, step it, and book finished episodes."""
        if lane.learner_pending and not self._take_served(lane):
            return
        if lane.pending is not None:
            try:
                lane.others_actions[lane.served] = self.opponents.result(lane.pending)
            except Exception as exc:  # served opponents unanswered (a replica's node died): as a served move
                self._recover(lane, "serving", exc, source="the served opponents", count="served_errors")
                return
        lane.pending, lane.prepared = None, False
        if self.opening_plies:
            self._random_moves(lane, lane.others, lane.others_actions)
        try:
            done = lane.play.step(lane.learner, lane.learner_actions, lane.others, lane.others_actions)
        except Exception as exc:  # the game's own code (a user's game may raise): drop, restart, go on
            self._recover(lane, "stepping", exc)
            return
        lane.ply += 1
        learner = lane.learner
        if len(learner):  # recorded once stepped: with the step's per-step rewards, where the game gives them
            rows = learner.rows
            self_play = self._against_self(lane, rows)
            parts = (lane.episode[rows], learner.obs, learner.mask, lane.learner_actions, lane.learner_logp,
                     lane.learner_values, learner.agents, done.rewards, self_play, lane.learner_targets)
            if lane.learner_opening.any():
                keep = ~lane.learner_opening
                parts = tuple(None if part is None else np.asarray(part)[keep] for part in parts)
            self.recorder.add(*parts)
        E = lane.game.num_envs
        self.env_steps += E
        self.counts["env_steps"] += E
        if not len(done):
            return
        rows = done.rows
        complete = self.groups.finish(lane.slot[rows], lane.episode[rows], done.returns, done.scores,
                                      lane.decisions[rows])
        if len(complete):
            played = complete.decisions > 0
            self.recorder.finish(complete.episode[played], complete.returns[played], complete.decisions[played])
            if self.report_games:
                self.results.add(complete.opponent.reshape(-1), complete.scores.reshape(-1))
            if self.keep_groups:
                self.completed.append(complete)
        lane.decisions[rows] = 0
        lane.play.seat[rows] = self.rng.integers(0, 2, size=rows.size)
        self._start_episodes(lane, rows)
        self.counts["episodes"] += int(rows.size)

    def _recover(self, lane: Lane, doing: str, exc: Exception, source: str | None = None,
                 count: str = "game_errors") -> None:
        """The game (or ``source``) raised: log it, count it (``count``), drop the lane's running
        episodes (no game of theirs is reported, none of their decisions reaches the learner) and
        restart its environments with the same opponents in the same group slots, so matchmaking and
        groups go on as they were. Finished
        episodes, and everything already handed out, are untouched. A game whose ``reset`` raises
        too is built anew."""
        self.counts[count] += 1
        errors = self.counts[count]
        log.error("%s: %s %s raised %s: %s; dropping the %d running episodes of its lane and restarting them",
                  self.name, doing, source or lane.game.name, type(exc).__name__, exc, lane.game.num_envs,
                  exc_info=errors <= 3)
        try:
            lane.game.reset()
        except Exception as exc2:
            log.error("%s: %s: reset raised %s too; building the game anew", self.name, lane.game.name, exc2)
            lane.game = self.rebuild(errors)
            lane.play = TwoSeatPlay(lane.game, lane.play.seat)
        self._restart(lane)

    def _restart(self, lane: Lane) -> None:
        """Drop the lane's running episodes (no decision of theirs reaches the learner) and number its
        environments' episodes anew, in the same group slots: the game was just reset or built."""
        self.recorder.drop(lane.episode)
        E = lane.game.num_envs
        lane.episode = np.arange(self._next_episode, self._next_episode + E)
        self._next_episode += E
        lane.decisions[:] = 0
        self._open(lane, np.arange(E))
        lane.pending, lane.prepared, lane.learner_pending = None, False, []
