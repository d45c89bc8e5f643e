"""The league's roles, one class each: whom a learner plays, when it snapshots, when it resets.

AlphaStar (Vinyals et al. 2019, Methods, "League composition"):
- main agents play 35% self-play, 50% PFSP against every past player and 15%
  against forgotten main snapshots and past main exploiters; they snapshot
  every N steps and never reset;
- main exploiters play the current main agents (or, while they lose to one,
  a PFSP curriculum over its snapshots); they snapshot once they beat every
  main agent more than 70% of the time, or after N steps, and then reset;
- league exploiters play PFSP over the whole pool; they snapshot once they
  beat every player of the pool more than 70% of the time, or after N steps,
  and then reset with probability 0.25.
As in DI-engine's ``league/player.py`` (``MainPlayer``, ``MainExploiter``,
``LeagueExploiter``), a role is a class whose methods are these rules; its
config (``league.config.MainAgentConfig``, ...) holds only the keys they read
and names the role. ``ROLES`` is the registry: adding a role is one class here
(``config = ItsConfig``) and its config dataclass; the rest of the league
iterates the registry.
Any role's ``sampling`` may replace its AlphaStar mix with one rule of
``league.matchmaking`` (PFSP, the Nash, its latest snapshot, self-play).
Pure objects: the caller passes the league's view, win rates and game counts;
randomness comes from the caller's RNG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from league.config import (ROLE_CONFIGS, ExploiterConfig, LeagueExploiterConfig, MainAgentConfig,
                           MainExploiterConfig, RoleConfig)
from league.matchmaking import LeagueView, MatchPlan, PlanBranch, pfsp_probabilities
from league.messages import Match, MatchAssignments
from league.pool import AgentPool, AgentType


@dataclass(frozen=True)
class SnapshotDecision:
    snapshot: bool
    reason: str


# role name -> its class, in the order of league.config.ROLE_CONFIGS
ROLES: dict[str, type[Role]] = {}


class Role:
    """What every role does: the ``sampling`` rules that replace the AlphaStar mix, the snapshot
    every ``snapshot_every_steps``; no reset. Subclasses give their AlphaStar mix (``branches``)
    and their own snapshot and reset rules; one that sets ``config`` (a ``RoleConfig`` declared
    with ``role="name"``) is that role, registered in ``ROLES``."""

    config: ClassVar[type[RoleConfig]]
    agent_type: ClassVar[AgentType]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "config" in cls.__dict__:
            cls.agent_type = AgentType(cls.config.role)
            ROLES[cls.config.role] = cls

    def __init__(self, cfg: RoleConfig):
        self.cfg = cfg

    # -- opponents -----------------------------------------------------------------
    def match_plan(self, learner_id: str, view: LeagueView, version: str = "", made_at: float = 0.0) -> MatchPlan:
        """The opponent distribution of ``learner_id`` under ``view``: the ``self``, ``latest``,
        ``nash`` and ``pfsp`` rules are one fixed distribution per view, and the ``alphastar`` rule
        is a random choice among the role's branches that each are one."""
        cfg, snapshots = self.cfg, view.pool.ids()
        one = lambda branch: MatchPlan(learner_id, (branch,), False, version, made_at)  # noqa: E731
        if cfg.sampling == "self" or (not snapshots and cfg.sampling != "alphastar"):
            return one(live(1.0, learner_id, "self_play"))
        if cfg.sampling == "latest":
            latest = view.pool.latest(learner_id)
            if latest is None:
                return one(live(1.0, learner_id, "self_play"))
            return one(PlanBranch(1.0, (latest.agent_id,), None, False, "latest"))
        if cfg.sampling == "nash":
            ids = [a for a, w in view.nash_weights.items() if w > 0 and a in view.pool]
            if not ids:
                return one(self.pfsp_branch(1.0, learner_id, snapshots, view, "nash_fallback_pfsp"))
            return one(PlanBranch(1.0, tuple(ids), np.cumsum([view.nash_weights[a] for a in ids]), False, "nash"))
        if cfg.sampling == "pfsp":
            return one(self.pfsp_branch(1.0, learner_id, snapshots, view, "pfsp"))
        return MatchPlan(learner_id, tuple(self.branches(learner_id, view)), True, version, made_at)

    def branches(self, learner_id: str, view: LeagueView) -> list[PlanBranch]:
        """The role's AlphaStar mix: branches weighted by the probability of each."""
        raise NotImplementedError

    def pfsp_branch(self, weight: float, learner_id: str, candidates: Sequence[str], view: LeagueView, name: str,
             weighting: str | None = None) -> PlanBranch:
        """PFSP over ``candidates`` with the role's weighting (or ``weighting``), computed once per view."""
        weighting = weighting or self.cfg.pfsp_weighting
        key = (learner_id, tuple(candidates), weighting, self.cfg.pfsp_exponent)
        cdf = view.pfsp_cache.get(key)
        if cdf is None:
            rates = view.win_rates.win_rates_for(learner_id, candidates)
            cdf = view.pfsp_cache[key] = np.cumsum(pfsp_probabilities(rates, weighting, self.cfg.pfsp_exponent))
        return PlanBranch(weight, tuple(candidates), cdf, False, name)

    def vs_learner(self, weight: float, learner_id: str, opponent: str, view: LeagueView, live_threshold: float,
                   live_name: str, pfsp_name: str) -> PlanBranch:
        """Play learner ``opponent`` live while beating it more than ``live_threshold``, else f_var
        PFSP over its snapshots (a curriculum); live when it has none."""
        if opponent == learner_id or view.win_rates.win_rates_for(learner_id, [opponent])[0] > live_threshold:
            return live(weight, opponent, live_name)
        past = [r.agent_id for r in view.pool.list(learner_id=opponent)]
        if not past:
            return live(weight, opponent, live_name)
        return self.pfsp_branch(weight, learner_id, past, view, pfsp_name, weighting="variance")

    # -- snapshots -----------------------------------------------------------------
    def snapshot_targets(self, learner_id: str, view: LeagueView) -> list[str]:
        """The opponents whose defeat earns the learner an early snapshot: none."""
        return []

    def should_snapshot(self, steps_since_snapshot: int, target_win_rates: Sequence[float] = (),
                        target_games: Sequence[float] = ()) -> SnapshotDecision:
        """A snapshot every ``snapshot_every_steps`` learner steps."""
        if steps_since_snapshot >= self.cfg.snapshot_every_steps:
            return SnapshotDecision(True, "steps")
        return SnapshotDecision(False, "")

    # -- resets --------------------------------------------------------------------
    def should_reset(self, rng: np.random.Generator) -> bool:
        """Whether the learner restarts after a snapshot: never."""
        return False

    def reset_target(self, pool: AgentPool) -> str | None:
        """The snapshot a reset learner restarts from; None: a fresh initialisation."""
        return None


