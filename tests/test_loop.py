"""actors.loop: one run loop a process, and a stop that gets through however many ``run`` calls wait."""

import sys
import threading
import time

import pytest

from actors.loop import CONTROL_OPTIONS, control, one_loop


class Looping:
    """A league actor's shape: ``run`` loops until ``stop``; it counts the loops that ran."""

    def __init__(self):
        self._stop = threading.Event()
        self.loops = 0
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()

    @control
    def stop(self) -> None:
        self._stop.set()

    @control
    def get_stats(self) -> dict:
        return {"loops": self.loops, "most_running": self.most_running}

    @one_loop
    def run(self) -> int:
        with self.lock:
            self.loops += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        while not self._stop.wait(0.01):
            pass
        with self.lock:
            self.running -= 1
        return self.loops


def test_a_second_run_waits_for_the_running_loop_and_returns_its_result():
    actor = Looping()
    results = []
    threads = [threading.Thread(target=lambda: results.append(actor.run())) for _ in range(3)]
    threads[0].start()
    while actor.loops == 0:
        time.sleep(0.01)
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)
    assert actor.loops == 1 and all(t.is_alive() for t in threads)  # the later calls wait, none loops
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
    while ray_local.get(actor.get_stats.remote(), timeout=30)["loops"] == 0 and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    assert ray_local.get(actor.get_stats.remote(), timeout=30) == {"loops": 1, "most_running": 1}
    ray_local.get(actor.stop.remote(), timeout=30)
    # every call returns: the loop's, one that waited for it, and the third, which once a thread was
    # free either waited too or ran a loop that found the stop set (in whatever order Ray ran them)
    results = ray_local.get(runs, timeout=60)
    stats = ray_local.get(actor.get_stats.remote(), timeout=30)
    assert 1 in results and max(results) == stats["loops"] <= 2 and stats["most_running"] == 1
    ray_local.kill(actor)
