"""Where a search learner's worker spends its time: searched moves/s and the search's split, side by side.

    python -m bench.search [--seconds 10] [--config configs/tic_tac_toe.yaml ...] [--envs 256 ...]

For each config (default: tic-tac-toe, the Connect Four search config and the two Dots and Boxes
examples), one process plays the config's ``rollout.envs_per_worker`` games with its network,
untrained, every move searched as its search learner searches (``policies.expert.MoveSearch``,
``search_learner`` settings), for ``--seconds``. It prints, per config: searched moves/s (a root
proven early stops before its simulations are spent) and the split of the search's time between
the tree arrays (selection, backup, proofs in the tree: ``tree``), the forward passes
(``evaluate``), the positions' copies and steps (``expand``) and the remembered proofs' keys and
lookups (``proofs``), as shares of the whole; then one JSON line with the figures. ``--envs N``
(repeatable) measures each config at N games searched at once instead, one row each, side by side.
``--clones`` also measures each OpenSpiel game on ``pyspiel`` clones (``envs.openspiel.OpenSpielStates``,
the store every OpenSpiel game has) where it has a faster one of its own (Connect Four's bitboards),
the row marked ``clones``.
The same code runs in the rollout worker; its pace there is this one's, shared with the game's
own step and the worker's sending.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from envs import NO_ACTION, make_game
from envs.base import utility_range
from envs.openspiel import OpenSpielStates
from league.config import load_config
from league.errors import ArgumentParser
from policies.expert import MoveSearch
from policies.net import build_policy, policy_spec

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("configs/tic_tac_toe.yaml", "configs/connect_four.yaml", "examples/dots_and_boxes/config.yaml",
           "examples/dots_and_boxes/config_pettingzoo.yaml")


def measure(config: str, seconds: float, seed: int = 0, envs: int | None = None, clones: bool = False) -> dict:
    """One row: ``config``'s search over ``envs`` games (None: its ``rollout.envs_per_worker``), its
    positions in ``pyspiel`` clones where ``clones``."""
    path = ROOT / config
    sys.path.insert(0, str(path.parent))  # an example's game module sits beside its config
    try:
        cfg = load_config(path)
        E = envs or cfg.rollout.envs_per_worker
        game = make_game(cfg.game.name, E, seed=seed, **cfg.game.kwargs)
    finally:
        sys.path.remove(str(path.parent))
    torch.manual_seed(seed)
    model = build_policy(policy_spec(cfg.policy, game.obs_size, game.num_actions, game.obs_shape,
                                     game.channels_last)).eval()
    clone_store = (lambda capacity: OpenSpielStates(game.game, capacity, game.name)) if clones else None
    search = MoveSearch(game, E, cfg.search_learner, utility_range(game), np.random.default_rng(seed),
                        store_factory=clone_store)
    moves = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        movers = game.movers()
        envs = np.flatnonzero(movers.any(axis=1))
        found = search(model, game, envs)
        actions = np.full((E, 2), NO_ACTION)
        actions[envs, movers[envs].argmax(axis=1)] = found.action
        game.step(actions)
        moves += envs.size
    elapsed = time.perf_counter() - start
    profile = dict(search.profile)
    spent = sum(profile.values()) or 1.0
    return {"config": config, "game": cfg.game.name, "envs": E, "states": type(search.search.store).__name__,
            "clones": clones, "simulations": cfg.search_learner.simulations,
            "searched_moves_per_s": round(moves / elapsed, 1),
            "share": {k: round(v / spent, 3) for k, v in profile.items()},
            "search_share_of_loop": round(spent / elapsed, 3)}


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m bench.search", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--config", action="append", help="a config with search_learner settings (repeatable)")
    parser.add_argument("--envs", action="append", type=int, metavar="N",
                        help="games searched at once (repeatable; default: each config's rollout.envs_per_worker)")
    parser.add_argument("--clones", action="store_true",
                        help="also measure OpenSpiel games that have a store of their own on pyspiel clones")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.envs or ()):
        parser.error(f"--envs: must be >= 1, got {min(args.envs)}")
    torch.set_num_threads(1)
    rows = []
    for c in args.config or CONFIGS:
        for n in args.envs or [None]:
            rows.append(measure(c, args.seconds, envs=n))
            if args.clones and rows[-1]["states"] == "ConnectFourStates":  # the one OpenSpiel game with its own
                rows.append(measure(c, args.seconds, envs=n, clones=True))
    print(f"{'config':48} {'envs':>5} {'moves/s':>9} {'tree':>6} {'eval':>6} {'expand':>7} {'proofs':>7}")
    for r in rows:
        s = r["share"]
        label = r["config"] + (" clones" if r["clones"] else "")
        print(f"{label:48} {r['envs']:5d} {r['searched_moves_per_s']:9.0f} "
              f"{s.get('tree', 0):6.2f} {s.get('evaluate', 0):6.2f} {s.get('expand', 0):7.2f} {s.get('proofs', 0):7.2f}")
    print(json.dumps({"bench": "search", "seconds": args.seconds, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
