"""Does a team learn to fight? PPO with parameter sharing against a uniform random team, no Ray.

    python -m experiments.team_learning [--map-size 16] [--minutes 3 | --updates N] [--margin-only]
        [--param attack_penalty=0.0 ...] [--hidden 256 256] [--critic shared|separate|central]
        [--eval-games N] [--opponent uniform|scripted]

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

``--critic`` chooses the value function: ``shared`` (the league's ``net: mlp``, one trunk for the
policy and the value), ``separate`` (an actor and a critic of their own, each an MLP of
``--hidden`` on the agent's own observation) or ``central`` (the same towers, the critic seeing
the agent's observation and the mean observation of its team's acting agents in its environment:
a centralized critic in MAPPO's sense, Yu et al. 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games"). The actor sees the agent's own observation in all three.
``--opponent scripted`` trains against the scripted team instead of a uniform random one (each
line's ``score_vs_opponent`` is then against it). ``--eval-games N`` ends with one more JSON line: the trained policy's score against a uniform
random team and against the scripted team (``evaluation.scripted:attack_nearest``), N games each,
seats alternating (``evaluation.anchors``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from envs import make_game

# policies/ and evaluation/ (torch, pyspiel) are imported in the functions that train and score, after
# the arguments are checked: a bad argument is refused at once, without loading torch
BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"
CRITICS = ("shared", "separate", "central")
SCRIPTED = "evaluation.scripted:attack_nearest"


def team_mean_view(game):
    """``game`` with each row's observation followed by the mean observation of its side's acting
    agents in its environment (the rows of a side come in environment order)."""
    import numpy as np

    class TeamMeanView:
        obs_size = 2 * game.obs_size

        def __getattr__(self, name):
            return getattr(game, name)

        def observe_side(self, side: int):
            b = game.observe_side(side)
            if not len(b.env):
                return b._replace(obs=np.zeros((0, self.obs_size), np.float32))
            starts = np.flatnonzero(np.r_[True, b.env[1:] != b.env[:-1]])
            means = np.add.reduceat(b.obs, starts, axis=0) / np.diff(np.r_[starts, len(b.env)])[:, None]
            rows = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(b.env)]))
            return b._replace(obs=np.concatenate([b.obs, means[rows].astype(np.float32)], axis=1))

    return TeamMeanView()


def two_towers(obs_size: int, num_actions: int, hidden: tuple[int, ...], central: bool):
    """An actor on the first ``obs_size`` columns and a critic on them (or, ``central``, on all of
    a ``team_mean_view`` row), each an MLP of ``hidden``; and the actor alone as a policy of
    ``obs_size`` observations (for scoring against anchors, which see the game's own rows)."""
    from policies.net import ActorCritic, PolicyNet, PolicySpec

    class TwoTowers(PolicyNet):
        def __init__(self):
            super().__init__()
            self.spec = PolicySpec(2 * obs_size, num_actions, hidden)
            self.actor = ActorCritic(PolicySpec(obs_size, num_actions, hidden))
            self.critic = ActorCritic(PolicySpec(2 * obs_size if central else obs_size, num_actions, hidden))

        def forward(self, obs, mask):
            logits, _ = self.actor(obs[:, :obs_size], mask)
            _, value = self.critic(obs if central else obs[:, :obs_size], mask)
            return logits, value

    model = TwoTowers()
    return model, model.actor


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.team_learning", description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--critic", choices=CRITICS, default="shared",
                        help="the value function: shared trunk, separate critic, or central critic (team mean)")
    parser.add_argument("--opponent", choices=("uniform", "scripted"), default="uniform",
                        help="the team trained against: uniform random play or evaluation.scripted:attack_nearest")
    parser.add_argument("--eval-games", type=int, default=0,
                        help="score the trained policy against uniform and the scripted team at the end (0: no)")
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

    from evaluation.anchors import _protocol_anchor, parse_anchor, score_against
    from policies.net import ActorCritic, PolicySpec
    from policies.ppo import PPOConfig, make_optimizer, ppo_update
    from policies.rollout import EpisodeMixture, collect_rollout

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    teams = {"prefix": ["red_", "blue_"], "score": "survivors", "max_cycles": 200,
             "dense_rewards": not args.margin_only}
    game = plain = make_game(BATTLE, args.envs, seed=args.seed, teams=teams, map_size=args.map_size, **args.params)
    if args.critic == "shared":
        model = policy = ActorCritic(PolicySpec(game.obs_size, game.num_actions, tuple(args.hidden)))
    else:
        model, policy = two_towers(game.obs_size, game.num_actions, tuple(args.hidden), args.critic == "central")
        game = team_mean_view(game)
    ppo = PPOConfig(lr=3e-4, ent_coef=0.01, epochs=3, minibatch_size=min(2048, args.batch))  # battle.yaml's
    optimizer = make_optimizer(model, ppo)
    rng = np.random.default_rng(args.seed)
    if args.opponent == "uniform":
        opponent = EpisodeMixture([None], [1.0], rng)
    else:
        bot = _protocol_anchor(parse_anchor(SCRIPTED), plain, rng)
        opponent = lambda obs, mask: bot(obs[:, :plain.obs_size], mask)  # noqa: E731 (the game's own rows)
    start, updates, decisions = time.time(), 0, 0
    while updates < args.updates if args.updates else time.time() - start < args.minutes * 60:
        game.reset()
        rollout, scores = collect_rollout(game, model, opponent, args.batch, rng, value="game_score")
        stats = ppo_update(model, optimizer, rollout, ppo)
        updates, decisions = updates + 1, decisions + len(rollout)
        if updates % 3 == 0:
            print(json.dumps({"bench": "team_learning", "map_size": args.map_size, "params": args.params,
                              "dense_rewards": not args.margin_only, "seconds": round(time.time() - start),
                              "updates": updates, "decisions": decisions,
                              "opponent": args.opponent, "score_vs_opponent": round(float(scores.mean()), 3),
                              "games": len(scores),
                              "reward_per_trajectory": round(float(rollout.rewards.sum()) / max(rollout.num_episodes, 1), 3),
                              "entropy": round(float(stats["entropy"]), 3), "critic": args.critic}), flush=True)
    if args.eval_games:
        kwargs = {"map_size": args.map_size, **args.params, "teams": teams}
        scores = {a: score_against(BATTLE, kwargs, [policy], [1.0], a, args.eval_games, args.seed)
                  for a in ("uniform", SCRIPTED)}
        print(json.dumps({"bench": "team_learning", "critic": args.critic, "map_size": args.map_size,
                          "updates": updates, "decisions": decisions, "seconds": round(time.time() - start),
                          "eval": {a: {"score": round(r["score"], 3), "ci95": r["ci95"], "games": r["games"]}
                                   for a, r in scores.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
