"""`make test`'s runner (tests/halves.py): what each half runs, the verdict, and the session the pure
half runs in beside the Ray half."""
import sys
import tempfile

import pytest

import halves


def test_the_ray_half_collects_only_the_files_that_mark_ray_tests():
    files = halves.ray_test_files()
    assert "tests/test_launch.py" in files and "tests/test_operations.py" in files
    assert "tests/test_config.py" not in files and "tests/test_halves.py" not in files
    pure, ray = halves.commands([])
    assert pure[-4:] == ["-n", "2", "-m", "not ray"]
    assert ray[ray.index("-m", 3) + 1] == "ray" and ray[-len(files):] == files


def test_arguments_go_to_both_halves_in_place_of_the_ray_files():
    pure, ray = halves.commands(["tests/test_config.py", "-k", "bad"])
    assert pure[-3:] == ray[-3:] == ["tests/test_config.py", "-k", "bad"]
    assert not set(halves.ray_test_files()) & set(ray)


@pytest.mark.parametrize("pure, ray, code", [
    (0, 0, 0), (0, 5, 0), (5, 0, 0), (5, 5, 5), (1, 0, 1), (0, 1, 1), (2, 5, 1), (-15, 0, 1),
])
def test_the_verdict_passes_only_when_each_half_passed_or_selected_nothing(pure, ray, code):
    assert halves.verdict(pure, ray) == code


def test_the_half_beside_runs_in_a_session_of_its_own_at_a_low_autogroup_priority():
    if not halves.autogroups_on():
        pytest.skip("this kernel shares no cores by autogroup: the halves run one after the other")
    script = "import os; print(os.getsid(0), open('/proc/self/autogroup').read().split()[-1])"
    with tempfile.TemporaryFile("w+") as log:
        proc = halves.start_beside([sys.executable, "-c", script], log)
        assert proc is not None and proc.wait(timeout=30) == 0
        log.seek(0)
        session, nice = log.read().split()
    assert int(session) == proc.pid != halves.os.getsid(0)
    assert int(nice) == halves.AUTOGROUP_NICE
