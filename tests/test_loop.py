"""actors.loop: one run loop a process, and a stop that gets through however many ``run`` calls wait."""

import linecache
import sys
import threading
import time

import pytest

from actors.loop import CONTROL_OPTIONS, control, one_loop


class Looping:
    """A league actor's shape: ``run`` loops until ``stop``; it counts the calls and the loops that ran."""

    def __init__(self):
        self._stop = threading.Event()
        self.calls = 0
        self.loops = 0
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()

    @control
    def stop(self) -> None:
        self._stop.set()

    @control
    def get_stats(self) -> dict:
        return {"calls": self.calls, "loops": self.loops, "most_running": self.most_running}

    def run(self) -> int:
        with self.lock:
            self.calls += 1
        return self._loop()

    @one_loop
    def _loop(self) -> int:
        with self.lock:
            self.loops += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        while not self._stop.wait(0.01):
            pass
        with self.lock:
            self.running -= 1
        return self.loops


def waiting_for_the_loop(thread: threading.Thread) -> bool:
    """``thread`` blocks in ``one_loop`` on the running loop's lock."""
    frame = sys._current_frames().get(thread.ident)
    return (frame is not None and frame.f_code.co_name == "guarded"
            and "with lock" in linecache.getline(frame.f_code.co_filename, frame.f_lineno))


def test_a_second_run_waits_for_the_running_loop_and_returns_its_result():
    actor = Looping()
    results = []
    threads = [threading.Thread(target=lambda: results.append(actor.run())) for _ in range(3)]
    threads[0].start()
    while actor.loops == 0:
        time.sleep(0.01)
    for t in threads[1:]:
        t.start()
    deadline = time.time() + 30
    while not all(waiting_for_the_loop(t) for t in threads[1:]) and time.time() < deadline:
        time.sleep(0.01)
    assert all(waiting_for_the_loop(t) for t in threads[1:])  # the later calls wait, none loops
    assert actor.loops == 1 and threads[0].is_alive()
    actor.stop()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    assert results == [1, 1, 1] and actor.most_running == 1
    assert actor.run() == 2  # the loop ended: a later call runs it again (here it returns at once, stopped)


@pytest.mark.ray
def test_stop_reaches_an_actor_whose_run_slots_are_all_taken(ray_local):
    """Two ``run`` calls fill the actor's two threads (the loop and a call waiting for it), as when
    the launcher calls ``run`` again after Ray reported a started call lost; ``stop`` and
    ``get_stats`` still get through on their own thread, and every call returns."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    actor = ray_local.remote(max_concurrency=2, **CONTROL_OPTIONS)(Looping).remote()
    runs = [actor.run.remote() for _ in range(3)]
    deadline = time.time() + 60
    while ray_local.get(actor.get_stats.remote(), timeout=30)["calls"] < 2 and time.time() < deadline:
        time.sleep(0.1)
    # both threads taken, by the loop and a call that waits for it; the third call queued
    assert ray_local.get(actor.get_stats.remote(), timeout=30) == {"calls": 2, "loops": 1, "most_running": 1}
    ray_local.get(actor.stop.remote(), timeout=30)
    # every call returns: the loop's, one that waited for it, and the third, which once a thread was
    # free either waited too or ran a loop that found the stop set (in whatever order Ray ran them)
    results = ray_local.get(runs, timeout=60)
    stats = ray_local.get(actor.get_stats.remote(), timeout=30)
    assert 1 in results and max(results) == stats["loops"] <= 2 and stats["most_running"] == 1
    ray_local.kill(actor)
