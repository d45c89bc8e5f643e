"""Scores of league mixtures against fixed anchors (uniform play, OpenSpiel's MCTS bot, a user's bot).

    python -m evaluation.anchor_scores --storage RUN [--storage RUN2 ...]
        [--anchors uniform,mcts:10,mcts:100,mcts:1000] [--games 100] [--seed 0]
    python -m evaluation.anchor_scores --uniform --game connect_four [--anchors ...]
    python -m evaluation.anchor_scores --uniform --game pettingzoo-parallel:magent2.environments.battle_v4:parallel_env \
        --params '{"map_size": 16}' --teams '{"prefix": ["red_", "blue_"], "score": "survivors", "max_cycles": 200}' \
        --anchors uniform,evaluation.scripted:attack_nearest
    python -m evaluation.anchor_scores --config configs/connect_four.yaml (--uniform | --storage RUN)
    python -m evaluation.anchor_scores --storage RUN --versus OTHER_RUN [--versus-games 200] [--anchors ...]
    python -m evaluation.anchor_scores --storage RUN --versus OTHER_RUN --agent main_agent-0-v160 [--anchors ...]

For each run folder it loads the latest published Nash mixture (no Ray) and
plays ``--games`` whole games against each anchor, seats alternating, one
member drawn per game by its weight (``evaluation.anchors``). Prints one JSON line
per run::

    {"bench": "anchors", "storage": ..., "game": ..., "support": ...,
     "anchors": {"mcts:100": {"score", "ci95", "games"}, ...}, "seconds": ...}

With ``--config`` the game, the anchors and the games per anchor are the
config's (``anchors``, ``evaluator.anchor_games``), as the league's anchor judge
plays them, and the line adds ``round_cpu_seconds``: the CPU time of one judge
round (this mixture scored against every anchor, twice: the judge scores the
published mixture and the newest main agent; with the config's ``search`` once
more with search over ``search.anchor_games`` games per anchor, as the judge's
``published_search``), and ``cpu_share``: a round's share
of one core at ``evaluator.anchor_every_seconds``, round / (round + every).

With ``--search SIMULATIONS`` the line adds ``search``: the same games with each member playing
PUCT search guided by its network's prior and value (``evaluation.search``; ``--rollout-weight``,
``--c-puct``, ``--prior-temperature``), its settings, its ``anchors`` and its ``seconds``; the
network-alone scores stay in ``anchors``, so what search adds to the learned policy shows beside
what the policy is without it. ``--uniform --search N`` is the search with a uniform prior and
rollouts alone: the search's own strength, with nothing learned.

With ``--versus OTHER_RUN`` each line adds ``versus``: the run's mixture against the other run's,
head to head (``evaluation.compare.head_to_head``: ``--versus-games`` games, each member by
its Nash weight against one member of the other mixture drawn per game, seats alternating), the
run's score with its 95% interval: two configs of one game compared directly.

With ``--agent ID`` each run is scored by its snapshot ``ID`` instead of its published mixture,
against the anchors and, with ``--versus``, against the other run's snapshot of the same id
(``main_agent-0-v160``: each run's 160th main snapshot, so with one ``snapshot_every_steps``
two runs' main agents after the same number of decisions trained on: what a league and self-play
learn per decision rather than per second). A run without that snapshot is an error naming both.

``--params`` and ``--teams`` (JSON) are the game's parameters and, for a team
game, its ``game.teams`` (with ``--config``, the config's).

Scores lie in [0, 1] (the game's score: win 1, draw 0.5, loss 0; in a team game
1 to the side with more survivors or whatever its scoring counts); higher is
stronger. ``mcts:N`` needs a perfect-information OpenSpiel game (Connect Four,
tic-tac-toe, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from evaluation.anchors import parse_anchor, score_against
from evaluation.compare import head_to_head
from evaluation.search import SearchSpec
from evaluation.stored_run import StoredRun, stored_game
from league.config import ConfigError, load_config
from league.errors import ArgumentParser, UsageError, fail

DEFAULT_ANCHORS = "uniform,mcts:10,mcts:100,mcts:1000"


def _stored_mixture(run_dir: str, agent: str | None = None):
    """A run's game and what it plays: its published mixture, or with ``agent`` that snapshot."""
    with StoredRun(run_dir) as run:
        ids, models, weights = run.subject(agent)
        return run.game, run.game_params, ids, models, weights


def score_mixture(game: str, params: dict, models, weights, anchors: list[str], games: int, seed: int,
                  search=None) -> dict:
    return {a: {k: v for k, v in score_against(game, params, models, weights, a, games, seed, search).items()
                if k != "anchor"} for a in anchors}


