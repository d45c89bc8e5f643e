"""The league's config schema: every setting with its default, its bounds and its meaning.

    cfg = load_config("configs/kuhn_poker.yaml", ["run.max_minutes=10", "ppo.lr=1e-3"])

Each field is a ``setting`` (``league.config_loader``): ``check`` reads its bounds and choices in
one loop, and a class's ``rules`` hold what a bound cannot say, each with its reason. An unknown
key or an invalid value raises ``ConfigError`` whose message names the dotted key, so the
launcher stops before Ray starts with one line. What needs the game and the code a config names
is checked on the launcher's side (``actors.preflight``).

``auto``: a setting declared with ``setting(..., auto=True)`` may hold ``"auto"``; the launcher
resolves those from the cluster's resources before any actor starts (``league.sizing.plan``);
checks before it (``rules`` here, ``actors.preflight``) take an auto count as one that may come to
learners, or to none. ``learner.device: auto`` keeps its own meaning (CUDA where Ray gave the
learner a GPU), which that plan also reads.

Roles: a ``RoleConfig`` subclass that names its role (``class XConfig(RoleConfig, role="x")``)
adds the section ``roles.x``; its rules are the class in ``league.roles`` that reads it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, make_dataclass
from typing import Any, ClassVar, Iterable, Mapping

from league.anchors import parse_anchor
from league.config_loader import AUTO, ConfigError, check, from_dict, parse_override, read, setting
from league.objectives import ShaperError, resolve_shaper

__all__ = ["AUTO", "Config", "ConfigError", "CurriculumStage", "EvaluatorConfig", "ExploiterConfig", "GameConfig",
           "LeagueConfig", "LeagueExploiterConfig", "LearnerConfig", "MainAgentConfig", "MainExploiterConfig",
           "ObjectiveConfig", "PPOConfig", "Placement", "PolicyConfig", "ROLE_CONFIGS", "RayConfig", "RoleConfig",
           "RolesConfig", "RolloutConfig", "RunConfig", "SearchConfig", "SearchLearnerConfig", "ServeConfig", "SnapshotsConfig", "check",
           "from_dict", "load_config", "parse_override", "setting"]

SCHEDULING = ("default", "spread")
SAMPLING = ("alphastar", "pfsp", "nash", "latest", "self")
WEIGHTING = ("hard", "squared", "variance", "linear", "linear_capped")
PUBLISH = ("nash", "least_exploitable")
LEARNERS = ("ppo", "search")
# how a frozen snapshot picks its move (policy.snapshot_play; policies.snapshot writes it in the blob)
SNAPSHOT_PLAYS = ("sample", "greedy")
SERVE_PROXY = ("HeadOnly", "EveryNode", "Disabled")
AUTOSCALING_KEYS = ("min_replicas", "max_replicas", "target_ongoing_requests", "initial_replicas",
                    "upscale_delay_s", "downscale_delay_s")
RESERVED_RESOURCES = ("CPU", "GPU", "memory")  # Ray's own: a custom resource may not take these names
RAY_WORKER_PORTS = (10002, 19999)
# keys that were renamed, and what to use instead
RENAMED = {"serve.lru_size": "use snapshots.cache_size (it sizes every snapshot cache)"}


def _unit(doc: str, default: float, open_low: bool = False) -> Any:
    """A share or probability: in [0, 1] (or (0, 1])."""
    return setting(default, low=0, high=1, open_low=open_low, doc=doc)


def _positive(doc: str, default: Any) -> Any:
    return setting(default, low=0, open_low=True, doc=doc)


def _nonneg(doc: str, default: Any) -> Any:
    return setting(default, low=0, doc=doc)


# -- the game ----------------------------------------------------------------------

@dataclass
class CurriculumStage:
    """One stage of ``game.curriculum``: the learner's rollout workers play the game with
    ``params`` (over ``game.params``) while the learner has trained on fewer than ``until_step``
    decisions."""

    until_step: int = setting(0, doc="the learner's trained decisions at which the stage ends")
    params: dict[str, Any] = setting(factory=dict, doc="the stage's game params, over game.params")


@dataclass
class GameConfig:
    name: str = setting("kuhn_poker", doc="an OpenSpiel game, or 'package.module:Game' (docs/envs_policies.md)")
    params: dict[str, Any] = setting(factory=dict, doc="keyword arguments of the game")
    teams: dict[str, Any] | None = setting(None, doc="how a team game's agents form its two sides (envs.teams, "
                                                     "docs/teams.md); pettingzoo-parallel games only")
    curriculum: list[CurriculumStage] = setting(factory=list, doc="stages of smaller games the rollout workers "
                                                                  "play first (docs/teams.md, 'Curriculum')")

    @property
    def kwargs(self) -> dict[str, Any]:
        """What ``envs.make_game(name, E, seed, **kwargs)`` takes: the params, and the teams of a
        team game. The store keeps it as the run's ``game_params``, so that everything rebuilding
        the game from a store (the report, export, the probe) builds this very game."""
        return {**self.params, "teams": self.teams} if self.teams is not None else dict(self.params)

    def stage(self, step: int) -> int:
        """The curriculum stage of a learner at ``step`` trained decisions: the index of the first
        stage whose ``until_step`` it has not reached, ``len(curriculum)`` for the game itself."""
        for i, stage in enumerate(self.curriculum):
            if step < stage.until_step:
                return i
        return len(self.curriculum)

    def stage_kwargs(self, stage: int) -> dict[str, Any]:
        """``kwargs`` of curriculum stage ``stage``: its params over the game's."""
        if stage >= len(self.curriculum):
            return self.kwargs
        return {**self.kwargs, **self.curriculum[stage].params}

    def rules(self, key: str) -> None:
        if not self.name:
            raise ConfigError(f"{key}.name", "must not be empty")
        last = 0
        for i, stage in enumerate(self.curriculum):  # stages in order of the learner's steps
            if stage.until_step <= last:
                raise ConfigError(f"{key}.curriculum[{i}].until_step",
                                  f"must be > {last} (stages in order of the learner's steps), got {stage.until_step}")
            last = stage.until_step
            if "teams" in stage.params:  # the sides stay the game's: a stage shrinks the game, not its teams
                raise ConfigError(f"{key}.curriculum[{i}].params", "a stage changes the game's params, not its teams")


