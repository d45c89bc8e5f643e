"""The frozen-opponent inference deployment.

One deployment holds every frozen snapshot by id (a ``SnapshotCache`` bounded by
``snapshots.cache_size``), loads a snapshot from the coordinator on first use (so new
snapshots need no redeploy), batches requests across rollout workers with
``@serve.batch`` and runs one forward pass per snapshot id per batch
(``serve.batching.run_grouped``), all ids stacked into one pass. A request carries a whole vector of
observations for one snapshot, as single-observation calls are far slower
(docs/serve.md).

Settings that matter on small machines:
- ``max_ongoing_requests`` well above ``max_batch_size * max_concurrent_batches``,
  or batches never fill and the router backs off;
- ``ray_actor_options={"num_cpus": serve.num_cpus}`` (a fraction): a replica
  reserves a whole CPU by default;
- ``serve.num_gpus`` (a fraction of a GPU, 0 by default): a replica given one loads its
  snapshots onto the GPU and runs the batch's forward passes there; otherwise on its CPU;
- ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` (set by the launcher and the Makefile).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import ray
import torch
from ray import serve

from league.seeds import seed_sequence
from monitoring.metrics import LeagueMetrics
from policies.device import resolve_device
from policies.snapshot import SnapshotCache
from serve.batching import act_known, run_grouped, validate_request

log = logging.getLogger(__name__)

APP_NAME = "opponents"
DEPLOYMENT_NAME = "Opponents"


class UnknownAgent(KeyError):
    pass


@serve.deployment(name=DEPLOYMENT_NAME)
class Opponents:
    def __init__(self, coordinator_name: str, namespace: str, cache_size: int, cache_bytes: int | None = None,
                 max_batch_size: int = 16, batch_wait_timeout_s: float = 0.002, seed=0,
                 cache_idle_seconds: float | None = None):
        torch.set_num_threads(1)
        self.coordinator = ray.get_actor(coordinator_name, namespace=namespace)
        self.metrics = LeagueMetrics()
        # cuda where Ray gave this replica a GPU (serve.num_gpus) and torch sees it; the snapshots
        # load onto it and every forward pass of a batch runs there (policies.net follows the model)
        self.device = resolve_device("auto", ray.get_gpu_ids())
        log.info("opponents replica runs its forward passes on %s", self.device)
        self.cache = SnapshotCache(cache_size, max_bytes=cache_bytes, device=self.device,
                                   on_load=lambda: self.metrics.inc("snapshot_loads", process="serve"),
                                   on_bytes=lambda b: self.metrics.set("snapshot_cache_bytes", b, process="serve"),
                                   idle_seconds=cache_idle_seconds)
        self.rng = np.random.default_rng(seed)
        self._act_batch.set_max_batch_size(max_batch_size)
        self._act_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)

    async def act(self, agent_ids: list[str], codes: np.ndarray, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Actions for a vector of observations; row ``i`` is played by ``agent_ids[codes[i]]``.

        One call carries every frozen-opponent decision of a worker's vector step.
        """
        request = validate_request(agent_ids, codes, obs, mask)
        return await self._act_batch(request)

    async def _model(self, agent_id: str):
        model = self.cache.lookup(agent_id)
        if model is not None:
            return model
        try:
            blob = await self.coordinator.get_snapshot.remote(agent_id)
        except Exception as exc:  # the coordinator raises KeyError for an unknown id
            raise UnknownAgent(f"unknown or evicted agent {agent_id!r}") from exc
        return self.cache.load(agent_id, blob)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def _act_batch(self, requests: list) -> list:
        start = time.perf_counter()
        models = {}
        for agent_id in {a for r in requests for a in r[0]}:
            try:
                models[agent_id] = await self._model(agent_id)
            except UnknownAgent as exc:
                log.warning("%s; its rows play uniformly", exc)

        def forward(agent_ids, obs, masks):
            self.metrics.observe("batch_size", sum(len(o) for o in obs))
            return act_known(models, agent_ids, obs, masks, self.rng)

        out = run_grouped(requests, forward)
        self.metrics.observe("inference_seconds", time.perf_counter() - start)
        return out


def replica_actor_options(serve_cfg) -> dict:
    """Each replica's Ray options: a fraction of a CPU (a replica reserves a whole one by default), its
    share of a GPU where ``serve.num_gpus`` gives one, and any custom resources. Replicas hold no
    state but an LRU of snapshots fetched from the coordinator, so they may run on any node."""
    options: dict = {"num_cpus": serve_cfg.num_cpus}
    if serve_cfg.num_gpus > 0:
        options["num_gpus"] = serve_cfg.num_gpus
    if serve_cfg.resources:
        options["resources"] = dict(serve_cfg.resources)
    return options


def replica_count(serve_cfg) -> dict:
    """``num_replicas`` fixed, or Serve's autoscaling on ongoing requests per replica."""
    if serve_cfg.autoscaling is not None:
        return {"autoscaling_config": dict(serve_cfg.autoscaling)}
    return {"num_replicas": serve_cfg.num_replicas}


def deploy_opponents(cfg) -> None:
    """Run the opponents app (no HTTP route: only rollout workers call it)."""
    app = Opponents.options(
        max_ongoing_requests=cfg.serve.max_ongoing_requests,
        graceful_shutdown_timeout_s=5, graceful_shutdown_wait_loop_s=0.5,
        ray_actor_options=replica_actor_options(cfg.serve),
        **replica_count(cfg.serve),
        # an access-log line per rollout request costs CPU and says nothing new
        logging_config={"enable_access_log": False},
    ).bind(cfg.ray.coordinator_name, cfg.ray.namespace, cfg.snapshots.cache_size, cfg.snapshots.cache_bytes,
           cfg.serve.max_batch_size,
           cfg.serve.batch_wait_timeout_s, seed_sequence(cfg.run.seed, "serve", APP_NAME),
           cache_idle_seconds=cfg.snapshots.cache_idle_seconds)
    serve.run(app, name=APP_NAME, route_prefix=None)


class ServedOpponents:
    """The rollout worker's side: ``submit`` sends one request for a whole
    vector step and returns at once; ``result`` waits for the actions."""

    def __init__(self):
        # the method handle once: attribute access builds a new handle each time
        self.act_handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME).act

    def submit(self, agent_ids: list[str], codes: np.ndarray, obs: np.ndarray, mask: np.ndarray):
        return self.act_handle.remote(agent_ids, codes, obs, mask)

    def result(self, pending) -> np.ndarray:
        return pending.result()
