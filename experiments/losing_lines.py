"""Where one run loses to another, head to head: its score from each seat, and the openings of the
games it does not win.

    python -m experiments.losing_lines --storage RUN --versus OTHER_RUN [--games 400] [--plies 6]
        [--top 3] [--seed 0]

Both runs' published mixtures play ``--games`` whole games of their game (a deterministic
two-player OpenSpiel game of perfect information), seats alternating, each side drawing one member
a game by its Nash weight, each member playing as it plays when measured (a greedy snapshot its
best move, any other sampling its policy), as ``evaluation.anchor_scores --versus`` plays them.
Ends with one JSON line: per seat of ``--storage`` (``first``, ``second``) its mean score (win 1,
draw 0.5, loss 0), the games, and the ``--top`` commonest openings (first ``--plies`` moves) of
the games it did not win, with their counts. A run that loses most of its games from one seat down
one opening has a line that the other run found and replays.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

import numpy as np
import pyspiel
import torch

from envs import is_openspiel_game
from envs.openspiel import load_two_player_zero_sum, state_tensor
from evaluation.anchors import member_action
from evaluation.stored_run import StoredRun
from league.errors import ArgumentParser, UsageError, fail

SEATS = ("first", "second")


def _mixture(run_dir: str, option: str):
    with StoredRun(run_dir, option=option) as run:
        _, models, weights = run.nash_mixture()
        game, params = run.game, run.game_params
    w = np.asarray(weights, dtype=np.float64)
    return game, params, models, w / w.sum()


def losing_lines(game: pyspiel.Game, mine, mine_w, theirs, theirs_w, games: int, plies: int, top: int,
                 seed: int) -> dict:
    """``mine`` (models, weights ``mine_w``) against ``theirs``, ``games`` games, seats alternating
    (module docstring): per seat the mean score, the games and the commonest openings not won."""
    rng = np.random.default_rng(seed)
    tensor = state_tensor(game)
    actions = game.num_distinct_actions()
    scores: dict[int, list[float]] = {0: [], 1: []}
    lost: dict[int, collections.Counter] = {0: collections.Counter(), 1: collections.Counter()}
    for g in range(games):
        seat = g % 2
        players = {seat: mine[rng.choice(len(mine), p=mine_w)], 1 - seat: theirs[rng.choice(len(theirs), p=theirs_w)]}
        state, moves = game.new_initial_state(), []
        while not state.is_terminal():
            player = state.current_player()
            move = member_action(players[player], tensor, state, player, actions, rng)
            moves.append(move)
            state.apply_action(move)
        score = (float(state.returns()[seat]) + 1.0) / 2.0  # returns in [-1, 1]: win 1, draw 0.5, loss 0
        scores[seat].append(score)
        if score < 1.0:
            lost[seat][tuple(moves[:plies])] += 1
    return {name: {"score": float(np.mean(scores[s])) if scores[s] else None, "games": len(scores[s]),
                   "not_won": [{"opening": list(line), "games": n} for line, n in lost[s].most_common(top)]}
            for s, name in enumerate(SEATS)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = ArgumentParser(prog="python -m experiments.losing_lines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", required=True, metavar="RUN_DIR", help="the run whose losses are looked for")
    parser.add_argument("--versus", required=True, metavar="RUN_DIR", help="the run it plays, of the same game")
    parser.add_argument("--games", type=int, default=400, help="games, seats alternating (default 400)")
    parser.add_argument("--plies", type=int, default=6, help="moves of an opening (default 6)")
    parser.add_argument("--top", type=int, default=3, help="openings listed per seat (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("games", "plies", "top"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    try:
        game_name, params, mine, mine_w = _mixture(args.storage, "--storage")
        other_name, other_params, theirs, theirs_w = _mixture(args.versus, "--versus")
        if (other_name, other_params) != (game_name, params):
            raise UsageError(f"--versus {args.versus}", f"a run of {other_name} {other_params}, "
                                                        f"not of {game_name} {params}")
        if not is_openspiel_game(game_name):
            raise UsageError(f"--storage {args.storage}", f"a run of {game_name}; this plays OpenSpiel games")
        game = load_two_player_zero_sum(game_name, params or None)
        kind = game.get_type()
        if (kind.information != pyspiel.GameType.Information.PERFECT_INFORMATION
                or kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC):
            raise UsageError(f"--storage {args.storage}", f"{game_name} is not a deterministic game of "
                                                          "perfect information")
    except UsageError as exc:
        return fail(exc)
    except ValueError as exc:
        return fail("experiments.losing_lines", exc)
    seats = losing_lines(game, mine, mine_w, theirs, theirs_w, args.games, args.plies, args.top, args.seed)
    print(json.dumps({"bench": "losing_lines", "storage": args.storage, "versus": args.versus, "game": game_name,
                      "games": args.games, **seats}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
