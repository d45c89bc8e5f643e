"""Two-seat play, trajectories of one learner's side, and a plain reference collector.

A :class:`Rollout` holds N transitions of ONE learner's side, made of complete
episodes concatenated in order. ``dones[t]`` is True at the learner's last
decision of an episode and the terminal return goes in that step's reward (the
games are zero-sum with terminal rewards, so the learner's episode return is
the sum of its rewards). Rollout workers send it to their learner as is (numpy
columns cross Ray cheaply).

One stepping kernel serves every place that plays: :class:`TwoSeatPlay` splits
a vector step's decisions between a focal side (the learner, or the first agent
of an evaluated pair) sitting in seat ``seat[e]`` of environment ``e`` and the
other side, steps the game with both sides' actions and reports finished
episodes from the focal side's point of view. :class:`EpisodeRecorder` is the
one episode assembler: it keeps the focal side's decisions until their episodes
end and hands them out as a :class:`Rollout`. The rollout worker (actors/), the
evaluator's sampled games and :func:`collect_rollout` (the plain reference
collector) all use these two. :func:`collect_rollout` plays against an opponent
callable ``(obs, mask) -> actions`` or an :class:`EpisodeMixture` (one member
drawn per episode, as a league's Nash mixture is played).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

import numpy as np

from envs.base import NO_ACTION, VectorGame, outcome_from_returns
from policies.net import sample_rows, stacked_act

_DTYPES = {
    "obs": np.float32,
    "mask": np.bool_,
    "actions": np.int64,
    "logp": np.float32,
    "values": np.float32,
    "rewards": np.float32,
    "dones": np.bool_,
    "self_play": np.bool_,
    "targets": np.float32,
}


@dataclass
class Rollout:
    """obs (N,D) float32, mask (N,A) bool, actions (N,) int64, logp (N,) float32,
    values (N,) float32, rewards (N,) float32, dones (N,) bool; self_play (N,) bool: the
    decision's opponent was the learner itself, live (all False when not given); targets (N, A)
    float32: the search's improved policy at each decision of a search learner (policies.expert),
    (N, 0) when its moves were not searched."""

    obs: np.ndarray
    mask: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    self_play: np.ndarray | None = None
    targets: np.ndarray | None = None

    def __post_init__(self):
        if self.self_play is None:
            self.self_play = np.zeros(len(self.actions), dtype=bool)
        if self.targets is None:
            self.targets = np.zeros((len(self.actions), 0), dtype=np.float32)
        for f in fields(self):
            setattr(self, f.name, np.asarray(getattr(self, f.name), dtype=_DTYPES[f.name]))
        n = len(self.actions)
        for f in fields(self):
            arr = getattr(self, f.name)
            want_ndim = 2 if f.name in ("obs", "mask", "targets") else 1
            if arr.ndim != want_ndim or len(arr) != n:
                raise ValueError(f"Rollout.{f.name} must be {want_ndim}-D with {n} rows, got shape {arr.shape}")

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        return int(self.dones.sum())

    def episode_returns(self) -> np.ndarray:
        """The learner's return of each complete episode, in order."""
        ends = np.flatnonzero(self.dones)
        starts = np.concatenate([[0], ends[:-1] + 1])
        csum = np.concatenate([[0.0], np.cumsum(self.rewards, dtype=np.float64)])
        return csum[ends + 1] - csum[starts]

    def slice(self, start: int, stop: int) -> "Rollout":
        """Transitions ``start:stop`` (views, not copies)."""
        return Rollout(**{f.name: getattr(self, f.name)[start:stop] for f in fields(self)})

    def with_episode_rewards(self, rewards: np.ndarray) -> "Rollout":
        """A copy whose episode ``j`` gets reward ``rewards[j]`` on its last decision and 0 before it
        (a shaped reward in place of the terminal return)."""
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if len(rewards) != self.num_episodes:
            raise ValueError(f"{len(rewards)} rewards for {self.num_episodes} episodes")
        new = np.zeros(len(self), dtype=np.float32)
        new[self.dones] = rewards
        return Rollout(**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "rewards"}, rewards=new)

    @property
    def searched(self) -> bool:
        """Whether the decisions carry search targets."""
        return self.targets.shape[1] > 0

    @classmethod
    def empty(cls, obs_size: int, num_actions: int) -> "Rollout":
        return cls(
            obs=np.zeros((0, obs_size)), mask=np.zeros((0, num_actions)), actions=[], logp=[],
            values=[], rewards=[], dones=[],
        )

    @classmethod
    def concat(cls, rollouts: list["Rollout"]) -> "Rollout":
        if not rollouts:
            raise ValueError("Rollout.concat needs at least one rollout")
        # an empty rollout (a group the learner had no decision in) may carry no targets' width
        rollouts = [r for r in rollouts if len(r)] or rollouts[:1]
        return cls(**{f.name: np.concatenate([getattr(r, f.name) for r in rollouts]) for f in fields(cls)})


