"""Where a running league's CPU goes: ``python -m operations.profile [--seconds 60] [--rate 20]``.

Attaches to the league running on this machine (every Ray worker process whose title names an
actor kind, as ``operations.soak`` finds them: coordinator, learner, rollout_worker, evaluator,
anchor_judge, serve) and samples each process's Python stacks with py-spy for ``--seconds``,
without pausing it (``--nonblocking``: the league's speed is what is measured). Beside the
samples it reads each process's CPU time over the same window.

A sample is charged to the innermost frame of this project's code in its stack (``policies/
lanes.py:_prepare``, ``envs/...:step``): what our code was doing, whatever library it was in at the
time (torch, numpy, OpenSpiel's C++, Ray's client). A stack with no frame of ours (Ray's and Serve's
own threads) is charged to its innermost frame. Sampled threads are the ones running Python or
holding the GIL, so an actor that waits shows few samples and its ``cores`` show that.

It prints ONE JSON line: ``seconds``, ``rate`` and per kind ``processes``, ``cores`` (the CPU its
processes used over the window, on average) and ``top``: [label, share of the kind's samples,
cores charged to it (``cores`` times the share)], largest first. Run it beside a league started as
usual, e.g. ``python -m actors.launch --config configs/connect_four.yaml`` in another terminal,
after its start-up. py-spy needs the right to trace the processes (root, or ptrace_scope 0).

``--rate 0``: CPU time only, no py-spy, for a window as long as a run (``--seconds 900`` started
with the launcher): the league's processes are looked up again every 2 s, so an actor that starts
during the window counts from its start and one that ends counts up to when it was last seen.
``top`` is then empty.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from operations.soak import CLOCK_TICKS, actor_kind, cpu_and_start, cpu_seconds, title

# a file of this project's packages, wherever its checkout is (not an installed library)
OURS = re.compile(r"/((?:actors|bench|envs|league|monitoring|nash_league|policies|serve)/[^/]+\.py)$")


def frame_label(frame: str) -> tuple[str, bool]:
    """``function (path)`` from py-spy's raw format -> (``path-from-repo:function``, ours)."""
    name, _, rest = frame.partition(" (")
    path = rest.rstrip(")").rsplit(":", 1)[0] if rest else ""
    mine = OURS.search(path)
    if mine and "-packages/" not in path:
        return f"{mine.group(1)}:{name}", True
    if "-packages/" in path:
        path = path.split("-packages/", 1)[1]
    return f"{path}:{name}", False


def charge(collapsed: str) -> Counter:
    """Samples per label from py-spy's raw (collapsed) output: each stack ``f1;f2;...;fn count``,
    outermost first, charged to its innermost frame of ours, else to its innermost frame."""
    out: Counter = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_label(f) for f in stack.split(";") if f]
        if frames and frames[0][0].startswith(("process ", "thread ")):  # py-spy's -t/-s prefixes
            frames = frames[1:]
        if not frames:
            continue
        ours = [label for label, mine in frames if mine]
        out[ours[-1] if ours else frames[-1][0]] += int(count)
    return out


