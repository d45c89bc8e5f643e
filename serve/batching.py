"""Batching logic of the opponents deployment, as plain functions.

A request carries every frozen-opponent decision of one vector step of one
rollout worker: ``(agent_ids, codes, obs, mask)`` where row ``i`` is played by
``agent_ids[codes[i]]``. One request per vector step, not one per opponent: a
Serve call costs milliseconds of client CPU whatever its size (docs/serve.md),
so the number of calls, not the number of observations, decides throughput.

``@serve.batch`` hands the deployment a list of such requests from many
workers; ``run_grouped`` gathers the rows of each agent id across all of them,
hands every id's rows to one ``forward`` call (which evaluates all the
policies in one stacked pass, ``policies.net.stacked_act``), and scatters the
actions back per request. Kept
free of Ray so it is unit-tested directly (``@serve.batch`` does not run under
Serve's local testing mode).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from policies.net import sample_rows, stacked_act

# (agent ids, obs of each, masks of each) -> actions of each
Forward = Callable[[list[str], list[np.ndarray], list[np.ndarray]], list[np.ndarray]]
Request = tuple[list[str], np.ndarray, np.ndarray, np.ndarray]  # agent ids, per-row index into them, obs, mask


def validate_request(agent_ids, codes, obs, mask, obs_size: int | None = None,
                     num_actions: int | None = None) -> Request:
    """(agent_ids, codes int64 (n,), obs float32 (n, D), mask bool (n, A)); ValueError if malformed."""
    if isinstance(agent_ids, str) or not isinstance(agent_ids, (list, tuple)) or not agent_ids:
        raise ValueError("agent_ids must be a non-empty list of agent ids")
    if not all(isinstance(a, str) and a for a in agent_ids):
        raise ValueError("every agent id must be a non-empty string")
    obs = np.asarray(obs, dtype=np.float32)
    mask = np.asarray(mask, dtype=bool)
    codes = np.asarray(codes)
    if obs.ndim != 2 or mask.ndim != 2 or len(obs) != len(mask) or len(obs) == 0:
        raise ValueError(f"obs and mask must be non-empty 2-D arrays with the same rows, got {obs.shape} and {mask.shape}")
    if codes.shape != (len(obs),) or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be {len(obs)} integers, got shape {codes.shape} of {codes.dtype}")
    if codes.min() < 0 or codes.max() >= len(agent_ids):
        raise ValueError(f"codes must index agent_ids (0..{len(agent_ids) - 1})")
    if obs_size is not None and obs.shape[1] != obs_size:
        raise ValueError(f"observations have {obs.shape[1]} features, the game has {obs_size}")
    if num_actions is not None and mask.shape[1] != num_actions:
        raise ValueError(f"masks have {mask.shape[1]} actions, the game has {num_actions}")
    if not np.all(np.isfinite(obs)):
        raise ValueError("observations contain NaN or inf")
    if not mask.any(axis=1).all():
        raise ValueError("every mask needs at least one legal action")
    return list(agent_ids), codes.astype(np.int64, copy=False), obs, mask


def rows_by_code(codes: np.ndarray, n_codes: int) -> list[np.ndarray]:
    """Row indices of each code, in row order."""
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=n_codes))[:-1]
    return np.split(order, bounds)


def run_grouped(requests: Sequence[Request], forward: Forward) -> list[np.ndarray]:
    """Actions for each request's rows, with one ``forward`` over the rows of every distinct id."""
    by_id: dict[str, list[tuple[int, np.ndarray | slice]]] = {}
    for r, (agent_ids, codes, _, _) in enumerate(requests):
        if len(agent_ids) == 1:
            by_id.setdefault(agent_ids[0], []).append((r, slice(None)))
            continue
        for agent_id, rows in zip(agent_ids, rows_by_code(codes, len(agent_ids))):
            if rows.size:
                by_id.setdefault(agent_id, []).append((r, rows))
    ids = list(by_id)
    obs, masks = [], []
    for parts in by_id.values():
        if len(parts) == 1:
            r, rows = parts[0]
            obs.append(requests[r][2][rows])
            masks.append(requests[r][3][rows])
        else:
            obs.append(np.concatenate([requests[r][2][rows] for r, rows in parts]))
            masks.append(np.concatenate([requests[r][3][rows] for r, rows in parts]))
    out = [np.empty(len(req[2]), dtype=np.int64) for req in requests]
    for parts, actions in zip(by_id.values(), forward(ids, obs, masks) if ids else []):
        start = 0
        for r, rows in parts:
            n = len(out[r][rows])
            out[r][rows] = actions[start:start + n]
            start += n
    return out


