"""Objectives across k opponents: a learner's episodes in groups, and reward shapers.

With ``roles.ROLE.objective.k_opponents: k`` a learner's rollout workers play
its episodes in groups: k episodes, one against each of k opponents drawn by
the role's own matchmaking rule, every decision made by one policy version.
A group reaches the learner only when all k episodes finished, with its
opponents and its *outcome vector* (the learner's k returns).

A reward shaper (``objective.shaper``) is a plain function

    shaper(groups: list[Group], state: dict, **params) -> array (len(groups), k)

called in the learner before advantages are computed, with the groups of one
update. It returns the reward each episode is trained on (the games are
zero-sum with terminal rewards: it replaces the episode's return on its last
decision). ``state`` is the shaper's own, kept across updates and checkpointed
with the learner (plain values and numpy arrays). A shaper that raises, or
returns the wrong shape or non-finite values, costs that update only.

Two shapers ship:

- :func:`novelty`: novelty search (Lehman and Stanley 2011, "Abandoning
  Objectives: Evolution Through the Search for Novelty Alone", Evolutionary
  Computation 19(2); as a reward for policy-gradient agents, Conti et al. 2018,
  "Improving Exploration in Evolution Strategies for Deep RL via a Population of
  Novelty-Seeking Agents", NeurIPS): the mean distance of a group's outcome
  vector to its nearest vectors in an archive of earlier ones, optionally mixed
  with the plain return;
- :func:`diversity`: the plain return plus the distance of the group's
  behaviour embedding (``league.diversity.embed_trajectory``: its action
  histogram) to its nearest earlier embeddings.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from league.diversity import TrajectoryBatch, embed_trajectory

SHIPPED = {"novelty": "league.objectives:novelty", "diversity": "league.objectives:diversity"}


class ShaperError(ValueError):
    """A shaper could not be found, failed, or returned unusable rewards."""


@dataclass
class Group:
    """k episodes of one learner version, one against each of ``opponents``.

    ``outcomes[i]``: the learner's return against ``opponents[i]``.
    ``trajectories[i]``: the learner's decisions of that episode (a
    ``policies.rollout.Rollout`` with one episode), None when the learner had
    no decision in it (it is scored, and its shaped reward has nowhere to go).
    ``acted[i]``: the version whose policy made the learner's decisions in episode
    i (-1: none), ``version`` for every episode the learner acted in.
    """

    group_id: int
    source: str
    version: int
    opponents: tuple[str, ...]
    outcomes: np.ndarray
    trajectories: list[Any] = field(default_factory=list)
    acted: np.ndarray | None = None

    @property
    def k(self) -> int:
        return len(self.opponents)


Shaper = Callable[[list[Group], dict], np.ndarray]


def resolve_shaper(spec: str, params: dict | None = None) -> Shaper:
    """``"novelty"``, ``"diversity"`` or ``"package.module:function"`` as a callable
    ``(groups, state) -> rewards`` with ``params`` bound. Raises ShaperError for a
    path that does not name a function, ValueError for params it does not take."""
    if not isinstance(spec, str) or not spec:
        raise ShaperError(f"must be novelty, diversity or 'package.module:function', got {spec!r}")
    path = SHIPPED.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ShaperError(f"must be novelty, diversity or 'package.module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error on import
        raise ShaperError(f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ShaperError(f"{module_name!r} has no function {attr!r}")
    params = dict(params or {})
    try:
        inspect.signature(fn).bind([], {}, **params)
    except TypeError as exc:
        raise ValueError(f"{spec} does not take these params {sorted(params)} ({exc})") from None
    except ValueError:  # no signature (a builtin): call and see
        pass
    if spec in SHIPPED:
        _check_shipped_params(params)
    return (lambda groups, state: fn(groups, state, **params)) if params else fn


def _check_shipped_params(params: dict) -> None:
    for name in ("neighbours", "archive_size"):
        value = params.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    weight = params.get("weight", 0.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not np.isfinite(weight):
        raise ValueError(f"weight must be a finite number, got {weight!r}")


def apply_shaper(shaper: Shaper, groups: list[Group], state: dict) -> np.ndarray:
    """The shaper's rewards (len(groups), k) as float64, checked; ``state`` moves on only
    when they are usable. Raises ShaperError naming what went wrong."""
    k = groups[0].k if groups else 0
    work = copy.deepcopy(state)
    try:
        out = shaper(groups, work)
    except Exception as exc:
        raise ShaperError(f"shaper raised {type(exc).__name__}: {exc}") from exc
    try:
        rewards = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ShaperError(f"shaper returned {type(out).__name__}, not an array of numbers ({exc})") from None
    if rewards.shape != (len(groups), k):
        raise ShaperError(f"shaper returned shape {rewards.shape}, expected ({len(groups)}, {k}): "
                          "one reward per episode of each group")
    if not np.all(np.isfinite(rewards)):
        raise ShaperError("shaper returned non-finite rewards (NaN or inf)")
    state.clear()
    state.update(work)
    return rewards


# -- nearest-neighbour novelty over an archive --------------------------------------------

def nearest_distances(points: np.ndarray, archive: np.ndarray, neighbours: int, metric: str = "euclidean") -> np.ndarray:
    """Mean distance of each point to its ``neighbours`` nearest archive rows; 0 with an empty archive."""
    points = np.asarray(points, dtype=np.float64)
    archive = np.asarray(archive, dtype=np.float64).reshape(-1, points.shape[1]) if len(points) else archive
    if not len(points) or not len(archive):
        return np.zeros(len(points))
    if metric == "euclidean":
        sq = (points ** 2).sum(1)[:, None] + (archive ** 2).sum(1)[None, :] - 2.0 * points @ archive.T
        d = np.sqrt(np.maximum(sq, 0.0))
    else:  # cosine distance, as league.diversity measures behaviour
        def unit(x):
            n = np.linalg.norm(x, axis=1, keepdims=True)
            return np.divide(x, n, out=np.zeros_like(x), where=n > 0)
        d = np.clip(1.0 - unit(points) @ unit(archive).T, 0.0, 2.0)
    m = min(int(neighbours), d.shape[1])
    return np.sort(d, axis=1)[:, :m].mean(axis=1)


def archive_add(archive: np.ndarray | None, rows: np.ndarray, size: int) -> np.ndarray:
    """The archive with ``rows`` appended, the oldest dropped beyond ``size``."""
    rows = np.asarray(rows, dtype=np.float64)
    if archive is None or not len(archive) or np.asarray(archive).shape[1:] != rows.shape[1:]:
        archive = np.zeros((0, *rows.shape[1:]))
    return np.concatenate([np.asarray(archive, dtype=np.float64), rows])[-int(size):]


def outcome_matrix(groups: Sequence[Group], sort: bool = True) -> np.ndarray:
    """(G, k) outcome vectors; sorted within each group when ``sort`` (the k opponents of a
    group are drawn independently, so position i names no particular opponent)."""
    out = np.array([np.asarray(g.outcomes, dtype=np.float64) for g in groups]).reshape(len(groups), -1)
    return np.sort(out, axis=1) if sort else out


def novelty(groups: list[Group], state: dict, weight: float = 0.0, neighbours: int = 5, archive_size: int = 2000,
            sort: bool = True) -> np.ndarray:
    """Each episode's reward: its group's novelty + ``weight`` x its own return.

    Novelty: mean Euclidean distance of the group's outcome vector (sorted, see
    :func:`outcome_matrix`) to its ``neighbours`` nearest vectors of earlier
    updates in ``state["archive"]`` (at most ``archive_size``, oldest dropped);
    0 while the archive is empty. This update's vectors join it afterwards."""
    vectors = outcome_matrix(groups, sort)
    score = nearest_distances(vectors, state.get("archive", np.zeros((0, vectors.shape[1]))), neighbours)
    state["archive"] = archive_add(state.get("archive"), vectors, archive_size)
    returns = np.array([np.asarray(g.outcomes, dtype=np.float64) for g in groups]).reshape(vectors.shape)
    return score[:, None] + float(weight) * returns


