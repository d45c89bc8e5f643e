"""What a league run holds in the launcher's process besides its actors: the Ray it runs on, the
OS lock on its storage folder, the clean-up of what a killed launcher left of its local Ray, and the
Prometheus discovery file (``monitoring.targets``) that ``make monitor`` finds the league by.

``RaySession`` takes them all and ``close`` gives them back; the launcher (``actors.launch``) and
the Python API (``actors.league_run.LeagueRun``) both run a league inside one.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

import ray

from actors.outbox import node_run_dir, outbox_dir
from actors.placement import check_storage_resource, resolve_storage
from actors.preflight import import_paths, open_lock
from league.config import Config, ConfigError
from league.store import db_path
from monitoring.targets import PrometheusTargets
from serve.environment import set_serve_environment

log = logging.getLogger(__name__)
TARGETS_EVERY_SECONDS = 10.0  # how often the Prometheus discovery file follows the cluster's nodes
SESSION_NAME = "ray_session"
# Ray's own logs (raylet, GCS, agents and every worker's .out/.err) rotate at this size, keeping this
# many old files each: Ray 2.60 defaults to 512 MB x 5 per file, and rotates worker output only
# when RAY_ROTATION_MAX_BYTES is set at all (docs/operations.md). A user's own values win.
RAY_LOG_MAX_BYTES = 64 * 1024 * 1024
RAY_LOG_BACKUPS = 3


def worker_pythonpath(config: str | None) -> str:
    """``PYTHONPATH`` for a local Ray's processes: what was set already, then ``import_paths``."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + import_paths(config)
    return os.pathsep.join(dict.fromkeys(parts))


def lock_storage(storage: str):
    """Hold an OS lock on the run's ``launcher.lock`` for the life of this process.

    Two launchers on one folder would run two coordinators against one SQLite
    file and one set of outboxes. ``flock`` is released by the kernel when the
    process dies, however it dies (SIGKILL too), so a crashed run never leaves a
    stale lock. The lock lives in this node's folder for the run
    (``actors.outbox.node_run_dir``), not in ``run.storage``, which only the
    coordinator opens. A fresh run (no league in the storage yet) starts with
    no outboxes: a deleted run's unsent messages must not enter a new league.
    Returns the open file; keep it referenced."""
    f = open_lock(storage)
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    if not db_path(storage).exists():
        shutil.rmtree(outbox_dir(storage), ignore_errors=True)
    return f


def reap_leftovers(storage: str) -> int:
    """Kill what a SIGKILLed launcher left of its local Ray (returns how many processes).

    A local Ray shares the launcher's fate: its GCS and raylet die with it and its workers
    exit when they find their raylet gone, normally within seconds. But a few helper
    processes (the dashboard and runtime-env agents) are re-parented to init and linger,
    and a worker can stay stuck in its exit for minutes on a loaded machine, its files
    (the store's too) still open. They are found by their open files in the dead run's
    session folder, recorded in the run's ``ray_session`` marker (``node_run_dir``);
    nothing else is touched."""
    marker = node_run_dir(storage) / SESSION_NAME
    try:
        session = marker.read_text().strip()
    except OSError:
        return 0
    killed = 0
    if session and "session_" in Path(session).name:
        for pid in session_processes(session):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:  # gone meanwhile
                continue
    marker.unlink(missing_ok=True)
    if killed:
        log.warning("killed %d leftover processes of the previous run's Ray (%s)", killed, session)
    return killed


