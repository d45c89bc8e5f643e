"""Anchors in the league: the measurements that say how strong the league is in absolute terms.

An anchor (``evaluation.anchors``: ``uniform``, ``mcts:N``, ``pkg.module:factory``)
never learns, so a score against it means the same in every run, and an anchor
with a fixed Elo rating turns a score into a rating on a scale that does not
drift (the scripted opponents with fixed ratings of AlphaStar's evaluation,
Vinyals et al. 2019). The judge actor (``actors.anchor_judge``) scores two
subjects against every configured anchor: ``published``, the league's published
Nash mixture, and ``newest_main``, the newest main-agent snapshot.

Each score is the measurement ``league.measures.anchor_score_kind(subject, anchor)``
(value: the score in [0, 1]; data: anchor, subject, agents, ci95, games,
pool_version, seconds), and each subject's rating from the rated anchors is
``anchor_elo_kind(subject)``, one kind per pair, so the latest of each is one
indexed look-up in the store.

The rating is the maximum-likelihood Elo rating over all games against rated
anchors: the r that solves ``sum_i n_i (s_i - E(r, R_i)) = 0`` with
``E(r, R) = 1 / (1 + 10 ** ((R - r) / 400))`` (n_i games at mean score s_i
against an anchor rated R_i). Against one anchor it is the closed form
``R + 400 log10(s / (1 - s))``. Each s_i is first clamped to
``[1 / (2 n_i), 1 - 1 / (2 n_i)]`` (half a game from a clean sweep), so a sweep
gives a finite rating.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

# the subjects and the kinds of their measurements, read here by monitoring.report
from league.measures import SUBJECTS  # noqa: F401
from league.measures import anchor_elo_kind as elo_kind  # noqa: F401
from league.measures import anchor_score_kind as score_kind  # noqa: F401


@dataclass(frozen=True)
class AnchorSpec:
    """A parsed anchor: ``kind`` is ``uniform``, ``mcts`` or ``factory``."""

    name: str
    kind: str
    simulations: int = 0
    factory: str = ""


def parse_anchor(text: str) -> AnchorSpec:
    """``uniform``, ``mcts:N`` or ``pkg.module:factory``; ValueError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"an anchor must be a non-empty string, got {text!r}")
    text = text.strip()
    if text == "uniform":
        return AnchorSpec(text, "uniform")
    if text.startswith("mcts:"):
        n = text[len("mcts:"):]
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"anchor {text!r}: mcts:N needs a whole number of simulations N >= 1")
        return AnchorSpec(text, "mcts", simulations=int(n))
    module, sep, attr = text.rpartition(":")
    if not sep or not module or not attr.isidentifier():
        raise ValueError(f"anchor {text!r} is not 'uniform', 'mcts:N' or 'pkg.module:factory'")
    return AnchorSpec(text, "factory", factory=text)


# the rating `uniform` gets unless anchor_elo says otherwise: the league's own Elo pins uniform
# random play at 1000 (league.elo.UNIFORM_RANDOM), so the two scales agree
UNIFORM_ELO = 1000.0


def anchor_ratings(anchors: Sequence[str], anchor_elo: Mapping[str, float]) -> dict[str, float]:
    """The fixed rating of every rated anchor: ``anchor_elo``, with ``uniform`` at 1000 unless given."""
    out = {a: float(anchor_elo[a]) for a in anchors if a in anchor_elo}
    if "uniform" in anchors and "uniform" not in out:
        out["uniform"] = UNIFORM_ELO
    return out


def clamp_score(score: float, games: int) -> float:
    """``score`` kept half a game away from 0 and 1: ``[1/(2n), 1 - 1/(2n)]``."""
    lo = 1.0 / (2.0 * games)
    return min(max(float(score), lo), 1.0 - lo)


def _expected(r: float, anchor: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((anchor - r) / 400.0))


def anchored_elo(results: Sequence[tuple[float, float, int]]) -> float:
    """Maximum-likelihood Elo rating from ``(anchor_rating, score, games)`` triples (module docstring).

    ``sum_i n_i (s_i - E(r, R_i))`` falls strictly as r rises, so its root is found by bisection
    between the bounds that the clamped scores allow (every anchor's own closed-form rating lies
    between them)."""
    rows = [(float(r), clamp_score(s, int(n)), int(n)) for r, s, n in results if int(n) >= 1]
    if not rows:
        raise ValueError("anchored_elo needs at least one anchor with games >= 1")
    for r, s, _ in rows:
        if not (math.isfinite(r) and math.isfinite(s)):
            raise ValueError(f"anchor rating and score must be finite, got {r}, {s}")
    singles = [r + 400.0 * math.log10(s / (1.0 - s)) for r, s, _ in rows]
    if len(rows) == 1:
        return singles[0]
    lo, hi = min(singles), max(singles)

    def gap(x: float) -> float:
        return sum(n * (s - _expected(x, r)) for r, s, n in rows)

    for _ in range(200):  # far past float resolution of any span of ratings
        mid = 0.5 * (lo + hi)
        if gap(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return 0.5 * (lo + hi)
