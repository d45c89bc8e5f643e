"""How far one coordinator goes: ``python -m bench.coordinator [--seconds S] [--clients 16,64,256]``.

Simulated rollout workers run the rollout worker's own path at full speed against a real
``LeagueCoordinator`` actor whose pool holds 1,000 frozen agents (plus the default league's four
learners): each round a client draws ``--matches`` matches from the coordinator's match plan for
its learner (``league.matchmaking.MatchSampler``; as a worker, it keeps one long-poll request
for a newer plan out and takes a newer plan between reports, not between draws), makes up their
outcomes, and every ``--batch-games`` games (default ``rollout.results_batch_size``) reports them
as one per-pair ``ResultBatch`` and waits for the acknowledgement. ``inprocess`` is the same loop
on a plain ``League`` with no Ray in between: the ceiling of the league's own Python.

Prints one JSON line: ``{"clients": {"16": {...}, ...}, "inprocess": {...}, "settings": {...}}``,
each entry with ``results_per_s``, ``next_matches_p50_ms`` and ``next_matches_p99_ms`` (the time
a worker waits for a round's matches), the latency of ``report_results`` and of a first (not
waiting) ``match_plan``. Where the time goes, on Linux (schedstat): ``next_matches_p99_off_runqueue_ms``
is the same wait less the time the client's thread was runnable but not on a CPU (the OS
scheduler's share); ``coordinator_ping_p50_ms``/``_p99_ms`` the round trip of the coordinator's
cheapest call from the driver every 20 ms; ``coordinator_cores`` and ``client_cores`` the CPU the
coordinator's and the clients' processes used, ``machine_cores`` what the whole machine used (of
``machine_cpus``), ``coordinator_runqueue_wait`` the seconds a second the coordinator's threads
waited for a CPU. CPU is read on the coordinator's node: ``client_cores`` counts the
``actors_on_coordinator_node`` of the ``actors`` client processes (all of them on one machine).
``--address auto`` runs on a running cluster instead, client processes spread over its nodes.

``--set KEY=VALUE`` adds config overrides (e.g. ``--set league.match_plan_seconds=5``).

A Ray actor process costs memory and a start-up's CPU time, so at most
``--max-actors`` client processes are started; more clients than that run as concurrent loops
inside them (256 clients: 64 processes x 4 loops; the coordinator sees as many concurrent callers).
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
import ray

from actors.coordinator import LeagueCoordinator
from actors.placement import coordinator_options
from league.config import ConfigError, load_config
from league.league import League
from league.matchmaking import MatchSampler
from league.messages import ResultColumns
from league.seeds import generator
from league.store import LeagueStore
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_to_bytes

POOL = 1000
OVERRIDES: list[str] = []  # --set key=value: config overrides on top of the bench's own


def bench_config(storage: str):
    # No periodic Nash re-solve of the 1000x1000 meta-game during the measure: this measures the
    # request path. (A solve runs in a thread of the coordinator; its cost is bench.nash's subject.)
    return load_config(None, [f"run.storage={storage}", "league.nash_every_seconds=3600",
                              "league.nash_every_results=1000000000", "serve.api=false", *OVERRIDES])


def seed_pool(storage: str) -> list[str]:
    """A store holding POOL frozen agents (tiny policies) and the default league's learners."""
    cfg = bench_config(storage)
    blob = policy_to_bytes(ActorCritic(PolicySpec(obs_size=11, num_actions=2, hidden=(8,))))
    with LeagueStore(storage) as store:
        return list(seeded_league(store, cfg, POOL, blob).learners)


def seeded_league(store: LeagueStore, cfg, pool: int, blob: bytes) -> League:
    """A league of ``cfg`` in the new ``store`` whose pool holds ``pool`` copies of the snapshot ``blob``."""
    store.set_meta("game", cfg.game.name)
    store.set_meta("game_params", cfg.game.kwargs)
    store.set_meta("config", cfg.to_dict())
    league = League(cfg, store)
    for i in range(pool):
        league.add_seed(f"agent-{i}", blob)
    return league


