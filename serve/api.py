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
import json
import logging
import time
from typing import Any

import msgpack
import numpy as np
import ray
import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)

APP_NAME = "api"
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BATCH = 4096
MSGPACK = "application/msgpack"


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def member_for_episode(episode_id: Any, seed: int, pool_version: int, weights: np.ndarray) -> int:
    """The mixture member that plays a whole episode: a stable hash of the
    episode id drawn through the weights, so every request of that episode
    gets the same member (the per-episode semantics exploitability uses)."""
    digest = hashlib.blake2b(f"{seed}:{pool_version}:{episode_id}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "little") / 2**64
    return int(min(np.searchsorted(np.cumsum(weights), u * weights.sum(), side="right"), len(weights) - 1))


def parse_act_request(body: dict, obs_size: int, num_actions: int) -> dict[str, Any]:
    """Validated arrays of a /nash/act body; BadRequest says what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be an object with 'observations'")
    unknown = set(body) - {"observations", "legal_masks", "episode_ids", "seed", "deterministic"}
    if unknown:
        raise BadRequest(f"unknown fields: {sorted(unknown)}")
    raw = body.get("observations")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'observations' must be a non-empty list of observation vectors")
    if len(raw) > MAX_BATCH:
        raise BadRequest(f"at most {MAX_BATCH} observations per request, got {len(raw)}", 413)
    try:
        obs = np.array(raw, dtype=np.float64)
    except (ValueError, TypeError):
        raise BadRequest("'observations' must be a list of equally long lists of numbers") from None
    if obs.ndim != 2 or obs.shape[1] != obs_size:
        raise BadRequest(f"each observation must have {obs_size} numbers, got shape {list(obs.shape)}", 422)
    if not np.all(np.isfinite(obs)):
        raise BadRequest("observations contain NaN or infinity", 422)
    masks = body.get("legal_masks")
    if masks is None:
        mask = np.ones((len(obs), num_actions), dtype=bool)
    else:
        if not isinstance(masks, list) or len(masks) != len(obs):
            raise BadRequest("'legal_masks' must be a list with one mask per observation", 422)
        try:
            m = np.array(masks)
        except (ValueError, TypeError):
            raise BadRequest("'legal_masks' must be a list of equally long lists of 0/1 or booleans", 422) from None
        if m.ndim != 2 or m.shape[1] != num_actions:
            raise BadRequest(f"each legal mask must have {num_actions} entries, got shape {list(m.shape)}", 422)
        if m.dtype == object or not np.all((m == 0) | (m == 1)):
            raise BadRequest("legal masks must hold only 0/1 or booleans", 422)
        mask = m.astype(bool)
        if not mask.any(axis=1).all():
            raise BadRequest("every legal mask needs at least one legal action", 422)
    episodes = body.get("episode_ids")
    if episodes is not None:
        if not isinstance(episodes, list) or len(episodes) != len(obs):
            raise BadRequest("'episode_ids' must be a list with one id per observation", 422)
        if not all(isinstance(e, (str, int)) and not isinstance(e, bool) for e in episodes):
            raise BadRequest("episode ids must be strings or integers", 422)
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
        raise BadRequest("'seed' must be a non-negative integer", 422)
    deterministic = body.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise BadRequest("'deterministic' must be true or false", 422)
    return {"obs": obs.astype(np.float32), "mask": mask, "episode_ids": episodes, "seed": seed,
            "deterministic": deterministic}


app = FastAPI(title="nash-league", description="The current Nash policy of a running league.", version="1")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


@app.exception_handler(StarletteHTTPException)
async def _http_error(request, exc):
    return _error(exc.status_code, str(exc.detail))


@app.exception_handler(RequestValidationError)
async def _validation_error(request, exc):
    return _error(422, f"invalid request: {exc.errors()[:3]}")


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
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
        kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if not raw:
            raise BadRequest("empty body")
        if kind == MSGPACK:
            try:
                return msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=MAX_BODY_BYTES)
            except Exception as exc:
                raise BadRequest(f"malformed msgpack: {type(exc).__name__}") from None
        if kind in ("application/json", "text/json", ""):
            try:
                return json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise BadRequest(f"malformed JSON: {exc}") from None
        raise BadRequest(f"unsupported Content-Type {kind!r}; use application/json or {MSGPACK}", 415)

    @staticmethod
    def _reply(request: Request, payload: Any, status: int = 200) -> Response:
        if MSGPACK in request.headers.get("accept", ""):
            return Response(msgpack.packb(payload, use_bin_type=True), status_code=status, media_type=MSGPACK)
        return JSONResponse(payload, status_code=status)

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
        return self._reply(request, {**n, "game": self.game})

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
        if not n["agents"]:
            return _error(409, "the league has no Nash mixture yet")
        ids = [a["agent_id"] for a in n["agents"]]
        weights = np.array([a["weight"] for a in n["agents"]], dtype=np.float64)
        seed = req["seed"]
        rng = np.random.default_rng(seed)
        count = len(req["obs"])
        if req["episode_ids"] is not None:
            members = np.array([member_for_episode(e, seed or 0, n["pool_version"], weights)
                                for e in req["episode_ids"]])
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
                actions[rows] = model.act(req["obs"][rows], req["mask"][rows], generator=rng,
                                          deterministic=req["deterministic"])[0]
        return self._reply(request, {"actions": actions.tolist(), "members": [ids[m] for m in members.tolist()],
                                     "pool_version": n["pool_version"], "solved_at": n["solved_at"]})


def deploy_api(cfg, obs_size: int, num_actions: int) -> None:
    app_ = LeagueAPI.options(ray_actor_options={"num_cpus": cfg.serve.num_cpus}, max_ongoing_requests=64,
                             graceful_shutdown_timeout_s=5, graceful_shutdown_wait_loop_s=0.5).bind(
        cfg.ray.coordinator_name, cfg.ray.namespace, cfg.game.name, obs_size, num_actions)
    serve.run(app_, name=APP_NAME, route_prefix="/")
