"""Decayed win/draw/loss counts between every ordered pair of agents.

As in AlphaStar's payoff (Vinyals et al. 2019, pseudocode ``Payoff``): each new
result for a pair first multiplies that pair's counts by ``decay`` and then adds
the result, so old games fade and the win rate follows agents that still learn.
A result for (a, b) updates (b, a) with the mirrored outcome.

An outcome is a score in [0, 1] from the first agent's side: 1 win, 0 loss,
exactly 0.5 a draw; any other score counts ``score`` wins and ``1 - score``
losses (the predecessor tutorial's fractional outcomes).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class PayoffTable:
    """Dense decayed counts over a growing set of agent ids."""

    # n x n float64 each; ``_games`` is wins + draws + losses, kept as they are written (it is read
    # far more often than written: every ranking of pairs, every win rate)
    _ARRAYS = ("_wins", "_draws", "_losses", "_games")

    def __init__(self, decay: float = 0.99, prior: float = 0.5, prior_games: float = 0.0, capacity: int = 16):
        if not (0.0 < decay <= 1.0) or not np.isfinite(decay):
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if not (0.0 <= prior <= 1.0):
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        if prior_games < 0 or not np.isfinite(prior_games):
            raise ValueError(f"prior_games must be >= 0, got {prior_games}")
        self.decay = float(decay)
        self.prior = float(prior)
        self.prior_games = float(prior_games)
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._wins = self._draws = self._losses = self._games = np.zeros((0, 0))
        self._grow(max(int(capacity), 1))

    # -- ids ---------------------------------------------------------------
    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._index

    def add_agent(self, agent_id: str) -> int:
        if agent_id in self._index:
            return self._index[agent_id]
        n = len(self._ids)
        if n == self._wins.shape[0]:
            self._grow(2 * n)
        self._index[agent_id] = n
        self._ids.append(agent_id)
        return n

    def remove_agent(self, agent_id: str) -> None:
        """Forget an agent; keeps the other counts."""
        i, n = self._idx(agent_id), len(self._ids)
        for m in (getattr(self, name) for name in self._ARRAYS):  # shift later rows and columns in place
            m[i : n - 1, :n] = m[i + 1 : n, :n]
            m[:n, i : n - 1] = m[:n, i + 1 : n]
            m[n - 1, :n] = 0.0
            m[:n, n - 1] = 0.0
        self._ids.pop(i)
        self._index = {a: k for k, a in enumerate(self._ids)}

    def _grow(self, cap: int) -> None:
        """Arrays for ``cap`` agents, written through at once: the process holds their memory from
        here on, so its resident size does not creep up as the pool fills them."""
        for name in self._ARRAYS:
            old = getattr(self, name)
            new = np.empty((cap, cap))
            new.fill(0.0)
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)

    def _idx(self, agent_id: str) -> int:
        try:
            return self._index[agent_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown agent id {agent_id!r}") from None

    # -- updates -------------------------------------------------------------
    def record(self, a: str, b: str, outcome: float) -> None:
        """One game: ``a`` scored ``outcome`` in [0, 1] against ``b`` (AlphaStar's update: decay the
        pair, then add the game). Unknown ids are added."""
        outcome = float(outcome)
        if not (0.0 <= outcome <= 1.0):  # also rejects NaN
            raise ValueError(f"outcome must be a score in [0, 1], got {outcome}")
        draw = float(outcome == 0.5)
        win = 0.0 if draw else outcome
        self.record_counts([a], [b], [1.0], [win], [draw], [1.0 - draw - win])

    def record_counts(self, a_ids: Sequence[str], b_ids: Sequence[str], games: Sequence[float],
                      wins: Sequence[float], draws: Sequence[float], losses: Sequence[float],
                      decay: float | None = None) -> list[tuple[str, str]]:
        """Apply results given as counts per pair: row k is ``games[k]`` games of ``a_ids[k]`` against
        ``b_ids[k]`` worth ``wins[k]`` wins, ``draws[k]`` draws and ``losses[k]`` losses from ``a``'s side
        (a fractional score counts ``score`` wins and ``1 - score`` losses). Returns the ordered pairs
        that changed. ``decay`` overrides the table's decay for these games (1.0 for games between
        frozen agents, which do not change).

        The order of a pair's games is not known, so each of them gets the mean of the weights that
        ``record`` game by game would give to games in some order: old counts decay by ``decay ** N``
        for the pair's ``N`` games, and its wins, draws and losses are added with weight
        ``(1 - decay ** N) / ((1 - decay) N)``. The decayed number of games is exactly the
        game-by-game one; its split into wins, draws and losses is the mean over the games' orders.
        With ``decay`` 1 (frozen pairs), or one game per pair, it equals ``record`` game by game."""
        if len(a_ids) != len(b_ids):
            raise ValueError("payoff counts: ids and count columns must have one length")
        return self.record_pair_counts(*id_codes(a_ids, b_ids), games, wins, draws, losses, decay)

    def record_pair_counts(self, names: Sequence[str], a: np.ndarray, b: np.ndarray, games: Sequence[float],
                           wins: Sequence[float], draws: Sequence[float], losses: Sequence[float],
                           decay: float | None = None) -> list[tuple[str, str]]:
        """``record_counts`` with row k's agents given as codes: ``names[a[k]]`` against
        ``names[b[k]]`` (a batch names its few agents many times: each is looked up once)."""
        decay = self.decay if decay is None else float(decay)
        g = np.asarray(games, dtype=float)
        w, d, l = (np.asarray(x, dtype=float) for x in (wins, draws, losses))
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        if not (len(a) == len(b) == len(g) == len(w) == len(d) == len(l)):
            raise ValueError("payoff counts: ids and count columns must have one length")
        if not len(g):
            return []
        if not (np.all(np.isfinite(g)) and np.all(g > 0) and np.all((w >= 0) & (d >= 0) & (l >= 0))
                and np.allclose(w + d + l, g)):
            raise ValueError("payoff counts: games must be > 0 and wins + draws + losses == games, all >= 0")
        ia, ib = self._index_codes(names, a, b)
        lo, hi = np.minimum(ia, ib), np.maximum(ia, ib)
        flip = ia > ib
        w_lo, l_lo = np.where(flip, l, w), np.where(flip, w, l)
        key = lo * (1 << 32) + hi
        keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        m = len(keys)
        n = np.bincount(inverse, weights=g, minlength=m)
        wsum = np.bincount(inverse, weights=w_lo, minlength=m)
        dsum = np.bincount(inverse, weights=d, minlength=m)
        lsum = np.bincount(inverse, weights=l_lo, minlength=m)
        dk = decay ** n
        mean_weight = np.ones(m) if decay == 1.0 else (1.0 - dk) / ((1.0 - decay) * n)
        wsum, dsum, lsum = wsum * mean_weight, dsum * mean_weight, lsum * mean_weight
        i, j = lo[first], hi[first]
        return self._decay_and_add(i, j, dk, wsum, dsum, lsum)

    def _index_pairs(self, a_ids: Sequence[str], b_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Matrix indices of each row's two agents (added if new), each distinct id validated and
        indexed once (a batch names few agents many times); no agent may face itself."""
        return self._index_codes(*id_codes(a_ids, b_ids))

    def _index_codes(self, names: Sequence[str], a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_index_pairs`` of rows given as codes into ``names``: only the names the rows use are
        validated and indexed (added if new), once each."""
        canon, first = canonical_codes(names, a, b)
        for x in first:
            if not isinstance(x, str) or not x:
                raise ValueError(f"agent ids must be non-empty strings, got {x!r}")
        same = np.flatnonzero(canon[a] == canon[b])
        if len(same):
            raise ValueError(f"an agent cannot be recorded against itself ({names[int(a[same[0]])]!r})")
        table = np.zeros(len(names), dtype=np.int64)
        for x, k in first.items():
            table[k] = self.add_agent(x)
        return table[canon[a]], table[canon[b]]

    def _decay_and_add(self, i, j, dk, wsum, dsum, lsum) -> list[tuple[str, str]]:
        """Pairs (i[k], j[k]), i < j: decay old counts by dk and add wins/draws/losses seen from i's
        side (mirrored for j's). Returns the changed pairs as ids."""
        self._wins[i, j] = dk * self._wins[i, j] + wsum
        self._draws[i, j] = dk * self._draws[i, j] + dsum
        self._losses[i, j] = dk * self._losses[i, j] + lsum
        self._wins[j, i] = dk * self._wins[j, i] + lsum
        self._draws[j, i] = dk * self._draws[j, i] + dsum
        self._losses[j, i] = dk * self._losses[j, i] + wsum
        self._games[i, j] = self._games[j, i] = self._wins[i, j] + self._draws[i, j] + self._losses[i, j]
        return [(self._ids[x], self._ids[y]) for x, y in zip(i.tolist(), j.tolist())]

    # -- reads ---------------------------------------------------------------
    def counts(self, a: str, b: str) -> tuple[float, float, float]:
        i, j = self._idx(a), self._idx(b)
        return float(self._wins[i, j]), float(self._draws[i, j]), float(self._losses[i, j])

    def rows(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str, float, float, float]]:
        """``counts`` of many pairs in the store's one orientation (a < b): (a, b, wins, draws, losses)."""
        if not pairs:
            return []
        lo = [min(a, b) for a, b in pairs]
        hi = [max(a, b) for a, b in pairs]
        i = np.fromiter((self._idx(a) for a in lo), dtype=np.int64, count=len(lo))
        j = np.fromiter((self._idx(b) for b in hi), dtype=np.int64, count=len(hi))
        return list(zip(lo, hi, self._wins[i, j].tolist(), self._draws[i, j].tolist(), self._losses[i, j].tolist()))

    def set_counts(self, a: str, b: str, wins: float, draws: float, losses: float) -> None:
        """Restore one pair's counts (both directions) from storage."""
        i, j = self.add_agent(a), self.add_agent(b)
        self._wins[i, j], self._draws[i, j], self._losses[i, j] = wins, draws, losses
        self._wins[j, i], self._draws[j, i], self._losses[j, i] = losses, draws, wins
        self._games[i, j] = self._games[j, i] = wins + draws + losses

    def games(self, a: str, b: str) -> float:
        return float(self._games[self._idx(a), self._idx(b)])

    def win_rate(self, a: str, b: str) -> float:
        """(wins + draws/2) / games, shrunk toward ``prior`` by ``prior_games``
        pseudo-games; ``prior`` when the pair has never played."""
        return float(self.win_rates_for(a, [b])[0])

    def win_rates_for(self, a: str, ids: Sequence[str]) -> np.ndarray:
        """Win rates of ``a`` against each of ``ids`` in one vectorized pass."""
        i = self._idx(a)
        cols = np.array([self._idx(b) for b in ids], dtype=np.int64)
        return self._rates(np.full(len(cols), i), cols)

    def matrix(self, ids: Sequence[str]) -> np.ndarray:
        """Win-rate matrix over ``ids`` (diagonal 0.5)."""
        idx = np.array([self._idx(a) for a in ids], dtype=np.int64)
        rows, cols = np.meshgrid(idx, idx, indexing="ij")
        m = self._rates(rows, cols)
        np.fill_diagonal(m, 0.5)
        return m

    def games_matrix(self, ids: Sequence[str], cols: Sequence[str] | None = None) -> np.ndarray:
        """Games measured between ``ids`` (rows) and ``cols`` (default: ``ids`` again)."""
        rows = np.array([self._idx(a) for a in ids], dtype=np.int64)
        other = rows if cols is None else np.array([self._idx(a) for a in cols], dtype=np.int64)
        # the games are kept as counts are written, and taken rows then columns, not with one np.ix_
        # gather: at a pool of 1000, where the evaluator asks for its pairs several times a second
        # (league.League.evaluation_pairs), this is 10x cheaper than summing three gathers
        return np.take(np.take(self._games, rows, axis=0), other, axis=1)

    def _rates(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        w, d = self._wins[rows, cols], self._draws[rows, cols]
        games = self._games[rows, cols] + self.prior_games
        score = w + 0.5 * d + self.prior * self.prior_games
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = np.where(games > 0, score / np.where(games > 0, games, 1.0), self.prior)
        return rates

    def pairs(self) -> list[tuple[str, str, float, float, float]]:
        """Every ordered pair (a < b by index) with games, for persistence."""
        n = len(self._ids)
        g = self._games[:n, :n]
        out = []
        for i, j in zip(*np.nonzero(np.triu(g, 1))):
            out.append((self._ids[i], self._ids[j], *map(float, (self._wins[i, j], self._draws[i, j], self._losses[i, j]))))
        return out


def canonical_codes(names: Sequence[str], a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """For rows given as codes into ``names``: ``canon[k]``, the first code the rows use for the
    name ``names[k]`` (a name listed twice is one agent), and ``first``, each used name's code."""
    used = np.unique(np.concatenate([a, b]))
    if len(used) and (used[0] < 0 or used[-1] >= len(names)):
        raise ValueError(f"agent codes must index the {len(names)} names given")
    first: dict[str, int] = {}
    canon = np.zeros(len(names), dtype=np.int64)
    for k in used.tolist():
        canon[k] = first.setdefault(names[k], k)
    return canon, first


def id_codes(a_ids: Sequence[str], b_ids: Sequence[str]) -> tuple[list, np.ndarray, np.ndarray]:
    """Rows of ids as codes: ``(names, a, b)`` with row k's agents ``names[a[k]]`` and ``names[b[k]]``,
    each distinct id listed once."""
    local: dict = {}
    a = np.fromiter((local.setdefault(x, len(local)) for x in a_ids), dtype=np.int64, count=len(a_ids))
    b = np.fromiter((local.setdefault(x, len(local)) for x in b_ids), dtype=np.int64, count=len(b_ids))
    return list(local), a, b