def cpu_or_none(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return None


def league_processes() -> dict[str, list[int]]:
    """Actor kind -> pids of the league's Ray worker processes on this machine."""
    kinds: dict[str, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            kind = actor_kind(title(int(proc.name)))
        except OSError:
            continue
        if kind is not None:
            kinds.setdefault(kind, []).append(int(proc.name))
    return kinds


def cpu_used(scans: list[dict[tuple[str, int, int], float]], window_start: int) -> dict[str, tuple[int, float]]:
    """Per kind, its processes and the CPU seconds they used within a window, from scans in order:
    each ``{(kind, pid, start_ticks): cpu_seconds}``. A process counts from its first scan, or from
    0 where it started after ``window_start`` (ticks since boot), to its last scan."""
    first: dict[tuple, float] = {}
    last: dict[tuple, float] = {}
    for scan in scans:
        for key, cpu in scan.items():
            first.setdefault(key, 0.0 if key[2] > window_start else cpu)
            last[key] = cpu
    out: dict[str, tuple[int, float]] = {}
    for key, cpu in last.items():
        n, used = out.get(key[0], (0, 0.0))
        out[key[0]] = (n + 1, used + cpu - first[key])
    return out


def profile_cpu(kinds: list[str] | None, seconds: float, every: float = 2.0) -> dict:
    """Each kind's processes and the cores they used over ``seconds``, no stacks sampled: the
    league's processes looked up every ``every`` seconds (``cpu_used``)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    window_start = int(uptime * CLOCK_TICKS)
    start = time.perf_counter()
    scans = []
    while True:
        scan = {}
        for kind, pids in league_processes().items():
            if kinds and kind not in kinds:
                continue
            for pid in pids:
                try:
                    cpu, started = cpu_and_start(pid)
                except (OSError, ValueError, IndexError):
                    continue
                scan[(kind, pid, started)] = cpu
        scans.append(scan)
        left = seconds - (time.perf_counter() - start)
        if left <= 0:
            break
        time.sleep(min(every, left))
    elapsed = time.perf_counter() - start
    return {kind: {"processes": n, "cores": round(used / elapsed, 3), "cpu_seconds": round(used, 1),
                   "samples": 0, "top": []}
            for kind, (n, used) in sorted(cpu_used(scans, window_start).items())}


def py_spy() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(exe).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy; ray[default] brings it)")
    return exe


def profile(kinds: dict[str, list[int]], seconds: float, rate: int) -> dict:
    """Record every process in ``kinds`` at once for ``seconds``; per kind its processes, the
    cores they used and the samples' labels (``top``)."""
    exe = py_spy()
    with tempfile.TemporaryDirectory(prefix="nash_profile_") as tmp:
        before = {pid: cpu_or_none(pid) for pids in kinds.values() for pid in pids}
        start = time.perf_counter()
        procs = {pid: subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                                        "--rate", str(rate), "--format", "raw", "--nonblocking", "--nolineno",
                                        "--full-filenames", "--output", f"{tmp}/{pid}.txt"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for pids in kinds.values() for pid in pids}
        errors = {pid: p.communicate()[1] for pid, p in procs.items()}
        elapsed = time.perf_counter() - start
        after = {pid: cpu_or_none(pid) for pid in before}
        out = {}
        for kind, pids in sorted(kinds.items()):
            counts: Counter = Counter()
            used = 0.0
            for pid in pids:
                path = Path(f"{tmp}/{pid}.txt")
                if path.exists():
                    counts += charge(path.read_text())
                elif procs[pid].returncode:
                    print(f"operations.profile: pid {pid} ({kind}) not sampled: {errors[pid].strip()[-200:]}",
                          file=sys.stderr)
                if before[pid] is not None and after[pid] is not None:
                    used += after[pid] - before[pid]
            total = sum(counts.values())
            cores = used / elapsed
            out[kind] = {"processes": len(pids), "cores": round(cores, 3), "samples": total,
                         "top": [[label, round(n / total, 4), round(cores * n / total, 3)]
                                 for label, n in counts.most_common(12)] if total else []}
        return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operations.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to sample (default 60)")
    parser.add_argument("--rate", type=int, default=20, help="samples a second per process (default 20); 0: CPU time only, no py-spy")
    parser.add_argument("--kind", action="append", help="only these actor kinds (repeatable; default all)")
    args = parser.parse_args(argv)
    if args.seconds < 1 or args.rate < 0:
        parser.error("--seconds must be at least 1 and --rate at least 0")
    if args.rate == 0:
        kinds_out = profile_cpu(args.kind, args.seconds)
        if not kinds_out:
            print("operations.profile: no league ran on this machine in the window (no ray::<Actor> processes found)",
                  file=sys.stderr)
            return 1
        for kind, k in kinds_out.items():
            print(f"{kind}: {k['processes']} processes, {k['cores']} cores, {k['cpu_seconds']} CPU s", file=sys.stderr)
        print(json.dumps({"seconds": args.seconds, "rate": 0, "kinds": kinds_out}), flush=True)
        return 0
    kinds = league_processes()
    if args.kind:
        kinds = {k: v for k, v in kinds.items() if k in args.kind}
    if not kinds:
        print("operations.profile: no league is running on this machine (no ray::<Actor> processes found)", file=sys.stderr)
        return 1
    try:
        kinds_out = profile(kinds, args.seconds, args.rate)
    except RuntimeError as exc:
        print(f"operations.profile: {exc}", file=sys.stderr)
        return 1
    for kind, k in kinds_out.items():  # readable, on stderr; the JSON line on stdout
        print(f"{kind}: {k['processes']} processes, {k['cores']} cores", file=sys.stderr)
        for label, share, cores in k["top"][:8]:
            print(f"  {share:6.1%} {cores:6.3f} cores  {label}", file=sys.stderr)
    print(json.dumps({"seconds": args.seconds, "rate": args.rate, "kinds": kinds_out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
