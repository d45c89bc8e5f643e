"""Does a team learn to fight? PPO with parameter sharing against a uniform random team, no Ray.

    python -m bench.team_learning [--map-size 16] [--minutes 3 | --updates N] [--margin-only]
        [--param attack_penalty=0.0 ...] [--hidden 256 256]

One network plays every agent of its side of MAgent2's battle (survivors scoring, at most 200
steps) against a team that acts uniformly at random, seats drawn per game, and is trained by the
learners' PPO update (``policies.ppo``) on batches of 16,384 agent decisions from
``policies.rollout.collect_rollout`` (``--batch``): each agent's trajectory, its own per-step rewards
(``dense_rewards``, unless ``--margin-only``) and half the margin of survivors at its end, as in a
league. ``--param KEY=VALUE`` sets a parameter of battle (a number), e.g. its
``attack_penalty``. After every third update it prints one JSON line: seconds, updates,
decisions, the score against uniform of the batch's games (1 more survivors, 0.5 as many), the
mean reward of a trajectory and the policy's entropy. It shows in minutes what a league's
learner faces in the first minutes of ``configs/battle.yaml``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.team_learning", description=__doc__.split("\n\n")[0])
    parser.add_argument("--map-size", type=int, default=16, help="battle's map_size (16: 6 agents a side)")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--updates", type=int, default=0, help="stop after this many PPO updates instead (0: --minutes)")
    parser.add_argument("--margin-only", action="store_true", help="no per-step rewards: the margin alone")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a numeric parameter of battle, e.g. attack_penalty=0.0")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16_384, help="agent decisions per PPO update")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    params = {}
    for text in args.param:
        key, sep, value = text.partition("=")
        try:
            params[key] = float(value)
        except ValueError:
            parser.error(f"--param {text}: want KEY=NUMBER")
        if not sep or not key:
            parser.error(f"--param {text}: want KEY=NUMBER")
    if args.minutes <= 0 or args.updates < 0 or args.map_size < 12 or args.envs < 1 or args.batch < 1:
        parser.error("--minutes must be > 0, --updates >= 0, --map-size >= 12, --envs >= 1, --batch >= 1")
    args.params = params
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np
    import torch

    from envs import make_game
    from policies.net import ActorCritic, PolicySpec
    from policies.ppo import PPOConfig, make_optimizer, ppo_update
    from policies.rollout import EpisodeMixture, collect_rollout

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    teams = {"prefix": ["red_", "blue_"], "score": "survivors", "max_cycles": 200,
             "dense_rewards": not args.margin_only}
    game = make_game(BATTLE, args.envs, seed=args.seed, teams=teams, map_size=args.map_size, **args.params)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, tuple(args.hidden)))
    ppo = PPOConfig(lr=3e-4, ent_coef=0.01, epochs=3, minibatch_size=min(2048, args.batch))  # battle.yaml's
    optimizer = make_optimizer(model, ppo)
    rng = np.random.default_rng(args.seed)
    uniform = EpisodeMixture([None], [1.0], rng)
    start, updates, decisions = time.time(), 0, 0
    while updates < args.updates if args.updates else time.time() - start < args.minutes * 60:
        game.reset()
        rollout, scores = collect_rollout(game, model, uniform, args.batch, rng, value="game_score")
        stats = ppo_update(model, optimizer, rollout, ppo)
        updates, decisions = updates + 1, decisions + len(rollout)
        if updates % 3 == 0:
            print(json.dumps({"bench": "team_learning", "map_size": args.map_size, "params": args.params,
                              "dense_rewards": not args.margin_only, "seconds": round(time.time() - start),
                              "updates": updates, "decisions": decisions,
                              "score_vs_uniform": round(float(scores.mean()), 3), "games": len(scores),
                              "reward_per_trajectory": round(float(rollout.rewards.sum()) / max(rollout.num_episodes, 1), 3),
                              "entropy": round(float(stats["entropy"]), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