def simulated_games(got, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Outcomes of the assigned matches (random wins, draws, losses): opponent codes and scores."""
    return got.opponent, rng.integers(0, 3, len(got)) / 2.0


class Report:
    """A simulated worker's games since its last report, kept and sent as a rollout worker keeps and
    sends them (``league.messages.ResultColumns``): one per-pair ``ResultBatch`` per ``batch_games``
    games, opponents coded by the worker's own name table."""

    def __init__(self):
        self.columns = ResultColumns()
        self.names: dict[str, int] = {}

    @property
    def n(self) -> int:
        return len(self.columns)

    def add(self, got, rng: np.random.Generator) -> None:
        local, scores = simulated_games(got, rng)
        names = self.names
        if not names.keys() >= set(got.opponents):
            for o in got.opponents:
                names.setdefault(o, len(names))
        table = np.fromiter(map(names.__getitem__, got.opponents), dtype=np.int64, count=len(got.opponents))
        self.columns.add(table[local], scores)

    def take(self, source: str, seq: int, learner_id: str):
        return self.columns.take(source, seq, learner_id, list(self.names), 3 * self.n, {})


class RunQueue:
    """Nanoseconds the calling thread has waited for a CPU while runnable (Linux schedstat), so a
    latency can be split into the OS scheduler's share and the rest; 0 where not available."""

    def __init__(self):
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def waited_ns(self) -> int:
        return 0 if self.fd is None else int(os.pread(self.fd, 64, 0).split()[1])


def process_clock(pids: list[int]) -> tuple[int, int]:
    """Nanoseconds on a CPU and waiting for one while runnable, summed over every thread of
    ``pids`` (Linux schedstat; zeros where not available)."""
    cpu = wait = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    fields = f.read().split()
                cpu, wait = cpu + int(fields[0]), wait + int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    return cpu, wait


def machine_busy_ns() -> int:
    """Nanoseconds every CPU of the machine has been busy (Linux /proc/stat: all but idle and
    iowait), so the bench can say how full the machine was; 0 where not available."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0
    ticks = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def summary(results: int, seconds: float, latencies_s: list[float], report_s: list[float],
            plan_s: list[float], queued_s: list[float] | None = None) -> dict:
    ms = lambda xs, q: round(float(np.percentile(np.asarray(xs) * 1000.0, q)), 3) if len(xs) else None
    out = {"results_per_s": round(results / seconds), "next_matches_p50_ms": ms(latencies_s, 50),
           "next_matches_p99_ms": ms(latencies_s, 99), "calls": int(len(latencies_s)),
           "report_results_p50_ms": ms(report_s, 50), "report_results_p99_ms": ms(report_s, 99),
           "reports": len(report_s), "match_plan_p99_ms": ms(plan_s, 99)}
    if queued_s:  # the same wait less the time the client's thread was runnable but not on a CPU
        out["next_matches_p99_off_runqueue_ms"] = ms(np.asarray(latencies_s) - np.asarray(queued_s), 99)
    return out


def inprocess(storage: str, seconds: float, matches: int, batch_games: int) -> dict:
    """The product's path with no Ray: draw from the league's plan, report per-pair batches."""
    cfg = bench_config(storage)
    rng = np.random.default_rng(0)
    with LeagueStore(storage) as store:
        league = League(cfg, store)
        learners = list(league.learners)
        samplers = {l: MatchSampler(l, np.random.default_rng(i), cfg.league.match_plan_seconds)
                    for i, l in enumerate(learners)}
        reports = {l: Report() for l in learners}
        lat, rep, plans, results, seq, rounds = [], [], [], 0, 0, 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            lid = learners[rounds % len(learners)]
            rounds += 1
            sampler, report = samplers[lid], reports[lid]
            if sampler.due(time.time()):
                t0 = time.perf_counter()
                sampler.asked(time.time())
                sampler.update(league.match_plan(lid, sampler.version))
                plans.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = sampler.draw(matches)
            lat.append(time.perf_counter() - t0)
            report.add(got, rng)
            if report.n >= batch_games:
                seq += 1
                n = report.n
                t0 = time.perf_counter()
                league.report_results(report.take("bench", seq, lid))
                rep.append(time.perf_counter() - t0)
                results += n
        return summary(results, time.perf_counter() - start, lat, rep, plans)


def make_client():
    @ray.remote(num_cpus=0)
    class Client:
        """Simulated rollout workers on the product's path: matches drawn from the coordinator's
        plan (``MatchSampler``; one long-poll request for a newer plan always out, as a worker), games
        reported as per-pair batches, one report in flight, no think time."""

        def __init__(self, name: str, coordinator, learners: list[str], matches: int, batch_games: int,
                     refresh_seconds: float):
            self.name, self.coordinator, self.learners, self.matches = name, coordinator, learners, matches
            self.batch_games, self.refresh_seconds = batch_games, refresh_seconds

        async def _follow(self, sampler, until: float, out: dict) -> None:
            """As a worker does: one long-poll request for a newer plan always out."""
            while time.time() < until:
                plan = await self.coordinator.match_plan.remote(sampler.learner_id, sampler.version,
                                                                self.refresh_seconds)
                out["plans"] += plan is not None
                sampler.update(plan)

        async def _loop(self, source: str, k: int, until: float, out: dict, share: bool) -> None:
            rng = generator(0, "bench", source)
            lid = self.learners[k % len(self.learners)]
            sampler = MatchSampler(lid, generator(0, "bench", source, "matches"), self.refresh_seconds)
            report, seq, runq = Report(), 0, RunQueue()
            t0 = time.perf_counter()
            sampler.update(await self.coordinator.match_plan.remote(lid, None))  # the first: nothing to draw before
            out["first_plan"].append(time.perf_counter() - t0)
            follow = asyncio.ensure_future(self._follow(sampler, until, out))
            while time.time() < until:
                q0, t0 = runq.waited_ns(), time.perf_counter()
                got = sampler.draw(self.matches)
                out["lat"].append(time.perf_counter() - t0)
                out["queued"].append((runq.waited_ns() - q0) / 1e9)
                report.add(got, rng)
                if report.n >= self.batch_games:
                    seq += 1
                    n = report.n
                    t0 = time.perf_counter()
                    await self.coordinator.report_results.remote(report.take(source, seq, lid))
                    out["report"].append(time.perf_counter() - t0)
                    out["results"] += n
                elif share:
                    await asyncio.sleep(0)  # the other loops of this process get their turn
            await follow

        async def run(self, tag: str, loops: int, start_at: float, seconds: float) -> dict:
            """``loops`` simulated rollout workers in this process."""
            await asyncio.sleep(max(0.0, start_at - time.time()))
            out = {"lat": [], "queued": [], "report": [], "first_plan": [], "plans": 0, "results": 0}
            # one loop alone yields to the plan's long poll only while it waits for a report's ack,
            # as a worker checks for a newer plan between env steps, not between draws
            await asyncio.gather(*(self._loop(f"{self.name}:{tag}:{k}", k, start_at + seconds, out, loops > 1)
                                   for k in range(loops)))
            return out

        def ready(self) -> tuple[int, str]:
            return os.getpid(), ray.get_runtime_context().get_node_id()

    return Client


def ping_coordinator(coordinator, start_at: float, seconds: float, every: float = 0.02) -> list[float]:
    """Round trips of the coordinator's cheapest call (``ping``) from the driver every ``every`` s
    during the measure: how long any request waits for the coordinator's event loop under load."""
    time.sleep(max(0.0, start_at - time.time()))
    out = []
    while time.time() < start_at + seconds:
        t0 = time.perf_counter()
        ray.get(coordinator.ping.remote())
        out.append(time.perf_counter() - t0)
        time.sleep(every)
    return out


def with_ray(storage: str, counts: list[int], seconds: float, matches: int, batch_games: int, max_actors: int,
             address: str | None = None) -> dict:
    if address:  # a running cluster: the coordinator on this (the storage's) node, clients spread
        ray.init(address=address, log_to_driver=False, namespace="bench")
    else:
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", num_cpus=8,
                 log_to_driver=False, namespace="bench")
    here = ray.get_runtime_context().get_node_id()
    try:
        cfg = bench_config(storage)
        coordinator = LeagueCoordinator.options(name="coordinator", **coordinator_options(cfg)).remote(cfg)
        learners = list(ray.get(coordinator.status.remote())["learners"])
        Client = make_client()
        coordinator_pid = ray.get(coordinator.__ray_call__.remote(lambda self: os.getpid()))
        clients: list = []  # started once, reused by every count (a process is costly to start)
        out = {}
        for n in counts:
            actors = min(n, max_actors)
            while len(clients) < actors:
                clients.append(Client.options(scheduling_strategy="SPREAD").remote(
                    f"c{len(clients)}", coordinator, learners, matches, batch_games, cfg.league.match_plan_seconds))
            placed = ray.get([c.ready.remote() for c in clients[:actors]])
            client_pids = [pid for pid, node in placed if node == here]  # CPU is read on this node only
            start_at = time.time() + 1.0
            print(f"bench.coordinator: {n} clients: measuring for {seconds} s", file=sys.stderr, flush=True)
            runs = [c.run.remote(f"n{n}", n // actors + (i < n % actors), start_at, seconds)
                    for i, c in enumerate(clients[:actors])]
            time.sleep(max(0.0, start_at - time.time()))
            def usage():  # the coordinator's CPU and run-queue wait, the clients' CPU, the machine's (ns); the time (s)
                return (*process_clock([coordinator_pid]), process_clock(client_pids)[0], machine_busy_ns(),
                        time.perf_counter())

            before = usage()
            pings = ping_coordinator(coordinator, start_at, seconds)
            c_cpu, c_wait, w_cpu, busy, wall = (x - y for x, y in zip(usage(), before))
            parts = ray.get(runs)
            cat = lambda key: [x for p in parts for x in p[key]]
            out[str(n)] = {**summary(sum(p["results"] for p in parts), seconds, cat("lat"), cat("report"),
                                     cat("first_plan"), cat("queued")),
                           "coordinator_ping_p50_ms": round(float(np.percentile(pings, 50)) * 1000.0, 3),
                           "coordinator_ping_p99_ms": round(float(np.percentile(pings, 99)) * 1000.0, 3),
                           # CPU cores the coordinator and the client processes used, and the seconds a
                           # second the coordinator's threads were runnable but waited for a CPU
                           "coordinator_cores": round(c_cpu / 1e9 / wall, 3),
                           "coordinator_runqueue_wait": round(c_wait / 1e9 / wall, 3),
                           "client_cores": round(w_cpu / 1e9 / wall, 3),
                           # every process of the machine (Ray's own daemons and the driver too), of os.cpu_count()
                           "machine_cores": round(busy / 1e9 / wall, 3), "machine_cpus": os.cpu_count(),
                           "plans_received": sum(p["plans"] for p in parts), "actors": actors,
                           "client_nodes": len({node for _, node in placed}),
                           "actors_on_coordinator_node": len(client_pids)}
            print(f"bench.coordinator: {n} clients: {out[str(n)]}", file=sys.stderr, flush=True)
        return out
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coordinator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per client count")
    parser.add_argument("--clients", default="16,64,256")
    parser.add_argument("--matches", type=int, default=512, help="matches drawn per round")
    parser.add_argument("--batch-games", type=int, default=None,
                        help="games per report (default: rollout.results_batch_size, as a worker reports)")
    parser.add_argument("--max-actors", type=int, default=64, help="client processes at most (see above)")
    parser.add_argument("--address", default=None,
                        help="a running Ray cluster (e.g. auto) instead of a local Ray: the coordinator runs on "
                             "this node, client processes spread over the cluster's nodes")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override, e.g. league.match_plan_seconds=5 (repeatable)")
    args = parser.parse_args(argv)
    OVERRIDES[:] = args.set
    try:
        cfg = bench_config(".")
    except ConfigError as exc:  # a bad --set: one line naming the key, before anything starts
        parser.error(str(exc))
    if args.batch_games is None:
        args.batch_games = cfg.rollout.results_batch_size
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    root = Path(tempfile.mkdtemp(prefix="bench-coordinator-"))
    try:
        seed_pool(str(root / "seeded"))
        shutil.copytree(root / "seeded", root / "inprocess")
        ceiling = inprocess(str(root / "inprocess"), args.seconds, args.matches, args.batch_games)
        print(f"bench.coordinator: inprocess: {ceiling}", file=sys.stderr, flush=True)
        counts = [int(c) for c in args.clients.split(",")]
        served = with_ray(str(root / "seeded"), counts, args.seconds, args.matches, args.batch_games, args.max_actors,
                          args.address)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    settings = {"pool": POOL, "matches": args.matches, "batch_games": args.batch_games, "seconds": args.seconds,
                "overrides": args.set}
    print(json.dumps({"clients": served, "inprocess": ceiling, "settings": settings}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
