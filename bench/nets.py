"""Forward cost of the league's networks on Connect Four, side by side, on one CPU thread.

    python -m bench.nets [--seconds 1.0] [--game connect_four]

For batch sizes 1, 64 and 1024 of real positions (random play), times ``probs(obs, mask)``
(what Serve replicas and rollout workers call) and one PPO step's forward + backward
(``evaluate_actions`` and the gradient of its sum) for: the MLP of configs/connect_four.yaml
(``hidden: [256, 256]``), the default MLP (``[128, 128]``), ``net: conv`` at its defaults
(32 channels, 2 residual blocks) and a smaller conv (16 channels, 1 block). Prints a table of
microseconds per row and each net's cost as a ratio to the [256, 256] MLP measured in the same
run, then one JSON line with every figure.

    python -m bench.nets --stacked [--seconds 1.0]

Many frozen policies at once (what a Serve replica and in-process opponents do per batch): for
MLPs of three widths and G policies of n rows each, the stacked pass (layers stacked, one batched
matrix product per layer) against one lean pass per policy, and which of the two
``policies.net.stacked_probs`` picks (``STACK_MAX_WEIGHTS``). One JSON line per width.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from envs import game_info, make_game
from policies.net import STACK_MAX_WEIGHTS, PolicySpec, _one_pass_each, _stacked_buckets, build_policy, mlp_weights

SIZES = (1, 64, 1024)
STACK_WIDTHS = ((64, 64), (128, 128), (256, 256))
STACK_SHAPES = ((8, 128), (20, 50), (100, 10), (100, 3))  # (policies, rows each)
NETS = {
    "mlp [256, 256]": {"net": "mlp", "hidden": (256, 256)},
    "mlp [128, 128]": {"net": "mlp", "hidden": (128, 128)},
    "conv 32x2": {"net": "conv", "channels": 32, "blocks": 2},
    "conv 16x1": {"net": "conv", "channels": 16, "blocks": 1},
}


def positions(game_name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    game = make_game(game_name, 256, seed=0)
    rng = np.random.default_rng(0)
    obs, masks = [], []
    while sum(len(o) for o in obs) < n:
        movers = game.movers()
        actions = np.full((game.num_envs, 2), -1, dtype=np.int64)
        for seat in (0, 1):
            envs = np.flatnonzero(movers[:, seat])
            o, m = game.observe(seat, envs)
            obs.append(o)
            masks.append(m)
            for row, e in enumerate(envs):
                actions[e, seat] = rng.choice(np.flatnonzero(m[row]))
        game.step(actions)
    return np.concatenate(obs)[:n], np.concatenate(masks)[:n]


def per_row_us(fn, rows: int, seconds: float) -> float:
    fn()  # warm up
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / (calls * rows) * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nets", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--game", default="connect_four")
    parser.add_argument("--stacked", action="store_true", help="many policies at once: stacked pass or one each")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    info = game_info(args.game)
    obs, mask = positions(args.game, max(SIZES))
    if args.stacked:
        return stacked_vs_one_each(args, info, obs, mask)
    models = {}
    for name, kw in NETS.items():
        torch.manual_seed(0)
        models[name] = build_policy(PolicySpec(info.obs_size, info.num_actions, obs_shape=info.obs_shape,
                                               channels_last=info.channels_last, **kw))
    figures: dict[str, dict[str, float]] = {}
    for name, model in models.items():
        figures[name] = {"params": sum(p.numel() for p in model.parameters())}
        for n in SIZES:
            o, k = obs[:n], mask[:n]
            figures[name][f"probs_{n}"] = per_row_us(lambda: model.probs(o, k), n, args.seconds)
        to, tk = torch.as_tensor(obs), torch.as_tensor(mask)
        acts = torch.as_tensor(np.where(mask, 1.0, 0.0).argmax(axis=1))

        def train_step():
            model.zero_grad()
            logp, entropy, value = model.evaluate_actions(to, tk, acts)
            (logp.sum() + entropy.sum() + value.sum()).backward()

        figures[name][f"train_{max(SIZES)}"] = per_row_us(train_step, max(SIZES), args.seconds)
    base = figures["mlp [256, 256]"]
    cols = [f"probs_{n}" for n in SIZES] + [f"train_{max(SIZES)}"]
    print(f"{args.game}, one thread, microseconds per row (ratio to mlp [256, 256])")
    print(f"{'net':16s} {'params':>8s} " + " ".join(f"{c:>18s}" for c in cols))
    for name, f in figures.items():
        cells = " ".join(f"{f[c]:9.2f} ({f[c] / base[c]:5.2f}x)" for c in cols)
        print(f"{name:16s} {int(f['params']):8d} {cells}")
    print(json.dumps({"game": args.game, "figures": figures,
                      "ratios": {name: {c: f[c] / base[c] for c in cols} for name, f in figures.items()}}))
    return 0


def stacked_vs_one_each(args, info, obs: np.ndarray, mask: np.ndarray) -> int:
    print(f"{args.game}, one thread, ms per call; ratio: one pass each over stacked (below 1: one each is faster)")
    for hidden in STACK_WIDTHS:
        spec = PolicySpec(info.obs_size, info.num_actions, hidden=hidden)
        torch.manual_seed(0)
        models = [build_policy(spec) for _ in range(max(g for g, _ in STACK_SHAPES))]
        picks = "one pass each" if mlp_weights(spec) > STACK_MAX_WEIGHTS else "stacked"
        rows = {}
        for g, n in STACK_SHAPES:
            o = [obs[i * n:(i + 1) * n] for i in range(g)]
            k = [mask[i * n:(i + 1) * n] for i in range(g)]
            ms = models[:g]
            stacked = per_row_us(lambda: _stacked_buckets(ms, o, k), 1, args.seconds) / 1e3
            each = per_row_us(lambda: _one_pass_each(ms, o, k), 1, args.seconds) / 1e3
            rows[f"{g}x{n}"] = {"stacked_ms": round(stacked, 3), "one_each_ms": round(each, 3),
                                "ratio": round(each / stacked, 3)}
            print(f"  mlp {list(hidden)} ({mlp_weights(spec)} weights), {g} policies x {n} rows: stacked "
                  f"{stacked:.2f} ms, one each {each:.2f} ms, ratio {each / stacked:.2f}")
        print(json.dumps({"game": args.game, "hidden": list(hidden), "weights": mlp_weights(spec),
                          "stacked_probs_picks": picks, "shapes": rows}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