# -- the roles -----------------------------------------------------------------------

@dataclass
class ObjectiveConfig:
    """What a learner's update optimises (league.objectives): its episodes in groups of
    ``k_opponents`` (one against each of k opponents drawn by the role's rule, one policy
    version), and a reward ``shaper`` that turns each group's outcomes into the rewards to train on."""

    k_opponents: int = setting(1, low=1, doc="episodes in a group, each against its own opponent")
    shaper: str | None = setting(None, doc='"novelty", "diversity" or "package.module:function"; None: raw rewards')
    params: dict[str, Any] = setting(factory=dict, doc="keyword arguments of the shaper")

    def rules(self, key: str) -> None:
        if self.shaper is not None:  # the shaper must resolve, and accept its params
            try:
                resolve_shaper(self.shaper, self.params)
            except ShaperError as exc:
                raise ConfigError(f"{key}.shaper", str(exc)) from None
            except ValueError as exc:  # a shipped shaper's own check of its params
                raise ConfigError(f"{key}.params", str(exc)) from None

    @property
    def grouped(self) -> bool:
        """Episodes travel in groups (k > 1, or any shaper): otherwise today's plain stream."""
        return self.k_opponents > 1 or self.shaper is not None


# role name -> its config class, in the order the roles' sections and learners come in
ROLE_CONFIGS: dict[str, type[RoleConfig]] = {}


@dataclass
class RoleConfig:
    """What every role has (league.roles): how many learners play it, the rule that may replace its
    AlphaStar opponent mix (``sampling``) and the PFSP weighting of its PFSP draws, its snapshot
    period and its objective. A subclass declared with ``role="name"`` is a role of the league
    (``ROLE_CONFIGS``) and adds the keys its rules read; a key of another role is a config error.
    ``main=True`` marks the main role: what exploiters target, what seed snapshots join as;
    ``short`` is its label where space is short (the progress line)."""

    role: ClassVar[str] = ""
    main: ClassVar[bool] = False
    short: ClassVar[str] = ""

    count: int = setting(1, low=0, doc="learners that play this role")
    sampling: str = setting("alphastar", choices=SAMPLING, doc="the opponent rule (league.roles.Role.match_plan)")
    pfsp_weighting: str = setting("hard", choices=WEIGHTING, doc="the PFSP weighting of its PFSP draws")
    pfsp_exponent: float = _nonneg("p of the hard weighting (1 - x)^p", 2.0)
    snapshot_every_steps: int = _positive("a snapshot every N learner steps", 20_000)
    objective: ObjectiveConfig = setting(factory=ObjectiveConfig, doc="what its updates optimise")
    learner: str = setting("ppo", choices=LEARNERS, doc="ppo; search: its moves are searched and it trains on the "
                                                        "search's targets (search_learner, docs/search.md)")

    def __init_subclass__(cls, role: str = "", main: bool = False, short: str = "", **kwargs):
        super().__init_subclass__(**kwargs)
        if role:
            cls.role, cls.main, cls.short = role, main, short or role
            ROLE_CONFIGS[role] = cls

    @classmethod
    def unknown_key(cls, key: str) -> str:
        """Why ``key`` is not one of this role's: another role's key (a role's config holds only
        the keys its rules read), or unknown."""
        owners = [name for name, c in ROLE_CONFIGS.items()
                  if c is not cls and key in {f.name for f in dataclasses.fields(c)}]
        return f"a key of {' and '.join(owners)}, not of this role" if owners else "unknown key"