@dataclass
class Decisions:
    """The decisions one side owes on one vector step, one row per acting agent: its
    environment, the seat (side) it acts in, its index in that side's team (0 in a
    two-player game), and its observation and legal mask."""

    rows: np.ndarray
    seats: np.ndarray
    obs: np.ndarray
    mask: np.ndarray
    agents: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class Finished:
    """Episodes that ended on a step: their environments, and the focal side's
    return, score in [0, 1] (the game's ``score``: a two-player game's return
    rescaled over its range) and outcome (1 win, 0.5 draw, 0 loss).

    The return is half the difference of the two sides' returns: in a zero-sum
    game that is the focal side's own return, and in a team game, whose sides'
    scores need not be zero-sum (survivors, summed rewards), it is the margin
    by which the focal side won, which is what a learner maximises.

    ``rewards``: None, or the focal side's per-step rewards of the step's
    decisions (one per row of the focal ``Decisions``), where the game passes
    them on (``StepResult.rewards``)."""

    rows: np.ndarray
    returns: np.ndarray
    scores: np.ndarray
    outcomes: np.ndarray
    rewards: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)


class TwoSeatPlay:
    """A ``VectorGame`` played by two sides: the focal side in seat ``seat[e]``
    of environment ``e``, the other side in the other seat. The caller owns
    ``seat`` and may redraw it for environments whose episode ended.

    It plays through the game's team view (``alive``, ``observe_side``,
    ``step_team``), so a side may be a team of ``team_size`` agents sharing the
    side's policy; a two-player game is two teams of one, whose team view is
    its own ``movers``/``observe``/``step``."""

    def __init__(self, game: VectorGame, seat: np.ndarray):
        self.game = game
        self.seat = np.asarray(seat, dtype=np.int64)
        self.team_size = int(game.team_size)
        self._empty = Decisions(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                np.zeros((0, game.obs_size), dtype=np.float32),
                                np.zeros((0, game.num_actions), dtype=bool), np.zeros(0, dtype=np.int64))

    def decisions(self) -> tuple[Decisions, Decisions]:
        """(focal, other): every decision of the next step, both seats in one block per side."""
        focal, other = [], []
        for s in (0, 1):
            side = self.game.observe_side(s)
            if not len(side.env):
                continue
            mine = self.seat[side.env] == s
            seats = np.full(side.env.size, s, dtype=np.int64)
            for keep, out in ((mine, focal), (~mine, other)):
                if keep.all():  # the whole side's rows, no copy
                    out.append(Decisions(side.env, seats, side.obs, side.mask, side.agent))
                elif keep.any():
                    out.append(Decisions(side.env[keep], seats[keep], side.obs[keep], side.mask[keep],
                                         side.agent[keep]))
        return self._stack(focal), self._stack(other)

    def _stack(self, parts: list[Decisions]) -> Decisions:
        if not parts:
            return self._empty
        if len(parts) == 1:
            return parts[0]
        return Decisions(*(np.concatenate([getattr(p, f) for p in parts])
                           for f in ("rows", "seats", "obs", "mask", "agents")))

    def step(self, focal: Decisions, focal_actions: np.ndarray, other: Decisions,
             other_actions: np.ndarray) -> Finished:
        """Apply both sides' actions; the episodes that ended, seen from the focal side."""
        actions = np.full((self.game.num_envs, 2, self.team_size), NO_ACTION, dtype=np.int64)
        actions[focal.rows, focal.seats, focal.agents] = focal_actions
        actions[other.rows, other.seats, other.agents] = other_actions
        result = self.game.step_team(actions)
        rows = np.flatnonzero(result.done)
        returns = result.returns[rows]
        seat0 = self.seat[rows] == 0
        # scores are seat 0's score, and 1 minus that for seat 1, so a game's two scores sum to 1
        # (also in constant-sum games and under an asymmetric payoff range)
        s0, o0 = self.game.score(returns), outcome_from_returns(returns)
        margin = 0.5 * (returns[:, 0] - returns[:, 1])
        dense = None if result.rewards is None else result.rewards[focal.rows, focal.seats, focal.agents]
        return Finished(rows, np.where(seat0, margin, -margin), np.where(seat0, s0, 1.0 - s0),
                        np.where(seat0, o0, 1.0 - o0), dense)


