import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from serve.environment import set_serve_environment

ROOT = Path(__file__).resolve().parents[1]
# Ray 2.60 token auth is for real clusters; tests run a local Ray without it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
set_serve_environment()  # Serve's settings, as the launcher sets them


def pytest_collection_modifyitems(items):
    """The tests on the session's Ray last (a stable sort: each module keeps its order), so that it
    starts after the tests that start their own and does not idle beside them."""
    items.sort(key=lambda item: "shared_ray" in getattr(item, "fixturenames", ()))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the learner groups' own ``free_port``)."""
    from actors.learner_group import free_port as free_on

    return free_on("127.0.0.1")


@pytest.fixture(scope="session")
def shared_ray():
    """The address of one Ray cluster for the whole session (``ray start --head``, as on a cluster's
    head node), over-committing logical CPUs so that a league's many light actors fit on two cores.
    Leagues join it as they join a cluster under ``ray job submit`` (``RAY_ADDRESS``), one after
    another, each removing its actors and Serve apps when it stops; each saves a Ray start and stop
    and the CPU of Ray's own processes starting. Tests that kill or time Ray itself, read its
    session folder or need their own ``PYTHONPATH`` start their own."""
    ray_bin = Path(sys.executable).parent / "ray"
    temp = tempfile.mkdtemp(prefix="nlray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = free_port()
    # ports of its own, and worker ports above the range Ray picks from by default (10002-19999), so
    # that the local Rays other tests start beside it find theirs free
    ports = [f"--{name}={free_port()}" for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                       "metrics-export-port", "runtime-env-agent-port",
                                                       "node-manager-port", "object-manager-port")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    started = subprocess.run([str(ray_bin), "start", "--head", f"--port={port}", *ports, "--min-worker-port=20000",
                              "--max-worker-port=20999", "--node-ip-address=127.0.0.1", "--num-cpus=16",
                              "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_ray_at(temp)
        shutil.rmtree(temp, ignore_errors=True)  # its session's logs


def stop_ray_at(temp: str) -> None:
    """Stop the Ray node whose temp folder is ``temp`` (its processes hold files open in its session
    folder), and no other Ray on this machine."""
    from actors.runtime import session_processes

    session = str(Path(temp, "session_latest").resolve())
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        pids = session_processes(session)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + wait
        while pids and time.time() < deadline and session_processes(session):
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_local(shared_ray):
    """This process connected to the session's Ray for one test module, as a notebook's
    ``ray.init`` connects to a cluster. Disconnecting kills the actors it made; Serve's apps are
    detached, so any a test left are deleted first."""
    import ray

    ray.init(address=shared_ray, log_to_driver=False, namespace="league-test")
    yield ray
    if "ray.serve" in sys.modules:
        from ray import serve

        for app in serve.status().applications:  # none where Serve never started
            serve.delete(app)
    ray.shutdown()


@pytest.fixture(scope="module")
def own_ray():
    """A local Ray of this test module's own, whose processes inherit this process's environment
    (its ``PYTHONPATH``), as the launcher starts one."""
    import ray

    ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=16, include_dashboard=False, log_to_driver=False, namespace="league-test")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small MLPs gain nothing from intra-op threads, and lose a lot when the cores are shared."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
