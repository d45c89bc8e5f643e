"""The search learner in one process, without Ray or a league: its settings tried fast, side by side.

    python -m experiments.search_alone [--config configs/connect_four.yaml] [--minutes 15]
        [--seed 1] [--games 100] [--anchor mcts:100 --anchor mcts:1000] [KEY=VALUE ...]

One process, one thread: ``rollout.envs_per_worker`` games (256 where it is ``auto``) of the
config's OpenSpiel game, the learner's seat alternating between games; each of the learner's moves searched as a search
learner's worker searches it (``policies.expert.MoveSearch``), the other seat played by the same
network sampling (the league's self-play, without the league's other opponents); after every
``rollout.steps_per_batch`` searched positions, ``policies.expert.expert_update`` on the replay,
for ``--minutes``. Then the network (its moving average with ``policy.snapshot_average``, as the
league's snapshots) plays its most probable move (as a ``policy.snapshot_play: greedy`` snapshot)
against each anchor for ``--games`` games, seats alternating. ``KEY=VALUE``
overrides the config (``search_learner.simulations=32``). Several of these side by side share
the machine's cores evenly, so their results compare; none compares with a league's pace.

Ends with one JSON line: positions_per_s (searched), games, updates, and per anchor the score
with its 95% interval.
"""

from __future__ import annotations

import copy
import json
import sys
import time

import numpy as np
import torch

from envs import NO_ACTION, is_openspiel_game, make_game
from envs.base import utility_range
from envs.states import check_searchable
from envs.symmetry import game_symmetries
from evaluation.anchors import score_against
from league.anchors import parse_anchor
from league.config import ConfigError, load_config
from league.errors import ArgumentParser, fail
from policies.expert import MoveSearch, Replay, expert_update, make_optimizer, value_target
from policies.net import GreedyPolicy, average_rate, build_policy, follow, policy_spec

AUTO_ENVS = 256  # games at once where the config sizes its workers to the machine (envs_per_worker: auto)


def train(cfg, minutes: float, seed: int):
    """The network after ``minutes`` of searched self-play and updates (its moving average where
    ``policy.snapshot_average`` asks for one), and the run's counts."""
    sl = cfg.search_learner
    E = cfg.rollout.envs_per_worker if isinstance(cfg.rollout.envs_per_worker, int) else AUTO_ENVS
    game = make_game(cfg.game.name, E, seed=seed, **cfg.game.kwargs)
    torch.manual_seed(seed)
    model = build_policy(policy_spec(cfg.policy, game.obs_size, game.num_actions, game.obs_shape,
                                     game.channels_last)).eval()
    optimizer = make_optimizer(model, sl)
    average = copy.deepcopy(model) if cfg.policy.snapshot_average > 0 else None
    search = MoveSearch(game, E, sl, utility_range(game), np.random.default_rng(seed))
    replay = Replay(sl.replay_positions, game.obs_size, game.num_actions)
    symmetries = game_symmetries(game) if sl.symmetries else None
    generator = torch.Generator().manual_seed(seed)
    learner_seat = np.arange(E) % 2
    episodes: list[list[tuple]] = [[] for _ in range(E)]  # the learner's (obs, mask, target, root value)
    positions = games = updates = pending = 0
    start = time.perf_counter()
    while time.perf_counter() - start < minutes * 60:
        movers = game.movers()
        actions = np.full((E, 2), NO_ACTION)
        for seat in (0, 1):
            envs = np.flatnonzero(movers[:, seat])
            if envs.size == 0:
                continue
            obs, mask = game.observe(seat, envs)
            mine = learner_seat[envs] == seat
            if mine.any():
                searched, searched_obs, searched_mask = envs[mine], obs[mine], mask[mine]
                found = search(model, game, searched)
                actions[searched, seat] = found.action
                for k, e in enumerate(searched):
                    episodes[e].append((searched_obs[k], searched_mask[k], found.policy[k], found.value[k]))
                positions += searched.size
            if (~mine).any():
                actions[envs[~mine], seat] = model.act(obs[~mine], mask[~mine])[0]
        step = game.step(actions)
        for e in np.flatnonzero(step.done):
            rows, episodes[e] = episodes[e], []
            games += 1
            if rows:
                outcome = np.full(len(rows), step.returns[e, learner_seat[e]], dtype=np.float32)
                value = value_target(outcome, np.array([r[3] for r in rows]), sl.value_mix)
                pending += replay.add_rows(*(np.stack([r[j] for r in rows]) for j in range(3)), value)
        if pending >= cfg.rollout.steps_per_batch:
            stats = expert_update(model, optimizer, replay, pending, sl, generator=generator, symmetries=symmetries)
            if average is not None:
                follow(average, model, average_rate(cfg.policy.snapshot_average, stats["num_minibatches"]))
            pending, updates = 0, updates + 1
    elapsed = time.perf_counter() - start
    counts = {"positions_per_s": round(positions / elapsed, 1), "games": games, "updates": updates}
    return (average if average is not None else model), counts


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m experiments.search_alone", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/connect_four.yaml")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--games", type=int, default=100, help="games against each anchor (default 100)")
    parser.add_argument("--anchor", action="append", dest="anchors",
                        help="an anchor to score against (repeatable; default mcts:100 and mcts:1000)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if not args.minutes > 0 or args.games < 1:
        parser.error(f"--minutes must be > 0 and --games >= 1, got {args.minutes} and {args.games}")
    args.anchors = args.anchors or ["mcts:100", "mcts:1000"]
    try:
        cfg = load_config(args.config, args.overrides)
        for anchor in args.anchors:
            parse_anchor(anchor)
    except (ConfigError, ValueError, OSError) as exc:
        return fail("experiments.search_alone", exc)
    if not is_openspiel_game(cfg.game.name):
        return fail("--config", f"{cfg.game.name} is not an OpenSpiel game; the MCTS anchors need one")
    try:
        check_searchable(make_game(cfg.game.name, 1, seed=args.seed, **cfg.game.kwargs))
    except ValueError as exc:
        return fail("--config", str(exc).splitlines()[0])
    torch.set_num_threads(1)
    model, line = train(cfg, args.minutes, args.seed)
    line = {"config": args.config, "overrides": args.overrides, "seed": args.seed, **line}
    for anchor in args.anchors:
        scored = score_against(cfg.game.name, cfg.game.kwargs, [GreedyPolicy(model).eval()], [1.0], anchor,
                               args.games, seed=args.seed)
        line[anchor] = {"score": round(scored["score"], 3), "ci95": [round(x, 3) for x in scored["ci95"]]}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