def live(weight: float, opponent: str, name: str) -> PlanBranch:
    """Always ``opponent``, a learner with its current weights."""
    return PlanBranch(weight, (opponent,), None, True, name)


class MainAgent(Role):
    """Plays self-play, PFSP over the pool and its forgotten opponents; snapshots every N steps;
    never resets."""

    config = MainAgentConfig
    cfg: MainAgentConfig

    def branches(self, learner_id: str, view: LeagueView) -> list[PlanBranch]:
        """``self_play`` (split over the main agents; a curriculum over the snapshots of one it
        loses to), ``pfsp`` against every past player, ``forgotten``: PFSP over the main snapshots
        and past main exploiters it no longer beats (every past player when there are none)."""
        cfg, snapshots = self.cfg, view.pool.ids()
        mains = view.main_learners() or [learner_id]
        self_play = cfg.self_play if snapshots else 1.0
        out = [self.vs_learner(self_play / len(mains), learner_id, m, view, cfg.live_threshold, "self_play",
                               "self_play_pfsp") for m in mains]
        if not snapshots:
            return out
        out.append(self.pfsp_branch(cfg.pfsp, learner_id, snapshots, view, "pfsp"))
        forgotten = self.forgotten(learner_id, view)
        out.append(self.pfsp_branch(cfg.forgotten, learner_id, forgotten, view, "forgotten") if forgotten
                   else self.pfsp_branch(cfg.forgotten, learner_id, snapshots, view, "pfsp"))
        return out

    def forgotten(self, learner_id: str, view: LeagueView) -> list[str]:
        """Past main exploiters it beats less than ``forgotten_exploiter_threshold``, then main
        snapshots it beats less than ``forgotten_main_threshold``."""
        out = []
        for role, threshold in ((MainExploiter, self.cfg.forgotten_exploiter_threshold),
                                (MainAgent, self.cfg.forgotten_main_threshold)):
            ids = [r.agent_id for r in view.pool.list(role.agent_type)]
            if ids:
                out += [a for a, x in zip(ids, view.win_rates.win_rates_for(learner_id, ids)) if x < threshold]
        return out


