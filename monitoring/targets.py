"""Where Prometheus finds the running league: a file-based service discovery file
(https://prometheus.io/docs/guides/file-sd/) at one fixed path, kept current by the launcher.

Why not Ray's own ``/tmp/ray/prom_metrics_service_discovery.json``: Ray writes it only when the
dashboard runs (the launcher's local Ray runs without it, to save ~1 GiB), and the link then keeps
pointing at an earlier session's file whose targets are dead. The launcher knows the current
session, so it writes the metrics endpoints of that session's alive nodes here, rewrites the file
whenever it is missing or differs (nodes joining or leaving, another run's leftovers), and empties
it on a clean exit. ``monitoring/prometheus/prometheus.yml`` reads this path. No Ray import here:
the launcher passes ``ray.nodes()`` in.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable

TARGETS_FILE = Path("/tmp/nash-league/prometheus_targets.json")
log = logging.getLogger(__name__)


def metrics_endpoints(nodes: Iterable[dict[str, Any]]) -> list[str]:
    """``host:port`` of the metrics agent of every alive node (``ray.nodes()`` entries); nodes
    without a metrics exporter (port unset or -1, metrics collection disabled) are left out."""
    found = set()
    for node in nodes:
        port = node.get("MetricsExportPort") or 0
        if node.get("Alive", node.get("alive")) and port > 0:
            host = node["NodeManagerAddress"]
            found.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return sorted(found)


def file_sd(endpoints: list[str]) -> str:
    """The file's text: one target group, labelled like Ray's own discovery file."""
    groups = [{"labels": {"job": "ray"}, "targets": endpoints}] if endpoints else []
    return json.dumps(groups, indent=1) + "\n"


class PrometheusTargets:
    """The discovery file of one league run."""

    def __init__(self, path: str | os.PathLike = TARGETS_FILE):
        self.path = Path(path)
        self.written: str | None = None

    def update(self, nodes: Iterable[dict[str, Any]]) -> list[str]:
        """Rewrite the file unless it already lists exactly these nodes; returns the endpoints.
        A file that cannot be written costs the league nothing but a warning."""
        endpoints = metrics_endpoints(nodes)
        text = file_sd(endpoints)
        try:
            if self._read() != text:
                self._write(text)
            self.written = text
        except OSError as exc:
            log.warning("cannot write Prometheus targets to %s: %s", self.path, exc)
        return endpoints

    def clear(self) -> None:
        """Empty the file if it still lists this run's nodes (a later run may have taken it over)."""
        try:
            if self.written is not None and self._read() == self.written:
                self._write(file_sd([]))
        except OSError as exc:
            log.warning("cannot clear Prometheus targets in %s: %s", self.path, exc)

    def _read(self) -> str | None:
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return None

    def _write(self, text: str) -> None:
        # Atomic replace: Prometheus may read the file at any moment.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)
