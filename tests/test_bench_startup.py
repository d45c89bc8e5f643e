"""bench.startup: a row's figure is the CPU time of the work it names, in a fresh interpreter."""

import subprocess
import sys

from bench import startup


def test_a_row_counts_the_cpu_time_of_its_code():
    idle = startup.cpu_seconds("pass")
    busy = startup.cpu_seconds("sum(i * i for i in range(3_000_000))")
    assert 0 < idle < busy and busy - idle > 0.05


def test_a_bad_repeat_count_is_one_line():
    out = subprocess.run([sys.executable, "-m", "bench.startup", "--repeats", "0"], capture_output=True, text=True,
                         cwd=startup.ROOT)
    assert out.returncode == 2 and out.stderr == "nash-league: bench.startup: --repeats must be at least 1\n"
