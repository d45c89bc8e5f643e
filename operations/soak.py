"""Soak: does a league stay flat over time? ``python -m operations.soak [--minutes 60] [--config FILE]``.

Runs a shipped config under the launcher as a subprocess, as a user does, and samples every
``--interval`` seconds (default 60): the resident memory (RSS: each process's least over the
interval, read six times in it, so that transient arrays of work in progress do not read as
growth), open file descriptors and CPU time of every Ray process of the run by actor kind
(coordinator, learner, rollout worker, evaluator, anchor judge, serve; found among the launcher's
descendants by their process title ``ray::ClassName``), the store's size
(``league.db`` with its WAL), Ray's object store use (the node's ``ray_object_store_memory``
metric) and the league's env steps/s (the launcher's progress lines).

At the end it prints ONE JSON line: ``samples``, ``store_bytes_per_hour`` and ``rss_mb_per_hour``
per kind (least-squares slopes over the second half of the run, after start-up, of the kind's
summed RSS), ``rss_mb_per_hour_max_actor`` per kind (the steepest slope of one process of the kind
alive through the second half: the figure to hold against a per-actor bound), ``fds_growth``
(open descriptors at the end minus at the middle), ``object_store_mb`` (last),
``snapshot_loads_per_minute`` per process kind over the second half (snapshot cache misses: the
cost of a cache smaller than what a process plays, ``snapshots.cache_mb``),
``snapshot_cache_mb`` per kind (the weights its snapshot caches held at the end, the gauge
``ray_league_snapshot_cache_bytes``) with ``snapshot_cache_mb_per_hour`` (their slope over the
second half: the part of an RSS slope that is a bounded cache filling up), and
``throughput_drift`` (mean env steps/s of the last quarter over the second quarter's; 1 is flat)
and ``cpu_cores`` per kind over the ``second_quarter`` and the ``last_quarter`` (the cores its
processes used on average: where a drift's CPU went). The figures are for the machine it ran on; they are slopes, not targets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# process title (``ray::ClassName`` or ``ray::ClassName.method``) -> actor kind
KINDS = (("LeagueCoordinator", "coordinator"), ("Learner", "learner"), ("RolloutWorker", "rollout_worker"),
         ("Evaluator", "evaluator"), ("Prober", "evaluator"), ("AnchorJudge", "anchor_judge"),
         ("ServeReplica", "serve"), ("ServeController", "serve"),
         ("ProxyActor", "serve"), ("ApiServer", "serve"))
PROGRESS = re.compile(r"^\[\s*([\d.]+)s\]\s+([\d.]+) env steps/s")
ENDPOINTS = re.compile(r"metrics of Ray session \S+ at (.*?); Prometheus")


def actor_kind(cmdline: str) -> str | None:
    """The actor kind of a Ray worker process from its title; None for anything else."""
    if not cmdline.startswith("ray::"):
        return None
    name = cmdline[5:].split(".")[0].split(":")[0].split()[0] if len(cmdline) > 5 else ""
    for prefix, kind in KINDS:
        if name.startswith(prefix):
            return kind
    return None


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_and_start(pid: int) -> tuple[float, int]:
    """The CPU time (user + system) a process has used and when it started (clock ticks since
    boot), from one read of ``/proc/PID/stat``; OSError once it is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / CLOCK_TICKS, int(stat[19])


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used; OSError once it is gone."""
    return cpu_and_start(pid)[0]


def title(pid: int) -> str:
    """A process's command line (its title, for a Ray worker: ``ray::ClassName...``); OSError once it is gone."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


def process_sample(root_pid: int) -> dict[str, dict]:
    """Per actor kind: processes, summed RSS (MB), open file descriptors, each process's RSS
    (``pids``: pid -> MB) and the CPU time it has used (``cpu``: pid -> seconds)."""
    kinds: dict[str, dict[str, float]] = {}
    for pid in descendants(root_pid):
        try:
            kind = actor_kind(title(pid))
            if kind is None:
                continue
            rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("VmRSS:")) / 1024.0
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            cpu = cpu_seconds(pid)
        except (OSError, StopIteration, ValueError, IndexError):
            continue  # gone meanwhile
        k = kinds.setdefault(kind, {"processes": 0, "rss_mb": 0.0, "fds": 0, "pids": {}, "cpu": {}})
        k["processes"] += 1
        k["rss_mb"] += rss
        k["fds"] += fds
        k["pids"][pid] = rss
        k["cpu"][pid] = cpu
    return kinds


def floor_sample(window: list[dict[str, dict]]) -> dict[str, dict]:
    """One sample from several taken over an interval: every process read in it, with its least
    RSS over the interval and its latest descriptors and CPU time. A process's RSS rises while it
    works on transient arrays (a solve in progress) and falls after; the floor is what it keeps,
    so a slope of floors is growth, not the phase of the work a reading happened to catch."""
    out: dict[str, dict] = {}
    for reading in window:
        for kind, k in reading.items():
            o = out.setdefault(kind, {"pids": {}, "cpu": {}})
            for pid, mb in k["pids"].items():
                o["pids"][pid] = min(mb, o["pids"].get(pid, mb))
                o["cpu"][pid] = k["cpu"][pid]
            o["fds"] = k["fds"]
    for o in out.values():
        o["processes"] = len(o["pids"])
        o["rss_mb"] = sum(o["pids"].values())
    return out


