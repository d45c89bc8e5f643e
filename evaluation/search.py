"""Play-time search: a policy network that looks ahead before it moves.

PUCT Monte Carlo tree search (AlphaZero: Silver et al. 2018; PUCT after Rosin 2011) on a
deterministic, perfect-information OpenSpiel game. Each simulation descends the tree by

    Q(s, a) + c_puct * P(s, a) * sqrt(N(s)) / (1 + N(s, a))

to a leaf, expands it with the network's action probabilities as the prior ``P`` and scores it
with the network's value head (the return the player to move expects; a net with a second value
head, ``policy.search_value``, gives that one: it is trained on self-play), optionally mixed with one
random rollout (``rollout_weight``: AlphaGo's lambda, Silver et al. 2016), then backs the value up
the path, each node's statistics from the point of view of the player who chose the edge.
Terminal values are exact and are proven upwards as in MCTS-Solver (Winands, Bjornsson and Saito
2008): a node whose mover has a proven win is a proven win, one where every move is proven is
worth the best of them. A proven move is not searched again while another is open, a forced win
that the tree has seen is always played, a proven loss is never preferred to an open move, and a
proven draw is kept over an open move whose mean value is below it.

Leaves are evaluated ``batch`` at a time in one forward pass: selection adds a virtual loss to
every edge it crosses, so the other descents of the same batch spread over other leaves.

The network's prior temperature (``prior_temperature``, above 1 flattens it) keeps a
low-entropy policy from starving the search. The network alone (``simulations: 0`` in a config)
is ``evaluation.anchors.play_game`` without a search.
"""

from __future__ import annotations

import math

import numpy as np
import pyspiel
import torch

from envs.openspiel import state_tensor, why_not_searchable
from league.config import SearchConfig as SearchSpec  # simulations, c_puct, rollout_weight, prior_temperature, batch

__all__ = ["PUCT", "SearchSpec", "check_searchable"]


def check_searchable(game: pyspiel.Game) -> None:
    """Search needs a sequential, deterministic, perfect-information two-player game
    (``envs.openspiel.why_not_searchable``), zero-sum: this player's values are negated between seats."""
    t = game.get_type()
    if (why_not_searchable(game, t.short_name) is not None or game.num_players() != 2
            or t.utility != pyspiel.GameType.Utility.ZERO_SUM):
        raise ValueError(f"search needs a sequential, deterministic, perfect-information, zero-sum two-player "
                         f"game; {t.short_name} is not one")


class _Node:
    """A position. ``proven``: its exact value for the player who moved into it, once known."""

    __slots__ = ("state", "player", "actions", "prior", "N", "W", "children", "proven", "returns")

    def __init__(self, state):
        self.state = state
        self.children: list[_Node | None] | None = None  # None until expanded
        self.proven: float | None = None
        if state.is_terminal():
            self.returns = np.asarray(state.returns(), dtype=np.float64)
            self.player = -1
        else:
            self.returns = None
            self.player = state.current_player()
            self.actions = np.asarray(state.legal_actions(), dtype=np.int64)

    def expand(self, prior: np.ndarray) -> None:
        n = len(self.actions)
        self.prior = prior
        self.N = np.zeros(n)
        self.W = np.zeros(n)
        self.children = [None] * n


