"""Environment steps per second: our VectorGame vs a plain pyspiel loop, side by side.

    python -m bench.envs [--seconds 1.0] [--games kuhn_poker,leduc_poker,connect_four]

For each game: a plain single-environment OpenSpiel loop (random legal action,
chance sampled with a uniform draw, the seat's tensor converted to a float32
array and its legal mask to a bool array, i.e. what one needs to feed a
network), then ``envs.OpenSpielGame`` at vector sizes 1, 16, 64 and 256 doing the
same work per decision (``observe`` of the movers, a random legal action per
environment, ``step``). A step is one decision of one environment. Prints a
table, then one JSON line with the figures and the ratios to the plain loop.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import pyspiel

from envs import NO_ACTION, make_game
from envs.openspiel import sample_chance, uses_information_state

SIZES = (1, 16, 64, 256)
GAMES = ("kuhn_poker", "leduc_poker", "connect_four")


def plain_loop(game_name: str, seconds: float) -> float:
    game = pyspiel.load_game(game_name)
    info = uses_information_state(game)
    rnd = random.Random(0)
    state = game.new_initial_state()
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(256):
            if state.is_terminal():
                state = game.new_initial_state()
            while state.is_chance_node():
                state.apply_action(sample_chance(state.chance_outcomes(), rnd.random()))
            p = state.current_player()
            obs = np.asarray(state.information_state_tensor(p) if info else state.observation_tensor(p),
                             dtype=np.float32)
            mask = np.asarray(state.legal_actions_mask(p), dtype=bool)
            legal = state.legal_actions(p)
            state.apply_action(legal[rnd.randrange(len(legal))])
            steps += 1
            del obs, mask
        if time.perf_counter() >= deadline:
            return steps / (time.perf_counter() - start)


def vector_loop(game_name: str, num_envs: int, seconds: float) -> float:
    game = make_game(game_name, num_envs, seed=0)
    rng = np.random.default_rng(0)
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    actions = np.empty((num_envs, 2), dtype=np.int64)
    while time.perf_counter() < deadline:
        movers = game.movers()
        actions.fill(NO_ACTION)
        for seat in (0, 1):
            envs = np.flatnonzero(movers[:, seat])
            if envs.size:
                obs, mask = game.observe(seat, envs)
                actions[envs, seat] = (rng.random(mask.shape) * mask).argmax(axis=1)
                steps += envs.size
        game.step(actions)
    return steps / (time.perf_counter() - start)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.envs", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per figure")
    parser.add_argument("--games", default=",".join(GAMES))
    args = parser.parse_args(argv)
    figures, ratios = {}, {}
    print(f"{'game':<14}{'plain':>10}" + "".join(f"{'E=' + str(n):>10}" for n in SIZES) + "   (env steps/s)")
    for name in args.games.split(","):
        row = {"plain": plain_loop(name, args.seconds)}
        for n in SIZES:
            row[f"vector_{n}"] = vector_loop(name, n, args.seconds)
        figures[name] = {k: round(v) for k, v in row.items()}
        ratios[name] = {f"vector_{n}/plain": round(row[f"vector_{n}"] / row["plain"], 3) for n in SIZES}
        print(f"{name:<14}{row['plain']:>10.0f}" + "".join(f"{row[f'vector_{n}']:>10.0f}" for n in SIZES))
    result = {"bench": "envs", "unit": "env_steps_per_s", "steps_per_s": figures, "ratios": ratios}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