def cpu_cores(samples: list[dict], lo: float, hi: float) -> dict[str, float]:
    """Per kind, the cores its processes used on average between the samples nearest ``lo`` and
    ``hi`` seconds (a process that started in between counts from 0; one that ended is missed)."""
    if len(samples) < 2:
        return {}
    a = min(samples, key=lambda s: abs(s["t"] - lo))
    b = min(samples, key=lambda s: abs(s["t"] - hi))
    if b["t"] <= a["t"]:
        return {}
    out = {}
    for kind, k in b["kinds"].items():
        before = a["kinds"].get(kind, {}).get("cpu", {})
        used = sum(cpu - before.get(pid, 0.0) for pid, cpu in k.get("cpu", {}).items())
        out[kind] = round(used / (b["t"] - a["t"]), 3)
    return out


def store_bytes(storage: Path) -> int:
    return sum(p.stat().st_size for p in storage.glob("league.db*") if p.is_file())


LOADS = re.compile(r'^ray_league_snapshot_cache_loads_total\{.*process="(\w+)".*\}\s+(\S+)$')
CACHE_BYTES = re.compile(r'^ray_league_snapshot_cache_bytes\{.*process="(\w+)".*\}\s+(\S+)$')


def scrape(endpoints: list[str]) -> list[str]:
    """The metric lines of the run's nodes' metrics agents (none where one does not answer)."""
    lines = []
    for endpoint in endpoints:
        try:
            lines += urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5).read().decode().splitlines()
        except OSError:
            continue
    return lines


def object_store_mb(lines: list[str]) -> float | None:
    """Ray's object store use on the run's nodes (``ray_object_store_memory``, MB); None if unread."""
    values = [float(line.rsplit(" ", 1)[1]) for line in lines
              if line.startswith("ray_object_store_memory{") or line.startswith("ray_object_store_memory ")]
    return sum(values) / 2**20 if values else None


def per_process_kind(lines: list[str], pattern: re.Pattern) -> dict[str, float]:
    """A metric's values summed per ``process`` label (one series per process of a kind)."""
    out: dict[str, float] = {}
    for line in lines:
        m = pattern.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def snapshot_loads(lines: list[str]) -> dict[str, float]:
    """Snapshots loaded into caches so far, per process kind (``ray_league_snapshot_cache_loads_total``)."""
    return per_process_kind(lines, LOADS)


def snapshot_cache_mb(lines: list[str]) -> dict[str, float]:
    """Weights held in snapshot caches now, MB per process kind (``ray_league_snapshot_cache_bytes``)."""
    return {k: v / 2**20 for k, v in per_process_kind(lines, CACHE_BYTES).items()}


def slope_per_hour(t: list[float], y: list[float]) -> float:
    """Least-squares slope of ``y`` over ``t`` (seconds), per hour; 0 with fewer than two points."""
    if len(t) < 2 or max(t) == min(t):
        return 0.0
    return float(np.polyfit(np.asarray(t, dtype=float), np.asarray(y, dtype=float), 1)[0] * 3600.0)


def slopes_by_kind(series: list[tuple[float, dict[str, float]]], kinds: list[str]) -> dict[str, float]:
    """Per kind, the least-squares slope per hour of its values over the samples (time, {kind: value})
    that have it."""
    return {k: round(slope_per_hour([t for t, v in series if k in v], [v[k] for _, v in series if k in v]), 3)
            for k in kinds}