def act_known(models: dict, agent_ids: list[str], obs: list[np.ndarray], masks: list[np.ndarray],
              rng: np.random.Generator) -> list[np.ndarray]:
    """A ``Forward``: every agent in ``models`` acts in one stacked pass; an agent
    missing from it (evicted from the pool while a game against it was still
    running) plays uniformly over legal actions, so one stale id never fails
    the other rows of a request. Such games' results are dropped by the
    coordinator (their opponent is no longer in the pool)."""
    known = [i for i, a in enumerate(agent_ids) if a in models]
    out: list[np.ndarray] = [None] * len(agent_ids)  # type: ignore[list-item]
    if known:
        acted = stacked_act([models[agent_ids[i]] for i in known], [obs[i] for i in known], [masks[i] for i in known], rng)
        for i, a in zip(known, acted):
            out[i] = a
    for i in range(len(agent_ids)):
        if out[i] is None:
            legal = np.asarray(masks[i], dtype=np.float64)
            out[i] = sample_rows(legal / legal.sum(axis=1, keepdims=True), rng)
    return out


# A served rollout policy's request: ((learner id, version, the learner's life), obs, mask); its
# answer: arrays of one row per observation, (actions, logp, values) for its moves, (logits, values)
# for a search's leaves
LiveKey = tuple[str, int, str]
LiveRequest = tuple[LiveKey, np.ndarray, np.ndarray]
LiveAnswer = tuple[np.ndarray, ...]


def validate_live_request(learner_id, version, life, obs, mask) -> LiveRequest:
    """((learner id, version int, life str), obs float32 (n, D), mask bool (n, A)); ValueError if
    malformed."""
    if not isinstance(learner_id, str) or not learner_id:
        raise ValueError("learner_id must be a non-empty string")
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}")
    if not isinstance(life, str):
        raise ValueError(f"life must be a string, got {life!r}")
    _, _, obs, mask = validate_request([learner_id], np.zeros(len(np.asarray(obs)), dtype=np.int64), obs, mask)
    return (learner_id, int(version), life), obs, mask


def run_live(requests: Sequence[LiveRequest], act: Callable[[LiveKey, np.ndarray, np.ndarray], LiveAnswer]
             ) -> list[LiveAnswer]:
    """Each request's answer, with one ``act`` over the rows of every distinct key (learner, version,
    life): the workers' requests for one policy are one pass, whose arrays are split back by rows."""
    by_key: dict[LiveKey, list[int]] = {}
    for r, (key, _, _) in enumerate(requests):
        by_key.setdefault(key, []).append(r)
    out: list[LiveAnswer] = [None] * len(requests)  # type: ignore[list-item]
    for key, rs in by_key.items():
        obs = np.concatenate([requests[r][1] for r in rs]) if len(rs) > 1 else requests[rs[0]][1]
        mask = np.concatenate([requests[r][2] for r in rs]) if len(rs) > 1 else requests[rs[0]][2]
        answer = act(key, obs, mask)
        start = 0
        for r in rs:
            n = len(requests[r][1])
            out[r] = tuple(part[start:start + n] for part in answer)
            start += n
    return out
