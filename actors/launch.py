"""Start (or resume) a league: ``python -m actors.launch [--config FILE] [key=value ...]``.

With no arguments it runs configs/kuhn_poker.yaml on a local Ray with storage
under runs/. Inside ``ray job submit`` (RAY_ADDRESS set) it joins that cluster.
Pointing ``run.storage`` at an existing run resumes it. A bad config value
stops it before Ray starts, with one line that names the key; so does a game
brought by module path that breaks the protocol of envs/base.py
(``envs.protocol.check_game``). Such a module imports from the current
directory or the config file's folder, in the launcher and in every worker of
a local Ray (``import_paths``). Ctrl-C, or the
budget (``run.max_minutes``, ``run.max_env_steps``), stops it cleanly with
everything flushed to the store.

The same from Python (a notebook, a script): ``LeagueRun.start`` (also
``from nash_league import LeagueRun``), whose ``stop`` flushes the store as
Ctrl-C does; docs/user-guide.md shows it.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from actors.outbox import node_run_dir, outbox_dir
from league.store import db_path

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "kuhn_poker.yaml"
log = logging.getLogger("actors.launch")
TARGETS_EVERY_SECONDS = 10.0  # how often the Prometheus discovery file follows the cluster's nodes


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m actors.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help=f"YAML config (default {DEFAULT_CONFIG.name})")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. run.max_minutes=10")
    return parser.parse_args(argv)


def override_texts(overrides: Mapping[str, Any] | Iterable[str] = ()) -> list[str]:
    """The launcher's ``key=value`` arguments for overrides given as ``{"run.storage": "runs/a"}``
    (each value written as YAML, so it keeps its type) or as ``["run.storage=runs/a"]``."""
    import yaml

    def text(value: Any) -> str:
        dumped = yaml.safe_dump(value, default_flow_style=True, width=float("inf")).strip()
        return dumped[:-3].strip() if dumped.endswith("\n...") else dumped  # a scalar's end-of-document mark

    if isinstance(overrides, Mapping):
        return [f"{key}={text(value)}" for key, value in overrides.items()]
    return [overrides] if isinstance(overrides, str) else list(overrides)


def load(argv: list[str] | None):
    """Config and game shape of the launcher's command line, all checked before Ray starts."""
    args = parse_args(argv)
    return load_checked(args.config, args.overrides)


def load_checked(config: str | os.PathLike | Mapping[str, Any] | None, overrides: Iterable[str] = ()):
    """Config and game shape (``league.config``: ``load_config``, then ``check_runnable``), for a
    config given as a YAML file's path, as a dict (what such a file holds) or as None
    (``configs/kuhn_poker.yaml``). A user's game module imports from here or next to the file."""
    from actors.preflight import check_runnable
    from league.config import load_config

    path = None if config is None or isinstance(config, Mapping) else os.fspath(config)
    default = DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None
    cfg = load_config(config if config is not None else default, overrides)
    for folder in import_paths(path):
        if folder not in sys.path:
            sys.path.append(folder)
    return cfg, check_runnable(cfg)


def import_paths(config: str | None) -> list[str]:
    """Folders a user's game module (``game.name: "module:factory"``) is imported from, besides the
    installed packages: the current directory and the config file's folder, absolute. The launcher
    puts them on its own ``sys.path`` and, for a local Ray, on every worker's ``PYTHONPATH``."""
    folders = [os.getcwd()]
    if config:
        folders.append(str(Path(config).resolve().parent))
    return list(dict.fromkeys(folders))