@dataclass
class MainAgentConfig(RoleConfig, role="main_agent", main=True, short="main"):
    """A main agent's opponent mix (``league.roles.MainAgent``): self-play, PFSP over the pool,
    forgotten snapshots; it never resets."""

    pfsp_weighting: str = setting("squared", choices=WEIGHTING, doc="the PFSP weighting of its PFSP draws")
    self_play: float = _unit("share of games against the main agents (itself among them)", 0.35)
    pfsp: float = _unit("share of games by PFSP over every past player", 0.50)
    forgotten: float = _unit("share of games against forgotten opponents", 0.15)
    forgotten_main_threshold: float = _unit("forgotten: main snapshots it beats less often than this", 0.7)
    forgotten_exploiter_threshold: float = _unit("forgotten: past main exploiters it beats less often than this",
                                                 0.3)
    live_threshold: float = _unit("play another main agent live only while beating it more often than this", 0.3)

    def rules(self, key: str) -> None:
        total = self.self_play + self.pfsp + self.forgotten
        if abs(total - 1.0) > 1e-9:  # the three shares split every game between them
            raise ConfigError(f"{key}.self_play", f"self_play + pfsp + forgotten must sum to 1, got {total:g}")


@dataclass
class ExploiterConfig(RoleConfig):
    """What both exploiters have (``league.roles.Exploiter``): an early snapshot once they beat
    every target more than ``snapshot_win_rate`` (after ``min_steps_before_snapshot`` steps and
    ``min_games_for_snapshot`` games against each), and a reset after a snapshot. Their ``count``
    may be ``auto``: as many as the cluster's cores feed beside the main agents (league.sizing)."""

    count: int = setting(1, low=0, auto=True, doc="learners that play this role; auto: as many as the cluster's "
                                                   "cores feed beside the main agents (league.sizing)")

    min_steps_before_snapshot: int = _nonneg("learner steps before an early snapshot", 5_000)
    snapshot_win_rate: float = _unit("an early snapshot once it beats every target more often than this", 0.7)
    min_games_for_snapshot: float = _nonneg("games against each target before an early snapshot", 20.0)
    reset_probability: float = _unit("probability of a reset after a snapshot", 0.25)
    reset_to: str | None = setting(None, doc="a snapshot id, or a role name: that role's latest snapshot; "
                                             "None: a fresh network")


@dataclass
class MainExploiterConfig(ExploiterConfig, role="main_exploiter", short="mx"):
    pfsp_weighting: str = setting("variance", choices=WEIGHTING, doc="the PFSP weighting of its PFSP draws")
    reset_probability: float = _unit("probability of a reset after a snapshot", 1.0)
    live_threshold: float = _unit("play a main agent live only while beating it more often than this", 0.1)


@dataclass
class LeagueExploiterConfig(ExploiterConfig, role="league_exploiter", short="lx"):
    count: int = setting(2, low=0, auto=True, doc="learners that play this role; auto: as many as the cluster's "
                                                   "cores feed beside the main agents (league.sizing)")
    pfsp_weighting: str = setting("linear_capped", choices=WEIGHTING, doc="the PFSP weighting of its PFSP draws")


def _roles_items(self) -> list[tuple[str, RoleConfig]]:
    """Each role's name and config, in the registry's order."""
    return [(name, getattr(self, name)) for name in ROLE_CONFIGS]


# one section per role, named by the role (ROLE_CONFIGS)
RolesConfig = make_dataclass("RolesConfig", [(name, c, setting(factory=c, doc=f"the {name} role"))
                                              for name, c in ROLE_CONFIGS.items()],
                             namespace={"items": _roles_items, "__doc__": "Each role's config, by role name."})
RolesConfig.__module__ = __name__


# -- the league ---------------------------------------------------------------------

@dataclass
class LeagueConfig:
    payoff_decay: float = _unit("weight kept by old results at each new one (1: none forgotten)", 0.99, open_low=True)
    payoff_prior_games: float = _nonneg("pseudo-games at a score of 1/2 under every payoff", 0.0)
    pool_max_size: int = _positive("the most snapshots the pool holds", 1000)
    nash_every_seconds: float = _positive("the meta-game Nash is re-solved at most this often", 5.0)
    nash_every_results: int = _positive("... or after this many results between frozen agents", 20_000)
    elo_k: float = _positive("Elo's K factor", 16.0)
    elo_initial: float = setting(1000.0, doc="a new learner's Elo rating")
    seed_snapshots: list[str] = setting(factory=list, doc="snapshot files that join the pool as main-role snapshots")
    match_plan_seconds: float = _positive("a learner's match plan is remade at most this often while results "
                                          "arrive (docs/cluster.md)", 1.0)
    payoff_checkpoint_seconds: float = _nonneg("payoff and Elo tables go to the store at most this often; a restart "
                                               "replays the batches after (0: every batch)", 5.0)
    compact_every_seconds: float = _nonneg("stored result batches the checkpoint includes are deleted this often "
                                           "(league.retention; 0: never)", 300.0)
    history_retention_hours: float = _nonneg("Nash solves, Elo history, measurements and events older than this "
                                             "are deleted (the newest of each kept; 0: kept)", 168.0)
    history_thin_seconds: float = _nonneg("Nash solves and Elo history older than an hour are thinned to one per "
                                          "this many seconds (0: all kept)", 300.0)
    snapshot_archive: str | None = setting(None, doc="a folder where every snapshot's weights are also written; "
                                                     "unset: an evicted agent's weights are gone")