def count_decisions(counts: np.ndarray, rows: np.ndarray, team_size: int) -> None:
    """Add one to ``counts[e]`` per row of environment ``e`` (a team has several per env)."""
    if team_size == 1:  # one row per env at most
        counts[rows] += 1
    else:
        counts += np.bincount(rows, minlength=len(counts))


class EpisodeRecorder:
    """The focal side's decisions of running episodes; hands out finished ones.

    Decisions arrive step by step with their episode id (and, in a team game of
    ``team_size`` agents a side, the acting agent's index); ``finish`` marks an
    episode done with the focal side's return; ``take`` returns the decisions
    of finished episodes as a :class:`Rollout`, episodes in the order they
    finished, decisions in time order, the return as the reward of each
    episode's last decision (added to its own per-step reward, where the game
    gives those), and keeps the decisions of running episodes.

    Each agent of a team has its own trajectory (``episode * team_size +
    agent``): one episode of a team game is up to ``team_size`` trajectories
    in the rollout, one after the other, each ending with the team's return.
    An agent that died early has a short one; one that never acted has none.
    """

    def __init__(self, team_size: int = 1):
        self.team_size = int(team_size)
        self.chunks: list[tuple[np.ndarray, ...]] = []
        self.returns: dict[int, float] = {}  # finished trajectory -> return, in finishing order
        self.steps = 0  # decisions in finished episodes not yet taken

    def _keys(self, episodes) -> np.ndarray:
        """Every trajectory of ``episodes``, agent by agent within each."""
        episodes = np.asarray(episodes, dtype=np.int64).reshape(-1)
        N = self.team_size
        return episodes if N == 1 else (episodes[:, None] * N + np.arange(N)).reshape(-1)

    def add(self, episode, obs, mask, actions, logp, values, agents=None, rewards=None, self_play=None,
            targets=None) -> None:
        """Decisions of running episodes (``agents``: each one's index in its team; ``rewards``:
        each one's per-step reward, None for none; ``self_play``: each one's episode is against the
        learner itself, None for none; ``targets``: the search's improved policies, None for none)."""
        if len(episode):
            key = np.asarray(episode, dtype=np.int64)
            if self.team_size > 1:
                key = key * self.team_size + np.asarray(agents, dtype=np.int64)
            self.chunks.append((key, obs, mask, actions, logp, values,
                                np.zeros(len(key), np.float32) if rewards is None else
                                np.asarray(rewards, dtype=np.float32),
                                np.zeros(len(key), bool) if self_play is None else np.asarray(self_play, dtype=bool),
                                np.zeros((len(key), 0), np.float32) if targets is None else
                                np.asarray(targets, dtype=np.float32)))

    def drop(self, episodes) -> None:
        """Forget the decisions of running ``episodes`` (they will never finish)."""
        keys = self._keys(episodes)
        self.chunks = [tuple(part[keep] for part in chunk) for chunk in self.chunks
                       if (keep := ~np.isin(chunk[0], keys)).any()]

    def finish(self, episodes, returns, decisions) -> None:
        """Episodes that ended, the focal side's return and its number of decisions in each (all
        its agents' together)."""
        returns = np.asarray(returns, dtype=np.float64).reshape(-1)
        for e, r in zip(self._keys(episodes).tolist(), np.repeat(returns, self.team_size).tolist()):
            self.returns[e] = r
        self.steps += int(np.sum(decisions))

    def take(self) -> Rollout | None:
        if not self.chunks or not self.returns:
            return None
        ep, obs, mask, act, logp, val, rew, selfp, tgt = (np.concatenate(c) for c in zip(*self.chunks))
        done_eps = np.fromiter(self.returns, dtype=np.int64, count=len(self.returns))
        order = np.argsort(done_eps, kind="stable")
        pos = np.searchsorted(done_eps[order], ep)
        pos = np.minimum(pos, len(done_eps) - 1)
        finished = done_eps[order][pos] == ep
        rank = np.where(finished, order[pos], -1)  # finishing order of each decision's episode
        keep = ~finished
        self.chunks = [(ep[keep], obs[keep], mask[keep], act[keep], logp[keep], val[keep], rew[keep],
                        selfp[keep], tgt[keep])] if keep.any() else []
        idx = np.flatnonzero(finished)
        idx = idx[np.argsort(rank[idx], kind="stable")]
        eps = ep[idx]
        last = np.ones(len(idx), dtype=bool)
        last[:-1] = eps[1:] != eps[:-1]
        returns = np.fromiter(self.returns.values(), dtype=np.float64, count=len(self.returns))
        rewards = rew[idx]
        rewards[last] += returns[rank[idx][last]].astype(np.float32)
        self.returns, self.steps = {}, 0
        if not len(idx):
            return None
        return Rollout(obs=obs[idx], mask=mask[idx], actions=act[idx], logp=logp[idx], values=val[idx],
                       rewards=rewards, dones=last, self_play=selfp[idx], targets=tgt[idx])