class PUCT:
    """Searches for one seat's move with ``model`` (a ``policies.net.PolicyNet``, or None for a
    uniform prior with rollouts as the only value) on ``game``'s native states."""

    def __init__(self, game: pyspiel.Game, model, spec: SearchSpec, rng: np.random.Generator):
        check_searchable(game)
        if spec.simulations < 1:
            raise ValueError("search: simulations must be >= 1 to search (0 is the network alone: "
                             "evaluation.anchors.play_game without search)")
        self.game, self.model, self.spec, self.rng = game, model, spec, rng
        self.tensor = state_tensor(game)
        self.num_actions = game.num_distinct_actions()
        self.lo, self.hi = float(game.min_utility()), float(game.max_utility())
        self.scale = max(self.hi - self.lo, 1e-9) / 2.0  # Q in units of half the utility range
        self.rollout_weight = spec.rollout_weight if model is not None else 1.0
        self.evaluations = 0  # leaves the network scored
        self.proven: float | None = None  # the last root's exact value for its mover, once proven
        self.root: _Node | None = None  # the last search's tree

    # --------------------------------------------------------------------- leaves
    def _evaluate(self, nodes: list[_Node]) -> list[np.ndarray]:
        """Expand ``nodes`` (non-terminal) and return each one's value as a per-player vector."""
        values = []
        if self.model is not None:
            obs = np.stack([np.asarray(self.tensor(n.state, n.player), dtype=np.float32) for n in nodes])
            mask = np.zeros((len(nodes), self.num_actions), dtype=bool)
            for i, n in enumerate(nodes):
                mask[i, n.actions] = True
            with torch.inference_mode():
                logits, value = self.model.search_values(torch.from_numpy(obs), torch.from_numpy(mask))
            logits = logits.double().numpy() / self.spec.prior_temperature
            value = np.clip(value.double().numpy(), self.lo, self.hi)
        for i, n in enumerate(nodes):
            if self.model is not None:
                z = logits[i, n.actions]
                p = np.exp(z - z.max())
                n.expand(p / p.sum())
                v_mover = float(value[i])
            else:
                n.expand(np.full(len(n.actions), 1.0 / len(n.actions)))
                v_mover = 0.0
            v = np.empty(2)
            v[n.player], v[1 - n.player] = v_mover, -v_mover  # zero-sum
            if self.rollout_weight > 0:
                v = (1.0 - self.rollout_weight) * v + self.rollout_weight * self._rollout(n.state)
            values.append(v)
        self.evaluations += len(nodes)
        return values

    def _rollout(self, state) -> np.ndarray:
        state = state.clone()
        while not state.is_terminal():
            legal = state.legal_actions()
            state.apply_action(legal[int(self.rng.integers(len(legal)))])
        return np.asarray(state.returns(), dtype=np.float64)

    # ------------------------------------------------------------------ the tree
    def _select(self, node: _Node) -> int:
        if node.N.sum() == 0:
            # first visit: the prior's choice (ties broken at random)
            best = np.flatnonzero(node.prior == node.prior.max())
            return int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        q = np.zeros(len(node.actions))
        seen = node.N > 0
        q[seen] = node.W[seen] / node.N[seen] / self.scale
        solved = np.zeros(len(node.actions), dtype=bool)
        for i, child in enumerate(node.children):
            if child is not None and child.proven is not None:
                q[i] = child.proven / self.scale
                solved[i] = True
        u = q + self.spec.c_puct * node.prior * math.sqrt(node.N.sum()) / (1.0 + node.N)
        if solved.any() and not solved.all():
            u[solved] = -np.inf  # a proven move has nothing left to learn while another is open
        best = np.flatnonzero(u == u.max())
        return int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])

    def _child(self, node: _Node, i: int) -> _Node:
        child = node.children[i]
        if child is None:
            state = node.state.clone()
            state.apply_action(int(node.actions[i]))
            child = node.children[i] = _Node(state)
            if child.returns is not None:
                child.proven = float(child.returns[node.player])
        return child

    def _prove(self, node: _Node, parent_player: int) -> None:
        """Node's exact value for ``parent_player`` if a proven win for its mover, or proof of every move,
        settles it."""
        values = [c.proven if c is not None else None for c in node.children]
        known = [v for v in values if v is not None]
        best = max(known) if known else None
        if best is None or (best < self.hi and len(known) < len(values)):
            return
        node.proven = best if node.player == parent_player else -best  # zero-sum

    def _descend(self, root: _Node):
        """One selection from the root to a leaf, virtual losses added; (path of (node, edge), leaf)."""
        path, node = [], root
        while True:
            i = self._select(node)
            path.append((node, i))
            node.N[i] += 1
            node.W[i] -= self.scale  # virtual loss, removed at the back-up
            child = self._child(node, i)
            if child.proven is not None or child.children is None:
                return path, child
            node = child

    def _backup(self, path, value: np.ndarray) -> None:
        for node, i in reversed(path):
            node.W[i] += self.scale + value[node.player]
        for (node, _), (parent, _) in zip(reversed(path[1:]), reversed(path[:-1])):
            if node.proven is None:
                self._prove(node, parent.player)

    def search(self, state) -> np.ndarray:
        """The root's visit counts over ``num_distinct_actions`` after ``simulations`` simulations, less
        the moves proofs rule out; ``self.proven`` is the root's exact value once proven."""
        root = self.root = _Node(state.clone())
        self._evaluate([root])
        done = 0
        while done < self.spec.simulations:
            batch, pending = [], {}
            for _ in range(min(self.spec.batch, self.spec.simulations - done)):
                path, leaf = self._descend(root)
                done += 1
                if leaf.proven is not None:  # terminal, or solved: its value is exact
                    v = np.empty(2)
                    mover = path[-1][0].player
                    v[mover], v[1 - mover] = leaf.proven, -leaf.proven
                    self._backup(path, v)
                elif id(leaf) in pending:  # the batch reached this leaf already: count it once more
                    batch.append((path, pending[id(leaf)]))
                else:
                    pending[id(leaf)] = leaf
                    batch.append((path, leaf))
                if any(c is not None and c.proven is not None and c.proven >= self.hi for c in root.children):
                    break  # a proven win at the root: nothing left to search
            leaves = list(pending.values())
            values = dict(zip(map(id, leaves), self._evaluate(leaves))) if leaves else {}
            for path, leaf in batch:
                self._backup(path, values[id(leaf)])
            self._prove(root, root.player)
            if root.proven is not None:
                break
        self.proven = root.proven
        counts = np.zeros(self.num_actions)
        counts[root.actions] = root.N
        proven = np.array([c.proven if c is not None and c.proven is not None else np.nan for c in root.children])
        known = ~np.isnan(proven)
        if not known.any():
            return counts
        best = proven[known].max()
        if best >= self.hi or known.all():
            # a proven win, or every move proven: one of the best proven moves, the most visited (among
            # losses, the one the search took longest to refute)
            keep = known & (proven == best)
        else:
            # the most visited open move, unless its mean value is below the best proven one's (a proven
            # draw is not given up for a move that averages a loss); proven losses never
            open_ = np.flatnonzero(~known)
            i = open_[np.argmax(root.N[open_])]
            mean = root.W[i] / root.N[i] if root.N[i] else 0.0
            keep = (known & (proven == best)) if best > self.lo and best >= mean else ~known
        counts[root.actions[~keep]] = 0
        if not counts.any():
            counts[root.actions[keep]] = root.prior[keep]
        return counts

    def step(self, state) -> int:
        """The move for the player to move in ``state``: the most visited (ties broken at random)."""
        if state.is_terminal():
            raise ValueError("search: the game is over, there is no move to make")
        legal = state.legal_actions()
        if len(legal) == 1:
            return int(legal[0])
        counts = self.search(state)
        best = np.flatnonzero(counts == counts.max())
        return int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])