def _versus(run_dir: str, other: str, game: str, params: dict, games: int, seed: int,
            agent: str | None = None) -> dict:
    """``run_dir``'s mixture against ``other``'s, head to head; both runs must be of one game.
    ``agent``: that snapshot of each run instead of its mixture."""
    other_game, other_params = stored_game(other, "--versus")  # head_to_head loads what it plays
    if (other_game, other_params) != (game, params):
        raise UsageError(f"--versus {other}", f"a run of {other_game} {other_params}, not of {game} {params}")
    result = head_to_head(game, params, Path(run_dir), Path(other), games, seed, agent=agent)
    return {"storage": other, **result}


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m evaluation.anchor_scores", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--storage", action="append", metavar="RUN_DIR", help="a league run folder (repeatable)")
    what.add_argument("--uniform", action="store_true", help="score uniform random play (needs --game)")
    parser.add_argument("--agent", metavar="ID", help="score this snapshot of each run (and of --versus) instead "
                                                     "of its published mixture, e.g. main_agent-0-v160")
    parser.add_argument("--game", help="game name (with --uniform)")
    parser.add_argument("--params", type=json.loads, default={}, help="the game's parameters, JSON (with --uniform)")
    parser.add_argument("--teams", type=json.loads, default=None,
                        help="a team game's game.teams, JSON (with --uniform)")
    parser.add_argument("--anchors", default=DEFAULT_ANCHORS, help=f"comma-separated (default {DEFAULT_ANCHORS})")
    parser.add_argument("--games", type=int, default=100, help="games per anchor (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--versus", metavar="RUN_DIR", help="another run of the same game: score each --storage "
                                                            "run's mixture against its mixture, head to head")
    parser.add_argument("--versus-games", type=int, default=200, help="head-to-head games with --versus (default 200)")
    parser.add_argument("--search", type=int, default=0, metavar="SIMULATIONS",
                        help="also score the mixture playing with PUCT search guided by its networks, SIMULATIONS "
                             "a move (evaluation.search; a perfect-information OpenSpiel game)")
    parser.add_argument("--rollout-weight", type=float, default=0.0,
                        help="with --search: a leaf's value mixes one random rollout in at this weight (default 0)")
    parser.add_argument("--c-puct", type=float, default=1.5, help="with --search: PUCT's exploration (default 1.5)")
    parser.add_argument("--prior-temperature", type=float, default=1.0,
                        help="with --search: the network's prior flattened by this temperature (default 1)")
    parser.add_argument("--config", help="a league config: its game, anchors and evaluator.anchor_games, and the "
                                         "CPU share of one anchor judge round")
    args = parser.parse_args(argv)
    args.cfg = None
    if args.config:
        try:
            args.cfg = load_config(args.config)
        except ConfigError as exc:
            parser.error(f"--config: {exc}")
        if not args.cfg.anchors:
            parser.error(f"--config: {args.config} has no anchors")
        args.game, args.games = args.cfg.game.name, args.cfg.evaluator.anchor_games
        args.anchors = ",".join(args.cfg.anchors)
        args.kwargs = dict(args.cfg.game.kwargs)
    else:
        if not isinstance(args.params, dict):
            parser.error(f"--params must be a JSON object, got {args.params!r}")
        args.kwargs = {**args.params, **({"teams": args.teams} if args.teams is not None else {})}
    if args.uniform and not args.game:
        parser.error("--uniform needs --game")
    if args.games < 1:
        parser.error(f"--games must be >= 1, got {args.games}")
    if args.agent is not None and args.uniform:
        parser.error("--agent scores a snapshot of --storage runs, not --uniform")
    if args.versus is not None and args.uniform:
        parser.error("--versus scores --storage runs, not --uniform")
    if args.versus_games < 1:
        parser.error(f"--versus-games must be >= 1, got {args.versus_games}")
    args.search_spec = None
    if args.cfg is not None and args.cfg.search.simulations and not args.search:
        args.search_spec = args.cfg.search  # the judge's third subject: its cost is part of a round
    if args.search:
        try:
            args.search_spec = SearchSpec(simulations=args.search, c_puct=args.c_puct,
                                          rollout_weight=args.rollout_weight, prior_temperature=args.prior_temperature)
        except ValueError as exc:
            parser.error(f"--search: {exc}")
    args.anchors = [a.strip() for a in args.anchors.split(",") if a.strip()]
    try:
        for a in args.anchors:
            parse_anchor(a)
    except ValueError as exc:
        parser.error(f"--anchors: {exc}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    targets = [None] if args.uniform else args.storage
    for run_dir in targets:
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            if run_dir is None:
                game, params, ids, models, weights = args.game, args.kwargs, ["uniform"], [None], [1.0]
            else:
                game, params, ids, models, weights = _stored_mixture(run_dir, args.agent)
            scores = score_mixture(game, params, models, weights, args.anchors, args.games, args.seed)
            scores_cpu = time.process_time() - cpu0
            searched, searched_cpu = None, 0.0
            if args.search_spec is not None:
                t1 = time.perf_counter()
                games = args.search_spec.games_per_anchor(args.games)  # as the judge
                searched = {**dataclasses.asdict(args.search_spec),
                            "anchors": score_mixture(game, params, models, weights, args.anchors, games,
                                                     args.seed, args.search_spec)}
                searched["seconds"] = round(time.perf_counter() - t1, 1)
                searched_cpu = time.process_time() - cpu0 - scores_cpu
            versus = None
            if args.versus is not None:
                versus = _versus(run_dir, args.versus, game, params, args.versus_games, args.seed, args.agent)
        except UsageError as exc:
            return fail(exc)
        except ValueError as exc:
            return fail(f"--storage {run_dir}" if run_dir else "evaluation.anchor_scores", exc)
        line = {"bench": "anchors", "storage": run_dir or "uniform", "game": game, "support": len(ids),
                **({"agent": args.agent} if args.agent else {}),
                "anchors": scores, "seconds": round(time.perf_counter() - t0, 1)}
        if searched is not None:
            line["search"] = searched
        if versus is not None:
            line["versus"] = versus
        if args.cfg is not None:
            every = args.cfg.evaluator.anchor_every_seconds
            # the published mixture and the newest main agent, as the judge plays them, and with the
            # config's search the published mixture once more, searching
            round_cpu = 2 * scores_cpu + (searched_cpu if args.cfg.search.simulations else 0.0)
            line.update(round_cpu_seconds=round(round_cpu, 2), anchor_every_seconds=every,
                        cpu_share=round(round_cpu / (round_cpu + every), 4))
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
