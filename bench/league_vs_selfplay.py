"""League vs naive self-play on Kuhn poker at equal wall-clock time.

    python -m bench.league_vs_selfplay [--minutes 10]

Runs configs/kuhn_poker.yaml, then configs/kuhn_selfplay.yaml, each for the
same number of minutes on this machine (each through the real launcher, in a
fresh storage folder), then measures the exact NashConv of each league's Nash
mixture with OpenSpiel. Ends with one JSON line with ``league_nash_conv`` and
``selfplay_nash_conv``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from policies.exploitability import load_nash_mixture, nash_conv_of_mixture

ROOT = Path(__file__).resolve().parents[1]


def run(config: str, minutes: float, storage: Path) -> dict:
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    cmd = [sys.executable, "-m", "actors.launch", "--config", config, f"run.max_minutes={minutes}",
           f"run.storage={storage}", "run.progress_every_seconds=30"]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    ids, models, weights = load_nash_mixture(storage)
    result = nash_conv_of_mixture("kuhn_poker", models, weights)
    return {"nash_conv": result["nash_conv"], "support": len(ids)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.league_vs_selfplay")
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="league_vs_selfplay_") as tmp:
        league = run("configs/kuhn_poker.yaml", args.minutes, Path(tmp) / "league")
        print(f"league: NashConv {league['nash_conv']:.4f} (Nash support {league['support']})", flush=True)
        selfplay = run("configs/kuhn_selfplay.yaml", args.minutes, Path(tmp) / "selfplay")
        print(f"self-play: NashConv {selfplay['nash_conv']:.4f} (Nash support {selfplay['support']})", flush=True)
    print(json.dumps({"bench": "league_vs_selfplay", "game": "kuhn_poker", "minutes": args.minutes,
                      "league_nash_conv": league["nash_conv"], "selfplay_nash_conv": selfplay["nash_conv"],
                      "league_support": league["support"], "selfplay_support": selfplay["support"],
                      "ratio_league_to_selfplay": league["nash_conv"] / max(selfplay["nash_conv"], 1e-12)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
