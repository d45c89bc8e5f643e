"""actors.priority: a measuring actor's threads yield the CPU (their nice values), never the reverse."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.priority import MAX_NICE, lower_priority

ROOT = Path(__file__).resolve().parent.parent

# A process with a thread already lowered further (base + 4) and one at its own base lowers
# itself to base + 2, then starts a thread: each thread's nice value as the kernel reports it.
# ``make test`` runs the pure tests at nice 19, where nothing can be lowered further: the probe
# first returns to nice 0 where it may (root), else it reports why it cannot run.
PROBE = """
import json, os, sys, threading
from actors.priority import lower_priority
base = os.getpriority(os.PRIO_PROCESS, 0)
if base > 15:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
        base = 0
    except PermissionError:
        print(json.dumps({"skip": f"runs at nice {base} without the privilege to raise its priority"}))
        sys.exit(0)
ready, done = threading.Event(), threading.Event()
tids = {}
def hold(name, nice=None):
    tids[name] = threading.get_native_id()
    if nice is not None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    ready.set()
    done.wait()
for name, nice in (("already_lower", base + 4), ("at_base", None)):
    ready.clear()
    threading.Thread(target=hold, args=(name, nice), daemon=True).start()
    ready.wait()
count = lower_priority(base + 2)
ready.clear()
threading.Thread(target=hold, args=("started_after",), daemon=True).start()
ready.wait()
tids["main"] = threading.get_native_id()
nice = {name: os.getpriority(os.PRIO_PROCESS, tid) - base for name, tid in tids.items()}
print(json.dumps({"count": count, "nice": nice, "threads": len(os.listdir("/proc/self/task"))}))
done.set()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice values are Linux's")
def test_every_thread_is_lowered_to_at_least_the_value_and_later_threads_inherit_it():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    got = json.loads(out.stdout)
    if "skip" in got:
        pytest.skip(got["skip"])
    # relative to the process's nice value when it started
    assert got["nice"] == {"already_lower": 4, "at_base": 2, "main": 2, "started_after": 2}
    assert got["count"] == 3  # main and the two holders; the one after did not exist yet
    assert got["threads"] == 4


def test_zero_changes_nothing():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert lower_priority(0) == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


@pytest.mark.parametrize("bad", [-1, MAX_NICE + 1])
def test_a_value_outside_0_to_19_is_refused(bad):
    with pytest.raises(ValueError, match="nice must be 0 to 19"):
        lower_priority(bad)
