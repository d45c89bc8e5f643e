"""The HTTP API: the current Nash policy, the pool and the payoff, over JSON or msgpack.

    GET  /healthz      liveness
    GET  /status       throughput, games and env steps, pool by role, learners' versions
    GET  /nash         the current mixture (id, weight, role, Elo), entropy, meta-exploitability,
                       pool version and solve time, the game with its observation size and actions
    POST /nash/act     observations (+ legal masks) -> actions from the Nash policy
    GET  /pool         every agent of the pool
    GET  /payoff       the win-rate (expected score) matrix over the pool, ids in order
    GET  /             the league page: mixture, payoff heatmap, games/s, pool, and play against the Nash
    POST /play         start a game against the Nash policy ({"seat": 0 or 1}); GET /play/{id} its state;
                       POST /play/{id}/move {"action": a}; DELETE /play/{id}. With the config's
                       search (search.simulations > 0) the member searches its moves from the
                       game's state (evaluation.search); /nash/act, given observations, does not

Requests and responses are JSON; a request with ``Content-Type:
application/msgpack`` is read as msgpack, and the response is msgpack when
``Accept`` asks for it. Nothing received is unpickled. Bad input gets a 4xx
with ``{"error": "..."}``; the API and the league keep running.

The API is served by its own process, not through Ray Serve's HTTP proxy: an ``ApiServer``
actor on the head node runs uvicorn on ``serve.host:serve.port`` (127.0.0.1:8000 by default)
with the FastAPI app of one ``LeagueAPI``, which spares each request the proxy's extra hop and
body streaming, most of a one-client ``/nash/act``'s time through the proxy (docs/serve.md, "Latency").
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime.

import asyncio
import functools
import hashlib
import logging
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from league.messages import NashMixture
from monitoring.metrics import LeagueMetrics
from serve.codec import (MAX_BODY_BYTES, MSGPACK, BadRequest, decode_body, encode_json, encode_msgpack,
                         parse_act_request, safe_text)
from serve.play import PlayError, PlayTable, playable

log = logging.getLogger(__name__)

ACTOR_NAME = "api"
PAGE = (Path(__file__).with_name("page.html")).read_text(encoding="utf-8")
# /nash/act and /play read the mixture from a copy the replica refreshes in the background this often,
# instead of a coordinator round trip per request (docs/serve.md, "Latency").
NASH_REFRESH_S = 0.5

__all__ = ["ACTOR_NAME", "ApiServer", "ApiUnavailable", "BadRequest", "LeagueAPI", "build_app", "member_for_episode", "parse_act_request",
           "start_api", "stop_api"]


def member_for_episode(episode_id: Any, seed: int, pool_version: int, weights: np.ndarray) -> int:
    """The mixture member that plays a whole episode: a stable hash of the
    episode id drawn through the weights, so every request of that episode
    gets the same member (the per-episode semantics exploitability uses)."""
    key = f"{seed}:{pool_version}:{episode_id}".encode("utf-8", "surrogatepass")  # JSON may carry lone surrogates
    digest = hashlib.blake2b(key, digest_size=8).digest()
    u = int.from_bytes(digest, "little") / 2**64
    return int(min(np.searchsorted(np.cumsum(weights), u * weights.sum(), side="right"), len(weights) - 1))


def _error(status: int, message: str) -> Response:
    return Response(encode_json({"error": message}), status_code=status, media_type="application/json")


async def _http_error(request, exc):
    return _error(exc.status_code, safe_text(str(exc.detail), 200))


async def _validation_error(request, exc):
    return _error(422, safe_text(f"invalid request: {exc.errors()[:3]}", 400))


class LeagueAPI:
    """The endpoints and what they keep: the coordinator's handle, the snapshots of the Nash
    members (``SnapshotCache``), the current mixture and the play table. ``build_app`` routes them."""

    def __init__(self, coordinator, game: str, obs_size: int, num_actions: int, game_params: dict | None = None,
                 play_sessions: int = 256, play_ttl_s: float = 600.0, cache_size: int = 1024,
                 cache_bytes: int | None = None, cache_idle_seconds: float | None = None, search=None):
        self.coordinator = coordinator
        self.game = {"name": game, "obs_size": obs_size, "num_actions": num_actions}
        self.metrics = LeagueMetrics()
        self._cache_limits = (cache_size, cache_bytes, cache_idle_seconds)
        self.table = PlayTable(game, game_params, play_sessions, play_ttl_s) if playable(game, game_params) else None
        # the config's search (league.config.SearchConfig): /play's member searches from the game's
        # state (/nash/act gets observations only, so it answers with the network alone)
        self.search = search if search is not None and search.simulations > 0 and self.table is not None \
            and self.table.game is not None else None
        self._nash: NashMixture | None = None
        self._nash_task: asyncio.Task | None = None

    @functools.cached_property
    def cache(self):
        """The Nash members' networks (``SnapshotCache``), made by the first answer that needs one:
        torch loads there, not while the league starts, whose start is mostly its processes
        importing torch."""
        import torch

        from policies.snapshot import SnapshotCache

        torch.set_num_threads(1)
        size, max_bytes, idle_seconds = self._cache_limits
        return SnapshotCache(size, max_bytes=max_bytes,
                             on_load=lambda: self.metrics.inc("snapshot_loads", process="api"),
                             on_bytes=lambda b: self.metrics.set("snapshot_cache_bytes", b, process="api"),
                             idle_seconds=idle_seconds)

    # -- plumbing -----------------------------------------------------------
    async def _body(self, request: Request) -> Any:
        return decode_body(await self._raw(request), request.headers.get("content-type"))

    @staticmethod
    async def _raw(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        chunks, size = [], 0
        async for chunk in request.stream():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        return b"".join(chunks)

    @staticmethod
    def _reply(request: Request, payload: Any, status: int = 200) -> Response:
        if MSGPACK in request.headers.get("accept", ""):
            return Response(encode_msgpack(payload), status_code=status, media_type=MSGPACK)
        return Response(encode_json(payload), status_code=status, media_type="application/json")

    async def _model(self, agent_id: str):
        model = self.cache.lookup(agent_id)
        if model is None:
            model = self.cache.load(agent_id, await self.coordinator.get_snapshot.remote(agent_id))
        return model

    async def _refresh_nash(self) -> None:
        while True:
            try:
                self._nash = await self.coordinator.nash.remote()
            except Exception as exc:  # a restarting coordinator: keep serving the last mixture
                log.warning("Nash refresh failed: %s", exc)
            await asyncio.sleep(NASH_REFRESH_S)

    async def _current_nash(self) -> NashMixture:
        """The mixture as of at most ~NASH_REFRESH_S ago, kept current by one background task."""
        if self._nash_task is None or self._nash_task.done():
            self._nash_task = asyncio.get_running_loop().create_task(self._refresh_nash())
        if self._nash is None:
            self._nash = await self.coordinator.nash.remote()
        return self._nash

    # -- endpoints -------------------------------------------------------------
    async def page(self):
        return Response(PAGE, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})

    async def healthz(self, request: Request):
        await self.coordinator.ping.remote()
        return self._reply(request, {"status": "ok"})

    async def status(self, request: Request):
        s = await self.coordinator.status.remote()
        s["time"] = time.time()  # clients derive rates (games/s, env steps/s) from two readings
        return self._reply(request, s)

    async def nash(self, request: Request):
        n = await self.coordinator.nash.remote()
        quality = await self.coordinator.nash_quality.remote()
        # meta-exploitability is measured inside the pool only: the exact NashConv and the
        # best-response probe say how exploitable the mixture is in the game itself
        return self._reply(request, {**n.to_dict(), "quality": quality,
                                     "game": {**self.game, "playable": self.table is not None}})

    async def pool(self, request: Request):
        return self._reply(request, {"agents": await self.coordinator.pool.remote()})

    async def payoff(self, request: Request):
        return self._reply(request, await self.coordinator.payoff.remote())

    async def act(self, request: Request):
        t0 = time.perf_counter()
        try:
            req = parse_act_request(await self._body(request), self.game["obs_size"], self.game["num_actions"])
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        t1 = time.perf_counter()
        n = await self._current_nash()
        if not n.ids:
            return _error(409, "the league has no Nash mixture yet")
        t2 = time.perf_counter()
        ids, weights = n.ids, n.weights
        seed = req.seed
        rng = np.random.default_rng(seed)
        count = len(req.obs)
        if req.episode_ids is not None:
            members = np.array([member_for_episode(e, seed or 0, n.pool_version, weights)
                                for e in req.episode_ids])
        else:
            members = rng.choice(len(ids), size=count, p=weights / weights.sum())
        actions = np.zeros(count, dtype=np.int64)
        for m in np.unique(members).tolist():
            rows = np.flatnonzero(members == m)
            try:
                model = await self._model(ids[m])
            except Exception:
                return _error(503, f"Nash member {ids[m]} is not available; retry")
            actions[rows] = model.act(req.obs[rows], req.mask[rows], generator=rng,
                                      deterministic=req.deterministic)[0]
        response = self._reply(request, {"actions": actions.tolist(), "members": [ids[m] for m in members.tolist()],
                                         "pool_version": n.pool_version, "solved_at": n.solved_at})
        t3 = time.perf_counter()
        # where a request's time goes inside the replica (bench.serve reads it; browsers show it)
        response.headers["Server-Timing"] = (f"parse;dur={(t1 - t0) * 1e3:.3f}, nash;dur={(t2 - t1) * 1e3:.3f}, "
                                             f"act;dur={(t3 - t2) * 1e3:.3f}, app;dur={(t3 - t0) * 1e3:.3f}")
        return response

    # -- play against the Nash ------------------------------------------------------
    def _table(self) -> PlayTable:
        if self.table is None:
            raise PlayError(f"{self.game['name']} cannot be played here (envs.make_game cannot build it)", 404)
        return self.table

    async def _play(self, request: Request, fn, *args, status: int = 200) -> Response:
        try:
            return self._reply(request, fn(*args), status)
        except PlayError as exc:
            return _error(exc.status, str(exc))

    async def play_start(self, request: Request):
        try:
            table = self._table()
            raw = await self._raw(request)
            body = decode_body(raw, request.headers.get("content-type")) if raw else {}
            if not isinstance(body, dict) or set(body) - {"seat"}:
                raise BadRequest("the body must be an object with at most a 'seat' field (0 or 1)", 422)
            n = await self._current_nash()
            if not n.ids:
                raise PlayError("the league has no Nash mixture yet", 409)
            ids, weights = n.ids, n.weights
            seed = secrets.randbits(64)
            # one member plays the whole game, drawn as /nash/act draws a member for an episode
            agent_id = ids[member_for_episode(seed, seed, n.pool_version, weights)]
            try:
                model = await self._model(agent_id)
            except Exception:
                raise PlayError(f"Nash member {agent_id} is not available; retry", 503) from None
        except (BadRequest, PlayError) as exc:
            return _error(exc.status, str(exc))

        def agent(obs, mask, rng):
            return int(model.act(obs, mask, generator=rng)[0][0])

        searcher = None
        if self.search is not None:
            from evaluation.search import PUCT

            def searcher(state, rng):
                return PUCT(table.game, model, self.search, rng).step(state)

        return await self._play(request, table.start, agent_id, agent, body.get("seat", 0), seed, searcher,
                                status=201)

    async def play_view(self, request: Request, sid: str):
        return await self._play(request, lambda: self._table().view(sid))

    async def play_move(self, request: Request, sid: str):
        try:
            body = await self._body(request)
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        if not isinstance(body, dict) or set(body) != {"action"}:
            return _error(422, "the body must be {\"action\": <an action id from legal_actions>}")
        return await self._play(request, lambda: self._table().move(sid, body["action"]))

    async def play_end(self, request: Request, sid: str):
        return await self._play(request, lambda: (self._table().end(sid), {"ended": sid})[1])


def build_app(api: LeagueAPI) -> FastAPI:
    """The FastAPI app answering every route of ``api`` (schema at /docs and /openapi.json)."""
    app = FastAPI(title="nash-league", description="The current Nash policy of a running league.", version="1")
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_api_route("/", api.page, methods=["GET"], include_in_schema=False)
    for path, endpoint in (("/healthz", api.healthz), ("/status", api.status), ("/nash", api.nash),
                           ("/pool", api.pool), ("/payoff", api.payoff), ("/play/{sid}", api.play_view)):
        app.add_api_route(path, endpoint, methods=["GET"])
    app.add_api_route("/nash/act", api.act, methods=["POST"])
    app.add_api_route("/play", api.play_start, methods=["POST"])
    app.add_api_route("/play/{sid}/move", api.play_move, methods=["POST"])
    app.add_api_route("/play/{sid}", api.play_end, methods=["DELETE"])
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``; OSError (e.g. the port is taken) raised here, where the
    launcher sees it, not inside uvicorn (which would exit the process)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted server rebinds at once
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


@ray.remote(max_restarts=-1)
class ApiServer:
    """The HTTP API in one process: uvicorn on a thread of its own, serving ``build_app``.

    A request is parsed, answered from the cached mixture and run through the member's snapshot
    here, with no hop to another process (the coordinator is asked only for snapshots not yet
    cached and, in the background, for the current mixture). The actor method calls are for
    the launcher: ``ready`` and ``stop``. Restarted by Ray after a crash; it rebinds its port."""

    def __init__(self, host: str, port: int, coordinator_name: str, namespace: str, game: str, obs_size: int,
                 num_actions: int, game_params: dict | None = None, play_sessions: int = 256,
                 play_ttl_s: float = 600.0, cache_size: int = 1024, cache_bytes: int | None = None,
                 cache_idle_seconds: float | None = None, search=None):
        import uvicorn

        self.address = f"{host}:{port}"
        sock = listening_socket(host, port)
        api = LeagueAPI(ray.get_actor(coordinator_name, namespace=namespace), game, obs_size, num_actions,
                        game_params, play_sessions, play_ttl_s, cache_size, cache_bytes, cache_idle_seconds,
                        search)
        # no access log (a line per request is CPU on the /nash/act path); log_config=None leaves
        # the process's logging as Ray set it up
        self.server = uvicorn.Server(uvicorn.Config(build_app(api), lifespan="off", access_log=False,
                                                    log_config=None, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True,
                                       name="api-http")
        self.thread.start()

    def ready(self, timeout_s: float = 60.0) -> str:
        """The address once the server accepts connections; RuntimeError if it stopped instead."""
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP API did not start on {self.address}")
            time.sleep(0.02)
        return self.address

    def stop(self) -> None:
        """Close the listening socket and open connections (the launcher then kills the actor)."""
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ApiUnavailable(RuntimeError):
    """The HTTP API could not start (e.g. its port is taken)."""


def start_api(cfg, obs_size: int, num_actions: int) -> list:
    """Start the HTTP API where ``serve.proxy_location`` says (HeadOnly: the head node;
    EveryNode: every node alive now, each serving on its own ``serve.host``; Disabled: nowhere)
    and wait until it accepts connections. Returns the server actors."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    args = (cfg.serve.host, cfg.serve.port, cfg.ray.coordinator_name, cfg.ray.namespace, cfg.game.name, obs_size,
            num_actions, cfg.game.kwargs, cfg.serve.play_sessions, cfg.serve.play_ttl_s, cfg.snapshots.cache_size,
            cfg.snapshots.cache_bytes, cfg.snapshots.cache_idle_seconds, cfg.search)
    # no CPU reserved, like Serve's proxy: a head started with num-cpus 0 (common on KubeRay) still hosts it
    options = {"num_cpus": 0, "namespace": cfg.ray.namespace}
    if cfg.serve.proxy_location == "HeadOnly":
        # every Ray cluster's head declares node:__internal_head__ (Serve pins its HeadOnly proxy the same way)
        servers = [ApiServer.options(name=ACTOR_NAME, resources={"node:__internal_head__": 0.001},
                                     **options).remote(*args)]
    elif cfg.serve.proxy_location == "EveryNode":
        servers = [ApiServer.options(name=f"{ACTOR_NAME}:{node['NodeID']}", **options,
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                   .remote(*args) for node in ray.nodes() if node["Alive"]]
    else:
        servers = []
    try:
        ray.get([s.ready.remote() for s in servers])
    except ray.exceptions.RayError as exc:
        for server in servers:
            ray.kill(server, no_restart=True)
        cause = str(exc).strip().splitlines()[-1][:300]
        raise ApiUnavailable(f"the HTTP API cannot serve on {cfg.serve.host}:{cfg.serve.port} "
                             f"(serve.host, serve.port): {cause}") from None
    return servers


def stop_api(servers: list) -> None:
    """Stop the servers and free their ports."""
    for server in servers:
        try:
            ray.get(server.stop.remote(), timeout=15)
        except ray.exceptions.RayError as exc:
            log.warning("the HTTP API did not stop cleanly: %s", str(exc).strip().splitlines()[-1][:300])
        ray.kill(server, no_restart=True)
