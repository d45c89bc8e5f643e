"""How fast a run's learner went, stretch by stretch, and what its anchor judge saw per snapshot.

    python -m evaluation.pace --storage RUN [--storage RUN2 ...] [--every 180] [--learner main_agent-0]
        [--per-snapshots 40]

Reads kept run folders (no Ray). For each it prints one JSON line:

- ``stretches``: the learner's decisions trained on per second in each ``--every`` seconds from
  the coordinator's first start (from its snapshot events: each carries the learner's step, the
  decisions it had trained on, and its time), so two runs of one config side by side show where
  one fell behind and whether the gap grew with the pool;
- ``updates`` and ``step``: the learner's updates and decisions at its last checkpoint, and
  ``decisions_per_s``: its decisions over ``seconds``, the coordinator's first start to the
  store's last write;
- ``judge``: the anchor judge's scores of the newest main snapshot (``anchor:newest_main:<anchor>``),
  averaged over the rounds whose snapshot falls in each block of ``--per-snapshots`` snapshots
  (``v0``-``v39``, ...), with the rounds counted: what the judge saw per unit of experience rather
  than per second.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from evaluation.stored_run import StoredRun
from league.errors import ArgumentParser, UsageError, fail
from league.measures import NEWEST_MAIN, anchor_score_kind
from league.pool import AgentType

PREFIX = anchor_score_kind(NEWEST_MAIN, "")


def stretch_rates(points: list[tuple[float, int]], every: float) -> list[float | None]:
    """Decisions per second within each ``every``-second stretch of ``(seconds, step)`` points
    (seconds from the start, in order): the first and last point inside a stretch; None where it
    holds fewer than two."""
    if not points:
        return []
    stretches: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for t, step in points:
        stretches[int(t // every)].append((t, step))
    out: list[float | None] = []
    for k in range(int(points[-1][0] // every) + 1):
        inside = stretches.get(k, [])
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            out.append(None)
        else:
            out.append(round((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]), 1))
    return out


def version_of(agent_id: str) -> int:
    """The snapshot number of ``<learner>-vN``."""
    return int(agent_id.rsplit("-v", 1)[1])


def judge_by_snapshot(rounds: dict[str, list[dict]], per: int) -> dict[str, dict[str, dict]]:
    """Each anchor's newest-main scores averaged per block of ``per`` snapshots: ``{anchor:
    {"v0-v39": {"score", "rounds"}}}``, blocks in order."""
    out: dict[str, dict[str, dict]] = {}
    for anchor, rows in sorted(rounds.items()):
        blocks: dict[int, list[float]] = defaultdict(list)
        for r in rows:
            blocks[version_of(r["agents"][0]) // per].append(r["value"])
        out[anchor] = {f"v{per * b}-v{per * b + per - 1}": {"score": round(sum(v) / len(v), 4), "rounds": len(v)}
                       for b, v in sorted(blocks.items())}
    return out


def run_pace(run_dir: str, every: float, learner: str, per: int) -> dict:
    with StoredRun(run_dir) as run:
        store = run.store
        starts = store.events("coordinator_start")
        if not starts:
            raise UsageError("--storage", f"{run.path}: no coordinator ever started on this store")
        t0 = starts[0]["time"]
        snaps = [e for e in store.events("snapshot") if e.get("learner_id") == learner]
        rows = [r for r in store.learners() if r["learner_id"] == learner]
        if not rows:
            raise UsageError(f"--learner {learner}", f"{run.path}: no learner {learner!r} (--learner)")
        rounds = {kind[len(PREFIX):]: store.measurements(kind) for kind in store.measurement_kinds(PREFIX)}
        seconds = (store.last_write_time() or t0) - t0
    points = [(e["time"] - t0, int(e["step"])) for e in snaps]
    return {"bench": "pace", "storage": run_dir, "learner": learner, "every": every,
            "stretches": stretch_rates(points, every), "snapshots": len(snaps),
            "updates": rows[0]["version"], "step": rows[0]["step"], "seconds": round(seconds, 1),
            "decisions_per_s": round(rows[0]["step"] / seconds, 1) if seconds > 0 else None,
            "judge": judge_by_snapshot(rounds, per)}


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m evaluation.pace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", action="append", required=True, metavar="RUN_DIR", help="a run folder (repeatable)")
    parser.add_argument("--every", type=float, default=180.0, help="seconds per stretch (default 180)")
    first_main = f"{AgentType.main().value}-0"
    parser.add_argument("--learner", default=first_main, help=f"whose pace (default {first_main})")
    parser.add_argument("--per-snapshots", type=int, default=40, help="snapshots per block of the judge's scores (default 40)")
    args = parser.parse_args(argv)
    if not args.every > 0:
        parser.error(f"--every must be > 0, got {args.every}")
    if args.per_snapshots < 1:
        parser.error(f"--per-snapshots must be >= 1, got {args.per_snapshots}")
    for run_dir in args.storage:
        try:
            line = run_pace(run_dir, args.every, args.learner, args.per_snapshots)
        except UsageError as exc:
            return fail(exc)
        except (ValueError, FileNotFoundError) as exc:
            return fail(f"--storage {run_dir}", exc)
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
