"""The HTTP API: the current Nash policy, the pool and the payoff, over JSON or msgpack.

    GET  /healthz      liveness
    GET  /status       throughput, games and env steps, pool by role, learners' versions
    GET  /nash         the current mixture (id, weight, role, Elo), entropy, meta-exploitability,
                       pool version and solve time, the game with its observation size and actions
    POST /nash/act     observations (+ legal masks) -> actions from the Nash policy
    GET  /pool         every agent of the pool
    GET  /payoff       the win-rate (expected score) matrix over the pool, ids in order

Requests and responses are JSON; a request with ``Content-Type:
application/msgpack`` is read as msgpack, and the response is msgpack when
``Accept`` asks for it. Nothing received is unpickled. Bad input gets a 4xx
with ``{"error": "..."}``; the API and the league keep running.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime.

import hashlib
import logging
import time
from typing import Any

import numpy as np
import ray
import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from policies.snapshot import policy_from_bytes
from serve.codec import (MAX_BODY_BYTES, MSGPACK, BadRequest, decode_body, encode_json, encode_msgpack,
                         parse_act_request, safe_text)

log = logging.getLogger(__name__)

APP_NAME = "api"

__all__ = ["APP_NAME", "BadRequest", "LeagueAPI", "deploy_api", "member_for_episode", "parse_act_request"]


def member_for_episode(episode_id: Any, seed: int, pool_version: int, weights: np.ndarray) -> int:
    """The mixture member that plays a whole episode: a stable hash of the
    episode id drawn through the weights, so every request of that episode
    gets the same member (the per-episode semantics exploitability uses)."""
    key = f"{seed}:{pool_version}:{episode_id}".encode("utf-8", "surrogatepass")  # JSON may carry lone surrogates
    digest = hashlib.blake2b(key, digest_size=8).digest()
    u = int.from_bytes(digest, "little") / 2**64
    return int(min(np.searchsorted(np.cumsum(weights), u * weights.sum(), side="right"), len(weights) - 1))


app = FastAPI(title="nash-league", description="The current Nash policy of a running league.", version="1")


def _error(status: int, message: str) -> Response:
    return Response(encode_json({"error": message}), status_code=status, media_type="application/json")


@app.exception_handler(StarletteHTTPException)
async def _http_error(request, exc):
    return _error(exc.status_code, safe_text(str(exc.detail), 200))


@app.exception_handler(RequestValidationError)
async def _validation_error(request, exc):
    return _error(422, safe_text(f"invalid request: {exc.errors()[:3]}", 400))


@serve.deployment(name="LeagueAPI")
@serve.ingress(app)
class LeagueAPI:
    def __init__(self, coordinator_name: str, namespace: str, game: str, obs_size: int, num_actions: int):
        torch.set_num_threads(1)
        self.coordinator = ray.get_actor(coordinator_name, namespace=namespace)
        self.game = {"name": game, "obs_size": obs_size, "num_actions": num_actions}
        self.models: dict[str, Any] = {}
        self._last = (time.time(), None)

    # -- plumbing -----------------------------------------------------------
    async def _body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        chunks, size = [], 0
        async for chunk in request.stream():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        return decode_body(b"".join(chunks), request.headers.get("content-type"))

    @staticmethod
    def _reply(request: Request, payload: Any, status: int = 200) -> Response:
        if MSGPACK in request.headers.get("accept", ""):
            return Response(encode_msgpack(payload), status_code=status, media_type=MSGPACK)
        return Response(encode_json(payload), status_code=status, media_type="application/json")

    async def _model(self, agent_id: str):
        if agent_id not in self.models:
            self.models[agent_id] = policy_from_bytes(await self.coordinator.get_snapshot.remote(agent_id))
            if len(self.models) > 512:
                self.models.pop(next(iter(self.models)))
        return self.models[agent_id]

    # -- endpoints -------------------------------------------------------------
    @app.get("/healthz")
    async def healthz(self, request: Request):
        await self.coordinator.ping.remote()
        return self._reply(request, {"status": "ok"})

    @app.get("/status")
    async def status(self, request: Request):
        s = await self.coordinator.status.remote()
        now = time.time()
        then, steps = self._last
        s["env_steps_per_s"] = None if steps is None else (s["env_steps"] - steps) / max(now - then, 1e-9)
        self._last = (now, s["env_steps"])
        return self._reply(request, s)

    @app.get("/nash")
    async def nash(self, request: Request):
        n = await self.coordinator.nash.remote()
        quality = await self.coordinator.nash_quality.remote()
        # meta-exploitability is measured inside the pool only: the exact NashConv and the
        # best-response probe say how exploitable the mixture is in the game itself
        return self._reply(request, {**n.to_dict(), "quality": quality, "game": self.game})

    @app.get("/pool")
    async def pool(self, request: Request):
        return self._reply(request, {"agents": await self.coordinator.pool.remote()})

    @app.get("/payoff")
    async def payoff(self, request: Request):
        return self._reply(request, await self.coordinator.payoff.remote())

    @app.post("/nash/act")
    async def act(self, request: Request):
        try:
            req = parse_act_request(await self._body(request), self.game["obs_size"], self.game["num_actions"])
        except BadRequest as exc:
            return _error(exc.status, str(exc))
        n = await self.coordinator.nash.remote()
        if not n.members:
            return _error(409, "the league has no Nash mixture yet")
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
            with torch.inference_mode():
                actions[rows] = model.act(req.obs[rows], req.mask[rows], generator=rng,
                                          deterministic=req.deterministic)[0]
        return self._reply(request, {"actions": actions.tolist(), "members": [ids[m] for m in members.tolist()],
                                     "pool_version": n.pool_version, "solved_at": n.solved_at})


def deploy_api(cfg, obs_size: int, num_actions: int) -> None:
    app_ = LeagueAPI.options(ray_actor_options={"num_cpus": cfg.serve.num_cpus}, max_ongoing_requests=64,
                             graceful_shutdown_timeout_s=5, graceful_shutdown_wait_loop_s=0.5).bind(
        cfg.ray.coordinator_name, cfg.ray.namespace, cfg.game.name, obs_size, num_actions)
    serve.run(app_, name=APP_NAME, route_prefix="/")
