"""Batched Gumbel AlphaZero tree search: an improved policy and a searched value for many roots at once.

For each root position (an environment of a running ``VectorGame`` with a player to move) the search
grows a tree of at most ``simulations`` new nodes with a policy-value network and returns the move to
play, the improved policy target and the root's searched value, as Gumbel MuZero does (Danihelka,
Guez, Schrittwieser and Silver 2022, "Policy improvement by planning with Gumbel") on the
AlphaZero setting of exact game rules and one network for prior and value (Silver et al. 2018):

- at the root, ``considered`` actions are sampled without replacement by the Gumbel top-k trick on
  ``g + logits`` and Sequential Halving (Karnin, Koren and Somekh 2013) spends the simulations on
  them, halving the candidates by ``g + logits + sigma(q)``; the move played is the survivor;
- below the root, the deterministic selection ``argmax_a pi'(a) - N(a) / (1 + sum_b N(b))`` with
  ``pi' = softmax(logits + sigma(completed q))`` makes the visits follow the improved policy;
- completed q: a visited child's mean value, an unvisited one's the mixed value (the paper's
  Appendix D: the network's value of the node averaged with the prior-weighted q of the visited
  children); q is rescaled to [0, 1] by its minimum and maximum over the node's legal moves (mctx's
  ``rescale_values``) and
  ``sigma(q) = (c_visit + max_b N(b)) * c_scale * q``;
- the improved policy target is ``softmax(logits + sigma(completed q))`` over the root's legal moves.

Values are each node's own: the network's value is for the player to move at the node, and a value
changes sign on its way up only where the parent's mover differs from the child's (a player may move
twice in a row). A terminal node's value is its exact return for the player who moved into it.

Proofs (MCTS-Solver, Winands, Bjornsson and Saito 2008) where they come free: a terminal node is
proven; a node is proven when a child is proven worth the best return of ``value_range`` for its
mover, or when every legal child is proven (worth the best of them). A proven child's q is its exact
value, and selection never enters a proven child while the node is open, so every simulation adds a
new node. A root once proven stops searching; its policy target is the same softmax over the moves
that achieve its proven value only (the optimal moves the search has proven), its value the exact
one, and its move one of them. An open root plays a proven win when the tree holds one, and never
plays a proven loss while another move is not proven lost.

Proofs outlive a search where ``proof_table`` > 0 (a transposition table of proofs, as game-playing
programs keep): every non-terminal node a search proved is remembered by its position, with its exact
value, and a node that a later search reaches at a remembered position is proven on arrival, without
the network. Proofs are facts of the game, not of a network, so they hold for every later search;
they climb from the game's ends a layer per search, and a small game is soon proven wherever its
games go. A position is known by its store's key (``StateStore.keys``, exact: the key by which the
league enumerates a small game's tree). At most ``proof_table`` positions are kept, the oldest
forgotten first.

Everything is arrays shaped ``[roots, nodes]`` (``[roots, nodes, actions]`` for the priors and the
children): each simulation descends all the trees at once level by level with numpy operations
over the trees still descending, expands all the leaves in one ``StateStore.expand``, evaluates the
new non-terminal leaves in one network call and backs up all the paths at once.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from envs.base import VectorGame
from envs.states import TERMINAL, StateStore

__all__ = ["BatchedSearch", "SearchResult", "SearchSettings", "halving_schedule"]

UNKNOWN = 2  # ``SearchResult.proven`` of a root the search has not solved
_LOW_LOGIT = -1e9  # floor of the normalized root logits in the Gumbel score (mctx's low_logit)

Evaluate = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class SearchSettings:
    """The search's knobs (module docstring). ``gumbel_scale`` multiplies the root's Gumbel noise:
    0 makes the search deterministic (the top ``considered`` actions of the prior)."""

    simulations: int = 32  # per root and move
    considered: int = 16  # Gumbel top-k actions at the root (m)
    c_visit: float = 50.0  # sigma(q) = (c_visit + max_b N(b)) * c_scale * q
    c_scale: float = 0.1
    value_range: tuple[float, float] = (-1.0, 1.0)  # the game's returns: what a proven win is worth
    gumbel_scale: float = 1.0
    proof_table: int = 0  # proven positions remembered across searches (0: none)

    def __post_init__(self):
        def whole(name: str, low: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"search settings: {name} must be an integer >= {low}, got {v!r}")

        def real(name: str, low: float, strict: bool) -> None:
            v = getattr(self, name)
            bad = (isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
                   or not math.isfinite(v) or (v <= low if strict else v < low))
            if bad:
                raise ValueError(f"search settings: {name} must be a finite number {'>' if strict else '>='} "
                                 f"{low}, got {v!r}")

        whole("simulations", 1)
        whole("considered", 1)
        whole("proof_table", 0)
        real("c_visit", 0.0, strict=False)
        real("c_scale", 0.0, strict=True)
        real("gumbel_scale", 0.0, strict=False)
        vr = self.value_range
        try:
            lo, hi = (float(x) for x in vr)
        except (TypeError, ValueError):
            raise ValueError(f"search settings: value_range must be two numbers (lowest, highest return), "
                             f"got {vr!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"search settings: value_range must be finite with lowest < highest, got {vr!r}")


@dataclass
class SearchResult:
    """One row per root, in the order of the environments searched."""

    action: np.ndarray  # (n,) int64, the move to play
    policy: np.ndarray  # (n, A) float32, the improved policy target (0 on illegal moves)
    value: np.ndarray  # (n,) float32, the root's searched value for its mover
    proven: np.ndarray  # (n,) int8: +1 proven win, -1 proven loss, 0 proven draw, 2 unknown (for the mover)


def halving_schedule(considered: int, simulations: int) -> np.ndarray:
    """Sequential Halving's visit count to top up at each root simulation (mctx's
    ``get_sequence_of_considered_visits``), one row per number of considered actions 0..``considered``:
    row m, entry k is the visit count an action must have to be chosen at simulation k."""
    table = np.zeros((considered + 1, simulations), dtype=np.int64)
    for m in range(considered + 1):
        if m <= 1:
            table[m] = np.arange(simulations)
            continue
        log2m = math.ceil(math.log2(m))
        seq: list[int] = []
        visits = [0] * m
        num = m
        while len(seq) < simulations:
            extra = max(1, int(simulations / (log2m * num)))
            for _ in range(extra):
                seq.extend(visits[:num])
                for i in range(num):
                    visits[i] += 1
            num = max(2, num // 2)
        table[m] = seq[:simulations]
    return table


def _softmax(z: np.ndarray) -> np.ndarray:
    """Row softmax of ``z`` (rows with at least one finite entry; -inf gives 0)."""
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class BatchedSearch:
    """Gumbel AlphaZero search over up to ``max_roots`` roots at once (module docstring).

    A node is a slot of the store (``store_factory(capacity)``, capacity ``max_roots * nodes`` with
    ``nodes = simulations + 1``): root r's tree holds slots ``r * nodes`` (its root) to
    ``r * nodes + nodes - 1``. The node statistics are arrays shaped ``[max_roots, nodes]``
    (``[max_roots, nodes, A]`` for ``logits``, ``prior``, ``legal`` and ``children``), indexed by slot
    through flat views; ``parent`` and ``children`` hold slots (-1: none). A node's value is for its
    ``seat``: its mover, or at a terminal node the player who moved into it. Store and arrays are
    allocated once and reused by every ``run``. ``profile`` accumulates the seconds spent in the
    tree's array work ("tree"), the network ("evaluate"), the proof table's keys and lookups
    ("proofs") and the store ("expand", root copies included)."""

    def __init__(self, store_factory: Callable[[int], StateStore], max_roots: int, settings: SearchSettings,
                 rng: np.random.Generator):
        if int(max_roots) < 1:
            raise ValueError(f"search: max_roots must be >= 1, got {max_roots!r}")
        self.settings = settings
        self.rng = rng
        self.max_roots = R = int(max_roots)
        self.nodes = M = settings.simulations + 1
        self.store = store_factory(R * M)
        self.num_actions = A = int(self.store.num_actions)
        # values are kept centred on the middle of the game's range, so that a constant-sum game's
        # value for one player is minus the other's, as in a zero-sum game; results are in the game's units
        lo, hi = (float(x) for x in settings.value_range)
        self.mid = (lo + hi) / 2
        self.lo, self.hi = lo - self.mid, hi - self.mid
        self.schedule = halving_schedule(settings.considered, settings.simulations)
        self.profile: dict[str, float] = {"tree": 0.0, "evaluate": 0.0, "expand": 0.0, "proofs": 0.0}
        self.visits = np.zeros((R, M), dtype=np.int64)
        self.value_sum = np.zeros((R, M), dtype=np.float64)
        self.raw_value = np.zeros((R, M), dtype=np.float64)  # the network's value (0 at terminal nodes)
        self.seat = np.zeros((R, M), dtype=np.int64)  # the mover; an ended node keeps its parent's
        self.parent = np.zeros((R, M), dtype=np.int64)  # the parent's slot, -1 at the root
        self.proven = np.zeros((R, M), dtype=bool)
        self.exact = np.zeros((R, M), dtype=np.float64)  # a proven node's value for its seat
        self.logits = np.zeros((R, M, A), dtype=np.float32)
        self.prior = np.zeros((R, M, A), dtype=np.float64)  # softmax of the legal logits
        self.legal = np.zeros((R, M, A), dtype=bool)
        self.children = np.zeros((R, M, A), dtype=np.int64)  # the children's slots, -1 where not expanded
        self.next_node = np.zeros(R, dtype=np.int64)
        # flat views by slot: one gather per array and level instead of (root, node) pairs
        self._visits, self._value_sum, self._raw_value = (x.reshape(-1) for x in (
            self.visits, self.value_sum, self.raw_value))
        self._seat, self._parent = self.seat.reshape(-1), self.parent.reshape(-1)
        self._proven, self._exact = self.proven.reshape(-1), self.exact.reshape(-1)
        self._logits, self._prior, self._legal, self._children = (x.reshape(R * M, A) for x in (
            self.logits, self.prior, self.legal, self.children))
        self.table: dict[int, float] = {}  # a proven position's key -> its exact value for its mover
        self.recalled = 0  # nodes proven from the table
        self._position = np.zeros(R * M, dtype=np.int64)  # each slot's position key (where the table is on)
        self._root_key = np.zeros((R, A))  # g + the roots' logits less their max, floored; -inf if illegal
        self._considered = np.zeros((R, A), dtype=bool)
        self._num_considered = np.zeros(R, dtype=np.int64)

    # ------------------------------------------------------------------ the tree's numbers
    def _child_values(self, node: np.ndarray):
        """Children of slots ``node`` (k,): (legal, expanded, visits, proven, value for the node's
        mover (the exact value where proven, the mean where visited, 0 elsewhere)), each (k, A)."""
        ch = self._children[node]
        has = ch >= 0
        chs = np.where(has, ch, node[:, None])  # a node's own slot stands in for a child not made
        n_c = np.where(has, self._visits[chs], 0)
        proven = has & self._proven[chs]
        q = np.where(proven, self._exact[chs], self._value_sum[chs] / np.maximum(n_c, 1))
        q = np.where(self._seat[chs] == self._seat[node][:, None], q, -q)
        return self._legal[node], has, n_c, proven, np.where(has, q, 0.0)

    def _completed(self, node: np.ndarray):
        """For slots ``node`` (k,): legal mask, prior logits, children's visits, which children are
        proven, completed q (for the node's mover) and sigma(completed q), each (k, A)."""
        legal, has, n_c, proven, q = self._child_values(node)
        logits = self._logits[node]
        prior = self._prior[node]
        sum_n = n_c.sum(axis=1)
        # the mixed value (Danihelka et al. 2022, Appendix D); visited priors floored so that visited
        # children of prior 0 still weigh
        p_vis = np.where(has, np.maximum(prior, np.finfo(np.float32).tiny), 0.0)
        weighted = (p_vis * q).sum(axis=1) / np.maximum(p_vis.sum(axis=1), 1e-30)
        mix = (self._raw_value[node] + sum_n * weighted) / (sum_n + 1)
        q = np.where(has, q, mix[:, None])
        # min-max over the node's legal moves (mctx's rescale_values): sigma spans the same range
        # whatever the scale of the values the node's moves differ by
        lo = np.where(legal, q, np.inf).min(axis=1, keepdims=True)
        hi = np.where(legal, q, -np.inf).max(axis=1, keepdims=True)
        unit = np.where(legal, (q - lo) / np.maximum(hi - lo, 1e-8), 0.0)
        s = self.settings
        sigma = ((s.c_visit + n_c.max(axis=1)) * s.c_scale)[:, None] * unit
        return legal, logits, n_c, proven, q, sigma

    def _select_root(self, r: np.ndarray, sim: int) -> np.ndarray:
        """Sequential Halving at roots ``r``: among the considered open moves whose visits are the
        schedule's count, the best ``g + logits + sigma(q)``. Tiers keep the choice defined when
        proofs have removed those moves: open before proven, considered before not, then the count."""
        legal, _, n_c, proven, _, sigma = self._completed(r * self.nodes)
        score = self._root_key[r] + sigma
        want = self.schedule[self._num_considered[r], sim]
        tier = np.where(legal, 4 * ~proven + 2 * self._considered[r] + (n_c == want[:, None]), -1)
        score = np.where(tier == tier.max(axis=1, keepdims=True), score, -np.inf)
        return score.argmax(axis=1)

    def _select_interior(self, node: np.ndarray) -> np.ndarray:
        """Gumbel MuZero's deterministic selection over the open children of slots ``node``."""
        legal, logits, n_c, proven, _, sigma = self._completed(node)
        pi = _softmax(np.where(legal, logits + sigma, -np.inf))
        score = pi - n_c / (1.0 + n_c.sum(axis=1, keepdims=True))
        return np.where(legal & ~proven, score, -np.inf).argmax(axis=1)

    def _prove(self, node: np.ndarray) -> None:
        """Mark slots ``node`` proven where a child is proven worth ``value_range``'s best for the
        mover, or every legal child is proven; their exact value is the best proven child's."""
        legal, _, _, proven, value = self._child_values(node)
        best = np.where(proven, value, -np.inf).max(axis=1)
        done = (best >= self.hi) | (proven | ~legal).all(axis=1)
        self._proven[node[done]] = True
        self._exact[node[done]] = best[done]

    def _backup(self, node: np.ndarray, value: np.ndarray) -> None:
        """Add ``value`` (each node's, for its seat) up the paths from the new leaves ``node``,
        flipping its sign where the seat changes; proofs are updated on the way, and above a node
        just proven its exact value goes up instead. A node's proof can change only when the child
        on the path has just been proven (selection never enters a proven child), so only those
        nodes are looked at."""
        just = self._proven[node]
        while True:
            up = self._parent[node]
            keep = up >= 0
            if not keep.all():
                if not keep.any():
                    return
                node, up, value, just = node[keep], up[keep], value[keep], just[keep]
            value = np.where(self._seat[up] == self._seat[node], value, -value)
            self._visits[up] += 1
            self._value_sum[up] += value
            if just.any():
                self._prove(up[just])
                just = self._proven[up]
                value = np.where(just, self._exact[up], value)
            node = up

    # ------------------------------------------------------------------ the proof table
    def _keys(self, slots: np.ndarray) -> np.ndarray:
        """A 64-bit key per slot's position: the hash of the store's key (``StateStore.keys``)."""
        return np.fromiter((hash(k) for k in self.store.keys(slots)), dtype=np.int64, count=len(slots))

    def _remember(self, n: int) -> None:
        """Add the non-terminal nodes that the trees of roots 0..n-1 proved to the table."""
        used = np.arange(self.nodes)[None, :] < self.next_node[:n, None]
        slot = (np.arange(n)[:, None] * self.nodes + np.arange(self.nodes)[None, :])[used]
        slot = slot[self._proven[slot] & self._legal[slot].any(axis=1)]
        if not slot.size:
            return
        self.table.update(zip(self._position[slot].tolist(), self._exact[slot].tolist()))
        excess = len(self.table) - self.settings.proof_table
        if excess > 0:
            for key in list(itertools.islice(self.table, excess)):
                del self.table[key]

    # ------------------------------------------------------------------ a search
    def run(self, evaluate: Evaluate, game: VectorGame, envs) -> SearchResult:
        """Search from ``game``'s environments ``envs`` (each with a player to move), one root each.

        ``evaluate(obs (k, D) float32, mask (k, A) bool)`` answers ``(logits (k, A), values (k,))``,
        the values for the player to move; it is called once for the roots and once per simulation
        for the new non-terminal leaves."""
        start = time.perf_counter()
        spent = {"evaluate": 0.0, "expand": 0.0, "proofs": 0.0}
        envs = np.asarray(envs, dtype=np.int64).reshape(-1)
        n, M, A, s = envs.size, self.nodes, self.num_actions, self.settings
        if n == 0:
            raise ValueError("search: no environments to search")
        if n > self.max_roots:
            raise ValueError(f"search: {n} roots asked, the search holds at most {self.max_roots}")
        roots = np.arange(n)
        slots = roots * M
        self.visits[:n] = 0
        self.value_sum[:n] = 0.0
        self.proven[:n] = False
        self.children[:n, 0] = -1  # a new node's row is cleared when it is made
        self.parent[:n, 0] = -1
        self.next_node[:n] = 1

        t = time.perf_counter()
        pos = self.store.set_roots(slots, game, envs)
        spent["expand"] += time.perf_counter() - t
        if (pos.player == TERMINAL).any():
            raise ValueError("search: a root's game has ended; only positions with a player to move are searched")
        t = time.perf_counter()
        logits, values = evaluate(pos.obs, pos.mask)
        spent["evaluate"] += time.perf_counter() - t
        self.seat[:n, 0] = pos.player
        self.legal[:n, 0] = pos.mask
        if s.proof_table:
            t = time.perf_counter()
            self._position[slots] = self._keys(slots)
            spent["proofs"] += time.perf_counter() - t
        self.logits[:n, 0] = logits
        self.prior[:n, 0] = _softmax(np.where(pos.mask, self.logits[:n, 0], -np.inf))
        self.raw_value[:n, 0] = np.clip(np.asarray(values, dtype=np.float64) - self.mid, self.lo, self.hi)
        self.visits[:n, 0] = 1
        self.value_sum[:n, 0] = self.raw_value[:n, 0]

        # the Gumbel top-k of g + logits among the legal moves: the root's considered actions
        gumbel = s.gumbel_scale * self.rng.gumbel(size=(n, A)) if s.gumbel_scale > 0 else 0.0
        self._num_considered[:n] = np.minimum(s.considered, pos.mask.sum(axis=1))
        z = np.where(pos.mask, self.logits[:n, 0], -np.inf)
        z = np.maximum(z - z.max(axis=1, keepdims=True), _LOW_LOGIT)  # as mctx's score_considered
        key = self._root_key[:n] = np.where(pos.mask, gumbel + z, -np.inf)
        rank = np.empty((n, A), dtype=np.int64)
        np.put_along_axis(rank, np.argsort(-key, axis=1, kind="stable"), np.arange(A)[None, :], axis=1)
        self._considered[:n] = rank < self._num_considered[:n, None]

        for sim in range(s.simulations):
            active = roots[~self.proven[:n, 0]]
            if active.size == 0:
                break
            self._simulate(evaluate, active, sim, spent)

        if s.proof_table:
            t = time.perf_counter()
            self._remember(n)
            spent["proofs"] += time.perf_counter() - t
        result = self._result(n)
        for part, seconds in spent.items():
            self.profile[part] += seconds
        self.profile["tree"] += time.perf_counter() - start - sum(spent.values())
        return result

    def _simulate(self, evaluate: Evaluate, r: np.ndarray, sim: int, spent: dict) -> None:
        """One simulation in the trees of roots ``r``: descend to one unexpanded move each, expand,
        evaluate, back up."""
        M = self.nodes
        leaf_parent, leaf_action = [], []
        node = r * M
        a = self._select_root(r, sim)
        while True:
            child = self._children[node, a]
            new = child < 0
            if new.all():
                leaf_parent.append(node)
                leaf_action.append(a)
                break
            if new.any():
                leaf_parent.append(node[new])
                leaf_action.append(a[new])
                node = child[~new]
            else:
                node = child
            a = self._select_interior(node)
        parent = np.concatenate(leaf_parent) if len(leaf_parent) > 1 else leaf_parent[0]
        action = np.concatenate(leaf_action) if len(leaf_action) > 1 else leaf_action[0]
        tree = parent // M
        node = tree * M + self.next_node[tree]
        self.next_node[tree] += 1

        t = time.perf_counter()
        pos = self.store.expand(parent, action, node)
        spent["expand"] += time.perf_counter() - t

        self._children[parent, action] = node
        self._parent[node] = parent
        self._children[node] = -1
        ended = pos.player == TERMINAL
        mover = self._seat[parent]
        self._seat[node] = np.where(ended, mover, pos.player)
        value = np.where(ended, pos.returns[np.arange(node.size), mover] - self.mid, 0.0)
        self._proven[node] = ended
        self._exact[node] = value
        self._legal[node] = pos.mask
        self._raw_value[node] = 0.0
        open_ = np.flatnonzero(~ended)
        if self.settings.proof_table and open_.size:
            t = time.perf_counter()
            keys = self._keys(node[open_])
            self._position[node[open_]] = keys
            known = np.fromiter((self.table.get(k, np.nan) for k in keys.tolist()), dtype=np.float64,
                                count=open_.size)
            hit = ~np.isnan(known)
            if hit.any():  # remembered proofs: exact, no network needed
                self.recalled += int(hit.sum())
                proven = node[open_[hit]]
                self._proven[proven] = True
                self._exact[proven] = self._raw_value[proven] = value[open_[hit]] = known[hit]
                open_ = open_[~hit]
            spent["proofs"] += time.perf_counter() - t
        if open_.size:
            t = time.perf_counter()
            logits, values = evaluate(pos.obs[open_], pos.mask[open_])
            spent["evaluate"] += time.perf_counter() - t
            v = np.clip(np.asarray(values, dtype=np.float64) - self.mid, self.lo, self.hi)
            self._logits[node[open_]] = logits
            self._prior[node[open_]] = _softmax(np.where(pos.mask[open_], logits, -np.inf))
            self._raw_value[node[open_]] = v
            value[open_] = v
        self._visits[node] = 1
        self._value_sum[node] = value
        self._backup(node, value)

    def _result(self, n: int) -> SearchResult:
        """The move, policy target, value and proof of roots 0..n-1 (module docstring)."""
        r = np.arange(n)
        legal, logits, n_c, proven, q, sigma = self._completed(r * self.nodes)
        score = self._root_key[r] + sigma
        root_proven = self.proven[:n, 0]
        root_exact = self.exact[:n, 0]
        best_proven = np.where(proven, q, -np.inf).max(axis=1)
        optimal = proven & (q == best_proven[:, None])  # the best proven moves
        # an open root: the survivors of Sequential Halving (the most visited moves) or a proven draw,
        # never a proven loss while a move is not proven lost
        lost = proven & (q < 0)
        ok = legal & ~lost
        most = np.where(ok, n_c, -1).max(axis=1)
        survivors = ok & ((n_c == most[:, None]) | proven)
        take_proven = root_proven | (best_proven > 0)
        candidates = np.where(take_proven[:, None], optimal, survivors)
        action = np.where(candidates, score, -np.inf).argmax(axis=1)

        target = np.where(legal, logits + sigma, -np.inf)
        target = np.where(root_proven[:, None] & ~optimal, -np.inf, target)
        policy = _softmax(target).astype(np.float32)

        value = np.where(root_proven, root_exact, self.value_sum[:n, 0] / self.visits[:n, 0])
        code = np.where(root_proven, np.sign(root_exact), UNKNOWN).astype(np.int8)
        return SearchResult(action=action.astype(np.int64), policy=policy, value=(value + self.mid).astype(np.float32),
                            proven=code)
