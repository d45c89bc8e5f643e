"""`make test`'s two halves: ``python tests/halves.py [PYTEST_ARGS ...]``.

The tests that start Ray run one after another in the foreground (one local Ray at a time). The
tests that start no Ray run beside them, in two processes, in a session of their own whose
autogroup is at nice 15. Linux shares the cores between sessions by their autogroups' weights
(``/proc/sys/kernel/sched_autogroup_enabled``), and a nice-15 group weighs 36 against the 1,024 of
the session the leagues run in: the pure tests take the cores the leagues leave idle (the Ray half
alone leaves a fifth of them idle, in its single-threaded starts and between leagues) and about 3%
of them otherwise, so that a pure test's subprocess still finishes within its timeout while a
league keeps both cores busy. Where autogroups are off (or not Linux), a nice value would not rank the halves (Ray
starts its actors at nice 15), so they run one after the other, the pure half first.

The pure half's output is printed when both are done. Either half may select nothing when the
arguments name tests of the other kind; both selecting nothing (pytest's exit code 5) fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
AUTOGROUP_NICE = 15
NO_TESTS = 5  # pytest's exit code when it collected nothing


def ray_test_files() -> list[str]:
    """The test files that mark tests ``pytest.mark.ray``: all the Ray half collects."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if re.search(r"mark\.ray", p.read_text()))


def commands(args: list[str]) -> tuple[list[str], list[str]]:
    """The pure half's and the Ray half's pytest command lines for ``args``."""
    pytest = [sys.executable, "-m", "pytest", "-q"]
    return ([*pytest, "-n", "2", "-m", "not ray", *args],
            [*pytest, "-m", "ray", "--durations=15", *(args or ray_test_files())])


def autogroups_on() -> bool:
    try:
        return AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False


def _lower_session() -> None:
    """In the pure half's process, after ``setsid``: its new session's autogroup to ``AUTOGROUP_NICE``."""
    with open("/proc/self/autogroup", "w") as group:
        group.write(str(AUTOGROUP_NICE))


def start_beside(cmd: list[str], log) -> subprocess.Popen | None:
    """``cmd`` in a session of its own at the lowest autogroup priority, its output to ``log``;
    None where that session cannot be made (the caller runs it in turn instead)."""
    if not autogroups_on():
        return None
    try:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_lower_session)
    except (OSError, subprocess.SubprocessError):
        return None


def verdict(pure: int, ray: int) -> int:
    """``make test``'s exit code: 0 when each half passed or selected nothing, but not both nothing."""
    if pure == NO_TESTS and ray == NO_TESTS:
        return NO_TESTS
    return 0 if pure in (0, NO_TESTS) and ray in (0, NO_TESTS) else 1


def main(args: list[str]) -> int:
    pure_cmd, ray_cmd = commands(args)
    running: list[subprocess.Popen] = []

    def stop(signum, frame) -> None:
        """Ctrl-C reaches the foreground half from the terminal, which stops it in its own way; the
        half beside it is in another session, so it is stopped here. A SIGTERM stops both."""
        for proc in running:
            if proc.poll() is None and (proc is beside or signum != signal.SIGINT):
                os.killpg(proc.pid, signal.SIGTERM) if proc is beside else proc.terminate()

    def foreground(cmd: list[str]) -> int:
        proc = subprocess.Popen(cmd, cwd=ROOT)
        running.append(proc)
        return proc.wait()

    with tempfile.TemporaryFile("w+") as log:
        beside = None
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        beside = start_beside(pure_cmd, log)
        if beside is not None:
            running.append(beside)
        pure = foreground(pure_cmd) if beside is None else None
        ray = foreground(ray_cmd)
        if beside is not None:
            pure = beside.wait()
            log.seek(0)
            sys.stdout.write(log.read())
    print(f"make test: pure tests exit {pure}, Ray tests exit {ray}"
          + ("" if beside is not None else " (one after the other: autogroups are off)"), flush=True)
    return verdict(pure, ray)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
