"""What a rollout worker's step costs against a pool of frozen opponents, without Ray.

    python -m bench.step_cost [--config configs/connect_four_ppo.yaml] [--storage RUN]
                              [--repeats 1 4 16 32] [--seconds 5] [--rounds 3]

A worker's lanes (``policies.lanes``, the worker's own code) play the config's game in one lane of
``rollout.envs_per_worker`` environments, the config's network as the learner, its frozen opponents
in process (``actors.opponents.InProcessOpponents``, ``rollout.opponent_inference: inprocess``)
from a pool of ``league.pool_max_size`` freshly initialized snapshots of the same network. Settings,
measured side by side, each ``--seconds`` per round, rounds interleaved:

- ``self_play``: every opponent is the learner's live policy: self-play's worker;
- ``league-rN``: the main agent's matches: a live share, and frozen opponents drawn from the pool
  by weights, each drawn opponent playing ``N`` new episodes in a row
  (``rollout.episodes_per_opponent``; 1 is one draw per episode).

The weights are the games per opponent of a real run's last ``--batches`` worker result batches
with ``--storage`` (its learner's own id is the live share), or else a fixed shape modelled on a
Connect Four main agent's (``synthetic_weights``, docs/results.md): a live share, and frozen games
falling off from the newest snapshot back, down to a floor that every older snapshot keeps.

Prints one JSON line per setting: env steps/s (median over rounds), its ratio to self-play's, and
the distinct frozen opponents per vector step (mean), whose forward passes are most of the gap.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from actors.opponents import InProcessOpponents
from envs import make_game
from league.config import load_config
from league.matchmaking import MatchPlan, MatchSampler, PlanBranch
from league.store import LeagueStore
from policies.lanes import Lanes, MatchQueue
from policies.net import build_policy, policy_spec
from policies.snapshot import policy_to_bytes

LEARNER = "main_agent-0"


def synthetic_weights(pool: int) -> tuple[float, np.ndarray]:
    """The live share and the frozen weights, newest snapshot first (see the module's doc)."""
    frozen = np.maximum(0.3 ** np.arange(pool), 0.008)
    return 0.36, frozen / frozen.sum()


def stored_weights(storage: Path, batches: int) -> tuple[float, np.ndarray]:
    """The live share and frozen weights (most played first) of a run's last worker result batches:
    games against its learners (live) and against snapshots (frozen)."""
    if not (storage / "league.db").exists():
        raise SystemExit(f"bench.step_cost: no league store in {storage}")
    with LeagueStore(storage, create=False) as store:
        learners = {r["learner_id"] for r in store.learners()}
        last = deque((b for b in store.results_after() if b.source.startswith("worker:")), maxlen=batches)
    games: dict[str, float] = {}
    for batch in last:
        for b, n in zip(batch.b.tolist(), batch.games.tolist()):
            games[batch.agents[b]] = games.get(batch.agents[b], 0.0) + n
    if not games:
        raise SystemExit(f"bench.step_cost: {storage} holds no worker results")
    live = sum(n for a, n in games.items() if a in learners)
    frozen = np.array(sorted((n for a, n in games.items() if a not in learners), reverse=True))
    return live / (live + frozen.sum()), frozen / frozen.sum()


class CountingOpponents(InProcessOpponents):
    """In-process opponents that count the distinct frozen policies of each request (one vector step)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.distinct: list[int] = []

    def submit(self, agent_ids, codes, obs, mask):
        self.distinct.append(len(agent_ids))
        return super().submit(agent_ids, codes, obs, mask)


class Setting:
    """One side of the comparison: its own lanes, opponents and counters. ``frozen`` None: self-play."""

    def __init__(self, name: str, cfg, learner, snapshots: dict[str, bytes], live: float,
                 frozen: np.ndarray | None, repeat: int, seed: int):
        self.name = name
        envs = cfg.rollout.envs_per_worker
        branches = [PlanBranch(1.0 if frozen is None else live, (LEARNER,), None, True, "self_play")]
        if frozen is not None:
            branches.append(PlanBranch(1.0 - live, tuple(snapshots)[:len(frozen)], np.cumsum(frozen), False, "pfsp"))
        sampler = MatchSampler(LEARNER, np.random.default_rng(seed), refresh_seconds=1e9)
        sampler.update(MatchPlan(LEARNER, tuple(branches), True))
        self.opponents = CountingOpponents(snapshots.__getitem__, capacity=cfg.snapshots.cache_size,
                                           max_bytes=cfg.snapshots.cache_bytes, seed=seed)
        game = make_game(cfg.game.name, envs, seed=seed)
        queue = MatchQueue(sampler.draw, max(envs, cfg.rollout.matches_per_request), repeat=repeat)
        self.lanes = Lanes([game], 1, queue, self.opponents, lambda _: learner, np.random.default_rng(seed),
                           lambda n: make_game(cfg.game.name, envs, seed=seed + n), keep_groups=False)
        self.lanes.set_learner(1, learner)
        self.lanes.start(first_group_id=0)
        self.every = max(1, cfg.rollout.steps_per_batch // envs)  # vector steps per batch taken, as a worker
        self.rates: list[float] = []

    def run(self, seconds: float) -> None:
        steps, start = self.lanes.counts["env_steps"], time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            self.lanes.step()
            n += 1
            if n % self.every == 0:
                self.lanes.take_groups("bench", None)
                self.lanes.take_batch("bench", n, LEARNER)
        self.rates.append((self.lanes.counts["env_steps"] - steps) / (time.perf_counter() - start))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/connect_four_ppo.yaml")
    parser.add_argument("--storage", type=Path, help="take the opponent weights from this run's store")
    parser.add_argument("--batches", type=int, default=20, help="worker result batches read from --storage")
    parser.add_argument("--repeats", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.repeats) < 1 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--repeats must be >= 1, --seconds > 0, --rounds >= 1")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = load_config(args.config)
    one = make_game(cfg.game.name, 1)
    spec = policy_spec(cfg.policy, one.obs_size, one.num_actions, one.obs_shape, one.channels_last)
    live, frozen = (stored_weights(args.storage, args.batches) if args.storage
                    else synthetic_weights(cfg.league.pool_max_size))
    learner = build_policy(spec).eval()
    snapshots = {f"{LEARNER}-v{i + 1}": policy_to_bytes(build_policy(spec)) for i in range(len(frozen))}
    settings = [Setting("self_play", cfg, learner, snapshots, 1.0, None, 1, args.seed)]
    settings += [Setting(f"league-r{r}", cfg, learner, snapshots, live, frozen, r, args.seed)
                 for r in args.repeats]
    for s in settings:  # warm: fill every cache before timing
        s.run(min(args.seconds, 2.0))
        s.rates.clear()
        s.opponents.distinct.clear()
    for _ in range(args.rounds):
        for s in settings:
            s.run(args.seconds)
    base = float(np.median(settings[0].rates))
    for s in settings:
        rate = float(np.median(s.rates))
        print(json.dumps({"setting": s.name, "game": cfg.game.name, "envs": cfg.rollout.envs_per_worker,
                          "pool": len(frozen), "live_share": round(live, 3),
                          "env_steps_per_s": round(rate, 1), "ratio_to_self_play": round(rate / base, 3),
                          "distinct_opponents_per_step": round(float(np.mean(s.opponents.distinct)), 1) if s.opponents.distinct else 0.0,
                          "weights": "stored" if args.storage else "synthetic"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
