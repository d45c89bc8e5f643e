"""The figures a GPU machine gives in one short run (issue 49): at most 8 minutes on a machine with
16 cores and one H100 or H200, from the repository root after ``make setup``.

    python -m bench.gpu_check [--out DIR] [--budget 470] [--league-minutes 3] [--set KEY=VALUE ...]
        [--config configs/connect_four_ppo.yaml] [--league NAME=KEY=VALUE,... ...] [--skip-scale] [--skip-leagues]

Writes every step's output to ``--out`` (default ``$OUT``, else ``runs/gpu_check``), then prints a
summary and writes it to ``summary.json`` there. The steps, one after another, each with its own
timeout so that one failure does not eat the budget:

1. ``bench.learner`` on ``--device cpu`` and on ``--device cuda`` (configs/connect_four_ppo.yaml, the
   config's minibatch and 4x it): trained decisions/s and the GPU's ratio to one CPU core;
2. ``bench.scale --device cuda`` for this machine (``--cores`` this machine's, one GPU): the unit
   costs here, the GPU learner's speed-up, and the predicted pace and bound;
3. the shipped Connect Four config (``--config``) through the launcher (``auto`` sizing, the plan it
   prints), ``--set`` overrides (``AUTO_OVERRIDES`` below: none) appended: env steps/s from the
   progress lines after the first minute (median and highest), the learner's decisions/s from the
   run's store (``evaluation.pace``), ``nvidia-smi`` every 10 s and one ``top`` 90 s in;
4. the same with ``learner.replicas=2``.

After each league the error and warning lines of its actors' logs (Ray's session logs) go to
``NAME.workers.txt``.

``--league NAME=KEY=VALUE,KEY=VALUE`` (repeatable; ``NAME=`` for none) replaces steps 3 and 4 with
leagues of those overrides, e.g. a search config's leaves in the workers and served:
``--config configs/connect_four.yaml --league auto= --league served=rollout.policy_inference=serve``.
Each league's store is kept in ``--out`` under its name, so that its networks can be scored later
on another machine (``evaluation.anchor_scores --storage``).

Each league runs ``--league-minutes`` (3), shortened so that all fit in what is left of
``--budget`` seconds (470: the whole under 8 minutes with Ray's start and stop); a league with
under a minute left is skipped and says so. Ray starts with ``RAY_AUTH_MODE=disabled``, one BLAS
thread (as ``make``). ``--skip-scale`` leaves out step 2; ``--skip-leagues`` runs the benches
only (no Ray).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/connect_four_ppo.yaml"
AUTO_OVERRIDES: list[str] = []  # launcher overrides on top of the config's auto sizing, e.g. "learner.num_gpus=1"
REPLICA_OVERRIDES = ["learner.replicas=2"]
LEAGUE_OVERHEAD_S = 60.0  # Ray's start, the actors' start, the stop's flush
WARMUP_S = 60.0  # progress lines before this are the league starting up
PROGRESS = re.compile(r"^\[\s*(\d+)s\]\s+(\d+) env steps/s")
ENV = {"RAY_AUTH_MODE": "disabled", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
       "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "PYTHONUNBUFFERED": "1"}


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def run_step(name: str, argv: list[str], out: Path, timeout: float, during=None) -> dict:
    """Run ``argv`` (stdout and stderr to ``out/name.log``) for at most ``timeout`` s: SIGINT first
    (the launcher flushes its store), SIGKILL 30 s later. ``during(proc)`` runs in a thread meanwhile."""
    log = out / f"{name}.log"
    started = time.monotonic()
    if timeout < 5:
        return {"step": name, "skipped": f"{timeout:.0f} s left of the budget"}
    with open(log, "w") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **ENV},
                                start_new_session=True)
        watcher = None
        if during is not None:
            watcher = threading.Thread(target=during, args=(proc,), daemon=True)
            watcher.start()
        try:
            rc = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGINT)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
        if watcher is not None:
            watcher.join(timeout=5)
    text = log.read_text(errors="replace")
    return {"step": name, "rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 1),
            "log": str(log), "text": text}


def last_json(text: str) -> dict | None:
    """The last line of ``text`` that is a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def learner_rate(result: dict) -> dict | None:
    """decisions/s of each minibatch size from a ``bench.learner`` step."""
    out = last_json(result.get("text", ""))
    if not out:
        return None
    return {"device": out["device"], "by_minibatch": {r["minibatch_size"]: r["decisions_per_s"] for r in out["rows"]}}


