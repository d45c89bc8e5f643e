"""Exact evaluation of small deterministic games of perfect information, position by position.

A game that offers a ``StateStore`` (``envs.states``: tic-tac-toe, a user's take-away game, Dots
and Boxes 2x2, ...) and has at most ``max_positions`` distinct positions is enumerated once into a
``PositionGraph``: every position reachable from the start, transpositions merged by the store's
``keys``, with the mover, the returns where the game ended, the mover's observation and legal mask,
and the child of every legal action. A network sees only the mover's observation, so its policy is
one table of action probabilities over the positions (``table``), computed in one batched forward
pass; every value below is exact (no sampling).

- ``value_matrix`` / ``value``: seat-0 expected return when tables meet, by dynamic programming
  over the graph (a DAG), one height level at a time (a position's height is the longest path from
  it to an end, so its children are all lower);
- ``nash_conv``: NashConv of a mixture that draws one member per episode with the mixture's
  weights and lets it play the whole episode (``policies.rollout.EpisodeMixture``,
  ``serve.api``'s member per episode). A best responder sees the opponent's moves, so it plays
  against the posterior over members given those moves. Its value against weights ``w`` is the
  maximum over its history-dependent strategies of ``sum_i w_i V(BR, member_i)``: a walk from the
  start carrying the posterior ``q`` over members (``q_i`` proportional to ``w_i`` times member i's
  probability of the opponent's moves so far), where at the opponent's position the walk branches
  on each action ``a`` with probability ``sum_i q_i pi_i(a)`` and updates ``q``, and at the best
  responder's position it takes the best child. Pairs (position, posterior) are merged with the
  posterior rounded to ``POSTERIOR_DECIMALS``: members that put probability 0 or 1 on moves
  (deterministic networks) give few distinct posteriors; stochastic ones give about one pair per
  history, so the walk is capped at ``max_nodes`` pairs and raises ``TooLarge`` beyond (never an
  approximation). With one member the posterior never changes and the walk is the dynamic
  programme over positions (``best_response_values``).

NashConv is ``sum_p [BR_p - u_p]`` in return units (OpenSpiel's ``nash_conv``), ``u_p`` the
mixture's value in seat p against itself (members drawn independently per seat: for a zero- or
constant-sum game only the sum matters, which is the game's constant).
"""

from __future__ import annotations

import functools
import json
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from envs import make_game
from envs.states import TERMINAL, NotSearchable, StateStore, state_store

if TYPE_CHECKING:  # only annotations here
    import torch

MAX_POSITIONS = 50_000
MAX_NODES = 2_000_000
# the graph holds an observation, a mask and a child per action of every position: a game of wide
# positions (chess: thousands of actions) is refused after a few positions, not after max_positions
MAX_CELLS = 40_000_000  # positions x (obs_size + num_actions)
EXPAND_CHILDREN = 4096  # children made per store call (at least one parent's): a wide game stops early
POSTERIOR_DECIMALS = 12  # posteriors equal to this many decimals are one node of the best-response walk


class TooLarge(ValueError):
    """The game (or a best-response walk) is past the cap exact evaluation allows; the message
    names the cap."""