def group_embedding(group: Group) -> np.ndarray | None:
    """The behaviour embedding of a group's decisions (league.diversity), None without any."""
    parts = [t for t in group.trajectories if t is not None and len(t.actions)]
    if not parts:
        return None
    actions = np.concatenate([t.actions for t in parts])
    return embed_trajectory(TrajectoryBatch(actions=actions, num_actions=parts[0].mask.shape[1]))


def diversity(groups: list[Group], state: dict, weight: float = 1.0, neighbours: int = 5,
              archive_size: int = 500) -> np.ndarray:
    """Each episode's reward: its return + ``weight`` x its group's behaviour bonus.

    Bonus: mean cosine distance (league.diversity's measure) of the group's
    behaviour embedding to its ``neighbours`` nearest embeddings of earlier
    updates in ``state["archive"]``; 0 for a group without decisions."""
    returns = np.array([np.asarray(g.outcomes, dtype=np.float64) for g in groups]).reshape(len(groups), -1)
    embeddings = [group_embedding(g) for g in groups]
    have = [i for i, e in enumerate(embeddings) if e is not None]
    bonus = np.zeros(len(groups))
    if have:
        rows = np.stack([embeddings[i] for i in have])
        bonus[have] = nearest_distances(rows, state.get("archive", np.zeros((0, rows.shape[1]))), neighbours,
                                        metric="cosine")
        state["archive"] = archive_add(state.get("archive"), rows, archive_size)
    return returns + float(weight) * bonus[:, None]


