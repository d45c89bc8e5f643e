"""The search learner's update: the network learns what a tree search found.

Expert iteration (Anthony, Tian and Barber 2017, "Thinking Fast and Slow with Deep Learning and
Tree Search") and AlphaZero (Silver et al. 2018): the rollout worker searches each of the
learner's moves (``policies.tree_search``, Gumbel AlphaZero's improved policy, Danihelka, Guez,
Schrittwieser and Silver 2022), and the learner trains

    loss = CE(target, softmax(logits)) + value_coef * (v - z)^2

on positions drawn from a replay of the newest ``replay_positions``: ``target`` the search's
improved policy at the position, ``z`` the learner's outcome of the episode from that position on
(its return, the game's terminal result; optionally mixed with the search's root value by
``value_mix``). Each batch of new positions is drawn ``reuse`` times on average, in minibatches of
``minibatch_size``. Adam with L2 weight decay and global gradient clipping. A group of learner
replicas (``policies.replica_group``) trains on the union of their replays as one learner would.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from envs.symmetry import Symmetries
from league.config import SearchLearnerConfig
from policies.optim import Adam
from policies.replica_group import ReplicaGroup
from policies.rollout import Rollout


def make_optimizer(model: nn.Module, cfg: SearchLearnerConfig) -> Adam:
    return Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def outcomes(rollout: Rollout) -> np.ndarray:
    """Each decision's return to the end of its episode (undiscounted): the outcome it led to."""
    rewards = rollout.rewards.astype(np.float64)
    out = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if rollout.dones[t]:
            running = 0.0
        running += rewards[t]
        out[t] = running
    return out.astype(np.float32)


def value_target(outcome: np.ndarray, root_value: np.ndarray, value_mix: float) -> np.ndarray:
    """The value head's target: ``(1 - value_mix) * outcome + value_mix * root_value`` (float32)."""
    outcome = np.asarray(outcome, dtype=np.float32)
    if not value_mix:
        return outcome
    return ((1.0 - value_mix) * outcome + value_mix * np.asarray(root_value, dtype=np.float32)).astype(np.float32)


class Replay:
    """The newest ``capacity`` positions: observation, legal mask, policy target, value target."""

    def __init__(self, capacity: int, obs_size: int, num_actions: int):
        self.capacity = int(capacity)
        self.obs = np.zeros((self.capacity, obs_size), dtype=np.float32)
        self.mask = np.zeros((self.capacity, num_actions), dtype=bool)
        self.target = np.zeros((self.capacity, num_actions), dtype=np.float32)
        self.value = np.zeros(self.capacity, dtype=np.float32)
        self.size = 0
        self._next = 0
        self.added = 0

    def __len__(self) -> int:
        return self.size

    def add(self, rollout: Rollout, value_mix: float = 0.0) -> int:
        """The searched decisions of ``rollout`` (complete episodes); returns how many."""
        if not rollout.searched:
            raise ValueError("the search learner trains on searched decisions: the rollout has no targets")
        return self.add_rows(rollout.obs, rollout.mask, rollout.targets,
                             value_target(outcomes(rollout), rollout.values, value_mix))

    def add_rows(self, obs: np.ndarray, mask: np.ndarray, target: np.ndarray, value: np.ndarray) -> int:
        """Positions with their policy and value targets, oldest first; returns how many."""
        n = len(obs)
        for start in range(0, n, self.capacity):  # a batch larger than the replay keeps its newest rows
            rows = slice(start, min(n, start + self.capacity))
            m = rows.stop - rows.start
            idx = (self._next + np.arange(m)) % self.capacity
            self.obs[idx], self.mask[idx] = obs[rows], mask[rows]
            self.target[idx], self.value[idx] = target[rows], value[rows]
            self._next = int((self._next + m) % self.capacity)
            self.size = min(self.capacity, self.size + m)
        self.added += n
        return n


