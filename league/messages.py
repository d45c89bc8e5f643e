"""The messages between the league's actors, on one screen.

Plain dataclasses of strings, numbers and numpy columns (no Ray, no torch), so
they cross Ray cheaply (numpy arrays go out of band) and can be built and
checked in unit tests. Constructors validate: a malformed message raises
``ValueError`` naming the field, so a bad caller gets an error and the
long-running receiver stays up.

    RolloutWorker --match_plan(learner, version)----> Coordinator -> MatchPlan | None (draws its matches itself)
    anyone        --next_matches(learner, n)--------> Coordinator -> MatchAssignments
    RolloutWorker --report_results(ResultBatch)-----> Coordinator -> bool (stored; also on a retry)
    Evaluator     --report_results(ResultBatch)-----> Coordinator    (sampled frozen-vs-frozen games)
    Evaluator     --record_exact(ExactScores)-------> Coordinator -> int (pairs kept)
    Learner       --learner_progress(...)-----------> Coordinator -> ProgressDecision
    Learner       --add_snapshot(...)---------------> Coordinator -> SnapshotReply
    RolloutWorker --get_weights(version)------------> Learner     -> WeightsReply
    RolloutWorker --submit(policies.rollout.Rollout)> Learner     -> LearnerAck
    RolloutWorker --submit(Rollout, EpisodeGroups)--> Learner     -> LearnerAck  (objective.k_opponents, shaper;
                                                                     once per (source, seq), like its ResultBatch)
    anyone        --nash()--------------------------> Coordinator -> NashMixture  (GET /nash is its to_dict)

A result batch is idempotent per ``(source, seq)``: a retry after a lost reply
or a coordinator restart is stored once. It counts games per ordered pair
(a rollout worker's: per opponent), so its size and the cost of
ingesting it grow with the pairs, not with the games. ``ResultBatch.to_arrays`` and
``from_arrays`` are its one form on disk (the worker's outbox, the league's store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Result:
    """One finished game: ``a`` scored ``score`` in [0, 1] against ``b``."""

    a: str
    b: str
    score: float


def _pair_columns(agents: Any, a: Any, b: Any, score: Any, what: str) -> tuple[tuple[str, ...], np.ndarray, np.ndarray,
                                                                              np.ndarray]:
    """Validated ``(agents, a, b, score)``: ``agents[a[k]]`` scored ``score[k]`` against ``agents[b[k]]``."""
    if isinstance(agents, (str, bytes)) or not isinstance(agents, (list, tuple)) \
            or not all(isinstance(x, str) for x in agents):
        raise ValueError(f"{what}: 'agents' must be a list of agent ids")
    try:
        a_ = np.asarray(a)
        b_ = np.asarray(b)
        s_ = np.asarray(score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: columns a, b and score must be numeric ({exc})") from None
    if not (a_.ndim == b_.ndim == s_.ndim == 1 and len(a_) == len(b_) == len(s_)):
        raise ValueError(f"{what}: columns a, b and score must be 1-D of one length")
    if len(a_):
        if not (np.issubdtype(a_.dtype, np.integer) and np.issubdtype(b_.dtype, np.integer)):
            raise ValueError(f"{what}: columns a and b must be integer indices into agents")
        if min(a_.min(), b_.min()) < 0 or max(a_.max(), b_.max()) >= len(agents):
            raise ValueError(f"{what}: columns a and b must index agents (0..{len(agents) - 1})")
        if not np.all((s_ >= 0.0) & (s_ <= 1.0)):  # also rejects NaN
            bad = s_[~((s_ >= 0.0) & (s_ <= 1.0))][0]
            raise ValueError(f"{what}: score must be in [0, 1], got {bad}")
    a_, b_ = a_.astype(np.int64), b_.astype(np.int64)
    unique = tuple(dict.fromkeys(agents))
    if len(unique) < len(agents):
        # an id listed twice (a worker's learner that is also its own opponent) is one agent:
        # indices are remapped so that equal indices mean the same agent, and only then
        first = {x: i for i, x in enumerate(unique)}
        remap = np.array([first[x] for x in agents], dtype=np.int64)
        a_, b_ = remap[a_], remap[b_]
    return unique, a_, b_, s_


def _count_columns(batch: "ResultBatch") -> tuple:
    """Validated columns of a per-pair result batch: ``games`` >= 1, ``wins`` and ``draws`` >= 0 with
    ``wins + draws <= games``, and a score sum that such games can have (a win scores more than 1/2,
    a draw 1/2, a loss less)."""
    what = "result batch"
    try:
        games = np.asarray(batch.games)
        wins = np.asarray(batch.wins)
        draws = np.asarray(batch.draws)
        total = np.asarray(batch.score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: columns games, wins, draws and score must be numeric ({exc})") from None
    rows = len(np.asarray(batch.a)) if np.ndim(batch.a) == 1 else -1
    for name, col in (("games", games), ("wins", wins), ("draws", draws)):
        if col.ndim != 1 or len(col) != rows:
            raise ValueError(f"{what}: column {name} must be 1-D, one entry per row of a and b")
        if len(col) and not np.issubdtype(col.dtype, np.integer):
            raise ValueError(f"{what}: column {name} must hold integer counts")
    games, wins, draws = games.astype(np.int64), wins.astype(np.int64), draws.astype(np.int64)
    if len(games):
        if games.min() < 1 or min(wins.min(), draws.min()) < 0 or np.any(wins + draws > games):
            raise ValueError(f"{what}: counts must have games >= 1, wins and draws >= 0, wins + draws <= games")
        losses = games - wins - draws
        low = 0.5 * (wins + draws)  # a win scores more than 1/2, a loss at least 0
        high = wins + 0.5 * (draws + losses)
        ok = np.isfinite(total) & (total >= low - 1e-9) & (total <= high + 1e-9) if total.shape == games.shape else None
        if ok is None or not np.all(ok):
            raise ValueError(f"{what}: score must be the sum of the games' scores (between (wins + draws) / 2 and "
                             "wins + (draws + losses) / 2 per row)")
    agents, a, b, _ = _pair_columns(batch.agents, batch.a, batch.b, np.zeros(len(games)), what)
    return agents, a, b, total, games, wins, draws


def _intern(triples: Iterable[tuple[str, str, float]]) -> tuple[list[str], list[int], list[int], list[float]]:
    agents: dict[str, int] = {}
    a, b, s = [], [], []
    for x, y, score in triples:
        a.append(agents.setdefault(str(x), len(agents)))
        b.append(agents.setdefault(str(y), len(agents)))
        s.append(float(score))
    return list(agents), a, b, s


@dataclass(frozen=True)
class ResultBatch:
    """Finished games of one reporter, counted per ordered pair: row ``k`` stands for ``games[k]``
    games of ``agents[a[k]]`` against ``agents[b[k]]``, ``wins[k]`` of them won (score > 1/2),
    ``draws[k]`` drawn (score 1/2), ``score[k]`` the sum of their scores. One batch per
    ``(source, seq)``; the one form of a match result from the worker to the store.

    ``env_steps``: environment steps the reporter took since its last batch.
    ``action_counts``: per learner, a histogram of its actions since its last
    batch (the behaviour embedding of the league's diversity score).
    Rollout workers send thousands of games a second: a row per opponent costs far
    less to send, ingest and store than a row per game.
    """

    source: str
    seq: int
    agents: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    games: np.ndarray
    wins: np.ndarray
    draws: np.ndarray
    score: np.ndarray
    env_steps: int = 0
    action_counts: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source:
            raise ValueError("result batch: 'source' must be a non-empty string")
        if isinstance(self.seq, bool) or not isinstance(self.seq, (int, np.integer)):
            raise ValueError(f"result batch: 'seq' must be an integer, got {self.seq!r}")
        if isinstance(self.env_steps, bool) or not isinstance(self.env_steps, (int, np.integer)) or self.env_steps < 0:
            raise ValueError(f"result batch: 'env_steps' must be an integer >= 0, got {self.env_steps!r}")
        agents, a, b, score, games, wins, draws = _count_columns(self)
        counts = {}
        if not isinstance(self.action_counts, dict):
            raise ValueError("result batch: 'action_counts' must map learner ids to histograms")
        for learner_id, hist in self.action_counts.items():
            h = np.asarray(hist, dtype=np.float64)
            if not isinstance(learner_id, str) or h.ndim != 1 or not np.all(np.isfinite(h)) or np.any(h < 0):
                raise ValueError(f"result batch: action_counts[{learner_id!r}] must be a 1-D histogram of counts >= 0")
            counts[learner_id] = h
        for name, value in (("seq", int(self.seq)), ("env_steps", int(self.env_steps)), ("agents", agents), ("a", a),
                            ("b", b), ("score", score), ("action_counts", counts), ("games", games), ("wins", wins),
                            ("draws", draws)):
            object.__setattr__(self, name, value)

    @classmethod
    def from_games(cls, source: str, seq: int, agents: Sequence[str], a: Any, b: Any, score: Any, env_steps: int = 0,
                   action_counts: dict[str, Any] | None = None) -> "ResultBatch":
        """Games given one by one (``agents[a[k]]`` scored ``score[k]`` against ``agents[b[k]]``),
        counted per ordered pair, pairs in the order of their first game."""
        agents, a, b, score = _pair_columns(agents, a, b, score, "result batch")
        n = len(agents)
        keys, first, inverse = np.unique(a * n + b, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        m = len(keys)
        count = lambda w: np.bincount(inverse, weights=w, minlength=m)  # noqa: E731
        order = np.argsort(first, kind="stable")
        keys = keys[order]
        return cls(source, seq, agents, keys // n, keys % n, count(None).astype(np.int64)[order],
                   count(score > 0.5).astype(np.int64)[order], count(score == 0.5).astype(np.int64)[order],
                   count(score)[order], env_steps, {} if action_counts is None else action_counts)

    @classmethod
    def from_results(cls, source: str, seq: int, results: Iterable[Result | tuple[str, str, float]],
                     env_steps: int = 0, action_counts: dict[str, Any] | None = None) -> "ResultBatch":
        """``from_games`` of ``Result`` objects or ``(a, b, score)`` triples."""
        agents, a, b, s = _intern((r.a, r.b, r.score) if isinstance(r, Result) else r for r in results)
        return cls.from_games(source, seq, agents, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                              np.asarray(s, dtype=np.float64), env_steps, action_counts)

    @classmethod
    def learner_games(cls, source: str, seq: int, learner_id: str, names: Sequence[str], codes: Any, scores: Any,
                      env_steps: int = 0, action_counts: dict[str, Any] | None = None) -> "ResultBatch":
        """A rollout worker's report: its learner scored ``scores[k]`` against ``names[codes[k]]``, as
        one batch (a row per opponent with games, wins, draws and the score sum), so that sending and
        ingesting it costs per opponent, not per game."""
        codes = np.asarray(codes, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        used, b = np.unique(codes, return_inverse=True)
        b = b.reshape(-1)
        m = len(used)
        games = np.bincount(b, minlength=m).astype(np.int64)
        wins = np.bincount(b, weights=scores > 0.5, minlength=m).astype(np.int64)
        draws = np.bincount(b, weights=scores == 0.5, minlength=m).astype(np.int64)
        total = np.bincount(b, weights=scores, minlength=m)
        return cls(source, seq, (learner_id, *(names[c] for c in used.tolist())), np.zeros(m, dtype=np.int64),
                   np.arange(1, m + 1, dtype=np.int64), games, wins, draws, total, env_steps, action_counts or {})

    def to_arrays(self) -> dict[str, Any]:
        """The batch as named columns, all but its ``source`` and ``seq``: numbers as numpy arrays,
        names as lists of str, ``env_steps`` an int (the outbox's npz file takes each as an array,
        the store's JSON as a list); ``from_arrays`` reads them back."""
        ids = list(self.action_counts)
        return {"agents": list(self.agents), "a": self.a, "b": self.b, "games": self.games, "wins": self.wins,
                "draws": self.draws, "score": self.score, "env_steps": self.env_steps, "count_ids": ids,
                **{f"count_{i}": self.action_counts[k] for i, k in enumerate(ids)}}

    @classmethod
    def from_arrays(cls, source: str, seq: int, arrays: Mapping[str, Any]) -> "ResultBatch":
        """The batch that ``to_arrays`` gave ``arrays`` (numpy arrays or lists), validated."""
        try:
            ids = np.asarray(arrays["count_ids"], dtype=str).tolist()
            counts = {k: arrays[f"count_{i}"] for i, k in enumerate(ids)}
            return cls(source, seq, tuple(np.asarray(arrays["agents"], dtype=str).tolist()),
                       *(np.asarray(arrays[key]) for key in ("a", "b", "games", "wins", "draws")),
                       np.asarray(arrays["score"], dtype=np.float64), int(arrays["env_steps"]), counts)
        except KeyError as exc:
            raise ValueError(f"result batch arrays: missing {exc.args[0]!r}") from None

    def pair_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(a, b, games, wins, draws, score)`` with one row per ordered pair (rows of one pair
        summed), in order of the pair's first row."""
        if not len(self.a):
            z = np.zeros(0, dtype=np.int64)
            return z, z, z, z, z, np.zeros(0)
        n = len(self.agents)
        keys, first, inverse = np.unique(self.a * n + self.b, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        m = len(keys)
        out_games = np.bincount(inverse, weights=self.games, minlength=m).astype(np.int64)
        out_wins = np.bincount(inverse, weights=self.wins, minlength=m).astype(np.int64)
        out_draws = np.bincount(inverse, weights=self.draws, minlength=m).astype(np.int64)
        out_score = np.bincount(inverse, weights=self.score, minlength=m)
        order = np.argsort(first, kind="stable")
        keys = keys[order]
        return (keys // n, keys % n, out_games[order], out_wins[order], out_draws[order], out_score[order])

    def __len__(self) -> int:
        """Games (not rows) in the batch."""
        return int(self.games.sum())


class ResultColumns:
    """A rollout worker's finished games of its learner, kept as columns until reported as one
    per-pair ``ResultBatch``."""

    def __init__(self):
        self.opponents: list[np.ndarray] = []  # the worker's opponent codes
        self.scores: list[np.ndarray] = []
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, opponents: np.ndarray, scores: np.ndarray) -> None:
        self.opponents.append(opponents)
        self.scores.append(scores)
        self.n += len(opponents)

    def take(self, source: str, seq: int, learner_id: str, names: list[str], env_steps: int,
             action_counts: dict[str, np.ndarray]) -> ResultBatch:
        codes = np.concatenate(self.opponents) if self.opponents else np.zeros(0, dtype=np.int64)
        scores = np.concatenate(self.scores) if self.scores else np.zeros(0)
        self.opponents, self.scores, self.n = [], [], 0
        return ResultBatch.learner_games(source, seq, learner_id, names, codes, scores, env_steps, action_counts)


@dataclass(frozen=True)
class EpisodeGroups:
    """Complete groups of k episodes (league.objectives) that came with a rollout, as columns.

    Group ``g`` (id ``ids[g]`` of ``source``) played learner version ``version[g]``;
    its episode ``i`` was against ``opponents[opponent[g, i]]``, the learner's return
    was ``outcomes[g, i]``, and ``played[g, i]`` says the learner had decisions in it
    (its transitions are in the rollout: the played episodes, group by group, slot by
    slot, are the rollout's episodes in order). ``acted[g, i]`` is the version whose
    policy made those decisions (-1 none), the same as ``version[g]`` by construction.

    ``seq``: the number of the delivery these groups came in (the worker's outbox, actors/outbox.py,
    the same number as the result batch of their games); a learner takes a numbered delivery once
    per ``(source, seq)``, so a worker's restarted life may send it again. None: not numbered.
    """

    source: str
    ids: np.ndarray  # (G,) int64
    version: np.ndarray  # (G,) int64
    opponents: tuple[str, ...]
    opponent: np.ndarray  # (G, k) int64
    outcomes: np.ndarray  # (G, k) float64
    played: np.ndarray  # (G, k) bool
    acted: np.ndarray  # (G, k) int64
    seq: int | None = None

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source:
            raise ValueError("episode groups: 'source' must be a non-empty string")
        if self.seq is not None and (isinstance(self.seq, bool) or not isinstance(self.seq, (int, np.integer))):
            raise ValueError(f"episode groups: 'seq' must be an integer or None, got {self.seq!r}")
        if not isinstance(self.opponents, tuple) or not all(isinstance(x, str) for x in self.opponents):
            raise ValueError("episode groups: 'opponents' must be a tuple of agent ids")
        try:
            cols = {"ids": np.asarray(self.ids, dtype=np.int64).reshape(-1),
                    "version": np.asarray(self.version, dtype=np.int64).reshape(-1),
                    "opponent": np.asarray(self.opponent, dtype=np.int64),
                    "outcomes": np.asarray(self.outcomes, dtype=np.float64),
                    "played": np.asarray(self.played, dtype=bool), "acted": np.asarray(self.acted, dtype=np.int64)}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"episode groups: columns must be numeric ({exc})") from None
        G = len(cols["ids"])
        if len(cols["version"]) != G:
            raise ValueError("episode groups: 'ids' and 'version' must have one entry per group")
        shape = cols["opponent"].shape
        if len(shape) != 2 or shape[0] != G or shape[1] < 1:
            raise ValueError(f"episode groups: 'opponent' must be (groups, k), got shape {shape}")
        for name in ("outcomes", "played", "acted"):
            if cols[name].shape != shape:
                raise ValueError(f"episode groups: '{name}' must have the shape of 'opponent' {shape}")
        if G and (cols["opponent"].min() < 0 or cols["opponent"].max() >= len(self.opponents)):
            raise ValueError("episode groups: 'opponent' must index 'opponents'")
        if not np.all(np.isfinite(cols["outcomes"])):
            raise ValueError("episode groups: 'outcomes' must be finite")
        for name, value in cols.items():
            object.__setattr__(self, name, value)
        if self.seq is not None:
            object.__setattr__(self, "seq", int(self.seq))

    @property
    def k(self) -> int:
        return int(self.opponent.shape[1])

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def episodes(self) -> int:
        """Episodes with the learner's decisions: the rollout's episode count."""
        return int(self.played.sum())


@dataclass(frozen=True)
class ExactScores:
    """Exactly computed expected scores of frozen pairs (no sampling noise), as columns."""

    agents: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    score: np.ndarray

    def __post_init__(self):
        for name, value in zip(("agents", "a", "b", "score"),
                               _pair_columns(self.agents, self.a, self.b, self.score, "exact scores")):
            object.__setattr__(self, name, value)

    @classmethod
    def from_triples(cls, triples: Iterable[tuple[str, str, float]]) -> "ExactScores":
        agents, a, b, s = _intern(triples)
        return cls(tuple(agents), np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                   np.asarray(s, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.a)

    def triples(self) -> list[tuple[str, str, float]]:
        names = self.agents
        return [(names[i], names[j], s) for i, j, s in zip(self.a.tolist(), self.b.tolist(), self.score.tolist())]


@dataclass(frozen=True)
class Match:
    """One match of a learner: play ``opponent_id``, a learner playing with its current weights
    when ``live`` (self-play, an exploiter against a main agent) and a frozen snapshot of the pool
    otherwise; ``branch`` names the matchmaking rule that chose it. A row of ``MatchAssignments``."""

    learner_id: str
    opponent_id: str
    live: bool
    branch: str


@dataclass(frozen=True)
class MatchAssignments:
    """``n`` matches for one learner, as columns: match ``k`` is against
    ``opponents[opponent[k]]``, a live learner when ``live[opponent[k]]``
    (its current weights play) and a frozen snapshot otherwise; it came from
    matchmaking branch ``branches[branch[k]]`` (self_play, pfsp, ...).

    The one form of "who plays whom": what a ``league.matchmaking.MatchPlan`` draws, what
    ``next_matches`` returns, what a rollout worker queues and its lanes play
    (``policies.lanes``). ``m[k]`` is match ``k`` as a ``Match``."""

    learner_id: str
    opponents: tuple[str, ...]
    live: np.ndarray  # (len(opponents),) bool
    opponent: np.ndarray  # (n,) int64
    branches: tuple[str, ...]
    branch: np.ndarray  # (n,) int64

    @classmethod
    def from_matches(cls, learner_id: str, matches: Sequence[Any]) -> "MatchAssignments":
        """From ``Match`` objects (anything with opponent_id, live, branch)."""
        opp: dict[str, int] = {}
        live: list[bool] = []
        br: dict[str, int] = {}
        o_col, b_col = [], []
        for m in matches:
            k = opp.get(m.opponent_id)
            if k is None:
                k = opp[m.opponent_id] = len(opp)
                live.append(bool(m.live))
            o_col.append(k)
            b_col.append(br.setdefault(m.branch, len(br)))
        return cls(learner_id, tuple(opp), np.asarray(live, dtype=bool), np.asarray(o_col, dtype=np.int64),
                   tuple(br), np.asarray(b_col, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.opponent)

    def __getitem__(self, k: int) -> Match:
        o, b = int(self.opponent[k]), int(self.branch[k])
        return Match(self.learner_id, self.opponents[o], bool(self.live[o]), self.branches[b])

    def part(self, start: int, stop: int) -> "MatchAssignments":
        """Matches ``start:stop``, with the same opponent and branch lists."""
        return MatchAssignments(self.learner_id, self.opponents, self.live, self.opponent[start:stop],
                                self.branches, self.branch[start:stop])

    def take(self, index: np.ndarray) -> "MatchAssignments":
        """The matches at ``index``, in its order, with the same opponent and branch lists."""
        return MatchAssignments(self.learner_id, self.opponents, self.live, self.opponent[index],
                                self.branches, self.branch[index])

    @classmethod
    def concat(cls, parts: Sequence["MatchAssignments"]) -> "MatchAssignments":
        """The matches of ``parts`` in order, one learner's; opponents and branches listed in order of
        first appearance."""
        if not parts:
            raise ValueError("MatchAssignments.concat needs at least one part")
        if len({p.learner_id for p in parts}) != 1:
            raise ValueError("MatchAssignments.concat: parts of different learners")
        opp: dict[str, int] = {}
        live: list[bool] = []
        br: dict[str, int] = {}
        o_cols, b_cols = [], []
        for p in parts:
            for o, is_live in zip(p.opponents, p.live.tolist()):
                if o not in opp:
                    opp[o] = len(opp)
                    live.append(bool(is_live))
            o_map = np.array([opp[o] for o in p.opponents], dtype=np.int64)
            b_map = np.array([br.setdefault(b, len(br)) for b in p.branches], dtype=np.int64)
            o_cols.append(o_map[p.opponent] if len(o_map) else p.opponent)
            b_cols.append(b_map[p.branch] if len(b_map) else p.branch)
        return cls(parts[0].learner_id, tuple(opp), np.asarray(live, dtype=bool), np.concatenate(o_cols),
                   tuple(br), np.concatenate(b_cols))

    def branch_counts(self) -> dict[str, int]:
        counts = np.bincount(self.branch, minlength=len(self.branches))
        return {name: int(c) for name, c in zip(self.branches, counts)}


@dataclass(frozen=True)
class ProgressDecision:
    """The coordinator's answer to a learner's progress report."""

    snapshot: bool
    reason: str


@dataclass(frozen=True)
class SnapshotReply:
    """A snapshot is stored as ``agent_id``; the learner resets when ``reset``
    (to snapshot ``reset_to``, or a fresh initialisation when it is None)."""

    agent_id: str
    reset: bool
    reset_to: str | None = None


@dataclass(frozen=True)
class WeightsReply:
    """A learner's current version and the decisions it has trained on when it took it (``step``);
    ``blob`` is None when the caller already has it. ``life`` names the learner process's life: a
    learner restarted from its checkpoint publishes the versions after it again, other weights
    under the same numbers."""

    version: int
    blob: bytes | None
    step: int
    life: str = ""


@dataclass(frozen=True)
class LearnerAck:
    """A learner took a rollout; its version and step after any update it triggered."""

    version: int
    step: int


@dataclass(frozen=True)
class Checkpoint:
    """A learner's last saved state (parameters + optimizer), to resume from."""

    learner_id: str
    version: int
    step: int
    state: bytes | None


@dataclass(frozen=True, eq=False)
class NashMixture:
    """A Nash mixture over pool agents, in its one form from where it is made to ``GET /nash``.

    ``league.publication`` makes it: a meta-game solve (all measured agents, zero weights
    included) or the exact evaluator's least exploitable mixture; the store keeps its fields
    (``LeagueStore.save_nash``). The coordinator hands out its support with each member's
    ``roles`` and ``elo`` filled in (``League.nash_view``; empty otherwise), with the evidence under
    it: ``measured_agents`` of the ``pool_agents`` in the pool entered the meta-game (each measured
    against every other one), and ``min_pair_games`` is the fewest games measured between a member
    and an agent of the meta-game. ``to_dict`` is the body of ``GET /nash``. ``pool_version``: the
    pool it was made for; ``method``: the solver (``league.nash.NashSolution.method``) or
    ``least_exploitable``."""

    ids: list[str] = field(default_factory=list)
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    entropy: float = 0.0
    meta_exploitability: float = 0.0
    pool_version: int = -1
    solved_at: float = 0.0
    solve_seconds: float = 0.0
    method: str = ""
    roles: list[str | None] = field(default_factory=list)
    elo: list[float] = field(default_factory=list)
    measured_agents: int = 0
    pool_agents: int = 0
    min_pair_games: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "ids", list(self.ids))
        object.__setattr__(self, "weights", np.asarray(self.weights, dtype=np.float64).reshape(-1))
        object.__setattr__(self, "roles", list(self.roles))
        object.__setattr__(self, "elo", [float(x) for x in self.elo])
        if len(self.weights) != len(self.ids):
            raise ValueError(f"NashMixture: {len(self.ids)} ids and {len(self.weights)} weights")
        if (self.roles and len(self.roles) != len(self.ids)) or (self.elo and len(self.elo) != len(self.ids)):
            raise ValueError("NashMixture: roles and elo name every member or none")

    def support(self, eps: float = 1e-9) -> dict[str, float]:
        """Agent id -> weight of the members with weight above ``eps``."""
        return {a: float(w) for a, w in zip(self.ids, self.weights.tolist()) if w > eps}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``GET /nash``): ``agents`` is a list of {agent_id, weight, role, elo}."""
        roles = self.roles or [None] * len(self.ids)
        elo = self.elo or [None] * len(self.ids)
        return {
            "agents": [{"agent_id": a, "weight": w, "role": r, "elo": e}
                       for a, w, r, e in zip(self.ids, self.weights.tolist(), roles, elo)],
            "entropy": self.entropy, "meta_exploitability": self.meta_exploitability,
            "pool_version": self.pool_version, "solved_at": self.solved_at, "solve_seconds": self.solve_seconds,
            "method": self.method, "measured_agents": self.measured_agents, "pool_agents": self.pool_agents,
            "min_pair_games": self.min_pair_games,
        }
