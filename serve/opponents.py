"""The inference deployment: frozen opponents, and the learners' own moves where they are served.

One deployment holds every frozen snapshot by id (a ``SnapshotCache`` bounded by
``snapshots.cache_size``), loads a snapshot from the coordinator on first use (so new
snapshots need no redeploy), batches requests across rollout workers with
``@serve.batch`` and runs one forward pass per snapshot id per batch
(``serve.batching.run_grouped``), all ids stacked into one pass. A request carries a whole vector of
observations for one snapshot, as single-observation calls are far slower
(docs/serve.md).

Where the rollout policy is served (``rollout.policy_inference: serve``) the same replicas play the
learners' own moves too (``act_live``): a request carries a worker's learner decisions of one
vector step with the learner version its games play, the replica loads that version from the
learner (``weights_at``) on first use, and the requests for one version from every worker are one
pass, with the actions' log-probabilities and values that PPO needs.

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
from collections import OrderedDict

import numpy as np
import ray
import torch
from ray import serve

from league.seeds import seed_sequence
from monitoring.metrics import LeagueMetrics
from policies.device import resolve_device
from policies.expert import UnansweredEvaluation
from policies.snapshot import SnapshotCache, policy_from_bytes
from serve.batching import act_known, run_grouped, run_live, validate_live_request, validate_request

log = logging.getLogger(__name__)

APP_NAME = "opponents"
DEPLOYMENT_NAME = "Opponents"
SERVED_TIMEOUT_S = 120.0  # a worker waits this long for served moves, then restarts the lane's episodes
LIVE_MODELS = 64  # learner versions a replica holds (a few per learner: groups play the version they opened with)


class UnknownAgent(KeyError):
    pass


@serve.deployment(name=DEPLOYMENT_NAME)
class Opponents:
    def __init__(self, coordinator_name: str, namespace: str, cache_size: int, cache_bytes: int | None = None,
                 max_batch_size: int = 16, batch_wait_timeout_s: float = 0.002, seed=0,
                 cache_idle_seconds: float | None = None, learner_names: dict[str, list[str]] | None = None):
        torch.set_num_threads(1)
        self.namespace = namespace
        self.coordinator = ray.get_actor(coordinator_name, namespace=namespace)
        # learner id -> the names of its replicas' actors (weights_at), replica 0 first
        self.learner_names = {lid: list(names) for lid, names in (learner_names or {}).items()}
        self.live: OrderedDict[tuple[str, int, str], torch.nn.Module] = OrderedDict()  # (learner, version, life)
        self.life_owner: dict[tuple[str, str], str] = {}  # (learner, life) -> the replica actor that holds it
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
        for batched in (self._act_batch, self._live_batch, self._evaluate_batch):
            batched.set_max_batch_size(max_batch_size)
            batched.set_batch_wait_timeout_s(batch_wait_timeout_s)

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


    async def act_live(self, learner_id: str, version: int, obs: np.ndarray, mask: np.ndarray, life: str = ""):
        """A learner's own moves (``rollout.policy_inference: serve``): ``(actions, logp, values)`` of
        version ``version`` of learner ``learner_id`` (of its life ``life``, where named) for a vector
        of observations. LookupError when the learner is not this league's or no longer keeps that
        version."""
        request = validate_live_request(learner_id, version, life, obs, mask)
        answer = await self._live_batch(request)
        if isinstance(answer, str):
            raise LookupError(answer)
        return answer

    async def _live_model(self, learner_id: str, version: int, life: str):
        key = (learner_id, version, life)
        model = self.live.get(key)
        if model is not None:
            self.live.move_to_end(key)
            return model
        if learner_id not in self.learner_names:
            raise LookupError(f"unknown learner {learner_id!r}")
        # the replica that fed the worker holds the version of its life (each replica has its own; they
        # publish the same weights in lockstep): the one that answered for a life is asked first, then
        # the others in turn
        names = self.learner_names[learner_id]
        known = self.life_owner.get((learner_id, life))
        for i, name in enumerate([known] + [n for n in names if n != known] if known else names):
            try:
                blob = await ray.get_actor(name, namespace=self.namespace).weights_at.remote(version, life or None)
            except Exception:
                if i == len(names) - 1:
                    raise
                continue
            self.life_owner[(learner_id, life)] = name
            break
        model = policy_from_bytes(blob).to(self.device)
        self.live[key] = model
        while len(self.live) > LIVE_MODELS:
            self.live.popitem(last=False)
        return model

    async def evaluate_live(self, learner_id: str, version: int, obs: np.ndarray, mask: np.ndarray, life: str = ""):
        """A search learner's leaves (``rollout.policy_inference: serve``): ``(logits, values)`` of
        version ``version`` of learner ``learner_id`` for a vector of observations, as
        ``PolicyNet.evaluate`` gives them; the leaves of every worker's simulation step are one
        pass. LookupError as ``act_live``."""
        request = validate_live_request(learner_id, version, life, obs, mask)
        answer = await self._evaluate_batch(request)
        if isinstance(answer, str):
            raise LookupError(answer)
        return answer

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def _live_batch(self, requests: list) -> list:
        return await self._answer_live(requests, lambda model, obs, mask: model.act(obs, mask, generator=self.rng))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def _evaluate_batch(self, requests: list) -> list:
        return await self._answer_live(requests, lambda model, obs, mask: model.evaluate(obs, mask))

    async def _answer_live(self, requests: list, answer) -> list:
        """One ``answer(model, obs, mask)`` per (learner, version) over every request for it; a
        request whose version cannot be loaded gets the reason (a string), and the others their
        answers."""
        start = time.perf_counter()
        models, failed = {}, {}
        for key in dict.fromkeys(r[0] for r in requests):
            try:
                models[key] = await self._live_model(*key)
            except Exception as exc:  # an unknown learner, a version it no longer keeps, a learner restarting
                cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the learner's own error
                why = str(cause.args[0]) if cause.args else type(cause).__name__
                failed[key] = f"{key[0]} version {key[1]}: {why.splitlines()[0] if why else type(cause).__name__}"
        ok = [i for i, r in enumerate(requests) if r[0] in models]
        answers = run_live([requests[i] for i in ok], lambda key, obs, mask: answer(models[key], obs, mask))
        out: list = [failed.get(r[0]) for r in requests]
        for i, answer in zip(ok, answers):
            out[i] = answer
        self.metrics.observe("batch_size", sum(len(r[1]) for r in requests))
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


def deploy_opponents(cfg, learner_names: dict[str, list[str]] | None = None) -> None:
    """Run the opponents app (no HTTP route: only rollout workers call it). ``learner_names``: each
    learner id's replicas' actor names, where the rollout policy is served (``act_live`` loads its
    versions)."""
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
           cache_idle_seconds=cfg.snapshots.cache_idle_seconds, learner_names=learner_names)
    serve.run(app, name=APP_NAME, route_prefix=None)


def sync_handle():
    """The opponents deployment's handle for a synchronous caller (a rollout worker's loop): its
    router runs in an event loop of its own. ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` turns that loop
    off by default; set on the handle, it needs no runtime env, whose actors Ray starts through an
    extra interpreter each and cannot give an idle worker process (docs/serve.md). Serve hands a
    process one cached handle per deployment: the first call sets it up, later ones return it."""
    handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME)
    if not handle.is_initialized:
        handle._init(_run_router_in_separate_loop=True)
    if not handle._is_router_running_in_separate_loop():  # set up by other code: calls would never return
        raise RuntimeError(f"the {DEPLOYMENT_NAME} handle of this process routes in its caller's event loop")
    return handle


def answer(pending):
    """A served request's answer, waited for at most ``SERVED_TIMEOUT_S``: a request routed to a
    replica on a node that died may never be answered. One left unanswered is cancelled and raises
    ``TimeoutError``; the worker drops the lane's running episodes and goes on (``policies.lanes``)."""
    try:
        return pending.result(timeout_s=SERVED_TIMEOUT_S)
    except TimeoutError:
        pending.cancel()
        raise


class ServedOpponents:
    """The rollout worker's side: ``submit`` sends one request for a whole
    vector step and returns at once; ``result`` waits for the actions."""

    def __init__(self):
        # the method handle once: attribute access builds a new handle each time
        self.act_handle = sync_handle().act

    def submit(self, agent_ids: list[str], codes: np.ndarray, obs: np.ndarray, mask: np.ndarray):
        return self.act_handle.remote(agent_ids, codes, obs, mask)

    def result(self, pending) -> np.ndarray:
        return answer(pending)


class ServedPolicy:
    """The rollout worker's side of a served learner version: ``submit(obs, mask)`` sends one
    request for a vector of its decisions and returns at once; ``result`` waits for
    ``(actions, logp, values)``, as ``PolicyNet.act`` returns them. ``evaluate(obs, mask)`` waits
    for ``(logits, values)``, as ``PolicyNet.evaluate`` returns them (a search's leaves)."""

    def __init__(self, learner_id: str, version: int, handle=None, life: str = ""):
        self.learner_id, self.version, self.life = learner_id, int(version), life
        handle = handle if handle is not None else sync_handle()
        # the method handles once: attribute access builds a new handle each time
        self.handle, self.evaluate_handle = handle.act_live, handle.evaluate_live

    def submit(self, obs: np.ndarray, mask: np.ndarray):
        return self.handle.remote(self.learner_id, self.version, obs, mask, self.life)

    def evaluate(self, obs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        try:
            return self.result(self.evaluate_handle.remote(self.learner_id, self.version, obs, mask, self.life))
        except Exception as exc:
            raise UnansweredEvaluation(f"{self.learner_id} version {self.version}: {exc}") from exc

    def result(self, pending) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return answer(pending)

    def act(self, obs: np.ndarray, mask: np.ndarray, generator=None):
        """As ``PolicyNet.act``, waiting for the answer (a worker's live games against its own
        learner); the replica samples with its own stream, so ``generator`` is not used."""
        return self.result(self.submit(obs, mask))
