"""The CPU priority of a measuring actor: measurement yields the cores to learning.

On a machine with fewer cores than busy processes the kernel shares the cores evenly between
them, so an evaluator that plays pair games without pause takes as much CPU as the learner whose
update sets the league's pace (on 2 cores, Connect Four: learner 0.69 of a core, evaluator 0.50;
docs/results.md, "Where the league's CPU goes"). A higher nice value lets the learners and workers
take the CPU they can use first while the evaluator plays on what is left: it is not paced (it
still uses all of an otherwise idle core) but preempted.

Ray starts the processes of actors at nice 15 (the raylet's ``worker_niceness``; a job's driver
runs at 0), so a value up to 15 changes nothing for an actor: 19, the lowest priority, is what
ranks the evaluator below the league's other actors. The kernel weighs nice 15 at 36 and 19 at 15,
so where a learner and the evaluator both want the same core the evaluator gets about 29% of it.

Linux keeps a nice value per thread, so every thread of the process is lowered, and threads
started later inherit it from the thread that starts them. Processes in one autogroup (one
session: every actor of a Ray node, started by its raylet) share the cores by nice value;
between autogroups nice does not count, so the actors of one node are ranked and nothing else.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

MAX_NICE = 19


def thread_ids() -> list[int]:
    """This process's threads (Linux: ``/proc/self/task``); elsewhere the process alone (0)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def lower_priority(nice: int) -> int:
    """Raise every thread of this process to at least ``nice`` (0 to 19; 0 changes nothing; a
    thread already above it keeps its own) and return how many threads are now at least there.
    A thread gone meanwhile is skipped; where priorities cannot be set (no ``os.setpriority``, a
    refusal) the process runs on as it was, logged."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"nice must be 0 to {MAX_NICE}, got {nice!r}")
    if nice == 0 or not hasattr(os, "setpriority"):
        return 0
    done = 0
    for tid in thread_ids():
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            done += 1
        except ProcessLookupError:  # the thread ended
            continue
        except OSError as exc:
            log.warning("cannot lower the priority of thread %s to nice %s: %s", tid, nice, exc)
    return done
