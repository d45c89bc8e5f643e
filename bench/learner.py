"""What one learner can train a second, without Ray: the update path of ``actors.learner``.

    python -m bench.learner [--config configs/connect_four_ppo.yaml] [--device cpu|cuda]
        [--minibatch N ...] [--updates 5] [--set KEY=VALUE ...]

A league whose workers wait on their learner (backpressure) runs at the learner's pace, and a
learner is bound by its process's CPU, with or without a GPU (docs/results.md). This bench times
what a learner does per update, on the config's network, PPO and ``rollout.steps_per_batch``, with
real positions of the config's game (random play) cut into the pieces one worker sends:

- ``concat``: ``Rollout.concat`` of the pieces buffered for one update;
- ``update``: ``ppo_update`` on ``--device`` (GAE, then ``ppo.epochs`` passes of minibatches);
- ``publish``: ``policy_to_bytes``, which the learner runs after every update for its workers.

For each ``--minibatch`` size (default: the config's ``ppo.minibatch_size``, and 4x it) it prints
the milliseconds of each stage per update (median of ``--updates``, after one warm-up) and the
learner's ceiling, trained decisions a second, then one JSON line. Ray's messages and the
coordinator's round trip per update are not in it: the league's learner gets at most this pace.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench.nets import positions
from envs import game_info
from league.config import ConfigError, load_config
from policies.device import resolve_device
from policies.net import build_policy, policy_spec
from policies.ppo import make_optimizer, ppo_update
from policies.rollout import Rollout
from policies.snapshot import policy_to_bytes

ROOT = Path(__file__).resolve().parents[1]
EPISODE_DECISIONS = 10  # a learner's decisions in one game of Connect Four between random-ish players


def rollout_pieces(obs: np.ndarray, mask: np.ndarray, pieces: int, seed: int = 0) -> list[Rollout]:
    """``len(obs)`` decisions as ``pieces`` rollouts of whole episodes, legal actions, a result at
    each episode's end: what workers send, with the policy's numbers made up (timing only)."""
    rng = np.random.default_rng(seed)
    n = len(obs)
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in mask], dtype=np.int64)
    dones = np.zeros(n, dtype=bool)
    dones[EPISODE_DECISIONS - 1::EPISODE_DECISIONS] = True
    dones[-1] = True
    rewards = np.where(dones, rng.choice([-1.0, 1.0], size=n), 0.0).astype(np.float32)
    full = Rollout(obs=obs, mask=mask, actions=actions, logp=np.log(1.0 / mask.sum(1)).astype(np.float32),
                   values=rng.uniform(-0.5, 0.5, n).astype(np.float32), rewards=rewards, dones=dones)
    ends = np.flatnonzero(dones) + 1
    cuts = [0] + [int(ends[np.searchsorted(ends, n * k // pieces)]) for k in range(1, pieces)] + [n]
    cuts = sorted(set(cuts))
    return [full.slice(a, b) for a, b in zip(cuts[:-1], cuts[1:])]


def time_update(model, optimizer, pieces: list[Rollout], ppo, device: torch.device) -> tuple[dict[str, float], int]:
    """One update's stages, in milliseconds (CUDA work waited for before each clock reading), and
    the minibatch steps ``ppo_update`` took."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    data = Rollout.concat(pieces)
    t1 = time.perf_counter()
    stats = ppo_update(model, optimizer, data, ppo)
    sync()
    t2 = time.perf_counter()
    policy_to_bytes(model)
    t3 = time.perf_counter()
    return {"concat": (t1 - t0) * 1e3, "update": (t2 - t1) * 1e3, "publish": (t3 - t2) * 1e3}, stats["num_minibatches"]


def bench(config: str, overrides: list[str], device_name: str, minibatches: list[int] | None, updates: int) -> dict:
    cfg = load_config(config, overrides)
    torch.set_num_threads(1)  # as the learner actor runs
    try:
        device = resolve_device(device_name, [])
    except ValueError as exc:  # an unknown device, or CUDA where torch sees none
        raise ValueError(f"--device {device_name}: {exc}") from None
    info = game_info(cfg.game.name, **cfg.game.params)
    spec = policy_spec(cfg.policy, info.obs_size, info.num_actions, info.obs_shape, info.channels_last)
    n = cfg.rollout.steps_per_batch
    obs, mask = positions(cfg.game.name, n)
    pieces = rollout_pieces(obs, mask, max(1, n // 2048))
    decisions = sum(len(p) for p in pieces)
    sizes = minibatches or [cfg.ppo.minibatch_size, 4 * cfg.ppo.minibatch_size]
    rows = []
    for size in sizes:
        ppo = dataclasses.replace(cfg.ppo, minibatch_size=size)
        torch.manual_seed(0)
        model = build_policy(spec).to(device)
        optimizer = make_optimizer(model, ppo)
        time_update(model, optimizer, pieces, ppo, device)  # warm-up
        runs = [time_update(model, optimizer, pieces, ppo, device) for _ in range(updates)]
        stages = {k: statistics.median(ms[k] for ms, _ in runs) for k in runs[0][0]}
        total = sum(stages.values())
        rows.append({"minibatch_size": size, "minibatches_per_update": runs[-1][1],
                     "ms": {k: round(v, 2) for k, v in stages.items()}, "ms_total": round(total, 2),
                     "decisions_per_s": round(decisions / (total / 1e3), 1)})
    return {"bench": "learner", "config": config, "set": overrides, "game": cfg.game.name, "device": str(device),
            "net": spec.net, "decisions_per_update": decisions, "epochs": cfg.ppo.epochs, "updates": updates,
            "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.learner", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "connect_four_ppo.yaml"))
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--minibatch", type=int, action="append", metavar="N",
                        help="PPO minibatch size (repeatable; default the config's and 4x it)")
    parser.add_argument("--updates", type=int, default=5, help="timed updates per minibatch size (default 5)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a dotted config override")
    args = parser.parse_args(argv)
    if args.updates < 1 or any(m < 1 for m in args.minibatch or []):
        parser.error("--updates and --minibatch must be >= 1")
    try:
        out = bench(args.config, args.set, args.device, args.minibatch, args.updates)
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    print(f"{out['game']}, {out['net']}, {out['decisions_per_update']} decisions an update, {out['epochs']} epochs, "
          f"on {out['device']} (one CPU thread); ms per update, median of {out['updates']}")
    print(f"{'minibatch':>9s} {'steps':>6s} {'concat':>8s} {'update':>9s} {'publish':>8s} {'decisions/s':>12s}")
    for r in out["rows"]:
        print(f"{r['minibatch_size']:9d} {r['minibatches_per_update']:6d} {r['ms']['concat']:8.2f} "
              f"{r['ms']['update']:9.2f} {r['ms']['publish']:8.2f} {r['decisions_per_s']:12.0f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
