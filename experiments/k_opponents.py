"""Unshaped vs novelty-shaped league on a game with a dominant strategy, at equal wall-clock time.

    python -m experiments.k_opponents [--minutes 1.5]

Runs configs/dominant.yaml as it is ("unshaped"), then with every role's
``objective={k_opponents: 4, shaper: novelty, params: {weight: 0.0}}``
("novelty"), each for the same minutes through the real launcher in a fresh
storage folder, and reads each league's store. Ends with one JSON line
``{"unshaped": {...}, "novelty": {...}}``, each with

- ``diversity``: the league's own diversity score (mean pairwise cosine
  distance of the learners' action histograms over the run, league.diversity);
- ``pool_diversity``: the same measure over the frozen pool's policies;
- ``distinct_strategies``: how many different most-probable actions the pool's
  policies play (of 4);
- ``nash_support``: agents with positive weight in the league's final Nash;
- ``nash_conv``: the exact NashConv of that Nash mixture in the matrix game
  (the sum of both seats' best-response gains, in the game's payoff units).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from evaluation.compare import wait_or_stop
from league.diversity import DiversityTracker, diversity_score
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/dominant.yaml"
NOVELTY = "{k_opponents: 4, shaper: novelty, params: {weight: 0.0}}"


def policy_probs(model, seat: int, num_actions: int) -> np.ndarray:
    obs = np.eye(2, dtype=np.float32)[[seat]]
    return model.probs(obs, np.ones((1, num_actions), dtype=bool))[0].astype(np.float64)


def measure(storage: Path, payoff: np.ndarray) -> dict:
    """Diversity, Nash support and exact NashConv of a finished league's store."""
    n = payoff.shape[0]
    with LeagueStore(storage, create=False) as store:
        tracker = DiversityTracker()
        for agent_id, total, steps in store.diversity_rows():
            tracker.restore(agent_id, total, steps)
        nash = store.latest_nash()
        pool = {r.agent_id: policy_from_bytes(store.snapshot_blob(r.agent_id)) for r in store.agents()}
        games = store.counters().get("games", 0.0)
    seat0 = {a: policy_probs(m, 0, n) for a, m in pool.items()}
    seat1 = {a: policy_probs(m, 1, n) for a, m in pool.items()}
    members = [(a, float(w)) for a, w in zip(nash["ids"], nash["weights"]) if float(w) > 1e-9] if nash else []
    x = sum(w * seat0[a] for a, w in members) if members else np.full(n, 1.0 / n)
    y = sum(w * seat1[a] for a, w in members) if members else np.full(n, 1.0 / n)
    # zero-sum: NashConv = (max_i (A y)_i - x A y) + (max_j -(x A)_j + x A y)
    nash_conv = float((payoff @ y).max() + (-(x @ payoff)).max())
    probs = np.array(list(seat0.values())) if seat0 else np.zeros((0, n))
    return {"diversity": tracker.diversity_score(), "pool_diversity": diversity_score(probs),
            "distinct_strategies": len({int(p.argmax()) for p in probs}), "nash_support": len(members),
            "nash_conv": nash_conv, "pool_size": len(pool), "games": games,
            "nash_mixture_seat0": [round(float(v), 4) for v in x]}


def run(minutes: float, storage: Path, overrides: list[str]) -> None:
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    cmd = [sys.executable, "-m", "actors.launch", "--config", CONFIG, f"run.max_minutes={minutes}",
           f"run.storage={storage}", "run.progress_every_seconds=30", *overrides]
    code = wait_or_stop(subprocess.Popen(cmd, cwd=ROOT, env=env))
    if code != 0:
        raise subprocess.CalledProcessError(code, cmd)


def main(argv=None) -> int:
    import yaml

    parser = argparse.ArgumentParser(prog="python -m experiments.k_opponents")
    parser.add_argument("--minutes", type=float, default=1.5)
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: the running launcher is stopped, the temporary folder removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    payoff = np.array(yaml.safe_load((ROOT / CONFIG).read_text())["game"]["params"]["payoff"], dtype=np.float64)
    shaped = [f"roles.{r}.objective={NOVELTY}" for r in ("main_agent", "main_exploiter", "league_exploiter")]
    out = {}
    with tempfile.TemporaryDirectory(prefix="k_opponents_") as tmp:
        for name, overrides in (("unshaped", []), ("novelty", shaped)):
            run(args.minutes, Path(tmp) / name, overrides)
            out[name] = measure(Path(tmp) / name, payoff)
            print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
    print(json.dumps({"bench": "k_opponents", "game": "dominant", "minutes": args.minutes, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
