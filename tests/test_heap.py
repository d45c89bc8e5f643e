"""actors.heap: large blocks freed go back to the system, where glibc's malloc would keep them."""

import subprocess
import sys
from pathlib import Path

import pytest

from actors import heap

ROOT = Path(__file__).resolve().parents[1]

# 64 blocks of 4 MiB, each followed by a small array that stays: freeing the blocks leaves holes
# below live memory, which a heap cannot hand back. Prints the MiB still resident after the free.
PROBE = """
import sys
import numpy as np
from actors import heap

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

if sys.argv[1] == "fixed":
    assert heap.fix_mmap_threshold()
np.ones(1 << 19)  # a 4 MiB block freed: glibc raises its mmap threshold to that size
base = rss_mb()
big, small = [], []
for _ in range(64):
    big.append(np.ones(1 << 19))
    small.append(np.ones(1000))
del big
if sys.argv[1] == "trimmed":
    assert heap.trim()
print(rss_mb() - base)
"""


def retained_mb(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout)


@pytest.mark.skipif(not heap.available() or not Path("/proc/self/statm").exists(),
                    reason="glibc's mallopt and /proc are needed")
def test_fixed_threshold_and_trim_hand_freed_blocks_back():
    # 256 MiB were allocated and freed: glibc's default keeps most of them; with the threshold fixed
    # they were never in the heap, and a trim after the free hands the heap's free pages back
    assert retained_mb("default") > 128
    assert retained_mb("fixed") < 16
    assert retained_mb("trimmed") < 16