@dataclass
class PolicyConfig:
    """The learners' network (policies.net, docs/envs_policies.md). ``search_value``: a second value
    head trained on the learner's games against itself only; play-time search reads it."""

    net: str = setting("mlp", doc="mlp, conv or 'package.module:factory' (called with the spec and args)")
    hidden: list[int] = setting(factory=lambda: [128, 128], doc="the mlp's hidden layer sizes")
    activation: str = setting("tanh", choices=("tanh", "relu"), doc="the mlp's activation")
    channels: int = _positive("the conv net's channels", 32)
    blocks: int = _nonneg("the conv net's residual blocks", 2)
    args: dict[str, Any] = setting(factory=dict, doc="keyword arguments of a factory")
    search_value: bool = setting(False, doc="a second value head for play-time search (mlp, conv)")
    snapshot_play: str = setting("sample", choices=SNAPSHOT_PLAYS,
                                 doc="how frozen snapshots (opponents, the published mixture, exports) pick a "
                                     "move: sampled, or greedy (the most probable legal move; deterministic "
                                     "games of perfect information only)")
    snapshot_average: float = _unit("snapshots are taken from an exponential moving average of the learner's "
                                     "weights, which keeps this share of itself at each gradient step (0.999: "
                                     "about the last 1,000 steps); 0: from the weights themselves", 0.0)

    def rules(self, key: str) -> None:
        if self.snapshot_average >= 1:
            raise ConfigError(f"{key}.snapshot_average", f"must be in [0, 1) (1 never moves), got "
                                                        f"{self.snapshot_average}")
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ConfigError(f"{key}.hidden", f"must be a non-empty list of positive sizes, got {self.hidden}")
        module, sep, attr = self.net.partition(":")
        if self.net not in ("mlp", "conv") and not (sep and module and attr):
            raise ConfigError(f"{key}.net", f"must be mlp, conv or 'package.module:factory', got {self.net!r}")
        if self.search_value and self.net not in ("mlp", "conv"):  # a factory's network has no second head
            raise ConfigError(f"{key}.search_value", f"a second value head needs net mlp or conv, not {self.net!r}")


@dataclass
class PPOConfig:
    """The learners' PPO (policies.ppo; Schulman et al. 2017, GAE 2016). Checked when made (also
    directly, by evaluation.best_response and tests): a bad value raises ``ConfigError`` naming
    ``ppo.KEY``."""

    lr: float = _positive("Adam's learning rate", 2.5e-4)
    gamma: float = _unit("discount; 1 for episodic zero-sum games, where the terminal result counts", 1.0)
    gae_lambda: float = _unit("GAE's lambda", 0.95)
    clip: float = _positive("the ratio's clip range", 0.2)
    clip_value_loss: bool = setting(True, doc="clip the value loss as the ratio")
    vf_coef: float = _nonneg("weight of the value loss", 0.5)
    ent_coef: float = setting(0.01, doc="weight of the entropy bonus")
    max_grad_norm: float = _positive("gradients are clipped to this norm", 0.5)
    epochs: int = _positive("passes over each batch", 4)
    minibatch_size: int = _positive("rows per gradient step", 256)
    normalize_advantages: bool = setting(True, doc="advantages normalised per minibatch")
    target_kl: float | None = setting(None, low=0, open_low=True, doc="stop the epochs early past this approx KL")
    adam_eps: float = _positive("Adam's epsilon", 1e-5)
    magnet_coef: float = _nonneg("weight of KL(pi || magnet); 0: plain PPO", 0.0)
    magnet_rate: float = _unit("magnet <- (1 - rate) * magnet + rate * policy, per update", 0.05)
    lr_decay_steps: float = _nonneg("lr / sqrt(1 + steps / lr_decay_steps); 0: constant", 0.0)

    def __post_init__(self):
        check(self, "ppo")


