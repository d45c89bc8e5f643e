"""Elo ratings from match results (Elo 1978).

expected(a, b) = 1 / (1 + 10 ** ((r_b - r_a) / 400)); after a game with score s
for a, r_a += K (s - expected). Anchor agents keep a fixed rating so that
ratings mean the same across runs: by default ``uniform_random``, a policy
that picks uniformly among legal actions, pinned at 1000.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from league.payoff import canonical_codes, id_codes

UNIFORM_RANDOM = "uniform_random"


def expected_score(r_a: float, r_b: float) -> float:
    return _expected(r_b - r_a)


def _expected(d: float) -> float:
    """The expected score of a player rated ``d`` below its opponent: ``1 / (1 + 10 ** (d / 400))``,
    0 or 1 past gaps where the power would overflow a float."""
    x = d / 400.0
    return 0.0 if x > 300.0 else 1.0 / (1.0 + 10.0 ** x)


class EloTable:
    def __init__(self, k: float = 16.0, initial: float = 1000.0, anchors: Mapping[str, float] | None = None):
        if not (k > 0 and math.isfinite(k)):
            raise ValueError(f"Elo K must be a positive number, got {k}")
        self.k = float(k)
        self.initial = float(initial)
        self.anchors = dict({UNIFORM_RANDOM: 1000.0} if anchors is None else anchors)
        self.ratings: dict[str, float] = dict(self.anchors)
        self.games: dict[str, int] = {a: 0 for a in self.anchors}

    def rating(self, agent_id: str) -> float:
        return self.ratings.get(agent_id, self.initial)

    def add(self, agent_id: str, rating: float | None = None) -> None:
        if agent_id not in self.ratings:
            self.ratings[agent_id] = self.initial if rating is None else float(rating)
            self.games[agent_id] = 0

    def remove(self, agent_id: str) -> None:
        if agent_id not in self.anchors:
            self.ratings.pop(agent_id, None)
            self.games.pop(agent_id, None)

    def update(self, a: str, b: str, score: float) -> None:
        """One game: ``a`` scored ``score`` in [0, 1] against ``b``."""
        score = float(score)
        if not (0.0 <= score <= 1.0):  # also rejects NaN
            raise ValueError(f"Elo score must be in [0, 1], got {score}")
        self.update_pairs([a], [b], [1], [score])

    def update_pairs(self, a_ids: Sequence[str], b_ids: Sequence[str], games: Sequence[int],
                     scores: Sequence[float]) -> set[str]:
        """Results as counts per pair, in pair order: row k is ``games[k]`` games of ``a_ids[k]``
        against ``b_ids[k]`` with score sum ``scores[k]``; returns the ids whose rating moved.

        Game-by-game Elo depends on the order of the games, which counts do not keep. A pair's ``n``
        games are rated as ``n`` sequential games that each scored the pair's mean score ``s``, with
        the expected score linearised at the pair's ratings: the gap ``D = r_a - r_b`` moves by
        ``(g / h) (1 - (1 - c h) ** n)`` where ``g = s - E(D)``, ``h = dE/dD`` and ``c`` is K times the
        number of non-anchored agents, each of which takes its share. One game (``n = 1``) is exactly
        ``update``; many games close at most the linearised gap to the rating that expects ``s``, as
        sequential updates do, where a single update of K (s - E) n would overshoot without bound."""
        if not (len(a_ids) == len(b_ids) == len(games) == len(scores)):
            raise ValueError("Elo pairs: ids, games and scores must have the same length")
        return self.update_pair_codes(*id_codes(a_ids, b_ids), games, scores)

    def update_pair_codes(self, names: Sequence[str], a: Sequence[int], b: Sequence[int], games: Sequence[int],
                          scores: Sequence[float]) -> set[str]:
        """``update_pairs`` with row k's agents given as codes: ``names[a[k]]`` against ``names[b[k]]``
        (a coordinator rates ~1,000 pairs a report: each name is looked up once, the loop runs on
        list slots and float math)."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        counts, totals = np.asarray(games), np.asarray(scores, dtype=np.float64)
        if not (len(a) == len(b) == len(counts) == len(totals)):
            raise ValueError("Elo pairs: ids, games and scores must have the same length")
        if not len(a):
            return set()
        n_int = counts.astype(np.int64)
        bad = np.flatnonzero((n_int < 1) | ~((totals >= 0.0) & (totals <= n_int)))
        if len(bad):
            k = int(bad[0])
            raise ValueError(f"Elo pairs: need games >= 1 and 0 <= score sum <= games, got {int(n_int[k])} and "
                             f"{float(totals[k])}")
        canon, first = canonical_codes(names, a, b)  # one slot per distinct name
        ca, cb = canon[a], canon[b]
        ratings, anchors, k = self.ratings, self.anchors, self.k
        r, moves = [0.0] * len(names), [False] * len(names)
        for x, slot in first.items():
            if x not in ratings:
                self.add(x)
            r[slot], moves[slot] = ratings[x], x not in anchors
        slope = math.log(10.0) / 400.0
        log10 = math.log10
        # the arithmetic of _expected and of the clamps below, written out: this loop is the larger
        # part of a report's cost at the coordinator (~750 pairs), and calls cost more than the math
        for i, j, n, total in zip(ca.tolist(), cb.tolist(), n_int.tolist(), totals.tolist()):
            a_moves, b_moves = moves[i], moves[j]
            movers = a_moves + b_moves
            if i == j or not movers:
                continue
            ra, rb = r[i], r[j]
            x = (rb - ra) / 400.0
            e = 0.0 if x > 300.0 else 1.0 / (1.0 + 10.0 ** x)  # _expected(rb - ra)
            s = total / n
            g = s - e
            if n == 1:
                gap = movers * k * g
            else:
                ch = movers * k * e * (1.0 - e) * slope
                gap = movers * k * n * g if ch < 1e-12 else (g / (ch / (movers * k))) * (1.0 - (1.0 - ch) ** n)
                # Far from E = s the linearisation overshoots (where E is flat it moves K per game for all
                # n games): never past the gap that expects the score, smoothed by half a game so that
                # an all-or-nothing score has a finite one.
                half = 0.5 / n
                if s < half:
                    s = half
                if s > 1.0 - half:
                    s = 1.0 - half
                beyond = 400.0 * log10(s / (1.0 - s)) - (ra - rb)
                if gap < 0:  # max(gap, min(beyond, 0.0))
                    bound = beyond if beyond < 0.0 else 0.0
                    if gap < bound:
                        gap = bound
                else:  # min(gap, max(beyond, 0.0))
                    bound = beyond if beyond > 0.0 else 0.0
                    if gap > bound:
                        gap = bound
            share = gap / movers
            if a_moves:
                r[i] = ra + share
            if b_moves:
                r[j] = rb - share
        played = np.bincount(np.concatenate([ca, cb]), weights=np.concatenate([n_int, n_int]).astype(np.float64),
                             minlength=len(names))
        for x, slot in first.items():
            if moves[slot]:
                ratings[x] = r[slot]
            self.games[x] += int(played[slot])
        return {x for x in first if x not in anchors}