def expert_update(model, optimizer: Adam, replay: Replay, new: int, cfg: SearchLearnerConfig,
                  *, generator: torch.Generator | None = None, group: ReplicaGroup | None = None,
                  symmetries: Symmetries | None = None) -> dict:
    """Gradient steps on ``replay`` after ``new`` positions arrived: ``ceil(reuse * new / minibatch)``
    minibatches drawn uniformly from the replay. Returns mean statistics: policy_loss (the cross
    entropy), value_loss, entropy (of the network's policy), target_entropy, grad_norm,
    num_transitions, num_minibatches.

    The update's drawn positions go to the model's device at once, and its statistics are read
    once, at the end.

    With a ``group`` of replicas (``policies.replica_group``) the replay is the concatenation of
    the replicas' replays, in rank order, and ``new`` the sum of theirs: every replica draws the
    same positions of it (``generator`` seeded alike on each, or one replica 0 seeds) and trains on
    those in its own replay, each loss term summed over them and divided by the minibatch size, the
    gradients summed over the replicas before clipping; ``num_transitions`` is the group's.

    With ``symmetries`` (``envs.symmetry``) each drawn position is trained under one of them, drawn
    uniformly with the positions."""
    group = group or ReplicaGroup.single()
    offset, size = group.rows_before(len(replay))
    if size == 0:
        raise ValueError("expert_update: the replay is empty")
    new = int(new) if group.size == 1 else int(group.sum_(torch.tensor([int(new)], dtype=torch.int64))[0])
    generator = group.shared_generator(generator)
    device = next(model.parameters()).device
    mb = min(cfg.minibatch_size, size)
    steps = max(1, int(np.ceil(cfg.reuse * new / mb)))
    # every step's positions drawn first (the generator is consumed as step by step), gathered and
    # moved to the device at once; each step's are then a slice
    drawn = [torch.randint(size, (mb,), generator=generator) for _ in range(steps)]
    turned = (None if symmetries is None
              else [torch.randint(len(symmetries), (mb,), generator=generator) for _ in range(steps)])
    bounds = [0]
    if group.size > 1:
        keep = [(d >= offset) & (d < offset + len(replay)) for d in drawn]
        mine = [d[k] - offset for d, k in zip(drawn, keep)]
        turned = [t[k] for t, k in zip(turned, keep)] if turned is not None else None
        for d in mine:
            bounds.append(bounds[-1] + len(d))
        idx = torch.cat(mine).numpy()
    else:
        bounds += [mb * (k + 1) for k in range(steps)]
        idx = torch.cat(drawn).numpy()
    obs, mask, target, value = (x[idx] for x in (replay.obs, replay.mask, replay.target, replay.value))
    if turned is not None:
        sym = torch.cat(turned).numpy()
        obs = np.take_along_axis(obs, symmetries.obs[sym], axis=1)
        mask, target = (np.take_along_axis(x, symmetries.actions[sym], axis=1) for x in (mask, target))
    rows = [torch.from_numpy(x).to(device) for x in (obs, mask, target, value)]
    params = [p for p in model.parameters()]
    stats, grad_norms = [], []
    model.train()
    for k in range(steps):
        a, b = bounds[k], bounds[k + 1]
        optimizer.zero_grad()
        if b > a:  # a replica with none of this minibatch's positions adds nothing but still joins the sum
            obs, mask, target, value = (x[a:b] for x in rows)
            logits, v = model(obs, mask)
            logp = torch.log_softmax(logits, dim=-1)
            # illegal actions have target 0 and a finite masked logit: their terms vanish
            policy_loss = -(target * logp.masked_fill(~mask, 0.0)).sum(-1).sum() / mb
            value_loss = ((v - value) ** 2).sum() / mb
            loss = policy_loss + cfg.value_coef * value_loss
            loss.backward()
            with torch.no_grad():
                p = logp.exp()
                entropy = -(p * logp.masked_fill(~mask, 0.0)).sum(-1).sum() / mb
                t = target.clamp_min(1e-12)
                target_entropy = -(target * t.log()).sum(-1).sum() / mb
                local = torch.stack([policy_loss.detach(), value_loss.detach(), entropy, target_entropy])
        else:
            local = torch.zeros(4, device=device)
        stats.append(group.sum_gradients_(params, local))
        grad_norms.append(nn.utils.clip_grad_norm_(params, cfg.max_grad_norm).detach().reshape(()))
        optimizer.step()
    model.eval()
    table = torch.stack(stats).double().cpu().numpy()  # the statistics, read once
    norms = torch.stack(grad_norms).double().cpu().numpy()
    out = {name: float(np.mean(table[:, j]))
           for j, name in enumerate(("policy_loss", "value_loss", "entropy", "target_entropy"))}
    out.update(grad_norm=float(np.mean(norms)), num_transitions=int(new), num_minibatches=steps)
    return out


class UnansweredEvaluation(RuntimeError):
    """A served policy did not evaluate a search's leaves (a version its learner no longer keeps, the
    deployment restarting, no answer in time): the lane's running episodes start again."""


class MoveSearch:
    """The learner's move search in a rollout worker: ``search(policy, game, envs)`` searches the
    positions of ``game``'s environments ``envs`` (the learner to move in each) with ``policy``'s
    prior and value, all at once (``policies.tree_search.BatchedSearch``), and returns its
    ``SearchResult``: the moves to play, the improved policies (the targets) and the root values.
    ``rebuild()`` starts the search and its position store anew (after the game raised in them)."""

    def __init__(self, game, max_roots: int, cfg: SearchLearnerConfig, value_range: tuple[float, float],
                 rng: np.random.Generator, store_factory=None):
        from envs.states import state_store
        from policies.tree_search import BatchedSearch, SearchSettings

        settings = SearchSettings(simulations=cfg.simulations, considered=cfg.considered, c_visit=cfg.c_visit,
                                  c_scale=cfg.c_scale, value_range=tuple(float(v) for v in value_range),
                                  proof_table=cfg.proof_table)
        # capacity -> the positions' StateStore: the game's own unless another is given (bench.search)
        store_factory = store_factory or (lambda capacity: state_store(game, capacity))
        self.rebuild = lambda: setattr(self, "search", BatchedSearch(store_factory, int(max_roots), settings, rng))
        self.rebuild()
        self.positions = 0  # roots searched

    @property
    def profile(self) -> dict:
        return self.search.profile

    def __call__(self, policy, game, envs: np.ndarray):
        """``policy``: a ``PolicyNet`` in this process, or a served version
        (``serve.opponents.ServedPolicy``); the search asks either's ``evaluate(obs, mask)``."""
        self.positions += len(envs)
        return self.search.run(policy.evaluate, game, np.asarray(envs, dtype=np.int64))
