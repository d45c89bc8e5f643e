"""Serve's settings for a league, as environment variables (docs/serve.md, "Settings that matter on small machines").

Serve reads them when its modules are imported, in each process: the launcher sets them before it
starts a local Ray, whose controller and replicas inherit them; a cluster sets them in its own
environment (``deploy/kuberay/rayjob.yaml``). This module imports nothing of Ray's, so a process
can set them before anything imports Serve.

- ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: handle calls over gRPC, and Serve's other fast-path defaults.
- ``RAY_SERVE_ENABLE_DIRECT_INGRESS=0``: that mode turns direct ingress on, which starts an HTTP
  proxy on the head even with ``proxy_location="Disabled"``. No league route goes through Serve's
  proxies (the HTTP API is ``serve.api``'s own server), so the proxy would only cost a process.
"""

from __future__ import annotations

import os

SERVE_ENVIRONMENT = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"}


def set_serve_environment() -> None:
    """``SERVE_ENVIRONMENT`` in this process's environment, where the user set none of its keys."""
    for key, value in SERVE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
