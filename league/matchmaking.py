"""Opponent selection: prioritized fictitious self-play, and the plans of matches that the roles'
rules (``league.roles``) are made of.

PFSP (Vinyals et al. 2019, "Grandmaster level in StarCraft II using multi-agent
reinforcement learning", Methods): an opponent B is drawn for agent A with
probability proportional to f(P[A beats B]), where

    f_hard(x) = (1 - x)^p        focus on the opponents A loses to
    f_var(x)  = x (1 - x)        focus on opponents of A's own level
    linear(x) = 1 - x, linear_capped(x) = min(0.5, 1 - x)

Besides PFSP a role may draw from the current Nash mixture over the pool (the
best-response step of PSRO, Lanctot et al. 2017), from the latest snapshot of
its own learner, or always play its live self (naive self-play): PSRO and
self-play are configurations of the same league (``Role.match_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from league.messages import MatchAssignments
from league.pool import AgentPool, AgentType

WeightFunction = Callable[[float], float]


def f_hard(x: np.ndarray, p: float = 2.0) -> np.ndarray:
    return (1.0 - np.asarray(x, dtype=float)) ** p


def f_var(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x * (1.0 - x)


def f_linear(x: np.ndarray) -> np.ndarray:
    return 1.0 - np.asarray(x, dtype=float)


def f_linear_capped(x: np.ndarray) -> np.ndarray:
    return np.minimum(0.5, 1.0 - np.asarray(x, dtype=float))


WEIGHTINGS = {
    "hard": f_hard,
    "squared": lambda x: f_hard(x, 2.0),
    "variance": f_var,
    "linear": f_linear,
    "linear_capped": f_linear_capped,
}


def pfsp_weights(win_rates: Sequence[float], weighting: str | WeightFunction = "hard", p: float = 2.0) -> np.ndarray:
    """Unnormalized PFSP weights f(x) of each win rate x."""
    x = np.asarray(win_rates, dtype=float)
    if x.size and (not np.all(np.isfinite(x)) or np.any((x < 0) | (x > 1))):
        raise ValueError(f"win rates must lie in [0, 1], got {x[~((x >= 0) & (x <= 1))][:3]}")
    if callable(weighting):
        w = np.array([float(weighting(float(v))) for v in x])
    elif weighting == "hard":
        w = f_hard(x, p)
    elif weighting in WEIGHTINGS:
        w = WEIGHTINGS[weighting](x)
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r}; expected one of {sorted(WEIGHTINGS)} or a callable")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("a PFSP weight function must return finite non-negative weights")
    return w


def pfsp_probabilities(win_rates: Sequence[float], weighting: str | WeightFunction = "hard", p: float = 2.0) -> np.ndarray:
    """PFSP sampling distribution; uniform when every weight is zero."""
    w = pfsp_weights(win_rates, weighting, p)
    if w.size == 0:
        return w
    total = w.sum()
    return w / total if total > 0 else np.full(w.size, 1.0 / w.size)


class WinRates(Protocol):
    def win_rates_for(self, a: str, ids: Sequence[str]) -> np.ndarray: ...


# -- the league's matches ---------------------------------------------------------

class CachedWinRates:
    """Memoizes ``win_rates_for`` while nothing changes (one batch of draws)."""

    def __init__(self, inner: WinRates):
        self.inner = inner
        self._memo: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}

    def win_rates_for(self, a: str, ids: Sequence[str]) -> np.ndarray:
        key = (a, tuple(ids))
        rates = self._memo.get(key)
        if rates is None:
            rates = self._memo[key] = self.inner.win_rates_for(a, ids)
        return rates


@dataclass
class LeagueView:
    """What role rules read: the pool, win rates, live learners, the Nash.

    A view is a frozen moment of the league: draws made from one view may
    share work (``pfsp_cache`` holds the PFSP distributions computed so far).
    """

    pool: AgentPool
    win_rates: WinRates
    learners: Mapping[str, AgentType]
    nash_weights: Mapping[str, float]
    pfsp_cache: dict = field(default_factory=dict)

    def main_learners(self) -> list[str]:
        """The live learners of the main role (``AgentType.main``)."""
        main = AgentType.main()
        return [l for l, t in self.learners.items() if t == main]


@dataclass(frozen=True)
class PlanBranch:
    """One branch of a role's rule for one view: with probability ``weight`` (relative to the other
    branches) the opponent is ``opponents[i]``, ``i`` drawn from the cumulative (unnormalized)
    weights ``cdf``, or always ``opponents[0]`` when ``cdf`` is None."""

    weight: float
    opponents: tuple[str, ...]
    cdf: np.ndarray | None
    live: bool
    name: str

    def draw(self, k: int, rng: np.random.Generator) -> np.ndarray:
        """``k`` opponents, as indices into ``opponents``."""
        return np.zeros(k, dtype=np.int64) if self.cdf is None else _draw(self.cdf, rng, k)

    def probabilities(self) -> np.ndarray:
        if self.cdf is None:
            return np.ones(1)
        return np.diff(self.cdf, prepend=0.0) / self.cdf[-1]


def _compact(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True)`` for codes in ``[0, size)``, without sorting: the
    used codes in increasing order and each code's index among them (a draw's hot path)."""
    seen = np.zeros(size, dtype=bool)
    seen[codes] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen), rank[codes]