def session_processes(session: str) -> list[int]:
    """Pids of the processes (this one aside) with a file open under the Ray session folder ``session``."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int(proc.name) != os.getpid() and any(
                    os.readlink(fd).startswith(session + "/") for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return pids


def bound_ray_logs() -> None:
    """Set Ray's log rotation for the local cluster this process starts (it and its workers
    inherit the environment)."""
    os.environ.setdefault("RAY_ROTATION_MAX_BYTES", str(RAY_LOG_MAX_BYTES))
    os.environ.setdefault("RAY_ROTATION_BACKUP_COUNT", str(RAY_LOG_BACKUPS))


def record_session(storage: str) -> None:
    """Write the session folder of the Ray this process started into the run's ``ray_session``
    marker, which ``reap_leftovers`` reads after a crash."""
    try:
        session = ray._private.worker._global_node.get_session_dir_path()
    except AttributeError:  # a Ray without this internal: no reaping after a crash
        return
    (node_run_dir(storage) / SESSION_NAME).write_text(str(session))


def metrics_port(port: int | None) -> int | None:
    """``port`` if it is free, else None (Ray picks one): Ray does not check it, and its node then
    times out at startup with no word about the port. Prometheus finds either through the
    targets file. Probed on all interfaces, where Ray's agent listens: Ray replaces a loopback
    node address by the machine's."""
    if port is None:
        return None
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the agent's HTTP server does
        try:
            sock.bind(("", port))
        except OSError:
            print(f"nash-league: ray.metrics_export_port {port} is in use; Ray picks a free port instead",
                  file=sys.stderr, flush=True)
            return None
    return port


class RaySession:
    """What a league run holds in this process besides its actors: the lock on ``run.storage``,
    the Ray it runs on and the Prometheus targets file (``make monitor`` finds the league by it).

    In a process already connected to a Ray (a notebook that called ``ray.init``) it uses that
    one; inside ``ray job submit`` (``RAY_ADDRESS`` set) or with ``ray.address`` it joins that
    cluster; otherwise it starts a local Ray as the launcher does, reaping what a killed launcher left
    of one on this storage first. ``close`` gives back what it took (a Ray it started is shut
    down). A Ray it did not start is left running. Raises ``StorageInUse`` and, when no node
    declares ``ray.storage_resource``, ``ConfigError``."""

    def __init__(self, cfg: Config, config_path: str | None = None):
        # Absolute before anything starts: the coordinator may run in another working directory (a job's).
        cfg.run.storage, warning = resolve_storage(cfg.run.storage)
        if warning:
            print(f"nash-league: warning: {warning}", file=sys.stderr, flush=True)
        self.storage = cfg.run.storage
        self.lock = lock_storage(cfg.run.storage)  # held until close (or until the process exits)
        self.targets: PrometheusTargets | None = None
        self.started_ray = False
        set_serve_environment()
        if ray.is_initialized():  # a Ray this process is connected to is used as it is
            pass
        elif os.environ.get("RAY_ADDRESS") or cfg.ray.address is not None:
            ray.init(address=cfg.ray.address or os.environ.get("RAY_ADDRESS"), namespace=cfg.ray.namespace)
        else:
            reap_leftovers(cfg.run.storage)
            # a local Ray's processes inherit this environment: the user's game imports in every worker
            os.environ["PYTHONPATH"] = worker_pythonpath(config_path)
            bound_ray_logs()
            ray.init(address="local", namespace=cfg.ray.namespace, include_dashboard=False,
                     _node_ip_address="127.0.0.1", num_cpus=cfg.ray.num_cpus or max(8, 4 * (os.cpu_count() or 2)),
                     log_to_driver=False, _metrics_export_port=metrics_port(cfg.ray.metrics_export_port))
            self.started_ray = True
            record_session(cfg.run.storage)
        problem = check_storage_resource(cfg)
        if problem:
            self.close()
            raise ConfigError("", problem)
        print(f"nash-league: {cfg.game.name} league, storage {cfg.run.storage}", flush=True)
        self.targets = PrometheusTargets()
        endpoints = self.targets.update(ray.nodes())
        print(f"nash-league: metrics of Ray session {ray.get_runtime_context().get_session_name()} at "
              f"{', '.join(endpoints) or '(none)'}; Prometheus targets in {self.targets.path} (`make monitor`)",
              flush=True)

    def update_targets(self) -> None:
        """Follow the nodes of the cluster (they join and leave)."""
        if self.targets is not None:
            self.targets.update(ray.nodes())

    def close(self) -> None:
        if self.targets is not None:
            self.targets.clear()
            self.targets = None
        if self.started_ray:
            ray.shutdown()
            (node_run_dir(self.storage) / SESSION_NAME).unlink(missing_ok=True)
            self.started_ray = False
        if self.lock is not None:
            self.lock.close()  # releases the flock
            self.lock = None
