"""The run loop of a league actor that plays or measures (rollout worker, evaluator, prober, anchor
judge): one loop a process, and a stop that always gets through.

The launcher (``actors.league_run.LeagueRun.supervise``) calls ``run`` again whenever the call it
holds ends, with an error too. Ray reports some calls lost that did start ("the task may or may not
have been executed on the actor", an actor just restarted after its node died), so a second ``run``
can arrive while a loop runs. ``one_loop`` makes that call wait for the running loop and return its
result, rather than start a second loop beside it. ``stop`` and ``get_stats`` (marked ``control``)
run in a concurrency group of their own, so that no number of waiting ``run`` calls keeps them
from the actor.
"""

from __future__ import annotations

import functools
import threading

import ray

CONTROL_GROUP = "control"
# the actor's options: its control methods' own thread
CONTROL_OPTIONS = {"concurrency_groups": {CONTROL_GROUP: 1}}
control = ray.method(concurrency_group=CONTROL_GROUP)


def one_loop(run):
    """``run``, at most one call of it running in a process; a call that finds it running waits for
    it to end and returns what it returned."""

    @functools.wraps(run)
    def guarded(self, *args, **kwargs):
        lock = self.__dict__.setdefault("_one_loop", threading.Lock())
        if not lock.acquire(blocking=False):
            with lock:  # the running loop ended
                return self.__dict__.get("_one_loop_result")
        try:
            result = run(self, *args, **kwargs)
            self._one_loop_result = result
            return result
        finally:
            lock.release()

    return guarded
