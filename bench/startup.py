"""What an actor's process spends before its first work: CPU-seconds of imports and a first update.

    python -m bench.startup [--repeats 3]

A league starts about 14 actor processes, and on a 2-core machine their start-ups are bound by the
CPU (docs/results.md, "The test suite's time"). Each row runs a fresh interpreter ``--repeats``
times and prints the median CPU-seconds (user + system) of its work:

- ``torch``, ``ray``: the two imports every actor pays;
- ``actors.rollout``, ``actors.learner``, ``actors.coordinator``, ``serve.api``: each actor's module
  (with what it imports);
- ``first update, policies.optim.Adam`` against ``first update, torch.optim.Adam``: a learner's
  network and one Adam step after importing torch. ``torch.optim`` imports ``torch._dynamo`` when
  used, which the learners' own Adam does not.

Then one JSON line, with the ratio of the two first updates measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_UPDATE = """
import torch
from torch import nn
m = nn.Sequential(nn.Linear(42, 256), nn.ReLU(), nn.Linear(256, 7))
{make}
opt.zero_grad(); m(torch.randn(64, 42)).sum().backward(); opt.step()
"""

ROWS = {
    "import torch": "import torch",
    "import ray": "import ray",
    "import actors.rollout": "import actors.rollout",
    "import actors.learner": "import actors.learner",
    "import actors.coordinator": "import actors.coordinator",
    "import serve.api": "import serve.api",
    "first update, policies.optim.Adam": _UPDATE.format(
        make="from policies.optim import Adam; opt = Adam(m.parameters())"),
    "first update, torch.optim.Adam": _UPDATE.format(make="opt = torch.optim.Adam(m.parameters())"),
}

_MEASURE = ("import resource, sys\n"
            "{code}\n"
            "r = resource.getrusage(resource.RUSAGE_SELF)\n"
            "print(r.ru_utime + r.ru_stime)\n")


def cpu_seconds(code: str) -> float:
    """CPU-seconds of a fresh interpreter that runs ``code`` (its own start included)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE.format(code=code)], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def bench(repeats: int) -> dict:
    samples: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(repeats):  # rows interleaved, so a change of the machine's pace hits all of them
        for name, code in ROWS.items():
            samples[name].append(cpu_seconds(code))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ours, theirs = medians["first update, policies.optim.Adam"], medians["first update, torch.optim.Adam"]
    return {"bench": "startup", "repeats": repeats, "cpu_seconds": {k: round(v, 3) for k, v in medians.items()},
            "first_update_torch_optim_over_ours": round(theirs / ours, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters per row (median)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("nash-league: bench.startup: --repeats must be at least 1", file=sys.stderr)
        return 2
    result = bench(args.repeats)
    print(f"{'process work':<40} {'CPU-s':>7}")
    for name, value in result["cpu_seconds"].items():
        print(f"{name:<40} {value:7.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
