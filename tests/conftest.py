import os

import pytest

from serve.environment import set_serve_environment

# Ray 2.60 token auth is for real clusters; tests run a local Ray without it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
set_serve_environment()  # Serve's settings, as the launcher sets them


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray per test module (starting Ray costs seconds), over-committing
    logical CPUs so the league's many light actors fit on two cores."""
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