@dataclass(frozen=True)
class MatchPlan:
    """A learner's opponent distribution at one moment of the league, to draw matches from without
    asking the coordinator each time. ``mixed``: the rule is a random choice among ``branches``
    (AlphaStar roles); otherwise it is the one branch. ``version`` names the plan: the coordinator
    makes a new one when the pool or the Nash changed, or results moved the win rates."""

    learner_id: str
    branches: tuple[PlanBranch, ...]
    mixed: bool
    version: str = ""
    made_at: float = 0.0

    def __post_init__(self):
        # every opponent of every branch once, with a code; per branch, the code of each of its
        # opponents: a draw becomes MatchAssignments columns with arrays, no Python per match
        names: dict[str, int] = {}
        live: list[bool] = []
        codes = []
        for b in self.branches:
            for o in b.opponents:
                if o not in names:
                    names[o] = len(names)
                    live.append(b.live)
            codes.append(np.array([names[o] for o in b.opponents], dtype=np.int64))
        branch_names: dict[str, int] = {}
        object.__setattr__(self, "_names", tuple(names))
        object.__setattr__(self, "_live", np.array(live, dtype=bool))
        object.__setattr__(self, "_codes", codes)
        object.__setattr__(self, "_branch_code", np.array([branch_names.setdefault(b.name, len(branch_names))
                                                           for b in self.branches], dtype=np.int64))
        object.__setattr__(self, "_branch_names", tuple(branch_names))

    def _blocks(self, rng: np.random.Generator, n: int) -> tuple[list[tuple[int, np.ndarray]], np.ndarray | None]:
        """(branch number, opponent indices) blocks and the order of the i.i.d. sequence."""
        if not self.mixed:
            return [(0, self.branches[0].draw(n, rng))], None
        p = np.array([b.weight for b in self.branches], dtype=float)
        counts = rng.multinomial(n, p / p.sum())
        out = [(i, b.draw(int(k), rng)) for i, (b, k) in enumerate(zip(self.branches, counts)) if k]
        return out, (rng.permutation(n) if len(self.branches) > 1 else None)

    def draw(self, rng: np.random.Generator, n: int) -> MatchAssignments:
        """``n`` i.i.d. matches (what ``next_matches`` returns and a worker plays); opponents and
        branches listed in the plan's order."""
        blocks, order = self._blocks(rng, int(n))
        if blocks:
            codes = np.concatenate([self._codes[i][index] for i, index in blocks])
            branch = np.concatenate([np.full(len(index), self._branch_code[i]) for i, index in blocks])
        else:
            codes = branch = np.zeros(0, dtype=np.int64)
        if order is not None:
            codes, branch = codes[order], branch[order]
        used, opponent = _compact(codes, len(self._names))
        used_b, branch = _compact(branch, len(self._branch_names))
        names, branch_names = self._names, self._branch_names
        return MatchAssignments(self.learner_id, tuple([names[u] for u in used.tolist()]), self._live[used],
                                opponent, tuple([branch_names[u] for u in used_b.tolist()]), branch)

    def distribution(self) -> dict[tuple[str, str, bool], float]:
        """Probability of each (opponent, branch, live) per match: what the plan's draws converge to."""
        p = np.array([b.weight for b in self.branches], dtype=float)
        p = p / p.sum() if self.mixed else np.eye(len(self.branches))[0]
        out: dict[tuple[str, str, bool], float] = {}
        for branch, pb in zip(self.branches, p):
            for opponent, q in zip(branch.opponents, branch.probabilities()):
                key = (opponent, branch.name, branch.live)
                out[key] = out.get(key, 0.0) + float(pb * q)
        return out


class MatchSampler:
    """A rollout worker's matches, drawn from the coordinator's latest ``MatchPlan`` for its learner
    with the worker's own random stream (``league.seeds``), so that ``next_matches`` is no round
    trip. The worker asks the coordinator for a newer plan (``match_plan(learner, version)``) when
    ``due``, without waiting for it, and draws from the one it has meanwhile."""

    def __init__(self, learner_id: str, rng: np.random.Generator, refresh_seconds: float):
        self.learner_id, self.rng, self.refresh_seconds = learner_id, rng, float(refresh_seconds)
        self.plan: MatchPlan | None = None
        self.asked_at = -np.inf

    @property
    def version(self) -> str | None:
        return None if self.plan is None else self.plan.version

    def due(self, now: float) -> bool:
        return self.plan is None or now - self.asked_at >= self.refresh_seconds

    def asked(self, now: float) -> None:
        self.asked_at = now

    def update(self, plan: "MatchPlan | None") -> None:
        """The coordinator's answer: a newer plan, or None (the one held is current)."""
        if plan is not None:
            if plan.learner_id != self.learner_id:
                raise ValueError(f"a plan for {plan.learner_id!r} sent to the sampler of {self.learner_id!r}")
            self.plan = plan

    def draw(self, n: int) -> MatchAssignments:
        """``n`` matches from the plan held."""
        if self.plan is None:
            raise RuntimeError("no match plan yet: update() with the coordinator's first")
        return self.plan.draw(self.rng, n)


def _draw(cdf: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` indices drawn from a cumulative (unnormalized) distribution, by inverse CDF."""
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    return np.minimum(idx, len(cdf) - 1)