def summarize(samples: list[dict], rates: list[tuple[float, float]], minutes: float) -> dict:
    """The JSON line's figures from the samples (``t``, ``store_bytes``, ``kinds``) and the
    launcher's (time, env steps/s) progress."""
    half = [s for s in samples if s["t"] >= samples[-1]["t"] / 2] if samples else []
    if len(half) < 2:
        half = samples
    t = [s["t"] for s in half]
    kinds = sorted({k for s in samples for k in s["kinds"]})
    rss = slopes_by_kind([(s["t"], {k: v["rss_mb"] for k, v in s["kinds"].items()}) for s in half], kinds)
    fds = lambda s: sum(v["fds"] for v in s["kinds"].values())  # noqa: E731
    # each kind as last read at full strength (the most processes of it in one sample): a league's first
    # and last readings, while it starts and stops, lack some
    most = {k: max(s["kinds"][k]["processes"] for s in samples if k in s["kinds"]) for k in kinds}
    full = lambda k: next(s["kinds"][k] for s in reversed(samples)  # noqa: E731
                          if s["kinds"].get(k, {}).get("processes") == most[k])
    span_min = (half[-1]["t"] - half[0]["t"]) / 60.0 if len(half) > 1 else 0.0
    loads = {k: round((half[-1].get("snapshot_loads", {}).get(k, 0.0) - half[0].get("snapshot_loads", {}).get(k, 0.0))
                      / span_min, 2) for k in sorted(half[-1].get("snapshot_loads", {}))} if span_min else {}
    held = [(s["t"], s.get("snapshot_cache_mb", {})) for s in half]
    cache = slopes_by_kind(held, sorted({k for _, mb in held for k in mb}))
    last_held = samples[-1].get("snapshot_cache_mb", {}) if samples else {}
    actor = {}  # per kind, the steepest slope of one process alive through the half
    for k in kinds:
        series: dict[int, list[tuple[float, float]]] = {}
        for s in half:
            for pid, mb in s["kinds"].get(k, {}).get("pids", {}).items():
                series.setdefault(pid, []).append((s["t"], mb))
        slopes = [slope_per_hour(*zip(*points)) for points in series.values() if len(points) == len(half)]
        actor[k] = round(max(slopes), 3) if slopes else None
    end = samples[-1]["t"] if samples else 0.0
    quarter = lambda lo, hi: [r for at, r in rates if lo * end <= at < hi * end]  # noqa: E731
    second, last = quarter(0.25, 0.5), quarter(0.75, 1.01)
    drift = float(np.mean(last) / np.mean(second)) if second and last and np.mean(second) > 0 else None
    cores = {"second_quarter": cpu_cores(samples, 0.25 * end, 0.5 * end),
             "last_quarter": cpu_cores(samples, 0.75 * end, end)}
    return {
        "minutes": minutes,
        "samples": len(samples),
        "store_bytes": samples[-1]["store_bytes"] if samples else 0,
        "store_bytes_per_hour": round(slope_per_hour(t, [s["store_bytes"] for s in half]), 1),
        "rss_mb_per_hour": rss,
        "rss_mb_per_hour_max_actor": actor,
        "rss_mb": {k: round(full(k)["rss_mb"], 1) for k in kinds},
        "processes": most,
        "fds_growth": (fds(half[-1]) - fds(half[0])) if half else 0,
        "object_store_mb": samples[-1]["object_store_mb"] if samples else None,
        "snapshot_loads_per_minute": loads,
        "snapshot_cache_mb": {k: round(v, 1) for k, v in last_held.items()},
        "snapshot_cache_mb_per_hour": cache,
        "env_steps_per_s": round(float(np.mean(last)), 1) if last else None,
        "throughput_drift": round(drift, 4) if drift is not None else None,
        "cpu_cores": cores,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operations.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the league runs (default 60)")
    parser.add_argument("--config", default=None, help="a shipped config (default: the launcher's default league)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--storage", default=None, help="run.storage (default: a fresh temporary folder)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="more launcher overrides, e.g. --set run.progress_every_seconds=10")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.interval <= 0:
        parser.error("--minutes and --interval must be > 0")
    tmp = None
    if args.storage is None:
        tmp = tempfile.TemporaryDirectory(prefix="nash-soak-")
        storage = Path(tmp.name) / "run"
    else:
        storage = Path(args.storage).resolve()
    cmd = [sys.executable, "-m", "actors.launch", *(["--config", args.config] if args.config else []),
           f"run.storage={storage}", f"run.max_minutes={args.minutes}", "serve.api=false",
           f"run.progress_every_seconds={min(args.interval, 10.0)}", *args.set]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rates: list[tuple[float, float]] = []
    endpoints: list[str] = []
    tail: list[str] = []
    t0 = time.time()

    def read_output() -> None:
        for line in proc.stdout:
            tail.append(line)
            del tail[:-50]
            m = PROGRESS.match(line)
            if m and float(m.group(2)) > 0:
                rates.append((time.time() - t0, float(m.group(2))))
            m = ENDPOINTS.search(line)
            if m:
                endpoints[:] = [e.strip() for e in m.group(1).split(",") if ":" in e]

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    samples: list[dict] = []
    window: list[dict] = []  # the interval's process samples, one every sixth of it
    try:
        next_at, peek_at = t0 + args.interval, t0 + args.interval / 6
        while proc.poll() is None:
            time.sleep(min(1.0, max(0.0, min(next_at, peek_at) - time.time())))
            if time.time() >= peek_at:
                peek_at += args.interval / 6
                sample = process_sample(proc.pid)
                if sample:
                    window.append(sample)
            if time.time() < next_at:
                continue
            next_at += args.interval
            kinds, window = (floor_sample(window) if window else {}), []
            if not kinds:
                continue  # starting up or stopping: no actor yet (or any more)
            lines = scrape(endpoints)
            samples.append({"t": time.time() - t0, "store_bytes": store_bytes(storage), "kinds": kinds,
                            "object_store_mb": object_store_mb(lines), "snapshot_loads": snapshot_loads(lines),
                            "snapshot_cache_mb": snapshot_cache_mb(lines)})
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    finally:
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=10)
    if proc.returncode != 0:
        print("".join(tail), file=sys.stderr)
        print(f"nash-league: soak: the launcher exited with {proc.returncode}", file=sys.stderr)
        return 1
    out = summarize(samples, rates, args.minutes)
    out["config"] = args.config or "default"
    print(json.dumps(out), flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