def progress_rates(text: str) -> dict:
    """Env steps/s of the launcher's progress lines after the warm-up: median, highest, lines; and
    the plan lines the launcher printed."""
    rates = []
    for line in text.splitlines():
        m = PROGRESS.match(line.strip())
        if m and float(m.group(1)) >= WARMUP_S and int(m.group(2)) > 0:
            rates.append(int(m.group(2)))
    plan, in_plan = [], False
    for line in text.splitlines():
        if "nash-league: plan" in line:
            in_plan = True
        elif in_plan and not line.startswith("  "):
            in_plan = False
        if in_plan:
            plan.append(line.rstrip())
    return {"env_steps_per_s_median": statistics.median(rates) if rates else None,
            "env_steps_per_s_max": max(rates) if rates else None, "progress_lines": len(rates), "plan": plan}


def watch(out: Path, name: str):
    """``nvidia-smi`` every 10 s, and ``top`` once 90 s in, while a league runs."""

    def during(proc):
        started, topped = time.monotonic(), False
        with open(out / f"{name}.gpu.csv", "w") as f:
            while proc.poll() is None:
                try:
                    smi = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
                    f.write(f"{time.monotonic() - started:.0f}, {smi.stdout.strip()}\n")
                    f.flush()
                except (OSError, subprocess.TimeoutExpired):
                    pass
                if not topped and time.monotonic() - started >= 90:
                    topped = True
                    try:
                        top = subprocess.run(["top", "-b", "-n", "1", "-w", "200"], capture_output=True, text=True,
                                             timeout=10)
                        (out / f"{name}.top.txt").write_text(top.stdout)
                    except (OSError, subprocess.TimeoutExpired):
                        pass
                time.sleep(10)

    return during


def gpu_use(path: Path) -> dict | None:
    """The GPU's utilisation (%) and memory (MiB) over a league: median and highest."""
    if not path.exists():
        return None
    util, mem = [], []
    for line in path.read_text().splitlines():
        nums = [int(x) for x in re.findall(r"\d+", line)]
        if len(nums) >= 3:
            util.append(nums[1])
            mem.append(nums[2])
    if not util:
        return None
    return {"util_pct_median": statistics.median(util), "util_pct_max": max(util), "mem_mib_max": max(mem)}


def league(name: str, overrides: list[str], out: Path, budget: Budget, minutes: float, leagues_left: int,
           python: str, config: str = CONFIG) -> dict:
    """One league through the launcher, shortened to its share of the budget left."""
    share = budget.left() / leagues_left
    minutes = min(minutes, (share - LEAGUE_OVERHEAD_S) / 60.0)
    if minutes < 1.0:
        return {"step": name, "skipped": f"{budget.left():.0f} s left of the budget: under a minute of league"}
    storage = out / name
    argv = [python, "-m", "actors.launch", "--config", config, f"run.max_minutes={minutes:.2f}",
            f"run.storage={storage}", *overrides]
    result = run_step(name, argv, out, minutes * 60 + LEAGUE_OVERHEAD_S, during=watch(out, name))
    result.update(progress_rates(result.get("text", "")), minutes=round(minutes, 2), overrides=overrides)
    result["worker_errors"] = worker_errors(out / f"{name}.workers.txt")
    result["gpu"] = gpu_use(out / f"{name}.gpu.csv")
    if (storage / "league.db").exists():
        pace = run_step(f"{name}.pace", [python, "-m", "evaluation.pace", "--storage", str(storage)], out,
                        min(60.0, max(0.0, budget.left())))
        got = last_json(pace.get("text", ""))
        result["learner_decisions_per_s"] = got.get("decisions_per_s") if got else None
        result["pace"] = got
    return result


RAY_LOGS = Path("/tmp/ray/session_latest/logs")
WORKER_LINE = re.compile(r"ERROR|Error|raised|Traceback|WARNING")


def worker_errors(path: Path, most: int = 400, logs: Path = RAY_LOGS) -> int:
    """The error and warning lines of the league's actors (Ray's session logs ``logs``, which the
    launcher's output leaves out) into ``path``, at most ``most``; how many there were."""
    lines = []
    for log in sorted(logs.glob("worker-*.err")) + sorted(logs.glob("worker-*.out")):
        try:
            lines += [f"{log.name}: {line}" for line in log.read_text(errors="replace").splitlines()
                      if WORKER_LINE.search(line)]
        except OSError:
            continue
    path.write_text("\n".join(lines[:most]) + "\n")
    return len(lines)