def worker_pythonpath(config: str | None) -> str:
    """``PYTHONPATH`` for a local Ray's processes: what was set already, then ``import_paths``."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + import_paths(config)
    return os.pathsep.join(dict.fromkeys(parts))


LOCK_NAME = "launcher.lock"


class StorageInUse(RuntimeError):
    """Another launcher runs a league on this storage folder."""


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
    path = node_run_dir(storage)
    path.mkdir(parents=True, exist_ok=True)
    f = open(path / LOCK_NAME, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise StorageInUse(f"storage {storage} is in use by another launcher (pid {holder}); stop it first "
                           "or choose another run.storage") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    if not db_path(storage).exists():
        shutil.rmtree(outbox_dir(storage), ignore_errors=True)
    return f


SESSION_NAME = "ray_session"


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


# Ray's own logs (raylet, GCS, agents and every worker's .out/.err) rotate at this size, keeping this
# many old files each: Ray 2.60 defaults to 512 MB x 5 per file, and rotates worker output only
# when RAY_ROTATION_MAX_BYTES is set at all (docs/operations.md). A user's own values win.
RAY_LOG_MAX_BYTES = 64 * 1024 * 1024
RAY_LOG_BACKUPS = 3


def bound_ray_logs() -> None:
    """Set Ray's log rotation for the local cluster this process starts (it and its workers
    inherit the environment)."""
    os.environ.setdefault("RAY_ROTATION_MAX_BYTES", str(RAY_LOG_MAX_BYTES))
    os.environ.setdefault("RAY_ROTATION_BACKUP_COUNT", str(RAY_LOG_BACKUPS))


def record_session(storage: str) -> None:
    import ray

    try:
        session = ray._private.worker._global_node.get_session_dir_path()
    except AttributeError:  # a Ray without this internal: no reaping after a crash
        return
    (node_run_dir(storage) / SESSION_NAME).write_text(str(session))


class RaySession:
    """What a league run holds in this process besides its actors: the lock on ``run.storage``,
    the Ray it runs on and the Prometheus targets file (``make monitor`` finds the league by it).

    In a process already connected to a Ray (a notebook that called ``ray.init``) it uses that
    one; inside ``ray job submit`` (``RAY_ADDRESS`` set) or with ``ray.address`` it joins that
    cluster; otherwise it starts a local Ray as the launcher does, reaping what a killed launcher left
    of one on this storage first. ``close`` gives back what it took (a Ray it started is shut
    down). A Ray it did not start is left running. Raises ``StorageInUse`` and, when no node
    declares ``ray.storage_resource``, ``ConfigError``."""

    def __init__(self, cfg, config_path: str | None = None):
        import ray

        from actors.placement import check_storage_resource, resolve_storage
        from league.config import ConfigError
        from monitoring.targets import PrometheusTargets

        # Absolute before anything starts: the coordinator may run in another working directory (a job's).
        cfg.run.storage, warning = resolve_storage(cfg.run.storage)
        if warning:
            print(f"nash-league: warning: {warning}", file=sys.stderr, flush=True)
        self.storage = cfg.run.storage
        self.lock = lock_storage(cfg.run.storage)  # held until close (or until the process exits)
        self.targets: PrometheusTargets | None = None
        self.started_ray = False
        os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
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
        import ray

        if self.targets is not None:
            self.targets.update(ray.nodes())

    def close(self) -> None:
        import ray

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


class LeagueRun:
    """A running league: its actors on Ray, what keeps their loops running, and how it stops.

    The Python API (``from nash_league import LeagueRun``)::

        run = LeagueRun.start("configs/smoke.yaml", {"run.storage": "runs/mine"})
        run.status()["games"]      # what GET /status shows
        run.nash()["agents"]       # the published mixture, as GET /nash shows it
        run.stop()                 # everything flushed to the store, as Ctrl-C on the launcher

    ``start`` checks the config (``ConfigError`` names the key), takes the storage
    (``StorageInUse``), starts or joins a Ray (``RaySession``), starts the actors and keeps their
    loops running in a background thread until ``stop`` or the budget (``run.max_minutes``,
    ``run.max_env_steps``), when the league stops itself as the launcher does. ``python -m
    actors.launch`` is this class with the loop in the foreground and a progress line.

    ``LeagueRun(cfg, info)`` starts the actors on the Ray this process is connected to and leaves
    the loop to the caller (``supervise``; tests and benches)."""

    def __init__(self, cfg, info, session: RaySession | None = None):
        import ray

        from actors.coordinator import LeagueCoordinator
        from actors.evaluator import Evaluator
        from actors.learner import Learner
        from actors.placement import actor_options, coordinator_options, learner_options
        from actors.rollout import RolloutWorker
        from league.league import learner_ids

        self.cfg = cfg
        ns = cfg.ray.namespace
        self.coordinator = LeagueCoordinator.options(
            name=cfg.ray.coordinator_name, namespace=ns, **coordinator_options(cfg)).remote(cfg)
        ray.get(self.coordinator.ping.remote())
        self.api: list = []
        if cfg.serve.api:  # first after the coordinator: a taken port stops the launch before anything else starts
            from serve.api import ApiUnavailable, start_api

            try:
                self.api = start_api(cfg, info.obs_size, info.num_actions)
            except ApiUnavailable:
                ray.kill(self.coordinator, no_restart=True)
                raise
            if self.api:
                print(f"nash-league: league page and HTTP API on http://{cfg.serve.host}:{cfg.serve.port}/ (GET "
                      "/nash, POST /nash/act, /status, /pool, /payoff, /play; schema at /docs)", flush=True)
        # the learners start (their processes import torch, load their checkpoints) while Serve
        # deploys the opponents, which waits mostly on its controller's loops; both are ready below
        roles = learner_ids(cfg)
        self.learners = {
            lid: Learner.options(name=f"learner:{lid}", namespace=ns, **learner_options(cfg.learner)).remote(
                lid, role.value, cfg, info.obs_size, info.num_actions, self.coordinator,
                obs_shape=info.obs_shape, channels_last=info.channels_last)
            for lid, role in roles.items()
        }
        self.apps: list[str] = []
        if cfg.rollout.opponent_inference == "serve":
            self._start_opponents(cfg)
        ray.get([l.info.remote() for l in self.learners.values()])
        self.workers = {}
        for lid in roles:
            for j in range(cfg.rollout.workers_per_learner):
                wid = f"worker:{lid}:{j}"
                self.workers[wid] = RolloutWorker.options(name=wid, namespace=ns, **actor_options(cfg.rollout)).remote(
                    wid, lid, cfg, self.coordinator, self.learners)
        self.evaluators = {
            f"evaluator:{i}": Evaluator.options(name=f"evaluator:{i}", namespace=ns,
                                                **actor_options(cfg.evaluator)).remote(
                f"evaluator:{i}", cfg, self.coordinator, index=i)
            for i in range(cfg.evaluator.count)
        }
        if cfg.evaluator.probe_every_seconds > 0:
            from actors.prober import Prober

            # supervised and stopped like an evaluator
            self.evaluators["prober"] = Prober.options(
                name="prober", namespace=ns, num_cpus=cfg.evaluator.probe_num_cpus).remote(
                cfg, self.coordinator, seed=cfg.run.seed * 1000 + 990)
        if cfg.anchors:
            from actors.anchor_judge import AnchorJudge

            # supervised and stopped like an evaluator; never a training opponent
            self.evaluators["anchor_judge"] = AnchorJudge.options(
                name="anchor_judge", namespace=ns, num_cpus=cfg.evaluator.anchor_num_cpus).remote(
                cfg, self.coordinator, seed=cfg.run.seed * 1000 + 980)
        self.runs: dict[str, Any] = {}
        self.session = session
        self.started_at = time.time()
        self.final: dict[str, Any] | None = None  # the status at the stop, once stopped
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None

    @classmethod
    def start(cls, config: str | os.PathLike | Mapping[str, Any] | None = None,
              overrides: Mapping[str, Any] | Iterable[str] = ()) -> "LeagueRun":
        """Start (or resume) a league and keep it running in the background until ``stop``.

        ``config``: a YAML file's path, a dict (what such a file holds) or None
        (``configs/kuhn_poker.yaml``); ``overrides``: dotted keys, ``{"run.max_minutes": 2}`` or
        ``["run.max_minutes=2"]``. Pointing ``run.storage`` at an existing run resumes it."""
        cfg, info = load_checked(config, override_texts(overrides))
        session = RaySession(cfg, None if config is None or isinstance(config, Mapping) else os.fspath(config))
        try:
            run = cls(cfg, info, session)
        except BaseException:  # e.g. serve.api.ApiUnavailable: its port is taken
            session.close()
            raise
        run._keeper = threading.Thread(target=run._keep, name="league-run", daemon=True)
        run._keeper.start()
        return run

    def _keep(self) -> None:
        try:
            self.keep_running(self._stopping.is_set)
            if not self._stopping.is_set():  # the budget is spent: the league stops as the launcher's does
                self.final = self._stop_actors()
        except Exception:  # a Ray that went away under the run: stop() says what is left
            log.exception("the league's background loop stopped")

    def keep_running(self, stopping: Callable[[], bool],
                     progress: Callable[[dict[str, Any], float, float], None] | None = None) -> None:
        """Restart the actors' loops as they stop (``supervise``) and follow the cluster's nodes
        until ``stopping()`` or the budget (``run.max_minutes``, ``run.max_env_steps``) is spent.
        ``progress(status, env steps per second, seconds since the start)`` is called every
        ``run.progress_every_seconds`` (the launcher's progress line)."""
        cfg, start = self.cfg, self.started_at
        last_t, last_steps = start, None
        next_print = start
        next_targets = start + TARGETS_EVERY_SECONDS
        while not stopping():
            self.supervise()
            time.sleep(0.5)
            now = time.time()
            if now >= next_targets:  # nodes join and leave a cluster
                if self.session is not None:
                    self.session.update_targets()
                next_targets = now + TARGETS_EVERY_SECONDS
            if cfg.run.max_minutes is not None and now - start >= cfg.run.max_minutes * 60:
                return
            if (progress is not None and now >= next_print) or cfg.run.max_env_steps is not None:
                status = self.status()
                steps = status["env_steps"]
                if cfg.run.max_env_steps is not None and steps >= cfg.run.max_env_steps:
                    return
                if progress is not None and now >= next_print:
                    rate = 0.0 if last_steps is None else (steps - last_steps) / max(now - last_t, 1e-9)
                    progress(status, rate, now - start)
                    last_t, last_steps, next_print = now, steps, now + cfg.run.progress_every_seconds

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the league stopped at its budget (or ``timeout`` seconds passed); True when
        it did. Only a run made by ``start`` has a budget kept for it."""
        if self._keeper is not None:
            self._keeper.join(timeout)
        return self.final is not None

    def _start_opponents(self, cfg) -> None:
        from ray import serve

        from serve.opponents import APP_NAME as OPPONENTS_APP, deploy_opponents

        # The opponents app has no route, and the HTTP API runs its own server (serve.api.ApiServer),
        # which answers without the proxy's extra hop (docs/serve.md, "Latency"). Ray 2.60 still starts
        # a proxy on the head with proxy_location="Disabled": it gets a free loopback port, not serve.port.
        serve.start(proxy_location="Disabled", http_options={"host": "127.0.0.1", "port": 0})
        deploy_opponents(cfg)
        self.apps.append(OPPONENTS_APP)

    def supervise(self) -> None:
        """(Re)start the run loop of every worker and evaluator whose loop is not running."""
        import ray

        actors = {**self.workers, **self.evaluators}
        for name, actor in actors.items():
            ref = self.runs.get(name)
            if ref is not None:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as exc:
                    log.warning("%s stopped (%s); restarting its loop", name, str(exc).strip().splitlines()[-1][:300])
            self.runs[name] = actor.run.remote()

    def status(self) -> dict[str, Any]:
        """The league now, as ``GET /status`` shows it: games, env steps, the pool, the learners, the
        Nash's entropy and support, and the quality measurements."""
        import ray

        return ray.get(self.coordinator.status.remote(), timeout=60)

    def nash(self) -> dict[str, Any]:
        """The published mixture as ``GET /nash`` shows it (``agents``: agent_id, weight, role and
        Elo of each member; ``entropy``, ``meta_exploitability``, ``quality``, ...), without the
        page's ``game`` field; ``agents`` is empty until the first Nash is solved."""
        import ray

        nash, quality = ray.get([self.coordinator.nash.remote(), self.coordinator.nash_quality.remote()], timeout=60)
        return {**nash.to_dict(), "quality": quality}

    def stop(self) -> dict[str, Any]:
        """Stop the league with everything flushed to the store (what Ctrl-C on the launcher does),
        then give back the storage and a Ray that ``start`` started. In a Ray it did not start (a
        notebook's ``ray.init``) its actors are removed, so that another league can start there.
        Returns the final status."""
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join()
        try:
            if self.final is None:
                self.final = self._stop_actors()
                if self.session is not None and not self.session.started_ray:
                    self.kill()
        finally:
            if self.session is not None:
                self.session.close()
        return self.final

    def __enter__(self) -> "LeagueRun":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _stop_actors(self) -> dict[str, Any]:
        import ray

        t0 = time.time()

        for actor in {**self.workers, **self.evaluators}.values():
            actor.stop.remote()
        actors = {**self.workers, **self.evaluators}
        for name, ref in self.runs.items():
            try:
                ray.get(ref, timeout=120)
            except ray.exceptions.RayError as exc:
                log.warning("%s did not stop cleanly: %s", name, str(exc).strip().splitlines()[-1][:300])
                # Its loop died (a killed actor, since restarted): one more pass with the stop flag
                # set, which only re-sends the batch it had staged and returns.
                try:
                    ray.get(actors[name].stop.remote(), timeout=120)
                    ray.get(actors[name].run.remote(), timeout=120)
                except ray.exceptions.RayError as exc2:
                    log.warning("%s could not flush its outbox: %s", name, str(exc2).strip().splitlines()[-1][:300])
        for lid, learner in self.learners.items():
            try:
                ray.get(learner.flush.remote(), timeout=120)
            except ray.exceptions.RayError as exc:
                log.warning("learner %s did not flush: %s", lid, exc)
        log.info("loops stopped and learners flushed in %.1f s", time.time() - t0)
        final = ray.get(self.coordinator.flush.remote(), timeout=120)
        log.info("coordinator flushed in %.1f s", time.time() - t0)
        if self.api:
            from serve.api import stop_api

            stop_api(self.api)
            self.api = []
        if self.apps:
            from ray import serve

            for app in reversed(self.apps):  # Serve apps are detached: they outlive the driver
                # Non-blocking: a blocking delete can wait ~30 s on idle HTTP connections.
                serve.delete(app, _blocking=False)
        log.info("league stopped in %.1f s", time.time() - t0)
        return final

    def kill(self) -> None:
        """Kill every actor of this league (after ``stop``; tests and benches reuse one Ray)."""
        import ray

        for actor in [self.coordinator, *self.learners.values(), *self.workers.values(), *self.evaluators.values()]:
            ray.kill(actor, no_restart=True)


def metrics_port(port: int | None) -> int | None:
    """``port`` if it is free, else None (Ray picks one): Ray does not check it, and its node then
    times out at startup (~35 s) with no word about the port. Prometheus finds either through the
    targets file. Probed on all interfaces, where Ray's agent listens: Ray 2.60 replaces a loopback
    node address by the machine's."""
    import socket

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


def progress_line(status: dict[str, Any], steps_per_s: float, elapsed: float) -> str:
    by_role = status["pool_by_role"]
    mains = [(lid, l) for lid, l in status["learners"].items() if l["role"] == "main_agent"]
    main_txt = " ".join(
        f"{lid}: elo {l['elo']:.0f}"
        + (f" vs-nash {l['win_rate_vs_nash']:.2f}" if l.get("win_rate_vs_nash") is not None else "")
        + (f" curriculum stage {l['curriculum_stage']}" if "curriculum_stage" in l else "")
        for lid, l in mains)
    return (f"[{elapsed:7.0f}s] {steps_per_s:9.0f} env steps/s | games {status['games']:.0f} | pool "
            f"{status['pool_size']} (main {by_role['main_agent']}, mx {by_role['main_exploiter']}, "
            f"lx {by_role['league_exploiter']}) | nash H {abs(status['nash_entropy']):.2f} "
            f"support {status['nash_support']} | {quality_text(status)} | {main_txt}"
            + (" | STORE DISK FULL: nothing is acknowledged until space returns" if status.get("store_disk_full")
               else ""))


def quality_text(status: dict[str, Any]) -> str:
    """Meta-exploitability with what measures the mixture in the game beside it: alone it can
    read 0 for a mixture a best response beats by a wide margin."""
    q = status.get("quality") or {}
    parts = [f"meta-expl {status.get('meta_exploitability', 0.0):.3f}"]
    if "meta_game_agents" in status:  # how much of the pool the meta-game rests on
        parts[0] += f" over {status['meta_game_agents']}/{status.get('pool_size', 0)} agents"
    if "nash_conv" in q:
        parts.append(f"NashConv {q['nash_conv']['value']:.3f}")
    if "meta_nash_conv" in q:
        parts.append(f"(meta-Nash {q['meta_nash_conv']['value']:.3f})")
    if "probe" in q:
        p = q["probe"]
        low, high = p.get("ci95", (p["value"], p["value"]))
        parts.append(f"probe BR +{p['value']:.3f} [{low:.3f}, {high:.3f}]")
    anchors = q.get("anchors") or {}
    if anchors.get("published"):
        scores = " ".join(f"{a} {m['value']:.2f}" for a, m in anchors["published"].items())
        elo = anchors.get("elo", {}).get("published")
        parts.append(f"vs anchors {scores}" + (f" (anchored Elo {elo['value']:.0f})" if elo else ""))
    if anchors.get("published_search"):
        scores = " ".join(f"{a} {m['value']:.2f}" for a, m in anchors["published_search"].items())
        parts.append(f"with search {scores}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from actors.preflight import cache_warning
    from league.config import ConfigError

    try:
        cfg, info = load(argv)
    except ConfigError as exc:
        print(f"nash-league: config error: {exc}", file=sys.stderr)
        return 2
    warning = cache_warning(cfg, info)
    if warning:
        print(f"nash-league: warning: {warning}", file=sys.stderr, flush=True)
    from serve.api import ApiUnavailable  # after the checks: a bad config is one line without torch or Ray

    try:
        session = RaySession(cfg, parse_args(argv).config)
    except StorageInUse as exc:
        print(f"nash-league: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"nash-league: config error: {exc}", file=sys.stderr)
        return 2
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    # after Ray started: ray.init installs its own SIGTERM handler
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        run = LeagueRun(cfg, info, session)
    except ApiUnavailable as exc:
        print(f"nash-league: {exc}", file=sys.stderr)
        session.close()
        return 2
    try:
        run.keep_running(lambda: stop["flag"],
                         lambda status, rate, elapsed: print(progress_line(status, rate, elapsed), flush=True))
        print("nash-league: stopping (flushing results and checkpoints)...", flush=True)
        final = run.stop()
        print(progress_line(final, 0.0, time.time() - run.started_at), flush=True)
        print(f"nash-league: stopped; the league is in {Path(cfg.run.storage) / 'league.db'}", flush=True)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
