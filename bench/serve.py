"""Served vs in-process opponent inference, measured side by side in one run.

    python -m bench.serve [--seconds 20]

1. Rollout env steps/s of a league whose one learner plays only frozen
   opponents (a pool of 8 seeded snapshots), with opponents served by the
   Serve deployment, with opponents in the worker's process, and with the
   opponents and the learner's own moves served (``rollout.policy_inference: serve``).
2. Opponent inference observations/s at several batch sizes: one Serve call
   per vector (32 calls in flight) vs the same policy in-process.
3. ``POST /nash/act`` latency p50/p99, one client and 8 concurrent clients, while the league
   trains ("loaded") and with its games paused ("quiet"), with the API process's own share of each
   request and the coordinator's round trip (``--latency-only`` runs just this part).

Ends with one JSON line; ``rollout_ratio_served_to_inprocess`` is the headline, and
``rollout_ratio_policy_served_to_inprocess`` the same with the learner's moves served too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from actors.launch import load
from envs import game_info
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_from_bytes, policy_to_bytes
from serve.batching import run_grouped
from serve.environment import set_serve_environment

# set before the functions below import Ray and Serve (``actors.league_run`` too), which read them then
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
set_serve_environment()
os.environ.setdefault("RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP", "1")  # this driver calls handles synchronously


# a rollout run's name: (rollout.opponent_inference, rollout.policy_inference, what it is called)
MODES = {"inprocess": ("inprocess", "inprocess", "in-process opponents"),
         "serve": ("serve", "inprocess", "served opponents"),
         "serve_policy": ("serve", "serve", "served opponents and learner moves")}


def seeded_pool(folder: Path, n: int, obs_size: int, num_actions: int) -> list[str]:
    import torch

    paths = []
    for i in range(n):
        torch.manual_seed(i)
        path = folder / f"seed{i}.pt"
        path.write_bytes(policy_to_bytes(ActorCritic(PolicySpec(obs_size, num_actions, hidden=(64, 64)))))
        paths.append(str(path))
    return paths


def rollout_rate(mode: str, seconds: float, storage: Path, seeds: list[str], game: str, envs: int, port: int,
                 overrides: list[str]) -> float:
    import ray

    from actors.league_run import LeagueRun  # imports Ray and Serve: after the settings above

    cfg, info = load(["--config", "configs/smoke.yaml", f"game.name={game}", f"run.storage={storage}",
                      "roles.main_exploiter.count=0", "roles.league_exploiter.count=0",
                      "roles.main_agent.sampling=pfsp", "evaluator.count=0", "policy.hidden=[64,64]",
                      f"rollout.envs_per_worker={envs}", f"rollout.opponent_inference={MODES[mode][0]}",
                      f"rollout.policy_inference={MODES[mode][1]}",
                      "roles.main_agent.snapshot_every_steps=100000000", f"serve.port={port}",
                      f"league.seed_snapshots={json.dumps(seeds)}", *overrides])
    league = LeagueRun(cfg, info)
    try:
        league.supervise()
        worker = next(iter(league.workers.values()))
        time.sleep(5)  # warm up: weights fetched, snapshots loaded
        s0, t0 = ray.get(worker.get_stats.remote())["env_steps"], time.time()
        time.sleep(seconds)
        s1, t1 = ray.get(worker.get_stats.remote())["env_steps"], time.time()
        return (s1 - s0) / (t1 - t0)
    finally:
        league.stop()
        league.kill()


def inference_rates(obs_size: int, num_actions: int, seed_path: str, batch_sizes, calls: int = 200) -> dict:
    """obs/s for one frozen policy: Serve deployment vs in-process, same policy."""
    from ray import serve

    model = policy_from_bytes(Path(seed_path).read_bytes())

    @serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.2})
    class Bench:
        def __init__(self, blob):
            import torch

            torch.set_num_threads(1)
            self.model = policy_from_bytes(blob)
            self.rng = np.random.default_rng(0)

        @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
        async def act(self, reqs):
            return run_grouped(reqs, lambda ids, obs, masks: [self.model.act(o, m, generator=self.rng)[0]
                                                              for o, m in zip(obs, masks)])

        async def __call__(self, obs, mask):
            return await self.act((["x"], np.zeros(len(obs), dtype=np.int64), obs, mask))

    handle = serve.run(Bench.bind(Path(seed_path).read_bytes()), name="bench_inference", route_prefix=None)
    rng = np.random.default_rng(0)
    out = {}
    for n in batch_sizes:
        obs = rng.standard_normal((n, obs_size)).astype(np.float32)
        mask = np.ones((n, num_actions), dtype=bool)
        k = max(8, calls // max(1, n // 16))
        handle.remote(obs, mask).result()
        start = time.perf_counter()
        pending = []
        for _ in range(k):
            pending.append(handle.remote(obs, mask))
            if len(pending) >= 32:
                pending.pop(0).result()
        for p in pending:
            p.result()
        served = k * n / (time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(k):
            model.act(obs, mask, generator=rng)
        local = k * n / (time.perf_counter() - start)
        out[str(n)] = {"served_obs_per_s": served, "inprocess_obs_per_s": local, "ratio": served / local}
    serve.delete("bench_inference")
    return out


def latency_run(url: str, obs_size: int, clients: int, per_client: int, rows: int = 1) -> dict:
    """``POST /nash/act`` latency with ``clients`` concurrent clients, each sending ``per_client``
    requests of ``rows`` observations one after another; plus the API process's own share of each
    request (its ``Server-Timing`` header), so HTTP server + transport + client = total - app."""
    import requests

    body = {"observations": np.zeros((rows, obs_size)).tolist()}
    latencies: list[float] = []
    parts: dict[str, list[float]] = {}
    lock = threading.Lock()

    def client(i):
        s = requests.Session()
        s.post(f"{url}/nash/act", json=body, timeout=30).raise_for_status()  # connection and model warm
        for j in range(per_client):
            t = time.perf_counter()
            r = s.post(f"{url}/nash/act", json={**body, "seed": i * 1000 + j}, timeout=30)
            elapsed = time.perf_counter() - t
            r.raise_for_status()
            timing = {k: float(v) for k, v in (p.strip().replace("dur=", "").split(";")
                                               for p in r.headers.get("Server-Timing", "").split(",") if ";" in p)}
            with lock:
                latencies.append(elapsed)
                for k, v in timing.items():
                    parts.setdefault(k, []).append(v)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q = statistics.quantiles(latencies, n=100)
    out = {"clients": clients, "rows": rows, "requests": len(latencies), "p50_ms": q[49] * 1000,
           "p99_ms": q[98] * 1000}
    out.update({f"server_{k}_p50_ms": statistics.median(v) for k, v in parts.items()})
    if "app" in parts:
        out["outside_app_p50_ms"] = out["p50_ms"] - out["server_app_p50_ms"]
    return out


def coordinator_round_trip_ms(coordinator, n: int = 50) -> float:
    """Median round trip of the coordinator's ``nash()`` call, the one /nash/act made on every request."""
    import ray

    times = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(coordinator.nash.remote())
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def api_latency(port: int, storage: Path, seeds: list[str], game: str, clients: int = 8, per_client: int = 50) -> dict:
    """Latency of ``POST /nash/act`` while the league trains (loaded), then with its games paused (quiet)."""
    import ray
    import requests

    from actors.league_run import LeagueRun  # imports Ray and Serve: after the settings above

    obs_size = game_info(game).obs_size
    cfg, info = load(["--config", "configs/smoke.yaml", f"game.name={game}", f"run.storage={storage}",
                      "roles.main_exploiter.count=0", "roles.league_exploiter.count=0", "evaluator.count=1",
                      "run.max_minutes=30", f"serve.port={port}", f"league.seed_snapshots={json.dumps(seeds)}"])
    league = LeagueRun(cfg, info)
    try:
        league.supervise()
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline and not requests.get(f"{url}/nash", timeout=10).json()["agents"]:
            time.sleep(1)
        time.sleep(5)  # the learner and workers up to speed
        out = {}
        for phase in ("loaded", "quiet"):
            if phase == "quiet":  # stop the games; the coordinator and Serve stay up
                for actor in [*league.workers.values(), *league.evaluators.values()]:
                    actor.stop.remote()
                ray.get(list(league.runs.values()), timeout=120)
                time.sleep(3)
            out[phase] = {
                "one_client": latency_run(url, obs_size, 1, 200),
                f"{clients}_clients": latency_run(url, obs_size, clients, per_client),
                f"{clients}_clients_16_rows": latency_run(url, obs_size, clients, per_client // 2, rows=16),
                "coordinator_nash_round_trip_ms": coordinator_round_trip_ms(league.coordinator),
            }
            for name, r in out[phase].items():
                if isinstance(r, dict):
                    print(f"/nash/act {phase:6s} {name:18s}: p50 {r['p50_ms']:6.1f} ms, p99 {r['p99_ms']:6.1f} ms "
                          f"(server p50 {r.get('server_app_p50_ms', float('nan')):.2f} ms)", flush=True)
            print(f"coordinator nash() round trip ({phase}): {out[phase]['coordinator_nash_round_trip_ms']:.1f} ms",
                  flush=True)
        return out
    finally:
        league.stop()
        league.kill()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--game", default="kuhn_poker")
    parser.add_argument("--envs", type=int, default=2048, help="environments per rollout worker")
    parser.add_argument("--repeats", type=int, default=3, help="rollout runs per mode (the median is reported)")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--rollout-only", action="store_true", help="measure only the rollout ratio")
    parser.add_argument("--latency-only", action="store_true", help="measure only the /nash/act latency")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for both rollout runs (e.g. rollout.lanes=3)")
    args = parser.parse_args(argv)
    import ray

    info = game_info(args.game)
    ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=16, include_dashboard=False, log_to_driver=False, namespace="bench-serve")
    try:
        with tempfile.TemporaryDirectory(prefix="bench_serve_") as tmp:
            tmp = Path(tmp)
            seeds = seeded_pool(tmp, 8, info.obs_size, info.num_actions)
            runs: dict[str, list[float]] = {mode: [] for mode in MODES}
            if args.latency_only:
                latency = api_latency(args.port, tmp / "api", seeds, args.game)
                return report(args, {}, {}, latency)
            for r in range(args.repeats):  # alternate, so slow drifts of the machine hit both modes alike
                for mode in runs:
                    runs[mode].append(rollout_rate(mode, args.seconds, tmp / f"{mode}{r}", seeds, args.game, args.envs,
                                                   args.port, args.set))
                    print(f"rollout with {MODES[mode][2]}: {runs[mode][-1]:,.0f} env steps/s", flush=True)
            rates = {mode: statistics.median(v) for mode, v in runs.items()}
            inference, latency = {}, {}
            if args.rollout_only:
                return report(args, rates, inference, latency)
            inference = inference_rates(info.obs_size, info.num_actions, seeds[0], [1, 16, 64, 256, 1024])
            for n, r in inference.items():
                print(f"inference batch {n:>5}: served {r['served_obs_per_s']:>10,.0f} obs/s, "
                      f"in-process {r['inprocess_obs_per_s']:>12,.0f} obs/s", flush=True)
            latency = api_latency(args.port, tmp / "api", seeds, args.game)
    finally:
        ray.shutdown()
    return report(args, rates, inference, latency)


def report(args, rates: dict, inference: dict, latency: dict) -> int:
    print(json.dumps({"bench": "serve", "game": args.game, "envs_per_worker": args.envs, "overrides": args.set,
                      "repeats": args.repeats, "rollout_env_steps_per_s": rates, "inference": inference,
                      "nash_act_latency": latency,
                      "rollout_ratio_served_to_inprocess": rates["serve"] / rates["inprocess"] if rates else None,
                      "rollout_ratio_policy_served_to_inprocess": (rates["serve_policy"] / rates["inprocess"]
                                                                   if rates else None)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