def parse_league(text: str) -> tuple[str, list[str]]:
    """``NAME=KEY=VALUE,KEY=VALUE`` -> (name, overrides)."""
    name, _, rest = text.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise argparse.ArgumentTypeError(f"{text!r}: a league is NAME=KEY=VALUE,... with NAME of letters, digits, - and _")
    return name, [o for o in rest.split(",") if o]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "runs" / "gpu_check"))
    parser.add_argument("--budget", type=float, default=470.0, help="seconds for everything (default 470)")
    parser.add_argument("--league-minutes", type=float, default=3.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a launcher override for both leagues, after AUTO_OVERRIDES")
    parser.add_argument("--config", default=CONFIG, help=f"the leagues' and benches' config (default {CONFIG})")
    parser.add_argument("--league", action="append", type=parse_league, default=[], metavar="NAME=KEY=VALUE,...",
                        help="a league of these overrides, in place of auto and learner.replicas=2 (repeatable)")
    parser.add_argument("--skip-scale", action="store_true", help="leave out bench.scale")
    parser.add_argument("--skip-leagues", action="store_true", help="the benches only (no Ray)")
    parser.add_argument("--device", default="cuda", help="the learner's GPU (default cuda)")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    venv = ROOT / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    cores = os.cpu_count() or 1
    gpus = 1 if args.device != "cpu" else 0
    steps: dict[str, dict] = {}

    config = args.config
    steps["learner_cpu"] = run_step("learner_cpu", [python, "-m", "bench.learner", "--config", config, "--device",
                                                    "cpu", "--updates", "3"], out, min(45.0, budget.left()))
    steps["learner_gpu"] = run_step("learner_gpu", [python, "-m", "bench.learner", "--config", config, "--device",
                                                    args.device, "--updates", "3"], out, min(60.0, budget.left()))
    if not args.skip_scale:
        steps["scale"] = run_step("scale", [python, "-m", "bench.scale", "--config", config, "--cores", str(cores),
                                            "--gpus", str(gpus), "--device", args.device, "--seconds", "8"],
                                  out, min(90.0, budget.left()))
    overrides = AUTO_OVERRIDES + args.set
    leagues = [(f"league_{name}", extra) for name, extra in args.league] or [
        ("league_auto", []), ("league_replicas2", REPLICA_OVERRIDES)]
    if not args.skip_leagues:
        for i, (name, extra) in enumerate(leagues):
            steps[name] = league(name, overrides + extra, out, budget, args.league_minutes, len(leagues) - i, python,
                                 config)

    cpu, gpu = learner_rate(steps["learner_cpu"]), learner_rate(steps["learner_gpu"])
    ratio = None
    if cpu and gpu:
        base = next(iter(cpu["by_minibatch"].values()))  # the config's minibatch on one core
        ratio = {size: round(rate / base, 2) for size, rate in gpu["by_minibatch"].items()}
    scale = last_json(steps["scale"].get("text", "")) if "scale" in steps else None
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), "cores": cores, "out": str(out),
        "config": config,
        "learner_cpu": cpu, "learner_gpu": gpu, "gpu_over_one_core": ratio,
        "scale": None if not scale else {"units": scale.get("units"), "measured_speedup": scale.get("measured_speedup"),
                                         "prediction": scale.get("prediction"), "plan": scale.get("plan")},
        "steps": {name: {k: v for k, v in s.items() if k != "text"} for name, s in steps.items()},
        "seconds": round(args.budget - budget.left(), 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"gpu_check on {summary['machine']} ({cores} cores), {summary['seconds']} s, output in {out}")
    print(f"bench.learner decisions/s: cpu {cpu and cpu['by_minibatch']}, {args.device} {gpu and gpu['by_minibatch']}; "
          f"GPU over one core: {ratio}")
    if scale:
        p = scale["prediction"]
        print(f"bench.scale: predicted {p['env_steps_per_s']:.0f} env steps/s, bound by the {p['bound']}; "
              f"measured GPU speed-up {scale.get('measured_speedup')}")
    for name, _ in leagues:
        s = steps.get(name)
        if s is None:
            continue
        if "skipped" in s:
            print(f"{name}: skipped ({s['skipped']})")
            continue
        print(f"{name}: rc {s['rc']}{' (timed out)' if s['timed_out'] else ''}, {s['minutes']} min, env steps/s "
              f"median {s['env_steps_per_s_median']} max {s['env_steps_per_s_max']} over {s['progress_lines']} "
              f"lines; learner decisions/s {s.get('learner_decisions_per_s')}; GPU {s.get('gpu')}")
        for line in s["plan"]:
            print(f"  {line}")
    failed = [n for n, s in steps.items() if s.get("rc") not in (0, None) or s.get("timed_out")]
    if failed:
        print(f"steps that failed or timed out: {', '.join(failed)} (their logs are in {out})")
    print(json.dumps(summary))
    return 1 if failed else 0


def machine() -> str:
    """The GPU's name from ``nvidia-smi``, or the CPU's model."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        if smi.returncode == 0 and smi.stdout.strip():
            return smi.stdout.strip().replace("\n", ", ")
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
