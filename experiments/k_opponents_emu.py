"""The k_opponents example without Ray: one learner, the real PPO update and novelty shaper.

    python -m experiments.k_opponents_emu [--weights 0.5 0.0] [--seeds 0 1] [--updates 100]

A quick stand-in for ``experiments.k_opponents`` to study the shaper's settings: one
learner (``policies.ppo.ppo_update`` on an ``ActorCritic`` with the dominant
config's hidden size, lr, epochs, minibatch and ent_coef) plays seat 0 of the
game of configs/dominant.yaml in groups of k = 4 episodes, each against a
snapshot drawn uniformly from a pool that gains the learner's policy every 4
updates (4096 decisions, the config's snapshot_every_steps). Each update is 256
groups (1024 one-step episodes). Unshaped: trained on the returns; shaped:
on ``league.objectives.novelty`` with ``weight`` (the learner's code path:
the shaper's reward replaces each episode's return). Prints one JSON line per
setting and seed: the pool's most-probable actions counted per action and
``distinct_strategies`` as experiments.k_opponents counts it.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from league.objectives import Group, novelty
from policies.net import ActorCritic, PolicySpec
from policies.ppo import PPOConfig, make_optimizer, ppo_update
from policies.rollout import Rollout

PAYOFF = np.array([[0, 2, 2, 2], [-2, 0, 1, -1], [-2, -1, 0, 1], [-2, 1, -1, 0]], dtype=np.float64)
SEAT0, SEAT1 = np.array([[1, 0]], np.float32), np.array([[0, 1]], np.float32)
MASK = np.ones((1, 4), bool)


def run(weight: float | None, seed: int, updates: int = 100, groups: int = 256, k: int = 4, snap_every: int = 4):
    """The pool's seat-0 policies (without the initial one) after ``updates``; weight None: unshaped."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model = ActorCritic(PolicySpec(2, 4, (16,)))
    cfg = PPOConfig(lr=0.01, epochs=4, minibatch_size=256, ent_coef=0.0)
    optimizer, generator = make_optimizer(model, cfg), torch.Generator().manual_seed(seed)
    pool, snapshots, state, n = [model.probs(SEAT1, MASK)[0].astype(np.float64)], [], {}, groups * k
    for u in range(updates):
        p = model.probs(SEAT0, MASK)[0].astype(np.float64)
        p /= p.sum()
        with torch.no_grad():
            value = float(model(torch.as_tensor(SEAT0), torch.as_tensor(MASK))[1].reshape(-1)[0])
        opp = rng.integers(len(pool), size=(groups, k))
        cum = np.cumsum(np.array(pool), axis=1)
        cum[:, -1] = 1.0
        theirs = (rng.random((groups, k))[..., None] > cum[opp]).sum(-1)
        mine = rng.choice(4, p=p, size=(groups, k))
        returns = PAYOFF[mine, theirs]
        if weight is None:
            rewards = returns
        else:
            rewards = novelty([Group(i, "emu", u, tuple(map(str, opp[i])), returns[i]) for i in range(groups)],
                              state, weight=weight)
        rollout = Rollout(obs=np.repeat(SEAT0, n, 0), mask=np.ones((n, 4), bool), actions=mine.ravel(),
                          logp=np.log(p[mine.ravel()]), values=np.full(n, value), rewards=rewards.ravel(),
                          dones=np.ones(n, bool))
        ppo_update(model, optimizer, rollout, cfg, generator=generator)
        if (u + 1) % snap_every == 0:
            pool.append(model.probs(SEAT1, MASK)[0].astype(np.float64))
            snapshots.append(model.probs(SEAT0, MASK)[0].astype(np.float64))
    return snapshots


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.k_opponents_emu")
    parser.add_argument("--weights", type=float, nargs="*", default=[0.5, 0.0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    parser.add_argument("--updates", type=int, default=100)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for weight in [None, *args.weights]:
        for seed in args.seeds:
            modes = [int(q.argmax()) for q in run(weight, seed, args.updates)]
            print(json.dumps({"setting": "unshaped" if weight is None else f"novelty weight {weight}", "seed": seed,
                              "argmax_counts": np.bincount(modes, minlength=4).tolist(),
                              "distinct_strategies": len(set(modes))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