class EpisodeMixture:
    """An opponent that draws one member per episode with probability
    proportional to ``weights`` and lets it play the whole episode: the
    AlphaStar/PSRO meaning of a Nash mixture over snapshots (not a per-move
    mixture, which is a different, more exploitable policy). A member is an
    ``ActorCritic`` or None (uniform random over legal actions)."""

    def __init__(self, models, weights, rng: np.random.Generator):
        w = np.asarray(weights, dtype=np.float64)
        if len(models) == 0 or w.shape != (len(models),) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError(f"need one non-negative weight per member with a positive sum, got {list(w)} "
                             f"for {len(models)} members")
        self.models = list(models)
        self.weights = w / w.sum()
        self.rng = rng
        self.member = np.zeros(0, dtype=np.int64)  # member playing in each env

    def start(self, envs: np.ndarray) -> None:
        """New episodes begin in ``envs``: draw their members."""
        envs = np.asarray(envs, dtype=np.int64)
        if envs.size and envs.max() >= len(self.member):
            self.member = np.concatenate([self.member, np.zeros(envs.max() + 1 - len(self.member), dtype=np.int64)])
        self.member[envs] = self.rng.choice(len(self.models), size=envs.size, p=self.weights)

    def __call__(self, obs: np.ndarray, mask: np.ndarray, envs: np.ndarray) -> np.ndarray:
        who = self.member[np.asarray(envs, dtype=np.int64)]
        actions = np.zeros(len(who), dtype=np.int64)
        groups = [(m, np.flatnonzero(who == m)) for m in np.unique(who).tolist()]
        nets = [(m, rows) for m, rows in groups if self.models[m] is not None]
        for m, rows in groups:
            if self.models[m] is None:
                actions[rows] = sample_rows(mask[rows].astype(np.float64), self.rng)
        if nets:
            acts = stacked_act([self.models[m] for m, _ in nets], [obs[rows] for _, rows in nets],
                               [mask[rows] for _, rows in nets], self.rng)
            for (_, rows), a in zip(nets, acts):
                actions[rows] = a
        return actions


