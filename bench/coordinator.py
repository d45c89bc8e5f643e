"""How far one coordinator goes: ``python -m bench.coordinator [--seconds S] [--clients 16,64,256]``.

Simulated rollout workers call ``next_matches`` and ``report_results`` at full speed against a real
``LeagueCoordinator`` actor whose pool holds 1,000 frozen agents (plus the default league's four
learners). Each round a client asks for ``--matches`` opponents and reports as many game results
(one per match, as a rollout worker does, as a ``ResultBatch``). ``inprocess`` is the same loop on a plain
``League`` with no Ray in between: the ceiling of the league's own Python.

Prints one JSON line: ``{"clients": {"16": {...}, ...}, "inprocess": {...}}``, each with
``results_per_s``, ``next_matches_p50_ms`` and ``next_matches_p99_ms``.

On a 2-core machine a Ray actor process costs ~100 MB and ~1 s of CPU to start, so at most
``--max-actors`` client processes are started; more clients than that run as concurrent loops
inside them (the coordinator sees the same number of concurrent callers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

POOL = 1000


def bench_config(storage: str):
    from league.config import load_config

    # No periodic Nash re-solve of the 1000x1000 meta-game during the measure: this measures the
    # request path. (A solve runs in a thread of the coordinator; its cost is bench.nash's subject.)
    return load_config(None, [f"run.storage={storage}", "league.nash_every_seconds=3600",
                              "league.nash_every_results=1000000000", "serve.api=false"])


def seed_pool(storage: str) -> list[str]:
    """A store holding POOL frozen agents (tiny policies) and the default league's learners."""
    from league.league import League
    from league.store import LeagueStore
    from policies.net import ActorCritic, PolicySpec
    from policies.snapshot import policy_to_bytes

    cfg = bench_config(storage)
    blob = policy_to_bytes(ActorCritic(PolicySpec(obs_size=11, num_actions=2, hidden=(8,))))
    with LeagueStore(storage) as store:
        store.set_meta("game", cfg.game.name)
        store.set_meta("game_params", cfg.game.params)
        store.set_meta("config", cfg.to_dict())
        league = League(cfg, store)
        for i in range(POOL):
            league.add_seed(f"agent-{i}", blob)
        return list(league.learners)


def result_batch(source: str, seq: int, matches, rng: np.random.Generator):
    """One report as a rollout worker sends it: the learner's games against its assigned opponents."""
    from league.messages import ResultBatch

    n = len(matches)
    # self-play games name the learner once (index 0), as a worker's batch does
    index = np.array([0 if o == matches.learner_id else k + 1 for k, o in enumerate(matches.opponents)], dtype=np.int64)
    return ResultBatch(source, seq, (matches.learner_id, *matches.opponents), np.zeros(n, dtype=np.int64),
                       index[matches.opponent], rng.integers(0, 3, n) / 2.0, env_steps=3 * n)


def summary(results: int, seconds: float, latencies_s: list[float]) -> dict:
    lat = np.asarray(latencies_s) * 1000.0
    return {"results_per_s": round(results / seconds), "next_matches_p50_ms": round(float(np.percentile(lat, 50)), 3),
            "next_matches_p99_ms": round(float(np.percentile(lat, 99)), 3), "calls": int(len(lat))}


def inprocess(storage: str, seconds: float, matches: int) -> dict:
    from league.league import League
    from league.store import LeagueStore

    cfg = bench_config(storage)
    rng = np.random.default_rng(0)
    with LeagueStore(storage) as store:
        league = League(cfg, store)
        learners = list(league.learners)
        lat, results, seq = [], 0, 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            lid = learners[seq % len(learners)]
            t0 = time.perf_counter()
            got = league.next_matches(lid, matches)
            lat.append(time.perf_counter() - t0)
            seq += 1
            league.report_results(result_batch("bench", seq, got, rng))
            results += len(got)
        return summary(results, time.perf_counter() - start, lat)


def make_client():
    import ray

    @ray.remote(num_cpus=0)
    class Client:
        """Simulated rollout workers: next_matches, then report as many results, at full speed."""

        def __init__(self, name: str, coordinator, learners: list[str], matches: int):
            self.name, self.coordinator, self.learners, self.matches = name, coordinator, learners, matches

        async def _loop(self, source: str, k: int, until: float, out: dict) -> None:
            rng = np.random.default_rng(k)
            lid = self.learners[k % len(self.learners)]
            seq = 0
            while time.time() < until:
                t0 = time.perf_counter()
                got = await self.coordinator.next_matches.remote(lid, self.matches)
                out["lat"].append(time.perf_counter() - t0)
                seq += 1
                await self.coordinator.report_results.remote(result_batch(source, seq, got, rng))
                out["results"] += len(got)

        async def run(self, tag: str, loops: int, start_at: float, seconds: float) -> dict:
            """``loops`` simulated rollout workers in this process, each one request at a time."""
            await asyncio.sleep(max(0.0, start_at - time.time()))
            out = {"lat": [], "results": 0}
            await asyncio.gather(*(self._loop(f"{self.name}:{tag}:{k}", k, start_at + seconds, out)
                                   for k in range(loops)))
            return out

        def ready(self) -> bool:
            return True

    return Client


def with_ray(storage: str, counts: list[int], seconds: float, matches: int, max_actors: int) -> dict:
    import ray

    from actors.coordinator import LeagueCoordinator
    from actors.placement import coordinator_options

    ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", num_cpus=8, log_to_driver=False,
             namespace="bench")
    try:
        cfg = bench_config(storage)
        coordinator = LeagueCoordinator.options(name="coordinator", **coordinator_options(cfg)).remote(cfg)
        learners = list(ray.get(coordinator.status.remote())["learners"])
        Client = make_client()
        clients: list = []  # started once, reused by every count (a process costs ~1 s of CPU to start)
        out = {}
        for n in counts:
            actors = min(n, max_actors)
            while len(clients) < actors:
                clients.append(Client.remote(f"c{len(clients)}", coordinator, learners, matches))
            ray.get([c.ready.remote() for c in clients[:actors]])
            start_at = time.time() + 1.0
            parts = ray.get([c.run.remote(f"n{n}", n // actors + (i < n % actors), start_at, seconds)
                             for i, c in enumerate(clients[:actors])])
            lat = [x for p in parts for x in p["lat"]]
            out[str(n)] = {**summary(sum(p["results"] for p in parts), seconds, lat), "actors": actors}
            print(f"bench.coordinator: {n} clients: {out[str(n)]}", file=sys.stderr, flush=True)
        return out
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coordinator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per client count")
    parser.add_argument("--clients", default="16,64,256")
    parser.add_argument("--matches", type=int, default=512, help="matches asked for (and results reported) per round")
    parser.add_argument("--max-actors", type=int, default=64, help="client processes at most (see above)")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    root = Path(tempfile.mkdtemp(prefix="bench-coordinator-"))
    try:
        seed_pool(str(root / "seeded"))
        shutil.copytree(root / "seeded", root / "inprocess")
        ceiling = inprocess(str(root / "inprocess"), args.seconds, args.matches)
        print(f"bench.coordinator: inprocess: {ceiling}", file=sys.stderr, flush=True)
        counts = [int(c) for c in args.clients.split(",")]
        served = with_ray(str(root / "seeded"), counts, args.seconds, args.matches, args.max_actors)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"clients": served, "inprocess": ceiling}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