@dataclass(frozen=True, eq=False)
class PositionGraph:
    """Every distinct position of a game reachable from its start (index 0).

    player:  (P,) int64, the seat to move, ``envs.states.TERMINAL`` (-1) where the game ended;
    returns: (P, 2) float64, each seat's return where the game ended, 0 elsewhere;
    obs:     (P, D) float32, the mover's observation;
    mask:    (P, A) bool, the mover's legal actions;
    child:   (P, A) int64, the position after each legal action, -1 where illegal;
    height:  (P,) int64, the longest number of moves from the position to an end;
    order:   (P,) int64, a topological order (every position before its children);
    levels:  positions grouped by height, lowest (the ends) first;
    keys:    the store's key of each position.
    """

    player: np.ndarray
    returns: np.ndarray
    obs: np.ndarray
    mask: np.ndarray
    child: np.ndarray
    height: np.ndarray
    order: np.ndarray
    levels: tuple[np.ndarray, ...]
    keys: tuple

    @property
    def num_positions(self) -> int:
        return len(self.player)

    @property
    def decisions(self) -> np.ndarray:
        """Positions where a seat is to move."""
        return np.flatnonzero(self.player != TERMINAL)

    @classmethod
    def build(cls, make_store, max_positions: int = MAX_POSITIONS, name: str = "game") -> "PositionGraph":
        """Enumerate breadth-first from the start, about ``EXPAND_CHILDREN`` children a store call.
        ``make_store(capacity)`` gives an empty ``StateStore``; ``TooLarge`` past ``max_positions``
        or past ``MAX_CELLS`` numbers held (positions times observation size plus actions)."""
        probe: StateStore = make_store(1)
        num_actions = int(probe.num_actions)
        width = num_actions + int(probe.obs_size)
        limit = min(int(max_positions), max(1, MAX_CELLS // width))
        too_large = (f"{name}: more than {limit} distinct positions"
                     + ("" if limit == int(max_positions) else
                        f" of {probe.obs_size} observed numbers and {num_actions} actions each")
                     + "; exact evaluation enumerates every position of a small game")
        # a slot holds a position until it is expanded: at most every position found plus one batch's children
        capacity = limit + max(EXPAND_CHILDREN, num_actions)
        store: StateStore = make_store(capacity)
        free = list(range(capacity - 1, -1, -1))
        index: dict = {}
        keys: list = []
        player, returns, obs, mask, edges = [], [], [], [], []
        queue: deque = deque()  # (position, slot) found and not yet expanded

        def add(slots: np.ndarray, pos) -> np.ndarray:
            """Positions of the filled ``slots``: new ones numbered and queued, the others' slots freed."""
            out = np.empty(len(slots), dtype=np.int64)
            for i, (slot, key) in enumerate(zip(slots.tolist(), store.keys(slots))):
                k = index.get(key)
                if k is None:
                    k = index[key] = len(player)
                    if k >= limit:
                        raise TooLarge(too_large)
                    keys.append(key)
                    player.append(int(pos.player[i]))
                    returns.append(pos.returns[i])
                    obs.append(pos.obs[i])
                    mask.append(pos.mask[i])
                    if pos.player[i] != TERMINAL:
                        queue.append((k, slot))
                        out[i] = k
                        continue
                elif player[k] != pos.player[i]:  # a store whose keys leave out the mover would merge these
                    raise NotSearchable(f"{name}: two positions with one key have different seats to move")
                free.append(slot)
                out[i] = k
            return out

        root = np.array([free.pop()])
        add(root, store.set_initial(root))
        while queue:
            batch, made = [], 0
            while queue and (not batch or made + mask[queue[0][0]].sum() <= EXPAND_CHILDREN):
                batch.append(queue.popleft())
                made += int(mask[batch[-1][0]].sum())
            parents = np.array([slot for _, slot in batch], dtype=np.int64)
            legal = np.stack([mask[k] for k, _ in batch])
            rows, actions = np.nonzero(legal)
            children = np.array([free.pop() for _ in range(len(rows))], dtype=np.int64)
            pos = store.expand(parents[rows], actions, children)
            found = add(children, pos)
            ks = np.array([k for k, _ in batch], dtype=np.int64)
            edges.append((ks[rows], actions, found))
            free.extend(parents.tolist())
        P = len(player)
        child = np.full((P, num_actions), -1, dtype=np.int64)
        for ks, actions, found in edges:
            child[ks, actions] = found
        return cls._finish(np.array(player, dtype=np.int64), np.array(returns, dtype=np.float64).reshape(P, 2),
                           np.array(obs, dtype=np.float32).reshape(P, -1), np.array(mask, dtype=bool), child,
                           tuple(keys), name)

    @classmethod
    def _finish(cls, player, returns, obs, mask, child, keys, name) -> "PositionGraph":
        P = len(player)
        src, act = np.nonzero(child >= 0)
        dst = child[src, act]
        # Kahn's algorithm from the ends upwards: a position's height is known once all its children's are
        pending = np.bincount(src, minlength=P)
        height = np.zeros(P, dtype=np.int64)
        level = np.flatnonzero(pending == 0)
        levels, done = [], 0
        while len(level):
            levels.append(level)
            done += len(level)
            in_level = np.zeros(P, dtype=bool)
            in_level[level] = True
            parents = src[in_level[dst]]  # one entry per edge into this level
            np.subtract.at(pending, parents, 1)
            cand = np.unique(parents)
            level = cand[pending[cand] == 0]
            height[level] = len(levels)
        if done != P:
            raise NotSearchable(f"{name}: a position can recur (the game graph has a cycle); exact evaluation "
                                "needs games that always end")
        order = np.concatenate(levels[::-1])
        return cls(player, returns, obs, mask, child, height, order, tuple(levels), keys)


def _params_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=repr)


@functools.lru_cache(maxsize=16)
def _cached_graph(name: str, params_key: str, max_positions: int) -> PositionGraph:
    params = json.loads(params_key)
    game = make_game(name, 1, seed=0, **params)
    return PositionGraph.build(lambda capacity: state_store(game, capacity), max_positions, name)


def position_graph(name: str, params: dict | None = None, max_positions: int = MAX_POSITIONS) -> PositionGraph:
    """The ``PositionGraph`` of game ``name`` with ``params`` (``envs.make_game``), built once per
    process; ``NotSearchable`` when the game has no state store, ``TooLarge`` past ``max_positions``."""
    return _cached_graph(name, _params_key(dict(params or {})), int(max_positions))


# game object -> its graph, or the exception that says why it has none
_GAME_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def graph_of(game, max_positions: int = MAX_POSITIONS) -> PositionGraph:
    """The ``PositionGraph`` of a built ``VectorGame`` (its own state store), built once per game
    object; raises ``NotSearchable`` or ``TooLarge`` as ``position_graph`` does, every time asked."""
    hit = _GAME_GRAPHS.get(game)
    if hit is None:
        try:
            hit = PositionGraph.build(lambda capacity: state_store(game, capacity), max_positions, game.name)
        except (NotSearchable, TooLarge) as exc:
            hit = exc
        except Exception as exc:  # the game's own code raised while its positions were walked (a user's game)
            hit = NotSearchable(f"{game.name}: walking its positions raised {type(exc).__name__}: {exc}")
        _GAME_GRAPHS[game] = hit
    if isinstance(hit, Exception):
        raise hit
    return hit


def tree_supports_exact(game, max_positions: int = MAX_POSITIONS) -> bool:
    """Whether ``game`` is evaluated exactly through its positions: it has a state store and at most
    ``max_positions`` distinct positions (enumerated once to know, then kept)."""
    try:
        graph_of(game, max_positions)
    except (NotSearchable, TooLarge):
        return False
    return True


# ----------------------------------------------------------------------------- policy tables
# model -> {id(graph): (parameter fingerprint, table)}
_TABLES: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def _fingerprint(model) -> tuple:
    # in-place updates (optimizer.step, load_state_dict) bump _version
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def uniform_table(graph: PositionGraph) -> np.ndarray:
    """(P, A) uniform random play over the legal actions (rows of ended positions 0)."""
    m = graph.mask.astype(np.float64)
    return m / np.maximum(m.sum(axis=1, keepdims=True), 1.0)


def table(graph: PositionGraph, model) -> np.ndarray:
    """(P, A) float64 action probabilities of ``model`` (None: uniform) at every position where a
    seat moves, 0 on illegal actions and at ends; one batched forward pass, kept per model until
    its parameters change."""
    if model is None:
        return uniform_table(graph)
    per_model = _TABLES.setdefault(model, {})
    fp, hit = _fingerprint(model), per_model.get(id(graph))
    if hit is not None and hit[0] == fp and hit[1] is graph:
        return hit[2]
    obs, mask = graph.obs, graph.mask
    if model.spec.obs_size != obs.shape[1] or model.spec.num_actions != mask.shape[1]:
        raise ValueError(f"model expects obs_size={model.spec.obs_size}, num_actions={model.spec.num_actions}; "
                         f"the game has {obs.shape[1]}, {mask.shape[1]}")
    out = np.zeros(mask.shape, dtype=np.float64)
    dec = graph.decisions
    probs = np.asarray(model.probs(obs[dec], mask[dec]), dtype=np.float64) * mask[dec]
    out[dec] = probs / probs.sum(axis=1, keepdims=True)
    per_model[id(graph)] = (fp, graph, out)
    return out


# ----------------------------------------------------------------------------- values
def value_matrix(graph: PositionGraph, tables0, tables1, seat: int = 0) -> np.ndarray:
    """(M, N) exact expected return of ``seat`` when table i of ``tables0`` (M, P, A) plays seat 0
    and table j of ``tables1`` (N, P, A) plays seat 1."""
    t0 = np.asarray(tables0, dtype=np.float64)
    t1 = np.asarray(tables1, dtype=np.float64)
    M, N = len(t0), len(t1)
    V = np.zeros((graph.num_positions, M, N))
    V[:] = graph.returns[:, seat][:, None, None]
    child = np.maximum(graph.child, 0)
    for level in graph.levels[1:]:
        p = graph.player[level]
        for s, t in ((0, t0), (1, t1)):
            v = level[p == s]
            if not len(v):
                continue
            cv = V[child[v]]  # (n, A, M, N); illegal actions weigh 0
            V[v] = (np.einsum("kna,nakl->nkl", t[:, v], cv) if s == 0 else np.einsum("lna,nakl->nkl", t[:, v], cv))
    return V[0]


def value(graph: PositionGraph, t0: np.ndarray, t1: np.ndarray) -> float:
    """Exact seat-0 expected return when table ``t0`` plays seat 0 and ``t1`` seat 1."""
    return float(value_matrix(graph, np.asarray(t0)[None], np.asarray(t1)[None])[0, 0])


def best_response_values(graph: PositionGraph, opponent: np.ndarray, seat: int) -> np.ndarray:
    """(P,) value to ``seat`` of a best response to one table ``opponent`` in the other seat, at
    every position (the start: index 0)."""
    V = graph.returns[:, seat].copy()
    child = np.maximum(graph.child, 0)
    for level in graph.levels[1:]:
        cv = V[child[level]]  # (n, A)
        mine = graph.player[level] == seat
        best = np.where(graph.mask[level], cv, -np.inf).max(axis=1)
        expect = (opponent[level] * cv).sum(axis=1)
        V[level] = np.where(mine, best, expect)
    return V


def best_response_value(graph: PositionGraph, tables: np.ndarray, weights, seat: int,
                        max_nodes: int = MAX_NODES) -> float:
    """Exact value to ``seat`` of the best responder, who sees the opponent's moves, against the
    mixture that draws member i (table ``tables[i]``) with weight ``weights[i]`` for the whole
    episode in the other seat (module docstring). ``TooLarge`` past ``max_nodes`` pairs."""
    tables = np.asarray(tables, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    keep = w > 0
    tables, w = tables[keep], w[keep]
    if len(w) == 1:
        return float(best_response_values(graph, tables[0], seat)[0])
    M = len(w)
    # forward: pairs (position, posterior) grouped by the position's height, highest first; every
    # parent of a pair is higher, so a group is complete when its turn comes and is merged in one go
    pending: dict[int, list] = {}

    def push(pos: np.ndarray, q: np.ndarray, edge: np.ndarray) -> None:
        h = graph.height[pos]
        for hv in np.unique(h).tolist():
            sel = h == hv
            pending.setdefault(hv, []).append((pos[sel], q[sel], edge[sel]))

    groups = []  # per group: its pairs' positions
    edges = []  # per group: (parent pair, probability, best responder's choice) of each edge out of it
    reached = []  # (edge, pair it reaches)
    count = n_edges = 0
    push(np.array([0]), w[None], np.array([-1]))
    while pending:
        parts = pending.pop(max(pending))
        pos = np.concatenate([p for p, _, _ in parts])
        q = np.concatenate([x for _, x, _ in parts])
        edge = np.concatenate([e for _, _, e in parts])
        key = np.column_stack([pos.astype(np.float64), np.round(q, POSTERIOR_DECIMALS)])
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        reached.append((edge, count + inverse.ravel()))
        pos, q, base = pos[first], q[first], count
        count += len(first)
        if count > max_nodes:
            raise TooLarge(f"best response to a mixture of {M} members visits more than {max_nodes} "
                           "(position, posterior) pairs; exact evaluation caps its walk")
        groups.append(pos)
        rows, acts = np.nonzero(graph.mask[pos] & (graph.player[pos] != TERMINAL)[:, None])
        mine = graph.player[pos[rows]] == seat
        # the opponent's move: its probability under the posterior, and the posterior after it
        joint = q[rows] * tables[:, pos[rows], acts].T  # (edges, M)
        prob = np.where(mine, 1.0, joint.sum(axis=1))
        nq = np.where(mine[:, None], q[rows], joint / np.where(prob > 0, prob, 1.0)[:, None])
        alive = prob > 0
        rows, acts, mine, prob, nq = rows[alive], acts[alive], mine[alive], prob[alive], nq[alive]
        edges.append((base + rows, prob, mine))
        eid = n_edges + np.arange(len(rows))
        n_edges += len(rows)
        if len(rows):
            push(graph.child[pos[rows], acts], nq, eid)
    target = np.zeros(n_edges, dtype=np.int64)
    for edge, pair in reached:
        target[edge[edge >= 0]] = pair[edge >= 0]
    # backward: the lowest group first; a group's edges reach only lower groups
    pair_pos = np.concatenate(groups)
    values = np.where(graph.player[pair_pos] == TERMINAL, graph.returns[pair_pos, seat], -np.inf)
    bounds = np.cumsum([0] + [len(g) for g in groups])
    offset = np.cumsum([0] + [len(e[0]) for e in edges])
    for g in range(len(groups) - 1, -1, -1):
        parent, prob, mine = edges[g]
        if not len(parent):
            continue
        cv = values[target[offset[g]:offset[g + 1]]]
        np.maximum.at(values, parent[mine], cv[mine])
        lo, hi = bounds[g], bounds[g + 1]
        expect = np.zeros(hi - lo)
        np.add.at(expect, parent[~mine] - lo, prob[~mine] * cv[~mine])
        theirs = np.zeros(hi - lo, dtype=bool)
        theirs[parent[~mine] - lo] = True
        values[lo:hi] = np.where(theirs, expect, values[lo:hi])
    return float(values[0])


def nash_conv(graph: PositionGraph, tables, weights, max_nodes: int = MAX_NODES) -> dict:
    """NashConv, exploitability and each seat's improvement of the mixture drawing table i with
    weight ``weights[i]`` per episode (module docstring); one table: its own NashConv."""
    tables = np.asarray(tables, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if tables.ndim != 3 or len(tables) == 0 or w.shape != (len(tables),) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"need one non-negative weight per table with a positive sum, got {list(w)} "
                         f"for {len(tables)} tables")
    w = w / w.sum()
    own = [float(w @ value_matrix(graph, tables, tables, seat) @ w) for seat in (0, 1)]
    improvements = [best_response_value(graph, tables, w, seat, max_nodes) - own[seat] for seat in (0, 1)]
    return {"nash_conv": float(sum(improvements)), "exploitability": float(sum(improvements)) / 2,
            "player_improvements": improvements}