def collect_rollout(
    game: VectorGame,
    model,
    opponent_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | EpisodeMixture,
    num_steps: int,
    rng: np.random.Generator,
    *,
    deterministic: bool = False,
    value: str = "score",
    seats: str = "random",
) -> tuple[Rollout, np.ndarray]:
    """Play ``game`` (all its environments) until at least ``num_steps`` learner
    transitions lie in complete episodes, then finish every episode already
    started (episodes started after that point are played but not recorded, so
    long episodes are not under-sampled).

    The learner (``model.act``) takes seat 0 or 1 uniformly at random at the
    start of each episode; ``opponent_fn(obs, mask) -> actions`` plays the other
    seat, or an :class:`EpisodeMixture` draws a member per episode.
    ``deterministic`` makes the learner take its most probable legal action.
    ``seats="alternate"`` seats the learner in seat ``e % 2`` of environment
    ``e`` and swaps the seats after each of its episodes, so the two seats get
    equally many episodes up to one per environment (a head-to-head score then
    carries no first-mover luck).
    Returns ``(rollout, outcomes)``: the learner's transitions of the
    recorded episodes, in order of completion, and the learner's score
    (1 win, 0.5 draw, 0 loss; with ``value="return"``: its return; with
    ``value="game_score"``: the game's own ``score`` from its side, a two-player
    game's return rescaled over its range, a team game's 1/0.5/0 by its scoring)
    of each of those episodes, in the same order. Episodes in which the learner
    never had to act are scored but contribute no transitions.
    """
    if value not in ("score", "return", "game_score"):
        raise ValueError(f'value must be "score", "return" or "game_score", got {value!r}')
    if seats not in ("random", "alternate"):
        raise ValueError(f'seats must be "random" or "alternate", got {seats!r}')
    alternate = seats == "alternate"
    E = game.num_envs
    per_episode = isinstance(opponent_fn, EpisodeMixture)
    if per_episode:
        opponent_fn.start(np.arange(E))
    play = TwoSeatPlay(game, np.arange(E) % 2 if alternate else rng.integers(0, 2, size=E))
    episode = np.arange(E)  # id of the episode running in each env
    next_episode = E
    recording = np.ones(E, dtype=bool)  # the running episode will be recorded
    decisions = np.zeros(E, dtype=np.int64)  # recorded learner decisions of the running episode
    recorder = EpisodeRecorder(game.team_size)
    outcomes: list[np.ndarray] = []
    recorded_steps = 0
    target_reached = False

    while True:
        mine, theirs = play.decisions()
        a = np.zeros(0, dtype=np.int64)
        if len(mine):
            a, logp, v = model.act(mine.obs, mine.mask, generator=rng, deterministic=deterministic)
        b = np.zeros(0, dtype=np.int64)
        if len(theirs):
            b = opponent_fn(theirs.obs, theirs.mask, theirs.rows) if per_episode else opponent_fn(theirs.obs, theirs.mask)
            b = np.asarray(b, dtype=np.int64).reshape(-1)
        done = play.step(mine, a, theirs, b)
        if len(mine):  # recorded after the step: its per-step rewards, where the game gives them
            keep = recording[mine.rows]
            dense = None if done.rewards is None else done.rewards[keep]
            recorder.add(episode[mine.rows][keep], mine.obs[keep], mine.mask[keep], a[keep], logp[keep], v[keep],
                         mine.agents[keep], dense)
            count_decisions(decisions, mine.rows[keep], game.team_size)
        if per_episode and len(done):
            opponent_fn.start(done.rows)
        rec = recording[done.rows]
        outcomes.append({"score": done.outcomes, "return": done.returns, "game_score": done.scores}[value][rec])
        recorder.finish(episode[done.rows][rec], done.returns[rec], decisions[done.rows][rec])
        recorded_steps += int(decisions[done.rows][rec].sum())
        decisions[done.rows] = 0
        episode[done.rows] = np.arange(next_episode, next_episode + len(done))
        next_episode += len(done)
        play.seat[done.rows] = 1 - play.seat[done.rows] if alternate else rng.integers(0, 2, size=len(done))
        recording[done.rows] = not target_reached
        if not target_reached and recorded_steps >= num_steps:
            # episodes running now keep being recorded; later ones are not
            target_reached = True
        if target_reached and not recording.any():
            break

    rollout = recorder.take()
    if rollout is None:
        rollout = Rollout.empty(game.obs_size, game.num_actions)
    return rollout, np.concatenate(outcomes).astype(np.float64)