# -- the learner's side -------------------------------------------------------------------

NOVELTY_ARCHIVE = 1000  # outcome vectors of earlier updates the novelty metric compares with
NOVELTY_SAMPLE = 256  # vectors of an update the metric scores (a sample: it is a metric, not the shaper)


def groups_of(rollout, parts) -> list[Group]:
    """The groups of an update with their trajectories: the played episodes of ``parts``
    (``league.messages.EpisodeGroups``), group by group and slot by slot, are the episodes of
    ``rollout`` (a ``policies.rollout.Rollout``) in order."""
    ends = np.flatnonzero(rollout.dones)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    out, e = [], 0
    for part in parts:
        for g in range(len(part)):
            trajectories = []
            for i in range(part.k):
                if part.played[g, i]:
                    if e >= len(ends):
                        raise ValueError(f"groups name more played episodes than the rollout's {len(ends)}")
                    trajectories.append(rollout.slice(int(starts[e]), int(ends[e]) + 1))
                    e += 1
                else:
                    trajectories.append(None)
            out.append(Group(int(part.ids[g]), part.source, int(part.version[g]),
                             tuple(part.opponents[c] for c in part.opponent[g].tolist()), part.outcomes[g].copy(),
                             trajectories, part.acted[g].copy()))
    if e != len(ends):
        raise ValueError(f"groups name {e} played episodes, the rollout holds {len(ends)}")
    return out


class LearnerObjective:
    """What a learner trains on: its rollout as is (k = 1, no shaper: today's PPO, bit for bit),
    or with the shaper's rewards in place of the episodes' returns. Keeps the shaper's state
    and the metrics of the last update: ``outcome_novelty`` (mean distance of its sorted outcome
    vectors to their 5 nearest among earlier updates'; with k = 1 a vector is one return) and
    ``reward_gap`` (mean shaped minus raw return per episode; 0 without a shaper)."""

    def __init__(self, objective, seed: int = 0):
        self.k = objective.k_opponents
        self.shaper = resolve_shaper(objective.shaper, objective.params) if objective.shaper else None
        self.state: dict = {}
        self.stats = {"outcome_novelty": 0.0, "reward_gap": 0.0}
        self._archive: np.ndarray | None = None
        self._rng = np.random.default_rng(seed)

    def prepare(self, rollout, parts) -> Any:
        """The rollout to train on; ShaperError (state and metrics unchanged) when the shaper fails."""
        groups = groups_of(rollout, parts) if parts else []
        vectors = outcome_matrix(groups) if parts else rollout.episode_returns()[:, None]
        sample = vectors
        if len(sample) > NOVELTY_SAMPLE:
            sample = sample[self._rng.choice(len(sample), NOVELTY_SAMPLE, replace=False)]
        novelty = float(nearest_distances(sample, self._archive, 5).mean()) \
            if self._archive is not None and len(sample) else 0.0
        gap = 0.0
        if self.shaper is not None:
            shaped = apply_shaper(self.shaper, groups, self.state)
            played = np.concatenate([p.played for p in parts]) if parts else np.zeros((0, self.k), dtype=bool)
            raw = np.concatenate([p.outcomes for p in parts])[played] if parts else np.zeros(0)
            rewards = shaped[played]
            rollout = rollout.with_episode_rewards(rewards)
            gap = float(np.mean(rewards - raw)) if len(raw) else 0.0
        self._archive = archive_add(self._archive, vectors, NOVELTY_ARCHIVE) if len(vectors) else self._archive
        self.stats = {"outcome_novelty": novelty, "reward_gap": gap}
        return rollout

    def saved_state(self) -> str:
        return encode_state(self.state)

    def restore(self, text: str | None) -> None:
        self.state = decode_state(text)


# -- a shaper's state in a checkpoint -----------------------------------------------------

def encode_state(state: dict) -> str:
    """JSON of a shaper's state (plain values and numpy arrays); ShaperError if it holds anything else."""
    def default(x):
        if isinstance(x, np.ndarray):
            return {"__ndarray__": x.tolist(), "dtype": str(x.dtype)}
        if isinstance(x, np.generic):
            return x.item()
        raise TypeError(f"cannot checkpoint a {type(x).__name__}")
    try:
        return json.dumps(state, default=default)
    except (TypeError, ValueError) as exc:
        raise ShaperError(f"shaper state is not checkpointable: {exc}") from None


def decode_state(text: str | None) -> dict:
    if not text:
        return {}
    def hook(d):
        if "__ndarray__" in d:
            return np.asarray(d["__ndarray__"], dtype=d.get("dtype", "float64"))
        return d
    state = json.loads(text, object_hook=hook)
    return state if isinstance(state, dict) else {}
