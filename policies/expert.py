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
``minibatch_size``. Adam with L2 weight decay and global gradient clipping.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from league.config import SearchLearnerConfig
from policies.rollout import Rollout


def make_optimizer(model: nn.Module, cfg: SearchLearnerConfig) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


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
        z = outcomes(rollout)
        if value_mix:
            z = (1.0 - value_mix) * z + value_mix * rollout.values
        n = len(rollout)
        for start in range(0, n, self.capacity):  # a batch larger than the replay keeps its newest rows
            rows = slice(start, min(n, start + self.capacity))
            m = rows.stop - rows.start
            idx = (self._next + np.arange(m)) % self.capacity
            self.obs[idx], self.mask[idx] = rollout.obs[rows], rollout.mask[rows]
            self.target[idx], self.value[idx] = rollout.targets[rows], z[rows]
            self._next = int((self._next + m) % self.capacity)
            self.size = min(self.capacity, self.size + m)
        self.added += n
        return n


def expert_update(model, optimizer: torch.optim.Optimizer, replay: Replay, new: int, cfg: SearchLearnerConfig,
                  *, generator: torch.Generator | None = None) -> dict:
    """Gradient steps on ``replay`` after ``new`` positions arrived: ``ceil(reuse * new / minibatch)``
    minibatches drawn uniformly from the replay. Returns mean statistics: policy_loss (the cross
    entropy), value_loss, entropy (of the network's policy), target_entropy, grad_norm,
    num_transitions, num_minibatches."""
    if len(replay) == 0:
        raise ValueError("expert_update: the replay is empty")
    device = next(model.parameters()).device
    mb = min(cfg.minibatch_size, len(replay))
    steps = max(1, int(np.ceil(cfg.reuse * new / mb)))
    stats = {"policy_loss": [], "value_loss": [], "entropy": [], "target_entropy": [], "grad_norm": []}
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(replay), (mb,), generator=generator).numpy()
        obs, mask, target, value = (torch.from_numpy(x[idx]).to(device)
                                    for x in (replay.obs, replay.mask, replay.target, replay.value))
        logits, v = model(obs, mask)
        logp = torch.log_softmax(logits, dim=-1)
        # illegal actions have target 0 and a finite masked logit: their terms vanish
        policy_loss = -(target * logp.masked_fill(~mask, 0.0)).sum(-1).mean()
        value_loss = ((v - value) ** 2).mean()
        loss = policy_loss + cfg.value_coef * value_loss
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            p = logp.exp()
            stats["entropy"].append(float(-(p * logp.masked_fill(~mask, 0.0)).sum(-1).mean()))
            t = target.clamp_min(1e-12)
            stats["target_entropy"].append(float(-(target * t.log()).sum(-1).mean()))
        stats["policy_loss"].append(policy_loss.item())
        stats["value_loss"].append(value_loss.item())
        stats["grad_norm"].append(float(grad_norm))
    model.eval()
    out = {k: float(np.mean(v)) for k, v in stats.items()}
    out.update(num_transitions=int(new), num_minibatches=steps)
    return out


class MoveSearch:
    """The learner's move search in a rollout worker: ``search(policy, game, envs)`` searches the
    positions of ``game``'s environments ``envs`` (the learner to move in each) with ``policy``'s
    prior and value, all at once (``policies.tree_search.BatchedSearch``), and returns its
    ``SearchResult``: the moves to play, the improved policies (the targets) and the root values.
    ``rebuild()`` starts the search and its position store anew (after the game raised in them)."""

    def __init__(self, game, max_roots: int, cfg: SearchLearnerConfig, value_range: tuple[float, float],
                 rng: np.random.Generator):
        from envs.states import state_store
        from policies.tree_search import BatchedSearch, SearchSettings

        settings = SearchSettings(simulations=cfg.simulations, considered=cfg.considered, c_visit=cfg.c_visit,
                                  c_scale=cfg.c_scale, value_range=tuple(float(v) for v in value_range))
        self.rebuild = lambda: setattr(self, "search", BatchedSearch(
            lambda capacity: state_store(game, capacity), int(max_roots), settings, rng))
        self.rebuild()
        self.positions = 0  # roots searched

    @property
    def profile(self) -> dict:
        return self.search.profile

    def __call__(self, policy, game, envs: np.ndarray):
        def evaluate(obs: np.ndarray, mask: np.ndarray):
            with torch.no_grad():
                logits, values = policy(torch.from_numpy(obs), torch.from_numpy(mask))
            return logits.numpy(), values.numpy()

        self.positions += len(envs)
        return self.search.run(evaluate, game, np.asarray(envs, dtype=np.int64))
