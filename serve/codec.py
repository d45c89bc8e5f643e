"""What travels over HTTP: request bodies decoded and validated, responses encoded.

Plain functions, free of Ray and of the web framework, so every branch is
unit-tested (and fuzzed) without a cluster. The rule they keep: any body the
API cannot read or validate becomes a :class:`BadRequest` (a 4xx with a JSON
message), whatever the parser underneath raises. Nothing received is
unpickled: bodies are JSON or msgpack, and msgpack extension types decode to
inert objects that validation then refuses.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

MSGPACK = "application/msgpack"
JSON_TYPES = ("application/json", "text/json", "")
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BATCH = 4096
# Game observation tensors hold small numbers (0/1 planes, card one-hots). Far
# larger values overflow a float32 network into NaN logits, which would sample
# an arbitrary (possibly illegal) action, so they are refused up front.
MAX_OBS_MAGNITUDE = 1e6
MAX_EPISODE_ID_CHARS = 256
ACT_FIELDS = ("observations", "legal_masks", "episode_ids", "seed", "deterministic")


class BadRequest(Exception):
    """A request the API cannot serve because of what the client sent (status 4xx)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def media_type(content_type: str | None) -> str:
    return (content_type or "application/json").split(";")[0].strip().lower()


def decode_body(raw: bytes, content_type: str | None) -> Any:
    """The JSON or msgpack value of a request body; BadRequest if it is neither."""
    kind = media_type(content_type)
    if kind not in JSON_TYPES and kind != MSGPACK:
        raise BadRequest(f"unsupported Content-Type {kind!r}; use application/json or {MSGPACK}", 415)
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(f"body larger than {MAX_BODY_BYTES} bytes", 413)
    if not raw:
        raise BadRequest("empty body")
    if kind == MSGPACK:
        try:
            # strict_map_key: only str/bytes keys; ext types stay inert ExtType/Timestamp objects
            return msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=MAX_BODY_BYTES,
                                   max_str_len=MAX_BODY_BYTES)
        except Exception as exc:  # msgpack raises ValueError subclasses, TypeError, UnicodeDecodeError...
            raise BadRequest(f"malformed msgpack: {type(exc).__name__}") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise BadRequest("malformed JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, bad encodings, over-long integers
        raise BadRequest(f"malformed JSON: {safe_text(str(exc), 200)}") from None


def safe_text(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters and made encodable (lone surrogates escaped)."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _describe(value: Any) -> str:
    return "true/false" if isinstance(value, bool) else type(value).__name__


def _matrix(raw: Any, name: str, allowed: tuple[type, ...], what: str, status: int) -> list[list]:
    """``raw`` checked to be a non-empty list of equally long lists of ``allowed`` scalars."""
    if not isinstance(raw, list) or not raw:
        raise BadRequest(f"'{name}' must be a non-empty list of {what} vectors", status)
    if len(raw) > MAX_BATCH:
        raise BadRequest(f"at most {MAX_BATCH} rows per request in '{name}', got {len(raw)}", 413)
    if not all(type(row) is list for row in raw):
        bad = next(row for row in raw if type(row) is not list)
        raise BadRequest(f"'{name}' must be a list of lists, found a {_describe(bad)} row", status)
    if len({len(row) for row in raw}) != 1:
        raise BadRequest(f"'{name}' must be a list of equally long lists", status)
    types = {type(x) for row in raw for x in row}  # exact types: True is not a number here
    if not types <= set(allowed):
        bad = sorted(t.__name__ if t is not bool else "true/false" for t in types - set(allowed))
        raise BadRequest(f"'{name}' must hold only {what} values, found {', '.join(bad)}", status)
    return raw


def _float_matrix(raw: list[list]) -> np.ndarray:
    try:
        return np.array(raw, dtype=np.float64)
    except OverflowError:  # an integer beyond float range
        raise BadRequest("observations contain a number too large for a float", 422) from None


@dataclass
class ActRequest:
    obs: np.ndarray  # float32 (n, obs_size)
    mask: np.ndarray  # bool (n, num_actions), every row with a legal action
    episode_ids: list | None
    seed: int | None
    deterministic: bool


def parse_act_request(body: Any, obs_size: int, num_actions: int) -> ActRequest:
    """A validated ``POST /nash/act`` body; BadRequest says what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be an object with 'observations', got {_describe(body)}")
    if not all(isinstance(k, str) for k in body):
        raise BadRequest("field names must be strings")
    unknown = sorted(safe_text(k, 40) for k in body if k not in ACT_FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields: {unknown[:5]}; expected some of {list(ACT_FIELDS)}")
    rows = _matrix(body.get("observations"), "observations", (int, float), "number", 400)
    if len(rows[0]) != obs_size:
        raise BadRequest(f"each observation must have {obs_size} numbers, got {len(rows[0])}", 422)
    obs = _float_matrix(rows)
    if not np.all(np.isfinite(obs)):
        raise BadRequest("observations contain NaN or infinity", 422)
    if np.abs(obs).max() > MAX_OBS_MAGNITUDE:
        raise BadRequest(f"observation values must lie within ±{MAX_OBS_MAGNITUDE:g}", 422)
    n = len(obs)
    masks = body.get("legal_masks")
    if masks is None:
        mask = np.ones((n, num_actions), dtype=bool)
    else:
        if not isinstance(masks, list) or len(masks) != n:
            raise BadRequest("'legal_masks' must be a list with one mask per observation", 422)
        masks = _matrix(masks, "legal_masks", (int, float, bool), "0/1 or true/false", 422)
        if len(masks[0]) != num_actions:
            raise BadRequest(f"each legal mask must have {num_actions} entries, got {len(masks[0])}", 422)
        if not all(x == 0 or x == 1 for row in masks for x in row):
            raise BadRequest("legal masks must hold only 0/1 or true/false", 422)
        mask = np.array(masks, dtype=np.float64) == 1
        if not mask.any(axis=1).all():
            raise BadRequest("every legal mask needs at least one legal action", 422)
    episodes = body.get("episode_ids")
    if episodes is not None:
        if not isinstance(episodes, list) or len(episodes) != n:
            raise BadRequest("'episode_ids' must be a list with one id per observation", 422)
        for e in episodes:
            if isinstance(e, bool) or not isinstance(e, (str, int)):
                raise BadRequest(f"episode ids must be strings or integers, found {_describe(e)}", 422)
            if isinstance(e, int) and not -2**63 <= e < 2**64:
                raise BadRequest("integer episode ids must fit in 64 bits", 422)
            if isinstance(e, str) and len(e) > MAX_EPISODE_ID_CHARS:
                raise BadRequest(f"episode ids must be at most {MAX_EPISODE_ID_CHARS} characters", 422)
    seed = body.get("seed")
    if seed is not None and (type(seed) is not int or not 0 <= seed < 2**63):
        raise BadRequest("'seed' must be a non-negative integer below 2**63", 422)
    deterministic = body.get("deterministic", False)
    if not isinstance(deterministic, bool):
        raise BadRequest("'deterministic' must be true or false", 422)
    return ActRequest(obs.astype(np.float32), mask, episodes, seed, deterministic)


def finite_or_none(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, so it encodes as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def encode_json(payload: Any) -> bytes:
    """Strict JSON (no NaN tokens), ASCII, so no client string can make encoding fail."""
    return json.dumps(finite_or_none(payload), ensure_ascii=True, allow_nan=False,
                      separators=(",", ":")).encode("ascii")


def encode_msgpack(payload: Any) -> bytes:
    return msgpack.packb(finite_or_none(payload), use_bin_type=True)
