"""Chaos soak: run a league and kill a random actor every few seconds; nothing may be lost.

    python -m operations.chaos [--minutes 5] [--storage DIR] [--seed 0]

Runs the smoke league (configs/smoke.yaml: three learners, their rollout
workers, an exact evaluator, the Serve opponents deployment and API) on a
local Ray. Every few seconds it kills one actor, chosen at random among: the
coordinator, a learner, a rollout worker, an evaluator, a Serve opponents
replica. It waits for the league to make progress again before the next kill
(so each recovery is measured on its own), leaves the last ~15 % of the run
without kills, stops the league as the launcher does, and prints one JSON line:

- ``kills``: kills made, by kind (``learner_replica``, a learner group's replica other than its
  first, only when a schedule names it);
- ``results_acked``: games in the result batches whose acknowledgement the
  senders got (their outbox ledgers, actors/outbox.py); ``results_stored``:
  games in the store's result batches;
- ``snapshots_acked``: snapshots whose add_snapshot reply the learners got;
  ``snapshots_stored``: learner snapshots in the store; ``snapshots_loadable``:
  acknowledged snapshots whose stored weights load (``policy_from_bytes``);
- ``nash_solves_after_last_kill``: Nash re-solves committed after the last kill;
- ``recovery_s_median`` / ``recovery_s_max``: seconds from a kill until the
  killed part did its job again: every rollout worker had a new batch
  acknowledged (coordinator, replica), the killed worker had one acknowledged,
  the killed learner's new life finished a PPO update, the killed evaluator's
  new life finished an evaluation round;
- ``lost``: true when an acknowledged result or snapshot is missing (the exit
  status is 1 then).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from actors.launch import load
from actors.outbox import ledgers
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes
from serve.environment import set_serve_environment

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("coordinator", "learner", "worker", "evaluator", "replica")
# with learner.replicas > 1: a learner group's replica other than replica 0 (actors.learner_group)
GROUP_KINDS = ("learner_replica",)
RECOVERY_TIMEOUT_S = 180.0
log = logging.getLogger("operations.chaos")


def _try(fn, default=None):
    try:
        return fn()
    except Exception:  # an actor mid-restart: not there yet
        return default


def _replica(serve_app: str = "opponents"):
    """A live replica actor of the Serve opponents app (found by its actor name)."""
    import ray

    prefix = f"SERVE_REPLICA::{serve_app}#"
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(prefix):
            return ray.get_actor(entry["name"], namespace=entry["namespace"])
    return None


class Chaos:
    """Kills actors of a running ``actors.league_run.LeagueRun`` and measures recoveries."""

    def __init__(self, league, storage: str, rng: np.random.Generator):
        self.league, self.storage, self.rng = league, storage, rng
        self.kills: dict[str, int] = {k: 0 for k in KINDS}
        self.recoveries: list[float] = []
        self.unrecovered = 0
        self.last_kill = 0.0

    def worker_acked(self) -> dict[str, int]:
        return {l["source"]: int(l["items"]) for l in ledgers(self.storage) if l["source"].startswith("worker:")}

    def kill(self, kind: str) -> tuple[str, Any]:
        """Kill one actor of ``kind``; returns what was killed and a probe of its recovery."""
        import ray

        league = self.league
        if kind == "coordinator":
            before = self.worker_acked()
            ray.kill(league.coordinator, no_restart=False)
            return kind, lambda: all(self.worker_acked().get(w, 0) > before.get(w, 0) for w in league.workers)
        if kind == "replica":
            replica = _replica()
            if replica is None:
                return "", None
            before = self.worker_acked()
            ray.kill(replica, no_restart=True)  # the Serve controller starts a replacement
            return kind, lambda: all(self.worker_acked().get(w, 0) > before.get(w, 0) for w in league.workers)
        if kind == "worker":
            name = str(self.rng.choice(sorted(league.workers)))
            before = self.worker_acked().get(name, 0)
            ray.kill(league.workers[name], no_restart=False)
            return name, lambda: self.worker_acked().get(name, 0) > before
        if kind == "learner":
            return self._kill_restarting(league.learners, "info", "updates")
        if kind == "learner_replica":
            followers = {f"{lid}:{k}": r for lid, group in league.replicas.items() for k, r in enumerate(group) if k}
            if not followers:
                return "", None
            return self._kill_restarting(followers, "info", "updates")
        if kind == "evaluator":
            return self._kill_restarting(league.evaluators, "get_stats", "rounds")
        raise ValueError(f"unknown kind {kind!r}")

    def _kill_restarting(self, actors: dict, method: str, progress: str):
        """Kill one of ``actors`` (Ray restarts it); recovered once a new process (another pid from
        ``method``) reports ``progress`` >= 1."""
        import ray

        name = str(self.rng.choice(sorted(actors)))
        actor = actors[name]
        ask = getattr(actor, method)
        pid = _try(lambda: ray.get(ask.remote(), timeout=10)["pid"])
        ray.kill(actor, no_restart=False)

        def recovered():
            stats = _try(lambda: ray.get(ask.remote(), timeout=2))
            return stats is not None and stats["pid"] != pid and stats[progress] >= 1
        return name, recovered

    def strike(self, kind: str) -> float | None:
        """Kill one ``kind`` and wait (supervising) until the league made progress again."""
        name, recovered = self.kill(kind)
        if recovered is None:
            return None
        t0 = self.last_kill = time.time()
        self.kills[kind] = self.kills.get(kind, 0) + 1
        while time.time() - t0 < RECOVERY_TIMEOUT_S:
            self.league.supervise()
            if recovered():
                seconds = time.time() - t0
                self.recoveries.append(seconds)
                log.info("killed %s (%s): recovered in %.1f s", kind, name, seconds)
                return seconds
            time.sleep(0.25)
        self.unrecovered += 1
        log.warning("killed %s (%s): no progress within %.0f s", kind, name, RECOVERY_TIMEOUT_S)
        return None


def accounting(storage: str, since: float = 0.0) -> dict[str, Any]:
    """Acknowledged (senders' ledgers) against stored (the league's SQLite file)."""
    books = ledgers(storage)
    results_acked = sum(int(l["items"]) for l in books if not l["source"].startswith("learner:"))
    acked_ids = [i for l in books if l["source"].startswith("learner:") for i in l["ids"]]
    with LeagueStore(storage, create=False) as store:
        results_stored = int(store.result_count())
        stored = [a for a in store.agents(include_removed=True) if a.learner_id is not None]
        evicted = {e["agent_id"] for e in store.events("evict")}
        loadable = 0
        for agent_id in acked_ids:
            try:
                policy_from_bytes(store.snapshot_blob(agent_id))
                loadable += 1
            except (KeyError, ValueError, RuntimeError) as exc:
                log.error("acknowledged snapshot %s does not load: %s", agent_id, exc)
        nash_after = sum(1 for n in store.nash_history() if n["solved_at"] > since)
    return {
        "results_acked": results_acked, "results_stored": results_stored,
        "batches_acked": sum(int(l["batches"]) for l in books if not l["source"].startswith("learner:")),
        "snapshots_acked": len(acked_ids), "snapshots_stored": len(stored), "snapshots_loadable": loadable,
        "snapshots_evicted": len(evicted & set(acked_ids)),
        "snapshots_unacked_stored": sorted({a.agent_id for a in stored} - set(acked_ids)),
        "outbox_pending": sorted(l["source"] for l in books if l["pending"]),
        "nash_solves_after_last_kill": nash_after,
    }


def run_chaos(minutes: float = 5.0, storage: str | None = None, seed: int = 0, schedule: list[str] | None = None,
              every_s: tuple[float, float] = (3.0, 8.0), config: str = "configs/smoke.yaml",
              overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the chaos soak on the Ray this process is connected to; returns the summary.

    ``schedule``: kill these kinds in this order (then stop) instead of random kinds
    for ``minutes``."""
    from actors.league_run import LeagueRun  # imports Ray's Serve: after main sets its environment

    storage = storage or tempfile.mkdtemp(prefix="chaos-")
    cfg, info = load(["--config", str(ROOT / config) if not Path(config).is_absolute() else config,
                      f"run.storage={storage}", f"run.seed={seed}", *overrides])
    rng = np.random.default_rng(seed)
    league = LeagueRun(cfg, info)
    chaos = Chaos(league, storage, rng)
    start = time.time()
    end = start + minutes * 60.0
    quiet_from = end - max(15.0, 0.15 * minutes * 60.0)  # the tail shows the league settles
    try:
        # warm up: every worker has had a batch acknowledged and the pool is not empty
        while time.time() < end and not (len(chaos.worker_acked()) == len(league.workers)
                                         and all(chaos.worker_acked().values())
                                         and _try(lambda: league.status()["pool_size"], 0) >= 1):
            league.supervise()
            time.sleep(0.5)
        todo = list(schedule) if schedule is not None else None
        next_kill = time.time()
        while (todo if todo is not None else time.time() < quiet_from):
            league.supervise()
            if time.time() >= next_kill:
                kind = todo.pop(0) if todo is not None else str(rng.choice(KINDS))
                chaos.strike(kind)
                next_kill = time.time() + float(rng.uniform(*every_s))
            time.sleep(0.25)
        tail_end = time.time() + 10.0 if schedule is not None else end
        while time.time() < tail_end:
            league.supervise()
            time.sleep(0.5)
    finally:
        elapsed = time.time() - start
        league.stop()
        league.kill()
    summary = {"minutes": round(elapsed / 60.0, 2), "kills": chaos.kills, "kills_total": sum(chaos.kills.values()),
               **accounting(storage, since=chaos.last_kill),
               "recovery_s_median": round(statistics.median(chaos.recoveries), 2) if chaos.recoveries else None,
               "recovery_s_max": round(max(chaos.recoveries), 2) if chaos.recoveries else None,
               "unrecovered": chaos.unrecovered, "storage": storage}
    summary["lost"] = not (summary["results_acked"] == summary["results_stored"]
                           and summary["snapshots_acked"] == summary["snapshots_loadable"] == summary["snapshots_stored"])
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operations.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the soak (default 5)")
    parser.add_argument("--storage", default=None, help="run folder (default: a new temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be > 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    set_serve_environment()
    import ray

    ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             num_cpus=max(8, 4 * (os.cpu_count() or 2)), namespace="chaos")
    try:
        summary = run_chaos(args.minutes, args.storage, args.seed)
    finally:
        from ray import serve

        _try(serve.shutdown)
        ray.shutdown()
    print(json.dumps(summary), flush=True)
    return 1 if summary["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
