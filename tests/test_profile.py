"""operations.profile: stacks charged to the innermost frame of the project's code, and a real py-spy
recording of a process busy in one of the project's functions."""

import subprocess
import sys
import time

import pytest

from operations.profile import charge, frame_label, profile, py_spy

LANES = "/anywhere/checkout/policies/lanes.py"
TORCH = "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py"


def test_a_frame_of_ours_is_named_from_its_package_wherever_the_checkout_is():
    assert frame_label(f"_prepare ({LANES}:400)") == ("policies/lanes.py:_prepare", True)
    assert frame_label(f"forward ({TORCH}:125)") == ("torch/nn/modules/linear.py:forward", False)
    # an installed copy of a package named like ours is a library, not our code
    assert frame_label("run (/venv/lib/python3.12/site-packages/serve/x.py:3)")[1] is False


def test_a_sample_is_charged_to_its_innermost_frame_of_ours_else_to_its_innermost_frame():
    collapsed = "\n".join([
        f"run (/r/actors/rollout.py:10);step (/r/policies/lanes.py:313);_prepare ({LANES}:400);forward ({TORCH}:1) 30",
        f"run (/r/actors/rollout.py:10);step (/r/policies/lanes.py:313) 10",
        "thread (0x7f);_bootstrap (/usr/lib/python3.12/threading.py:1000);wait (/usr/lib/python3.12/threading.py:300) 5",
        "garbage line",
        "",
    ])
    counts = charge(collapsed)
    assert counts == {"policies/lanes.py:_prepare": 30, "policies/lanes.py:step": 10,
                      "/usr/lib/python3.12/threading.py:wait": 5}


def test_a_recording_charges_a_busy_process_to_the_function_of_ours_it_runs():
    try:
        py_spy()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    busy = ("import numpy as np\nfrom league.nash import nash_conv\n"
            "a = np.random.default_rng(0).uniform(-1, 1, (40, 40)); p = np.full(40, 1 / 40)\n"
            "print('ready', flush=True)\nwhile True:\n    nash_conv(a, p, p)\n")
    proc = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        out = profile({"busy": [proc.pid]}, seconds=3, rate=50)["busy"]
    finally:
        proc.kill()
        proc.wait()
    if out["samples"] == 0:
        pytest.skip("py-spy may not trace processes here (ptrace not permitted)")
    nash = [(share, cores) for label, share, cores in out["top"] if label.startswith("league/nash.py:")]
    assert sum(share for share, _ in nash) > 0.9  # the loop itself is a sliver of each call
    # each figure is rounded to 3 decimals, so their sum may pass the process's by half a unit each
    assert out["processes"] == 1 and 0 < sum(cores for _, cores in nash) <= out["cores"] + 0.0005 * (len(nash) + 1)


def test_cpu_only_counts_each_process_within_the_window_from_its_scans():
    from operations.profile import cpu_used

    window_start = 1000  # clock ticks since boot
    scans = [
        {("learner", 11, 500): 40.0, ("worker", 12, 600): 5.0, ("worker", 13, 700): 1.0},
        {("learner", 11, 500): 42.5, ("worker", 12, 600): 6.0, ("worker", 14, 1200): 0.75},  # 13 ended, 14 began
        {("learner", 11, 500): 45.0, ("worker", 12, 600): 7.5, ("worker", 14, 1200): 2.0},
    ]
    used = cpu_used(scans, window_start)
    assert used["learner"] == (1, 5.0)
    # 12: 7.5 - 5.0; 13: seen once, nothing within the window; 14: started inside it, from 0
    assert used["worker"] == (3, 2.5 + 0.0 + 2.0)
    # a pid reused by another process (another start time) is another process
    again = cpu_used([{("x", 5, 10): 3.0}, {("x", 5, 2000): 1.0}], window_start)
    assert again["x"] == (2, 0.0 + 1.0)


def test_cpu_only_reads_a_running_process_without_py_spy(monkeypatch):
    import operations.profile as prof

    proc = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\nwhile True:\n    pass\n"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        monkeypatch.setattr(prof, "league_processes", lambda: {"busy": [proc.pid], "other": [proc.pid]})
        time.sleep(0.5)  # CPU used before the window, which it must not count
        before = prof.cpu_seconds(proc.pid)
        out = prof.profile_cpu(["busy"], seconds=2, every=0.5)
        after = prof.cpu_seconds(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert list(out) == ["busy"] and out["busy"]["processes"] == 1 and out["busy"]["top"] == []
    # the process started before the window: what is counted lies within the process's own CPU
    # clock read just before and just after it (first and last scan fall in between), and a busy
    # loop uses some CPU in 2 s and at most the one core it runs on
    assert 0 < out["busy"]["cpu_seconds"] <= round(after - before, 1) + 0.05
    assert out["busy"]["cores"] <= 1.0 + 0.01