@dataclass
class Placement:
    """Ray options of one kind of actor (docs/cluster.md): logical CPUs and GPUs, custom resources, spread."""

    num_cpus: float = _nonneg("logical CPUs Ray reserves for each", 0.5)
    num_gpus: float = _nonneg("GPUs Ray reserves for each", 0.0)
    resources: dict[str, float] = setting(factory=dict, doc="custom resources each needs, e.g. {worker_slot: 1}")
    scheduling: str = setting("default", choices=SCHEDULING, doc="spread: across the cluster's nodes")

    def rules(self, key: str) -> None:
        _check_resources(f"{key}.resources", self.resources)


def _check_resources(key: str, resources: Mapping[str, Any]) -> None:
    """Custom resources: named other than Ray's own, each a positive amount."""
    for name, amount in resources.items():
        if not isinstance(name, str) or not name or name in RESERVED_RESOURCES:
            raise ConfigError(key, f"custom resource names are non-empty strings other than "
                                   f"{', '.join(RESERVED_RESOURCES)}; got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ConfigError(f"{key}.{name}", f"must be a number, got {amount!r}")
        if not math.isfinite(amount) or amount <= 0:
            raise ConfigError(f"{key}.{name}", f"must be > 0, got {amount}")


@dataclass
class LearnerConfig(Placement):
    """Where learners run and on what (docs/cluster.md)."""

    device: str = setting("auto", doc="auto: CUDA when Ray gave the actor a GPU (with num_gpus 0, the plan gives "
                                      "each learner a share of the cluster's GPUs: league.sizing); cpu; cuda; cuda:N")
    replicas: int = setting(1, low=1, auto=True, doc="learner processes of each role instance, data parallel (a "
                                                     "learner group); auto: as many as the cluster's cores feed "
                                                     "(league.sizing)")
    checkpoint_every_seconds: float = _positive("parameters and optimizer go to the store this often and after "
                                                "each snapshot: the most learning a death loses", 30.0)
    nice: int | None = setting(None, low=0, high=19, doc="the process's nice value as Ray starts it "
                                                         "(actors.placement); None: Ray's default for actors, 15")

    def rules(self, key: str) -> None:
        super().rules(key)
        base, _, index = self.device.partition(":")
        if base not in ("auto", "cpu", "cuda") or (index and (base != "cuda" or not index.isdigit())):
            raise ConfigError(f"{key}.device", f"must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if base == "cuda" and self.num_gpus <= 0:
            raise ConfigError(f"{key}.device", f"{self.device} needs learner.num_gpus > 0 (Ray hides GPUs from "
                                               "actors that did not ask for one)")


@dataclass
class RolloutConfig(Placement):
    workers_per_learner: int = setting(1, low=0, open_low=True, auto=True,
                                       doc="rollout workers of each learner process; auto: the cluster's cores left "
                                           "to workers (league.sizing)")
    envs_per_worker: int = setting(2048, low=0, open_low=True, auto=True,
                                   doc="games a worker steps as one vector; auto: the worker's share of a batch, "
                                       "64 to 2048 (league.sizing)")
    steps_per_batch: int = _positive("decisions per batch sent to the learner", 4096)
    max_inflight_batches: int = _positive("batches a worker may have on their way to its learner", 2)
    results_batch_size: int = _positive("games per report to the coordinator (or what finished within 2 s)",
                                        16384)
    opponent_inference: str = setting("serve", choices=("inprocess", "serve"), auto=True,
                                      doc="inprocess: frozen opponents in the worker's own process; auto: served "
                                          "on a GPU where the cluster has one, else in process (league.sizing)")
    policy_inference: str = setting("inprocess", choices=("inprocess", "serve"), auto=True,
                                    doc="the learner's own moves (a search learner's leaves): inprocess, in the "
                                        "worker; serve: in the opponents deployment, one batch across workers; auto: "
                                        "a PPO learner's served where frozen opponents are served on a GPU "
                                        "(league.sizing)")
    lanes: int = _positive("sub-vectors a worker alternates between while served requests are in flight", 2)
    matches_per_request: int = _positive("matches a worker draws from its plan at a time", 64)
    episodes_per_opponent: int = _positive("new episodes in a row that play each drawn opponent "
                                           "(docs/results.md, 'The cost of a step')", 1)

    @property
    def served(self) -> bool:
        """Whether the opponents deployment runs: frozen opponents or the learners' moves are served."""
        return "serve" in (self.opponent_inference, self.policy_inference)


@dataclass
class EvaluatorConfig(Placement):
    num_cpus: float = _nonneg("logical CPUs Ray reserves for each", 0.25)
    count: int = _nonneg("evaluators measuring the payoffs between pool agents", 1)
    games_per_pair: int = _positive("games a sampling evaluator plays a pair", 256)
    exact: bool = setting(True, doc="exact expected payoffs where the game supports them (envs: supports_exact), "
                                    "or where greedy snapshots settle a pair in two games (actors.evaluator)")
    exploitability: int | None = setting(0, low=0, doc="index of the evaluator that measures the published "
                                                       "mixture's exact exploitability; None: none does")
    publish: str = setting("nash", choices=PUBLISH, doc="nash: the meta-game Nash; least_exploitable: the mixture "
                                                        "of least exact NashConv, an LP (exact games only)")
    publish_candidates: int = setting(256, low=1, doc="snapshots that LP is solved over: the published members, "
                                                      "then the newest (league.publication.lp_candidates)")
    exploitability_cpu_share: float = _unit("the most of one core the measuring evaluator's rounds take "
                                            "(actors.evaluator.round_interval)", 0.1, open_low=True)
    games_cpu_share: float = _unit("the most of one core a sampling evaluator's games take "
                                   "(actors.evaluator.pace_seconds); 1: no wait", 1.0, open_low=True)
    nice: int = setting(0, low=0, high=19, doc="the sampling evaluator's nice value (actors.priority); 19: "
                                               "the learners and workers first")
    probe_every_seconds: float = _nonneg("a best-response probe of the published mixture this often "
                                         "(evaluation.best_response); 0: never", 0.0)
    probe_steps: int = _positive("decisions the probe's best response trains for", 100_000)
    probe_eval_episodes: int = _positive("episodes the probe's best response is evaluated on", 20_000)
    probe_num_envs: int = _positive("games the probe steps as one vector", 128)
    probe_num_cpus: float = _nonneg("logical CPUs Ray reserves for the prober", 0.5)
    anchor_every_seconds: float = _positive("the anchor judge's rounds this far apart (end to start)", 120.0)
    anchor_games: int = _positive("games per subject and anchor each round", 50)
    anchor_num_cpus: float = _nonneg("logical CPUs Ray reserves for the judge, and the share of a core its "
                                     "rounds use on average (0: no bound)", 0.5)

    def rules(self, key: str) -> None:
        super().rules(key)
        # the least exploitable mixture is solved by the evaluator that measures exploitability
        if self.publish == "least_exploitable" and not (
                self.exploitability is not None and self.exploitability < self.count):
            raise ConfigError(f"{key}.publish", "least_exploitable is solved by the evaluator that measures "
                                                "exploitability: set evaluator.exploitability to the index of one "
                                                f"of the {self.count} evaluators")


@dataclass(frozen=True)
class SearchConfig:
    """How the published policy plays with search (evaluation.search: PUCT over the game's native
    states, the network's prior and value at the leaves) on a perfect-information OpenSpiel game.
    With simulations > 0 the anchor judge scores a third subject, published_search.
    evaluation.search takes this as its spec (SearchSpec), checked when built."""

    simulations: int = _nonneg("positions each member searches a move; 0: off", 0)
    c_puct: float = _positive("PUCT's exploration constant", 1.5)
    rollout_weight: float = _unit("a leaf's value mixes one random rollout in at this weight", 0.0)
    prior_temperature: float = _positive("above 1 flattens the network's prior", 1.0)
    batch: int = _positive("leaves per forward pass", 8)
    anchor_games: int = _nonneg("the searched subject's games per anchor and round (0: evaluator.anchor_games)", 0)

    def __post_init__(self):
        check(self, "search")

    def games_per_anchor(self, default: int) -> int:
        """The searched subject's games per anchor and round: ``anchor_games``, else ``default``."""
        return self.anchor_games or default


@dataclass(frozen=True)
class SearchLearnerConfig:
    """The search learner (``roles.<role>.learner: search``; policies.tree_search, policies.expert):
    the rollout worker searches each of the learner's moves with a batched Gumbel tree search
    (Danihelka et al. 2022) and the learner trains the policy towards the search's improved policy
    and the value towards the game's outcome, on a replay of recent positions."""

    simulations: int = setting(32, low=2, doc="simulations per searched move")
    considered: int = setting(16, low=2, doc="actions sampled at the root (Gumbel top-k)")
    c_visit: float = _positive("sigma(q) = (c_visit + max visits) * c_scale * q", 50.0)
    c_scale: float = _positive("the scale of q in the improved policy", 0.1)
    lr: float = _positive("Adam's learning rate", 1e-3)
    weight_decay: float = _nonneg("Adam's L2 weight decay", 1e-4)
    replay_positions: int = _positive("the newest positions the learner samples from", 200_000)
    minibatch_size: int = _positive("positions per gradient step", 1024)
    reuse: float = _positive("times each new position is sampled on average", 4.0)
    value_coef: float = _nonneg("weight of the value loss", 1.0)
    value_mix: float = _unit("the value target: (1 - mix) * outcome + mix * the search's root value", 0.0)
    max_grad_norm: float = _positive("gradients are clipped to this norm", 1.0)
    symmetries: bool = setting(False, doc="each drawn position trained under one of the game's symmetries, at random "
                                         "(envs.symmetry; a game without any trains as it is)")
    opening_plies: int = setting(0, low=0, doc="each game of the learner against itself opens with a number of "
                                               "uniformly random moves, both seats', drawn from 0 to this; the "
                                               "learner's decisions among them are not trained on")
    proof_table: int = setting(100_000, low=0, doc="proven positions a worker's search remembers across searches "
                                                   "(0: none); proofs are exact, so they hold for every later search")

    def __post_init__(self):
        check(self, "search_learner")

    def rules(self, key: str) -> None:
        if self.considered > self.simulations:
            raise ConfigError(f"{key}.considered", f"at most simulations ({self.simulations}), got {self.considered}")


@dataclass
class SnapshotsConfig:
    """Frozen policies kept loaded by each process that plays them (Serve replicas, in-process
    workers, the API, evaluators), least recently used evicted first; a miss reloads from the store."""

    cache_size: int = _positive("the most snapshots a cache holds", 1024)
    cache_mb: float = _positive("the most weights a cache holds, in MiB", 64.0)
    cache_idle_seconds: float = _positive("a snapshot unused this long leaves the cache", 300.0)

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_mb * 2**20)


@dataclass
class ServeConfig:
    host: str = setting("127.0.0.1", doc="where the HTTP API listens")
    port: int = setting(8000, low=1, high=65535, doc="the HTTP API's TCP port")
    api: bool = setting(True, doc="serve the HTTP API")
    max_batch_size: int = _positive("opponent requests batched into one pass", 16)
    batch_wait_timeout_s: float = _nonneg("the longest a request waits for its batch to fill", 0.002)
    max_ongoing_requests: int = _positive("requests a replica takes at once", 256)
    num_cpus: float = _nonneg("logical CPUs of each opponents replica", 0.2)
    num_gpus: float = _nonneg("GPUs of each opponents replica; with one, the frozen opponents' forward passes run "
                              "on it", 0.0)
    resources: dict[str, float] = setting(factory=dict, doc="custom resources of each opponents replica")
    num_replicas: int = _positive("opponents replicas", 1)
    autoscaling: dict[str, Any] | None = setting(None, doc="Serve's autoscaling instead of num_replicas, e.g. "
                                                           "{min_replicas: 1, max_replicas: 8}")
    proxy_location: str = setting("HeadOnly", choices=SERVE_PROXY, doc="where the HTTP API's server runs "
                                                                       "(docs/serve.md, 'Latency')")
    play_sessions: int = _positive("games against the Nash the API keeps at once (GET / and /play)", 256)
    play_ttl_s: float = _positive("a play game idle this long is forgotten", 600.0)

    def rules(self, key: str) -> None:
        _check_resources(f"{key}.resources", self.resources)
        if self.autoscaling is not None:
            _check_autoscaling(f"{key}.autoscaling", self.autoscaling)


def _check_autoscaling(key: str, a: Mapping[str, Any]) -> None:
    """Serve's autoscaling keys: known, numbers, whole replica counts, min <= max (max required)."""
    for name, value in a.items():
        if name not in AUTOSCALING_KEYS:
            raise ConfigError(f"{key}.{name}", f"unknown key (known: {', '.join(AUTOSCALING_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}.{name}", f"must be a number, got {value!r}")
        if name.endswith("replicas") and not float(value).is_integer():
            raise ConfigError(f"{key}.{name}", f"must be an integer, got {value!r}")
        zero_ok = name in ("min_replicas", "upscale_delay_s", "downscale_delay_s")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise ConfigError(f"{key}.{name}", f"must be {'>=' if zero_ok else '>'} 0, got {value}")
    lo, hi = a.get("min_replicas", 1), a.get("max_replicas")
    if hi is None:
        raise ConfigError(f"{key}.max_replicas", "is required when serve.autoscaling is set")
    if lo > hi:
        raise ConfigError(f"{key}.min_replicas", f"must be <= max_replicas ({hi}), got {lo}")


@dataclass
class RayConfig:
    address: str | None = setting(None, doc="a cluster to join; None: a local Ray")
    namespace: str = setting("league", doc="the Ray namespace of the league's actors")
    coordinator_name: str = setting("coordinator", doc="the coordinator actor's name")
    num_cpus: int | None = setting(None, low=0, open_low=True, doc="CPUs of a local Ray; None: the machine's")
    metrics_export_port: int | None = setting(8080, doc="where a local Ray's metrics agent exports; None: a free "
                                                        "port; ignored when joining a cluster")
    storage_resource: str | None = setting(None, doc="a custom resource only the node holding run.storage declares: "
                                                     "the coordinator runs there; None: on the launcher's node")

    def rules(self, key: str) -> None:
        if self.storage_resource is not None and (not self.storage_resource
                                                  or self.storage_resource in RESERVED_RESOURCES):
            raise ConfigError(f"{key}.storage_resource", f"must name a custom resource that the storage node "
                                                         f"declares, got {self.storage_resource!r}")
        port, (lo, hi) = self.metrics_export_port, RAY_WORKER_PORTS
        if port is not None and (not 0 < port < 65536 or lo <= port <= hi):  # Ray hands its workers those
            raise ConfigError(f"{key}.metrics_export_port", f"must be a TCP port outside Ray's worker ports "
                                                            f"{lo}-{hi} (or null), got {port!r}")


@dataclass
class RunConfig:
    storage: str = setting("runs/default", doc="the run's folder: its store and snapshots")
    max_minutes: float | None = setting(None, low=0, open_low=True, doc="stop after this long; None: never")
    max_env_steps: int | None = setting(None, low=0, open_low=True, doc="stop after this many env steps")
    seed: int = _nonneg("every random stream of the run derives from it (league.seeds)", 0)
    progress_every_seconds: float = _positive("the launcher's progress line this often", 5.0)
    exploitability_every_seconds: float = setting(30.0, doc="the measuring evaluator's rounds this often")

    def rules(self, key: str) -> None:
        if not self.storage:
            raise ConfigError(f"{key}.storage", "must not be empty")


@dataclass
class Config:
    game: GameConfig = setting(factory=GameConfig, doc="the game")
    roles: RolesConfig = setting(factory=RolesConfig, doc="the roles (league.roles)")
    league: LeagueConfig = setting(factory=LeagueConfig, doc="the pool, payoffs, Nash, store")
    policy: PolicyConfig = setting(factory=PolicyConfig, doc="the learners' network")
    ppo: PPOConfig = setting(factory=PPOConfig, doc="the learners' PPO")
    search_learner: SearchLearnerConfig = setting(factory=SearchLearnerConfig,
                                                  doc="the search learner's search and update")
    rollout: RolloutConfig = setting(factory=RolloutConfig, doc="the rollout workers")
    evaluator: EvaluatorConfig = setting(factory=EvaluatorConfig, doc="the evaluators, the prober, the judge")
    anchors: list[str] = setting(factory=list, doc="fixed opponents the published mixture and the newest main "
                                                   "snapshot are scored against: uniform, mcts:N, pkg.module:factory")
    anchor_elo: dict[str, float] = setting(factory=dict, doc="fixed Elo ratings of anchors, e.g. {'mcts:100': 1500}; "
                                                             "uniform is 1000 unless given (league.anchors)")
    learner: LearnerConfig = setting(factory=LearnerConfig, doc="where learners run")
    search: SearchConfig = setting(factory=SearchConfig, doc="play-time search of the published policy")
    serve: ServeConfig = setting(factory=ServeConfig, doc="opponent inference and the HTTP API")
    snapshots: SnapshotsConfig = setting(factory=SnapshotsConfig, doc="the snapshot caches")
    ray: RayConfig = setting(factory=RayConfig, doc="the Ray cluster")
    run: RunConfig = setting(factory=RunConfig, doc="the run: its store, its limits, its seed")

    def validate(self) -> "Config":
        """Every setting's bounds and every rule (``check``); returns the config."""
        return check(self)

    def rules(self, key: str) -> None:
        # an auto count may come to 0 (league.sizing): only a count given guarantees a learner
        if not any(role.count != AUTO and role.count for _, role in self.roles.items()):
            main = next(name for name, c in ROLE_CONFIGS.items() if c.main)
            raise ConfigError(f"roles.{main}.count", "the league needs at least one learner")
        self._check_anchors()

    def _check_anchors(self) -> None:
        """The anchors' syntax and ratings; what needs the game (mcts on a perfect-information game, a
        factory that imports) is checked by the launcher (evaluation.anchors.check_anchor)."""
        seen = set()
        for i, text in enumerate(self.anchors):
            try:
                name = parse_anchor(text).name
            except ValueError as exc:
                raise ConfigError(f"anchors[{i}]", str(exc)) from None
            if name in seen:
                raise ConfigError(f"anchors[{i}]", f"{name!r} is listed twice")
            seen.add(name)
        self.anchors = [parse_anchor(text).name for text in self.anchors]  # one spelling for kinds and labels
        for name, rating in self.anchor_elo.items():
            if name not in seen:
                raise ConfigError(f"anchor_elo.{name}", f"is not one of the anchors ({', '.join(sorted(seen)) or 'none'})")
            if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not math.isfinite(rating):
                raise ConfigError(f"anchor_elo.{name}", f"must be a finite number, got {rating!r}")

    def role(self, agent_type) -> RoleConfig:
        return getattr(self.roles, getattr(agent_type, "value", agent_type))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_config(path: str | os.PathLike | Mapping[str, Any] | None = None, overrides: Iterable[str] = ()) -> Config:
    """Defaults, then the YAML file (or a mapping of what such a file holds), then ``key=value``
    overrides; checked."""
    return read(Config, path, overrides, RENAMED).validate()
