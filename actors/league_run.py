"""The Python API of a league run: ``LeagueRun`` starts (or resumes) a league from a notebook or a
script, reads its status and its Nash while it runs, and stops it with everything flushed to the
store, as Ctrl-C on the launcher does. ``python -m actors.launch`` runs the same class with the
loop in the foreground; docs/user-guide.md shows it (also ``from nash_league import LeagueRun``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping

import ray
import yaml
from ray import serve
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.anchor_judge import AnchorJudge
from actors.coordinator import LeagueCoordinator
from actors.evaluator import Evaluator
from actors.learner import Learner
from actors.learner_group import Rendezvous, placement_for, replica_name, replica_options
from actors.placement import actor_options, coordinator_options, learner_options
from actors.preflight import check_store, load_checked
from actors.prober import Prober
from actors.rollout import RolloutWorker
from actors.runtime import TARGETS_EVERY_SECONDS, RaySession
from envs import GameInfo
from league.config import Config, ConfigError
from league.league import learner_ids
from league.sizing import Resources, plan
from serve.api import ApiUnavailable, start_api, stop_api
from serve.opponents import APP_NAME as OPPONENTS_APP, SERVED_TIMEOUT_S, deploy_opponents

log = logging.getLogger(__name__)
PLACEMENT_TIMEOUT_SECONDS = 120.0  # a learner group's placement group waits this long for room on the cluster
PYTHON_FIX = 'LeagueRun.start("{}")'  # how a caller of ``start`` names a config file (``load_checked``'s ``fix``)
FINAL_SETTLE_SECONDS = 60.0  # at a stop, the longest the evaluators measure the last snapshots
# at a stop, the longest a loop may take to see its stop flag: longer than a worker waits for served moves
LOOP_STOP_SECONDS = SERVED_TIMEOUT_S + 60.0


def override_texts(overrides: Mapping[str, Any] | Iterable[str] = ()) -> list[str]:
    """The launcher's ``key=value`` arguments for overrides given as ``{"run.storage": "runs/a"}``
    (each value written as YAML, so it keeps its type) or as ``["run.storage=runs/a"]``."""
    def text(value: Any) -> str:
        dumped = yaml.safe_dump(value, default_flow_style=True, width=float("inf")).strip()
        return dumped[:-3].strip() if dumped.endswith("\n...") else dumped  # a scalar's end-of-document mark

    if isinstance(overrides, Mapping):
        return [f"{key}={text(value)}" for key, value in overrides.items()]
    return [overrides] if isinstance(overrides, str) else list(overrides)


def cluster_resources() -> Resources:
    """What the Ray this process is connected to offers (``league.sizing``): its nodes counted by
    Ray's node table, since nodes on one machine share one ``node:<ip>`` resource."""
    alive = sum(1 for node in ray.nodes() if node.get("Alive"))
    total = ray.cluster_resources()
    if alive > 1:
        return Resources(cpus=float(total.get("CPU", 0.0)), gpus=float(total.get("GPU", 0.0)), nodes=alive)
    return Resources.from_ray(total)


