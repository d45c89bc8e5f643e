"""Team-game steps per second: envs.teams' adapter vs the PettingZoo parallel environment stepped
directly, side by side.

    python -m bench.teams [--seconds 4] [--maps 12,45] [--sizes 1,8] [--two-player kuhn_poker,...]

For each MAgent2 battle map size and vector size E: a plain loop over E
``battle_v4.parallel_env`` copies (every live agent draws a uniformly random action, ``step``
with the dict, ``reset`` when no agent is left); the same loop that also stacks each side's
observations into one array, as feeding a network needs ("batched"); and ``make_game("pettingzoo-parallel:...
battle_v4:parallel_env", E)`` doing the same work through the team view (``observe_side`` of both
sides, a uniformly random legal action per row, ``step_team``). A step is one step of one
environment (every live agent acts). Both run under ``max_cycles=100`` so episodes end and reset
in the window. The three take turns in slices of 0.2 s, a round being one slice of each; the
figures are medians over rounds, and each ratio is the median of the rounds' ratios, so that a
machine's load changing under the run falls on all alike. Prints a table, then one JSON line
with the figures and the ratios adapter / plain and adapter / batched for each row.

Then, for two-player games at E=64, the same random legal play through ``movers``/``observe``/
``step`` and through the team view as teams of one (``observe_side``/``step_team``): the ratio
says what the team path costs a two-player game.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from envs import NO_ACTION, make_game

BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"
TEAMS = {"prefix": ["red_", "blue_"]}
MAX_CYCLES = 100
SLICE = 0.2


class PlainLoop:
    def __init__(self, map_size: int, num_envs: int):
        from magent2.environments import battle_v4

        self.envs = [battle_v4.parallel_env(map_size=map_size, max_cycles=MAX_CYCLES) for _ in range(num_envs)]
        for e, env in enumerate(self.envs):
            env.reset(seed=e)
        self.rng = np.random.default_rng(0)
        self.n = self.envs[0].action_space(self.envs[0].possible_agents[0]).n

    def step(self) -> int:
        for env in self.envs:
            agents = env.agents
            env.step(dict(zip(agents, self.rng.integers(self.n, size=len(agents)).tolist())))
            if not env.agents:
                env.reset()
        return len(self.envs)


class BatchedPlainLoop(PlainLoop):
    """The plain loop plus what feeding a network needs: each side's observations of every
    environment stacked into one float32 array (the adapter's ``observe_side``)."""

    def __init__(self, map_size: int, num_envs: int):
        super().__init__(map_size, num_envs)
        self.obs = [env.reset(seed=e)[0] for e, env in enumerate(self.envs)]

    def step(self) -> int:
        for prefix in TEAMS["prefix"]:
            rows = [o[a] for env, o in zip(self.envs, self.obs) for a in env.agents if a.startswith(prefix)]
            np.stack(rows).reshape(len(rows), -1).astype(np.float32, copy=False)
        for e, env in enumerate(self.envs):
            agents = env.agents
            self.obs[e] = env.step(dict(zip(agents, self.rng.integers(self.n, size=len(agents)).tolist())))[0]
            if not env.agents:
                self.obs[e] = env.reset()[0]
        return len(self.envs)


class AdapterLoop:
    def __init__(self, map_size: int, num_envs: int):
        self.game = make_game(BATTLE, num_envs, seed=0, teams=TEAMS, map_size=map_size, max_cycles=MAX_CYCLES)
        self.rng = np.random.default_rng(0)
        self.actions = np.empty((num_envs, 2, self.game.team_size), dtype=np.int64)

    def step(self) -> int:
        self.actions.fill(NO_ACTION)
        for side in (0, 1):
            batch = self.game.observe_side(side)
            self.actions[batch.env, side, batch.agent] = (self.rng.random(batch.mask.shape) * batch.mask).argmax(axis=1)
        self.game.step_team(self.actions)
        return self.game.num_envs


class TwoPlayerLoop:
    """A two-player game stepped through ``movers``/``observe``/``step`` (``team=False``) or through
    the team view, as a team of one (``team=True``)."""

    def __init__(self, name: str, num_envs: int, team: bool):
        self.game, self.team = make_game(name, num_envs, seed=0), team
        self.rng = np.random.default_rng(0)

    def step(self) -> int:
        game, rng = self.game, self.rng
        if self.team:
            actions = np.full((game.num_envs, 2, 1), NO_ACTION, dtype=np.int64)
            for side in (0, 1):
                b = game.observe_side(side)
                actions[b.env, side, b.agent] = (rng.random(b.mask.shape) * b.mask).argmax(axis=1)
            game.step_team(actions)
        else:
            actions = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
            movers = game.movers()
            for seat in (0, 1):
                envs = np.flatnonzero(movers[:, seat])
                _, mask = game.observe(seat, envs)
                actions[envs, seat] = (rng.random(mask.shape) * mask).argmax(axis=1)
            game.step(actions)
        return game.num_envs


def measure(loops, seconds: float) -> list[list[float]]:
    """Steps per second of each loop in each round: the loops run one slice each per round, in
    turn, until each has run ``seconds``."""
    rates, spent = [], 0.0
    while spent < seconds:
        row = []
        for loop in loops:
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < SLICE:
                steps += loop.step()
            row.append(steps / (time.perf_counter() - start))
        rates.append(row)
        spent += SLICE
    return rates


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.teams", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measuring time per loop and row")
    parser.add_argument("--maps", default="12,45", help="battle map sizes (12: 2 agents a side, 45: 81)")
    parser.add_argument("--sizes", default="1,8", help="vector sizes E")
    parser.add_argument("--two-player", default="kuhn_poker,connect_four,pettingzoo:texas_holdem_v4",
                        help="two-player games stepped both ways at E=64")
    args = parser.parse_args(argv)
    figures, ratios = {}, {}
    print(f"{'map':<6}{'E':>4}{'plain':>10}{'batched':>10}{'adapter':>10}{'/plain':>8}{'/batched':>9}"
          "   (env steps/s)")
    for map_size in (int(m) for m in args.maps.split(",")):
        for n in (int(s) for s in args.sizes.split(",")):
            rates = np.array(measure([PlainLoop(map_size, n), BatchedPlainLoop(map_size, n),
                                      AdapterLoop(map_size, n)], args.seconds))
            plain, batched, ours = np.median(rates, axis=0)
            # the median of each round's ratio: a round's slices share the machine's load of the moment
            by_plain, by_batched = np.median(rates[:, 2] / rates[:, 0]), np.median(rates[:, 2] / rates[:, 1])
            key = f"map{map_size}_E{n}"
            figures[key] = {"plain": round(plain, 1), "batched": round(batched, 1), "adapter": round(ours, 1)}
            ratios[key] = {"adapter/plain": round(by_plain, 3), "adapter/batched": round(by_batched, 3)}
            print(f"{map_size:<6}{n:>4}{plain:>10.0f}{batched:>10.0f}{ours:>10.0f}{by_plain:>8.3f}"
                  f"{by_batched:>9.3f}")
    print(f"{'two-player game':<28}{'E':>4}{'step':>10}{'team':>10}{'ratio':>8}   (env steps/s)")
    for name in args.two_player.split(","):
        rates = np.array(measure([TwoPlayerLoop(name, 64, False), TwoPlayerLoop(name, 64, True)], args.seconds))
        plain, team = np.median(rates, axis=0)
        ratio = np.median(rates[:, 1] / rates[:, 0])
        figures[name] = {"step": round(plain, 1), "step_team": round(team, 1)}
        ratios[name] = {"step_team/step": round(ratio, 3)}
        print(f"{name:<28}{64:>4}{plain:>10.0f}{team:>10.0f}{ratio:>8.3f}")
    result = {"bench": "teams", "unit": "env_steps_per_s", "steps_per_s": figures, "ratios": ratios}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
