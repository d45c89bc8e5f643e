"""Trajectories of one learner's side, and a plain reference collector.

A :class:`Rollout` holds N transitions of ONE learner's side, made of complete
episodes concatenated in order. ``dones[t]`` is True at the learner's last
decision of an episode and the terminal return goes in that step's reward (the
games are zero-sum with terminal rewards, so the learner's episode return is
the sum of its rewards). Rollout workers send it to their learner as is (numpy
columns cross Ray cheaply).

:func:`collect_rollout` is the reference the Ray rollout worker mirrors: it
plays a ``VectorGame`` with the learner in a random seat per episode against an
opponent callable ``(obs, mask) -> actions`` or an :class:`EpisodeMixture`
(one member drawn per episode, as a league's Nash mixture is played).
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
}


@dataclass
class Rollout:
    """obs (N,D) float32, mask (N,A) bool, actions (N,) int64, logp (N,) float32,
    values (N,) float32, rewards (N,) float32, dones (N,) bool."""

    obs: np.ndarray
    mask: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray

    def __post_init__(self):
        for f in fields(self):
            setattr(self, f.name, np.asarray(getattr(self, f.name), dtype=_DTYPES[f.name]))
        n = len(self.actions)
        for f in fields(self):
            arr = getattr(self, f.name)
            want_ndim = 2 if f.name in ("obs", "mask") else 1
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
        return cls(**{f.name: np.concatenate([getattr(r, f.name) for r in rollouts]) for f in fields(cls)})


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
) -> tuple[Rollout, np.ndarray]:
    """Play ``game`` (all its environments) until at least ``num_steps`` learner
    transitions lie in complete episodes, then finish every episode already
    started (episodes started after that point are played but not recorded, so
    long episodes are not under-sampled).

    The learner (``model.act``) takes seat 0 or 1 uniformly at random at the
    start of each episode; ``opponent_fn(obs, mask) -> actions`` plays the other
    seat, or an :class:`EpisodeMixture` draws a member per episode.
    ``deterministic`` makes the learner take its most probable legal action.
    Returns ``(rollout, outcomes)``: the learner's transitions of the
    recorded episodes, in order of completion, and the learner's score
    (1 win, 0.5 draw, 0 loss; with ``value="return"``: its return) of each of
    those episodes, in the same order. Episodes in which the learner never had
    to act are scored but contribute no transitions.
    """
    if value not in ("score", "return"):
        raise ValueError(f'value must be "score" or "return", got {value!r}')
    E = game.num_envs
    per_episode = isinstance(opponent_fn, EpisodeMixture)
    if per_episode:
        opponent_fn.start(np.arange(E))
    seat = rng.integers(0, 2, size=E)
    episode = np.arange(E)  # id of the episode running in each env
    next_episode = E
    recording = np.ones(E, dtype=bool)  # the running episode will be recorded
    # per learner decision: episode id, obs, mask, action, logp, value
    rec_ep, rec_obs, rec_mask, rec_act, rec_logp, rec_val = [], [], [], [], [], []
    finished: list[tuple[int, float, float]] = []  # (episode id, learner return, learner score)
    steps_per_episode: dict[int, int] = {}
    recorded_steps = 0
    target_reached = False

    while True:
        movers = game.movers()
        actions = np.full((E, 2), NO_ACTION, dtype=np.int64)
        for s in (0, 1):
            learner_envs = np.flatnonzero(movers[:, s] & (seat == s))
            opp_envs = np.flatnonzero(movers[:, s] & (seat != s))
            if learner_envs.size:
                obs, mask = game.observe(s, learner_envs)
                a, logp, v = model.act(obs, mask, generator=rng, deterministic=deterministic)
                actions[learner_envs, s] = a
                keep = recording[learner_envs]
                if keep.any():
                    rec_ep.append(episode[learner_envs][keep])
                    rec_obs.append(obs[keep])
                    rec_mask.append(mask[keep])
                    rec_act.append(a[keep])
                    rec_logp.append(logp[keep])
                    rec_val.append(v[keep])
                    for ep in episode[learner_envs][keep].tolist():
                        steps_per_episode[ep] = steps_per_episode.get(ep, 0) + 1
            if opp_envs.size:
                obs, mask = game.observe(s, opp_envs)
                acts = opponent_fn(obs, mask, opp_envs) if per_episode else opponent_fn(obs, mask)
                actions[opp_envs, s] = np.asarray(acts, dtype=np.int64).reshape(-1)
        result = game.step(actions)
        ended = np.flatnonzero(result.done)
        if per_episode and ended.size:
            opponent_fn.start(ended)
        for e in ended.tolist():
            if recording[e]:
                ret = float(result.returns[e, seat[e]])
                seat0_score = float(outcome_from_returns(result.returns[e]))
                score = seat0_score if seat[e] == 0 else 1.0 - seat0_score
                finished.append((int(episode[e]), ret, score if value == "score" else ret))
                recorded_steps += steps_per_episode.get(int(episode[e]), 0)
            episode[e] = next_episode
            next_episode += 1
            seat[e] = rng.integers(0, 2)
            recording[e] = not target_reached
        if not target_reached and recorded_steps >= num_steps:
            # episodes running now keep being recorded; later ones are not
            target_reached = True
        if target_reached and not recording.any():
            break

    return _assemble(game, finished, rec_ep, rec_obs, rec_mask, rec_act, rec_logp, rec_val)


def _assemble(game, finished, rec_ep, rec_obs, rec_mask, rec_act, rec_logp, rec_val):
    if not rec_ep:
        return Rollout.empty(game.obs_size, game.num_actions), np.array([s for _, _, s in finished])
    ep = np.concatenate(rec_ep)
    order_of = {e: i for i, (e, _, _) in enumerate(finished)}
    rank = np.array([order_of.get(int(e), -1) for e in ep])
    keep = rank >= 0  # drop decisions of episodes that never finished (cannot happen, but be safe)
    # stable sort: episodes in completion order, decisions in time order
    idx = np.flatnonzero(keep)[np.argsort(rank[keep], kind="stable")]
    ep_sorted = ep[idx]
    rank_sorted = rank[idx]
    last = np.ones(len(idx), dtype=bool)
    last[:-1] = ep_sorted[1:] != ep_sorted[:-1]
    rewards = np.zeros(len(idx), dtype=np.float32)
    returns = np.array([r for _, r, _ in finished], dtype=np.float32)
    rewards[last] = returns[rank_sorted[last]]
    rollout = Rollout(
        obs=np.concatenate(rec_obs)[idx],
        mask=np.concatenate(rec_mask)[idx],
        actions=np.concatenate(rec_act)[idx],
        logp=np.concatenate(rec_logp)[idx],
        values=np.concatenate(rec_val)[idx],
        rewards=rewards,
        dones=last,
    )
    outcomes = np.array([s for _, _, s in finished], dtype=np.float64)
    return rollout, outcomes
