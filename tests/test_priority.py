"""actors.priority: a measuring actor's threads yield the CPU (their nice values), never the reverse."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.priority import MAX_NICE, lower_priority

ROOT = Path(__file__).resolve().parent.parent

# A process with a thread already lowered further (7) and one at 0 lowers itself to 5, then
# starts a thread: each thread's nice value as the kernel reports it.
PROBE = """
import json, os, threading
from actors.priority import lower_priority
ready, done = threading.Event(), threading.Event()
tids = {}
def hold(name, nice=None):
    tids[name] = threading.get_native_id()
    if nice is not None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    ready.set()
    done.wait()
for name, nice in (("at_seven", 7), ("at_zero", None)):
    ready.clear()
    threading.Thread(target=hold, args=(name, nice), daemon=True).start()
    ready.wait()
count = lower_priority(5)
ready.clear()
threading.Thread(target=hold, args=("started_after",), daemon=True).start()
ready.wait()
tids["main"] = threading.get_native_id()
nice = {name: os.getpriority(os.PRIO_PROCESS, tid) for name, tid in tids.items()}
print(json.dumps({"count": count, "nice": nice, "threads": len(os.listdir("/proc/self/task"))}))
done.set()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice values are Linux's")
def test_every_thread_is_lowered_to_at_least_the_value_and_later_threads_inherit_it():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    got = json.loads(out.stdout)
    assert got["nice"] == {"at_seven": 7, "at_zero": 5, "main": 5, "started_after": 5}
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