class Exploiter(Role):
    """What both exploiters share: an early snapshot once they beat every target, and a reset after
    a snapshot with probability ``reset_probability``, to ``reset_to``."""

    cfg: ExploiterConfig

    def should_snapshot(self, steps_since_snapshot: int, target_win_rates: Sequence[float] = (),
                        target_games: Sequence[float] = ()) -> SnapshotDecision:
        """Every ``snapshot_every_steps``, or after ``min_steps_before_snapshot`` once every target
        was played ``min_games_for_snapshot`` times and beaten more than ``snapshot_win_rate``."""
        decision = super().should_snapshot(steps_since_snapshot)
        if decision.snapshot or steps_since_snapshot < self.cfg.min_steps_before_snapshot:
            return decision
        rates = np.asarray(target_win_rates, dtype=float)
        games = np.asarray(target_games, dtype=float)
        if rates.size == 0 or games.size != rates.size:
            return decision
        if np.all(games >= self.cfg.min_games_for_snapshot) and np.all(rates > self.cfg.snapshot_win_rate):
            return SnapshotDecision(True, "win_rate")
        return decision

    def should_reset(self, rng: np.random.Generator) -> bool:
        """With probability ``reset_probability`` (no random number drawn at 0 or 1)."""
        p = self.cfg.reset_probability
        return p >= 1.0 or (p > 0.0 and rng.random() < p)

    def reset_target(self, pool: AgentPool) -> str | None:
        """``reset_to``: a snapshot id, or a role name for that role's latest snapshot (an exploiter
        warm-started from the newest main agent); None when there is none yet."""
        reset_to = self.cfg.reset_to
        if reset_to in ROLES:
            records = pool.list(agent_type=reset_to)
            return records[-1].agent_id if records else None
        return reset_to

    def vs_pool(self, learner_id: str, view: LeagueView) -> list[PlanBranch]:
        """PFSP over the whole pool; the main agents live while the pool is empty."""
        snapshots = view.pool.ids()
        if not snapshots:
            mains = view.main_learners() or [learner_id]
            return [live(1.0 / len(mains), m, "vs_main") for m in mains]
        return [self.pfsp_branch(1.0, learner_id, snapshots, view, "pfsp")]


class MainExploiter(Exploiter):
    """Plays the current main agents; snapshots once it beats them all; resets after each snapshot
    (``reset_probability`` 1)."""

    config = MainExploiterConfig
    cfg: MainExploiterConfig

    def branches(self, learner_id: str, view: LeagueView) -> list[PlanBranch]:
        """Each main agent equally often: live while beating it more than ``live_threshold``, else
        f_var PFSP over its snapshots (a curriculum). Without main agents, the league exploiter's rule."""
        mains = view.main_learners()
        if not mains:
            return self.vs_pool(learner_id, view)
        return [self.vs_learner(1.0 / len(mains), learner_id, m, view, self.cfg.live_threshold, "vs_main",
                                "vs_main_pfsp") for m in mains]

    def snapshot_targets(self, learner_id: str, view: LeagueView) -> list[str]:
        """The current main agents."""
        return view.main_learners()


class LeagueExploiter(Exploiter):
    """Plays PFSP over the whole pool; snapshots once it beats every other player of the pool;
    resets with probability 0.25 (``reset_probability``)."""

    config = LeagueExploiterConfig
    cfg: LeagueExploiterConfig

    def branches(self, learner_id: str, view: LeagueView) -> list[PlanBranch]:
        return self.vs_pool(learner_id, view)

    def snapshot_targets(self, learner_id: str, view: LeagueView) -> list[str]:
        """Every pool agent but its own snapshots."""
        own = {r.agent_id for r in view.pool.list(learner_id=learner_id)}
        return [a for a in view.pool.ids() if a not in own]


if set(ROLES) != set(ROLE_CONFIGS):  # a role config without its rules, or rules without a config
    raise TypeError(f"roles with a config but no class here: {sorted(set(ROLE_CONFIGS) - set(ROLES))}")


def make_role(agent_type: AgentType | str, cfg: RoleConfig) -> Role:
    """The role object of ``agent_type`` with its config (``Config.role(agent_type)``)."""
    return ROLES[AgentType(agent_type)](cfg)


def match_plan(learner_id: str, role: AgentType, cfg: RoleConfig, view: LeagueView, version: str = "",
               made_at: float = 0.0) -> MatchPlan:
    """The opponent distribution of ``learner_id`` under ``view``, as a ``MatchPlan``: what its
    role's object says (``Role.match_plan``)."""
    return make_role(role, cfg).match_plan(learner_id, view, version, made_at)


def choose_match(learner_id: str, role: AgentType, cfg: RoleConfig, view: LeagueView, rng: np.random.Generator) -> Match:
    """One opponent for ``learner_id`` under its role's sampling rule."""
    return choose_matches(learner_id, role, cfg, view, rng, 1)[0]


def choose_matches(learner_id: str, role: AgentType, cfg: RoleConfig, view: LeagueView, rng: np.random.Generator,
                   n: int) -> MatchAssignments:
    """``n`` independent opponents for ``learner_id`` under its role's sampling rule. The coordinator
    hands out matches by the thousand: each rule is a ``MatchPlan`` (a fixed distribution, or a
    random choice among branches that each are one), computed once per call and drawn from ``n``
    times."""
    return match_plan(learner_id, role, cfg, view).draw(rng, n)