class LeagueRun:
    """A running league: its actors on Ray, what keeps their loops running, and how it stops.

    The Python API (``from nash_league import LeagueRun``)::

        run = LeagueRun.start("configs/smoke.yaml", {"run.storage": "runs/mine"})
        run.status()["games"]      # what GET /status shows
        run.nash()["agents"]       # the published mixture, as GET /nash shows it
        run.stop()                 # everything flushed to the store, as Ctrl-C on the launcher

    ``start`` checks the config (``ConfigError`` names the key) and that a store to resume holds
    a league of its game (``ConfigError`` naming ``run.storage``), takes the storage
    (``StorageInUse``), starts or joins a Ray (``RaySession``), starts the actors and keeps their
    loops running in a background thread until ``stop`` or the budget (``run.max_minutes``,
    ``run.max_env_steps``), when the league stops itself as the launcher does. ``python -m
    actors.launch`` is this class with the loop in the foreground and a progress line.

    ``LeagueRun(cfg, info)`` starts the actors on the Ray this process is connected to and leaves
    the loop to the caller (``supervise``; tests and benches)."""

    def __init__(self, cfg: Config, info: GameInfo, session: RaySession | None = None):
        # ``auto`` values come to numbers for the cluster this process is connected to (league.sizing)
        cfg, self.plan = plan(cfg, cluster_resources())
        print(self.plan, flush=True)
        self.cfg = cfg
        ns = cfg.ray.namespace
        self.coordinator = LeagueCoordinator.options(
            name=cfg.ray.coordinator_name, namespace=ns, **coordinator_options(cfg)).remote(cfg)
        # the coordinator's process starts beside the API's and the learners'; it answers below
        coordinator_up = self.coordinator.ping.remote()
        self.api: list = []
        self.placement_groups: list = []
        self.rendezvous: list = []
        if cfg.serve.api:  # first after the coordinator: a taken port stops the launch before anything else starts
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
        # each role instance's learners: replica 0 (the one the league talks to) first
        self.replicas: dict[str, list] = {lid: self._learner_group(cfg, info, ns, lid, role.value)
                                          for lid, role in roles.items()}
        self.learners = {lid: group[0] for lid, group in self.replicas.items()}
        ray.get(coordinator_up)
        self.apps: list[str] = []
        if cfg.rollout.served:
            self._start_opponents(cfg)
        ray.get([r.info.remote() for group in self.replicas.values() for r in group])
        self.workers = {}
        for lid, group in self.replicas.items():
            # each replica of a learner group is fed by workers of its own; the league's other
            # learners read a live opponent's weights from its replica 0
            for j in range(cfg.rollout.workers_per_learner * len(group)):
                wid = f"worker:{lid}:{j}"
                feeds = {**self.learners, lid: group[j % len(group)]}
                self.workers[wid] = RolloutWorker.options(name=wid, namespace=ns, **actor_options(cfg.rollout)).remote(
                    wid, lid, cfg, self.coordinator, feeds)
        self.evaluators = {
            f"evaluator:{i}": Evaluator.options(name=f"evaluator:{i}", namespace=ns,
                                                **actor_options(cfg.evaluator)).remote(
                f"evaluator:{i}", cfg, self.coordinator, index=i)
            for i in range(cfg.evaluator.count)
        }
        if cfg.evaluator.probe_every_seconds > 0:
            # supervised and stopped like an evaluator
            self.evaluators["prober"] = Prober.options(
                name="prober", namespace=ns, num_cpus=cfg.evaluator.probe_num_cpus).remote(
                cfg, self.coordinator, seed=cfg.run.seed * 1000 + 990)
        if cfg.anchors:
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

    def _learner_group(self, cfg: Config, info: GameInfo, ns: str, lid: str, role: str) -> list:
        """The learners of role instance ``lid``: one, or ``learner.replicas`` in a placement group
        with the rendezvous they meet at (actors.learner_group)."""
        n = cfg.learner.replicas
        args = (lid, role, cfg, info.obs_size, info.num_actions, self.coordinator)
        kwargs = {"obs_shape": info.obs_shape, "channels_last": info.channels_last}
        if n == 1:
            return [Learner.options(name=replica_name(lid, 0), namespace=ns, **learner_options(cfg.learner)).remote(
                *args, **kwargs)]
        pg = placement_for(cfg.learner, n)
        ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_TIMEOUT_SECONDS)
        if not ready:
            ray.util.remove_placement_group(pg)
            raise ConfigError(f"learner.replicas: the cluster has no room for {n} learners of "
                              f"{cfg.learner.num_cpus} CPUs and {cfg.learner.num_gpus} GPUs each "
                              f"({cfg.learner.scheduling} placement) after {PLACEMENT_TIMEOUT_SECONDS:.0f} s")
        self.placement_groups.append(pg)
        # beside replica 0, in its bundle (it takes no CPU): not on the head, whose few worker starts
        # Serve's own actors wait behind
        rendezvous = Rendezvous.options(name=f"rendezvous:{lid}", namespace=ns, scheduling_strategy=(
            PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0))).remote(n)
        self.rendezvous.append(rendezvous)
        return [Learner.options(name=replica_name(lid, k), namespace=ns, **replica_options(cfg.learner, pg, k)).remote(
            *args, **kwargs, replica=(k, n), rendezvous=rendezvous) for k in range(n)]

    @staticmethod
    def checked_config(config: str | os.PathLike | Mapping[str, Any] | None = None,
                       overrides: Mapping[str, Any] | Iterable[str] = ()) -> tuple[Config, GameInfo]:
        """The config and game shape ``start`` runs with the same arguments, checked, with nothing
        started: a file is the whole config; None, or a dict, is the launcher's default config
        (``python -m actors.launch`` with no ``--config``) with the dict's settings over it."""
        return load_checked(config, override_texts(overrides), fix=PYTHON_FIX)

    @classmethod
    def start(cls, config: str | os.PathLike | Mapping[str, Any] | None = None,
              overrides: Mapping[str, Any] | Iterable[str] = ()) -> "LeagueRun":
        """Start (or resume) a league and keep it running in the background until ``stop``.

        ``config``: a YAML file's path, None (``configs/kuhn_poker.yaml``, as the launcher without
        ``--config``) or a dict of settings over that default config (``checked_config``);
        ``overrides``: dotted keys, ``{"run.max_minutes": 2}`` or ``["run.max_minutes=2"]``. Pointing
        ``run.storage`` at an existing run resumes it."""
        cfg, info = cls.checked_config(config, overrides)
        check_store(cfg)
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

    def _start_opponents(self, cfg: Config) -> None:
        # The opponents app has no route, and the HTTP API runs its own server (serve.api.ApiServer),
        # which answers without the proxy's extra hop (docs/serve.md, "Latency"). No proxy runs
        # (serve.environment); one that direct ingress starts gets a free loopback port, not serve.port.
        serve.start(proxy_location="Disabled", http_options={"host": "127.0.0.1", "port": 0})
        learner_names = {lid: [replica_name(lid, k) for k in range(len(group))] for lid, group in self.replicas.items()}
        deploy_opponents(cfg, learner_names if cfg.rollout.policy_inference == "serve" else None)
        self.apps.append(OPPONENTS_APP)

    def supervise(self) -> None:
        """(Re)start the run loop of every worker and evaluator whose loop is not running."""
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
        return ray.get(self.coordinator.status.remote(), timeout=60)

    def nash(self) -> dict[str, Any]:
        """The published mixture as ``GET /nash`` shows it (``agents``: agent_id, weight, role and
        Elo of each member; ``entropy``, ``meta_exploitability``, ``quality``, ...), without the
        page's ``game`` field; ``agents`` is empty until the first Nash is solved."""
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
        t0 = time.time()
        # learner groups train no more: no replica may wait on a peer whose workers have stopped
        for rendezvous in self.rendezvous:
            try:
                ray.get(rendezvous.stop.remote(), timeout=60)
            except ray.exceptions.RayError as exc:
                log.warning("a learner group's rendezvous did not stop: %s", exc)

        for actor in {**self.workers, **self.evaluators}.values():
            actor.stop.remote()
        actors = {**self.workers, **self.evaluators}
        for name, ref in self.runs.items():
            try:
                ray.get(ref, timeout=LOOP_STOP_SECONDS)
            except ray.exceptions.GetTimeoutError:
                # still running (a served wait, a full disk): another run would only wait for it;
                # what it staged and was not acknowledged is re-sent by its next start
                log.warning("%s did not stop within %.0f s; its unacknowledged batch stays in its outbox",
                            name, LOOP_STOP_SECONDS)
            except ray.exceptions.RayError as exc:
                log.warning("%s did not stop cleanly: %s", name, str(exc).strip().splitlines()[-1][:300])
                # Its loop died (a killed actor, since restarted): one more pass with the stop flag
                # set, which only re-sends the batch it had staged and returns; where Ray lost the
                # call and the loop runs on, the pass waits for that loop (actors.loop).
                try:
                    ray.get(actors[name].stop.remote(), timeout=120)
                    ray.get(actors[name].run.remote(), timeout=LOOP_STOP_SECONDS)
                except ray.exceptions.RayError as exc2:
                    log.warning("%s could not flush its outbox: %s", name, str(exc2).strip().splitlines()[-1][:300])
        self._final_snapshots()
        for lid, learner in self.learners.items():
            try:
                ray.get(learner.flush.remote(), timeout=120)
            except ray.exceptions.RayError as exc:
                log.warning("learner %s did not flush: %s", lid, exc)
        log.info("loops stopped and learners flushed in %.1f s", time.time() - t0)
        final = ray.get(self.coordinator.flush.remote(), timeout=120)
        log.info("coordinator flushed in %.1f s", time.time() - t0)
        if self.api:
            stop_api(self.api)
            self.api = []
        if self.apps:
            for app in reversed(self.apps):  # Serve apps are detached: they outlive the driver
                # Non-blocking: a blocking delete can wait ~30 s on idle HTTP connections.
                serve.delete(app, _blocking=False)
        log.info("league stopped in %.1f s", time.time() - t0)
        return final

    def _final_snapshots(self) -> None:
        """The main agents' weights trained since their last snapshots join the pool, where the
        evaluators measure each pair once (exact, or greedy snapshots of a deterministic game):
        they measure the new snapshots now, and the coordinator's flush publishes over them.
        Elsewhere a new snapshot would be published unmeasured, so there is none."""
        evaluators = [a for name, a in self.evaluators.items() if name.startswith("evaluator:")]
        try:
            if not evaluators or not all(ray.get([e.measures_once.remote() for e in evaluators], timeout=60)):
                return
            added = [a for a in ray.get([learner.final_snapshot.remote() for learner in self.learners.values()],
                                        timeout=120) if a]
            if added:
                measured = sum(ray.get([e.settle.remote(FINAL_SETTLE_SECONDS) for e in evaluators],
                                       timeout=FINAL_SETTLE_SECONDS + 60))
                log.info("last snapshots %s joined the pool; %d pairs measured", ", ".join(added), measured)
        except ray.exceptions.RayError as exc:  # the stop goes on: the checkpoints keep the weights
            log.warning("the main agents' last snapshots were not all taken and measured: %s", exc)

    def kill(self) -> None:
        """Kill every actor of this league (after ``stop``; tests and benches reuse one Ray)."""
        for actor in [self.coordinator, *(r for group in self.replicas.values() for r in group), *self.rendezvous,
                      *self.workers.values(), *self.evaluators.values()]:
            ray.kill(actor, no_restart=True)
        for pg in self.placement_groups:
            ray.util.remove_placement_group(pg)
