"""One schema for the whole league: dataclasses, YAML files, dotted overrides.

    cfg = load_config("configs/kuhn_poker.yaml", ["run.max_minutes=10", "roles.main_agent.count=2"])

An unknown key or an invalid value raises ``ConfigError`` whose message names
the dotted key, so the launcher can stop before Ray starts with one line. Every
check lives here: the values (``load_config``), and what needs the game and the
code the config names (``check_runnable``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml


class ConfigError(ValueError):
    """A configuration key is unknown or its value invalid; ``key`` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


SCHEDULING = ("default", "spread")
DEVICES = ("auto", "cpu", "cuda")
SERVE_PROXY = ("HeadOnly", "EveryNode", "Disabled")
SAMPLING = ("alphastar", "pfsp", "nash", "latest", "self")
PUBLISH = ("nash", "least_exploitable")
WEIGHTING = ("hard", "squared", "variance", "linear", "linear_capped")


@dataclass
class CurriculumStage:
    """One stage of ``game.curriculum``: the learner's rollout workers play the game with
    ``params`` (over ``game.params``) while the learner has trained on fewer than ``until_step``
    decisions."""

    until_step: int = 0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class GameConfig:
    name: str = "kuhn_poker"
    params: dict[str, Any] = field(default_factory=dict)
    # how a team game's agents form its two sides (envs.teams, docs/teams.md); only
    # "pettingzoo-parallel:..." games take it
    teams: dict[str, Any] | None = None
    # stages of smaller games the rollout workers play first (docs/teams.md, "Curriculum")
    curriculum: list[CurriculumStage] = field(default_factory=list)

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

    def validate(self) -> None:
        if not self.name:
            raise ConfigError("game.name", "must not be empty")
        last = 0
        for i, stage in enumerate(self.curriculum):
            if stage.until_step <= last:
                raise ConfigError(f"game.curriculum[{i}].until_step",
                                  f"must be > {last} (stages in order of the learner's steps), got {stage.until_step}")
            last = stage.until_step
            if "teams" in stage.params:
                raise ConfigError(f"game.curriculum[{i}].params", "a stage changes the game's params, not its teams")


@dataclass
class ObjectiveConfig:
    """What a learner's update optimises (league.objectives): its episodes in groups of
    ``k_opponents`` (one against each of k opponents drawn by the role's rule, one policy
    version), and a reward ``shaper`` ("novelty", "diversity" or "package.module:function")
    that turns each group's outcomes into the rewards to train on; ``params`` go to it."""

    k_opponents: int = 1
    shaper: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def validate(self, key: str) -> None:
        if self.k_opponents < 1:
            raise ConfigError(f"{key}.k_opponents", f"must be >= 1, got {self.k_opponents}")
        if self.shaper is not None:
            from league.objectives import ShaperError, resolve_shaper

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


@dataclass
class RoleConfig:
    """What every role has (league.roles): how many learners play it, the rule that may replace its
    AlphaStar opponent mix (``sampling``) and the PFSP weighting of its PFSP draws, its snapshot
    period and its objective. A role's own rules add its keys (``MainAgentConfig``,
    ``ExploiterConfig``); a key of another role is a config error."""

    count: int = 1
    sampling: str = "alphastar"
    pfsp_weighting: str = "hard"
    pfsp_exponent: float = 2.0
    snapshot_every_steps: int = 20_000  # a snapshot every N learner steps
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)

    def validate(self, key: str) -> None:
        if self.count < 0:
            raise ConfigError(f"{key}.count", f"must be >= 0, got {self.count}")
        if self.sampling not in SAMPLING:
            raise ConfigError(f"{key}.sampling", f"must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")
        if self.pfsp_weighting not in WEIGHTING:
            raise ConfigError(f"{key}.pfsp_weighting", f"must be one of {', '.join(WEIGHTING)}, got {self.pfsp_weighting!r}")
        _nonneg(f"{key}.pfsp_exponent", self.pfsp_exponent)
        _positive(f"{key}.snapshot_every_steps", self.snapshot_every_steps)
        self.objective.validate(f"{key}.objective")


@dataclass
class MainAgentConfig(RoleConfig):
    """A main agent's opponent mix (``league.roles.MainAgent``): self-play, PFSP over the pool,
    forgotten snapshots; it never resets."""

    pfsp_weighting: str = "squared"
    self_play: float = 0.35
    pfsp: float = 0.50
    forgotten: float = 0.15
    # forgotten: main snapshots it beats less than this, past main exploiters it beats less than that
    forgotten_main_threshold: float = 0.7
    forgotten_exploiter_threshold: float = 0.3
    # play another main agent live only while beating it more than this often
    live_threshold: float = 0.3

    def validate(self, key: str) -> None:
        super().validate(key)
        for name in ("self_play", "pfsp", "forgotten", "forgotten_main_threshold", "forgotten_exploiter_threshold",
                     "live_threshold"):
            _unit(f"{key}.{name}", getattr(self, name))
        if abs(self.self_play + self.pfsp + self.forgotten - 1.0) > 1e-9:
            raise ConfigError(f"{key}.self_play", "self_play + pfsp + forgotten must sum to 1, got "
                              f"{self.self_play + self.pfsp + self.forgotten:g}")


@dataclass
class ExploiterConfig(RoleConfig):
    """What both exploiters have (``league.roles.Exploiter``): an early snapshot once they beat
    every target more than ``snapshot_win_rate`` (after ``min_steps_before_snapshot`` steps and
    ``min_games_for_snapshot`` games against each), and a reset after a snapshot."""

    min_steps_before_snapshot: int = 5_000
    snapshot_win_rate: float = 0.7
    min_games_for_snapshot: float = 20.0
    reset_probability: float = 0.25
    reset_to: str | None = None  # a snapshot id, or a role name: that role's latest snapshot

    def validate(self, key: str) -> None:
        super().validate(key)
        _nonneg(f"{key}.min_steps_before_snapshot", self.min_steps_before_snapshot)
        _unit(f"{key}.snapshot_win_rate", self.snapshot_win_rate)
        _nonneg(f"{key}.min_games_for_snapshot", self.min_games_for_snapshot)
        _unit(f"{key}.reset_probability", self.reset_probability)


@dataclass
class MainExploiterConfig(ExploiterConfig):
    pfsp_weighting: str = "variance"
    reset_probability: float = 1.0
    # play a main agent live only while beating it more than this often
    live_threshold: float = 0.1

    def validate(self, key: str) -> None:
        super().validate(key)
        _unit(f"{key}.live_threshold", self.live_threshold)


@dataclass
class LeagueExploiterConfig(ExploiterConfig):
    count: int = 2
    pfsp_weighting: str = "linear_capped"


@dataclass
class RolesConfig:
    main_agent: MainAgentConfig = field(default_factory=MainAgentConfig)
    main_exploiter: MainExploiterConfig = field(default_factory=MainExploiterConfig)
    league_exploiter: LeagueExploiterConfig = field(default_factory=LeagueExploiterConfig)


@dataclass
class LeagueConfig:
    payoff_decay: float = 0.99
    payoff_prior_games: float = 0.0
    pool_max_size: int = 1000
    nash_every_seconds: float = 5.0
    nash_every_results: int = 20_000
    elo_k: float = 16.0
    elo_initial: float = 1000.0
    seed_snapshots: list[str] = field(default_factory=list)
    # rollout workers draw their matches from a plan (the learner's opponent distribution) that the
    # coordinator remakes at most this often while results arrive, at once when the pool or the Nash
    # changes; workers ask for a newer one this often (docs/cluster.md)
    match_plan_seconds: float = 1.0
    # the payoff and Elo tables are written to the store at most this often (and with every change
    # to the pool); every result batch is stored before it is acknowledged, and a restart replays
    # the batches after the last checkpoint (docs/cluster.md); 0: with every batch
    payoff_checkpoint_seconds: float = 5.0
    # the store stays bounded (league.retention, docs/operations.md): this often the coordinator deletes
    # the result batches the payoff checkpoint includes (a resume cannot need them); 0: never
    compact_every_seconds: float = 300.0
    # Nash solves, Elo history, measurements and events older than this are deleted with each pass
    # (the newest Nash and the newest measurement of each kind are always kept); 0: kept for ever. A
    # week by default: a resume needs none of it, the report draws its curves from it
    history_retention_hours: float = 168.0
    # Nash solves (each the whole pool's weights) and Elo history older than an hour are thinned to
    # one per this many seconds with each pass; 0: every solve is kept
    history_thin_seconds: float = 300.0
    # a folder where every snapshot's weights are also written when it enters the pool (the store
    # drops an evicted agent's weights); unset: evicted weights are gone
    snapshot_archive: str | None = None


@dataclass
class PolicyConfig:
    """The learners' network (policies.net, docs/envs_policies.md): ``net`` is ``mlp``
    (``hidden``, ``activation``), ``conv`` (a residual conv net over the game's
    observation shape: ``channels``, ``blocks``) or ``"package.module:factory"``
    (called with the network's spec and ``args``). ``search_value``: a second value head (mlp,
    conv), trained on the learner's games against itself only; play-time search reads it
    (``search:``) instead of the value head, which a league trains against a mix of opponents."""

    net: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    activation: str = "tanh"
    channels: int = 32
    blocks: int = 2
    args: dict[str, Any] = field(default_factory=dict)
    search_value: bool = False


@dataclass
class PPOConfig:
    """The learners' PPO (policies.ppo; Schulman et al. 2017, GAE 2016). Checked when made: a bad
    value raises ``ConfigError`` naming ``ppo.KEY``."""

    lr: float = 2.5e-4
    gamma: float = 1.0  # episodic zero-sum games: the terminal result is what counts
    gae_lambda: float = 0.95
    clip: float = 0.2
    clip_value_loss: bool = True
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    epochs: int = 4
    minibatch_size: int = 256
    normalize_advantages: bool = True
    target_kl: float | None = None  # stop the epochs early when approx KL exceeds it
    adam_eps: float = 1e-5
    magnet_coef: float = 0.0  # weight of KL(pi || magnet); 0 = plain PPO
    magnet_rate: float = 0.05  # magnet <- (1 - rate) * magnet + rate * policy, per update
    # learning-rate decay by the learner's steps: lr / sqrt(1 + steps / lr_decay_steps); 0 = constant
    lr_decay_steps: float = 0.0

    def __post_init__(self):
        # made directly too (evaluation.best_response, tests), not only from a config file
        for name in ("lr", "clip", "max_grad_norm", "epochs", "minibatch_size", "adam_eps"):
            _positive(f"ppo.{name}", getattr(self, name))
        for name in ("gamma", "gae_lambda", "magnet_rate"):
            _unit(f"ppo.{name}", getattr(self, name))
        for name in ("vf_coef", "magnet_coef", "lr_decay_steps"):
            _nonneg(f"ppo.{name}", getattr(self, name))
        if self.target_kl is not None:
            _positive("ppo.target_kl", self.target_kl)


def _validate_placement(key: str, num_cpus: float, num_gpus: float, resources: dict, scheduling: str) -> None:
    """Per-role Ray options (docs/cluster.md): logical CPUs and GPUs, custom resources, spread."""
    _nonneg(f"{key}.num_cpus", num_cpus)
    _nonneg(f"{key}.num_gpus", num_gpus)
    for name, amount in resources.items():
        if not isinstance(name, str) or not name or name in ("CPU", "GPU", "memory"):
            raise ConfigError(f"{key}.resources", f"custom resource names are non-empty strings other than "
                                                  f"CPU, GPU, memory; got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ConfigError(f"{key}.resources.{name}", f"must be a number, got {amount!r}")
        _positive(f"{key}.resources.{name}", amount)
    if scheduling not in SCHEDULING:
        raise ConfigError(f"{key}.scheduling", f"must be one of {', '.join(SCHEDULING)}, got {scheduling!r}")


@dataclass
class LearnerConfig:
    """Where learners run and on what (docs/cluster.md)."""

    num_cpus: float = 0.5
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    scheduling: str = "default"  # or "spread": across the cluster's nodes
    device: str = "auto"  # auto: CUDA when Ray gave the actor a GPU; cpu; cuda; cuda:N
    # a learner's parameters and optimizer go to the store this often, and after each snapshot: at
    # most this much of its learning is lost when it dies
    checkpoint_every_seconds: float = 30.0
    # the learner process's nice value, 0 to 19, as Ray starts it (``RAY_worker_niceness`` in its
    # runtime env; actors.placement.learner_options); None: Ray's own for actors, 15. The learner's
    # update sets a league's pace, so 0 ranks it above the other actors where a core is short
    nice: int | None = None

    def validate(self) -> None:
        _validate_placement("learner", self.num_cpus, self.num_gpus, self.resources, self.scheduling)
        _nice("learner.nice", self.nice, null="Ray's default")
        _positive("learner.checkpoint_every_seconds", self.checkpoint_every_seconds)
        base, _, index = self.device.partition(":")
        if base not in DEVICES or (index and (base != "cuda" or not index.isdigit())):
            raise ConfigError("learner.device", f"must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if base == "cuda" and self.num_gpus <= 0:
            raise ConfigError("learner.device", f"{self.device} needs learner.num_gpus > 0 (Ray hides GPUs from "
                                                "actors that did not ask for one)")


@dataclass
class RolloutConfig:
    workers_per_learner: int = 1
    envs_per_worker: int = 2048  # large: a served call costs the same for 64 rows or 1024
    steps_per_batch: int = 4096
    max_inflight_batches: int = 2
    # games per report (or whatever finished within 2 s): a report costs the coordinator per opponent,
    # not per game, so large reports cost it little (docs/cluster.md, "How far one coordinator goes")
    results_batch_size: int = 16384
    opponent_inference: str = "serve"  # or "inprocess": frozen opponents in the worker's own process
    lanes: int = 2  # sub-vectors a worker alternates between while served requests are in flight
    matches_per_request: int = 64  # matches a worker draws from its plan at a time
    # new episodes in a row that play each drawn opponent (a k-opponent objective: each drawn group's
    # k opponents, that many groups in a row). Episodes that start together then share opponents, so a
    # vector step runs fewer frozen policies' forward passes; every opponent keeps its share of the
    # games. 1: each episode draws its own (docs/results.md, "The cost of a step").
    episodes_per_opponent: int = 1
    # Ray options of each worker (docs/cluster.md)
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    scheduling: str = "default"


@dataclass
class EvaluatorConfig:
    count: int = 1
    games_per_pair: int = 256
    exact: bool = True  # exact expected payoffs where the game supports them (envs: supports_exact)
    # index of the evaluator that measures the Nash mixture's exact exploitability
    # (games that support it); null: none does
    exploitability: int | None = 0
    # What the league publishes as its Nash (/nash, Nash sampling, every measurement):
    # "nash": the Nash of the meta-game over the measured snapshots;
    # "least_exploitable": the mixture of the pool's snapshots whose exact NashConv is least, an LP
    # the measuring evaluator solves every run.exploitability_every_seconds (games with exact
    # evaluation only: Kuhn, Leduc, matrix games). The meta-game Nash is still solved and measured.
    publish: str = "nash"
    # how many of the pool's snapshots that LP is solved over: the published members, then the newest
    # (league.publication.lp_candidates); its time and memory grow with this, not with the pool
    publish_candidates: int = 256
    # the most of one core the measuring evaluator's rounds (least-exploitable LP, exact NashConv)
    # take: a round whose CPU time would exceed it pushes the next one back past
    # run.exploitability_every_seconds (actors.evaluator.round_interval)
    exploitability_cpu_share: float = 0.1
    # the most of one core a sampling evaluator's games take: after each pair it waits until the
    # pair's CPU time is within this share of the time since the pair began
    # (actors.evaluator.pace_seconds); 1: no wait. Fewer sampled pairs measured, more CPU for the learners
    games_cpu_share: float = 1.0
    # the sampling evaluator's nice value, 0 to 19 (actors.priority): Ray runs actors at 15, so 19
    # puts the learners and workers first and its games play mostly on what they leave; 0 or up to
    # 15: an equal share
    nice: int = 0
    num_cpus: float = 0.25
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    scheduling: str = "default"
    # Approximate exploitability of the published Nash mixture (evaluation.best_response), measured
    # by a prober actor every probe_every_seconds (0: never) on probe_num_cpus of the machine:
    # a PPO best response trained for probe_steps decisions, evaluated on probe_eval_episodes.
    probe_every_seconds: float = 0.0
    probe_steps: int = 100_000
    probe_eval_episodes: int = 20_000
    probe_num_envs: int = 128
    probe_num_cpus: float = 0.5
    # Scores against the fixed anchors (top-level `anchors`), measured by the anchor judge actor every
    # anchor_every_seconds (between the end of one round and the start of the next) with anchor_games
    # games per subject and anchor; Ray reserves anchor_num_cpus for it, and its rounds are spaced so
    # that it uses no more than that share of a core on average (one core while it plays; 0: no bound)
    anchor_every_seconds: float = 120.0
    anchor_games: int = 50
    anchor_num_cpus: float = 0.5


@dataclass(frozen=True)
class SearchConfig:
    # How the published policy plays with search (evaluation.search: PUCT over the game's native states,
    # the network's prior and value at the leaves) on a perfect-information OpenSpiel game. With
    # simulations > 0 the anchor judge scores a third subject, published_search: the published
    # mixture, each member searching `simulations` positions a move. 0: off. evaluation.search takes
    # this as its spec (SearchSpec), checked when built. anchor_games: that subject's games per anchor
    # and round (0: evaluator.anchor_games); a searched game costs hundreds of times a plain one.
    simulations: int = 0
    c_puct: float = 1.5
    rollout_weight: float = 0.0  # a leaf's value mixes one random rollout in at this weight
    prior_temperature: float = 1.0  # above 1 flattens the network's prior
    batch: int = 8  # leaves per forward pass
    anchor_games: int = 0

    def __post_init__(self):
        for key in ("simulations", "batch", "anchor_games"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"search.{key}", f"must be an integer, got {value!r}")
        _nonneg("search.simulations", self.simulations)
        _positive("search.c_puct", self.c_puct)
        _unit("search.rollout_weight", self.rollout_weight)
        _positive("search.prior_temperature", self.prior_temperature)
        _positive("search.batch", self.batch)
        _nonneg("search.anchor_games", self.anchor_games)

    def games_per_anchor(self, default: int) -> int:
        """The searched subject's games per anchor and round: ``anchor_games``, else ``default``."""
        return self.anchor_games or default


@dataclass
class SnapshotsConfig:
    # frozen policies kept loaded by each process that plays them (Serve replicas,
    # in-process workers, the API, evaluators): at most cache_size of them and cache_mb of
    # weights, the least recently used evicted first (a miss reloads it from the store), and
    # none kept once unused for cache_idle_seconds (agents the pool evicted are never asked
    # for again: without it they stay until the cache is full)
    cache_size: int = 1024
    cache_mb: float = 64.0
    cache_idle_seconds: float = 300.0

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_mb * 2**20)


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api: bool = True
    max_batch_size: int = 16
    batch_wait_timeout_s: float = 0.002
    max_ongoing_requests: int = 256
    num_cpus: float = 0.2
    resources: dict[str, float] = field(default_factory=dict)  # of each opponents replica
    num_replicas: int = 1
    # Serve's own autoscaling of the opponents deployment instead of a fixed count, e.g.
    # {min_replicas: 1, max_replicas: 8, target_ongoing_requests: 4}
    autoscaling: dict[str, Any] | None = None
    # where the HTTP API's server runs: HeadOnly (the API is reached on the head), EveryNode (one per
    # node alive at launch), Disabled (none). Its own process, not Serve's proxy (docs/serve.md, "Latency").
    proxy_location: str = "HeadOnly"
    play_sessions: int = 256  # games against the Nash the API keeps at once (GET / and /play)
    play_ttl_s: float = 600.0  # a play game idle this long is forgotten


AUTOSCALING_KEYS = ("min_replicas", "max_replicas", "target_ongoing_requests", "initial_replicas",
                    "upscale_delay_s", "downscale_delay_s")


@dataclass
class RayConfig:
    address: str | None = None
    namespace: str = "league"
    coordinator_name: str = "coordinator"
    num_cpus: int | None = None
    # Where the local Ray's metrics agent exports (Prometheus text format); null lets Ray pick a free port.
    # Fixed so metrics keep one address across restarts; ignored when joining a cluster (its
    # `ray start --metrics-export-port` decides). Must lie outside Ray's worker ports (10002-19999).
    metrics_export_port: int | None = 8080
    # A custom resource that only the node holding run.storage declares (e.g. league_storage):
    # the coordinator then runs, and restarts, there. Unset: on the launcher's node, by hard affinity.
    storage_resource: str | None = None


@dataclass
class RunConfig:
    storage: str = "runs/default"
    max_minutes: float | None = None
    max_env_steps: int | None = None
    seed: int = 0  # every random stream of the run derives from it (league.seeds)
    progress_every_seconds: float = 5.0
    exploitability_every_seconds: float = 30.0


@dataclass
class Config:
    game: GameConfig = field(default_factory=GameConfig)
    roles: RolesConfig = field(default_factory=RolesConfig)
    league: LeagueConfig = field(default_factory=LeagueConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    # fixed opponents the published mixture and the newest main agent are scored against, never
    # training opponents (evaluation.anchors): uniform, mcts:N, pkg.module:factory
    anchors: list[str] = field(default_factory=list)
    # fixed Elo ratings of anchors, e.g. {"mcts:100": 1500}; uniform is 1000 unless given (league.anchors)
    anchor_elo: dict[str, float] = field(default_factory=dict)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    snapshots: SnapshotsConfig = field(default_factory=SnapshotsConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def validate(self) -> "Config":
        for name in ("main_agent", "main_exploiter", "league_exploiter"):
            getattr(self.roles, name).validate(f"roles.{name}")
        if self.roles.main_agent.count < 1 and not any(
            getattr(self.roles, r).count for r in ("main_exploiter", "league_exploiter")
        ):
            raise ConfigError("roles.main_agent.count", "the league needs at least one learner")
        self.game.validate()
        _unit("league.payoff_decay", self.league.payoff_decay, open_low=True)
        _nonneg("league.payoff_prior_games", self.league.payoff_prior_games)
        _positive("league.pool_max_size", self.league.pool_max_size)
        _positive("league.nash_every_seconds", self.league.nash_every_seconds)
        _positive("league.nash_every_results", self.league.nash_every_results)
        _positive("league.elo_k", self.league.elo_k)
        _positive("league.match_plan_seconds", self.league.match_plan_seconds)
        _nonneg("league.payoff_checkpoint_seconds", self.league.payoff_checkpoint_seconds)
        _nonneg("league.compact_every_seconds", self.league.compact_every_seconds)
        _nonneg("league.history_retention_hours", self.league.history_retention_hours)
        _nonneg("league.history_thin_seconds", self.league.history_thin_seconds)
        if self.league.snapshot_archive is not None and not isinstance(self.league.snapshot_archive, str):
            raise ConfigError("league.snapshot_archive", f"must be a folder path, got {self.league.snapshot_archive!r}")
        if not self.policy.hidden or any(h < 1 for h in self.policy.hidden):
            raise ConfigError("policy.hidden", f"must be a non-empty list of positive sizes, got {self.policy.hidden}")
        if self.policy.activation not in ("tanh", "relu"):
            raise ConfigError("policy.activation", f"must be tanh or relu, got {self.policy.activation!r}")
        net = self.policy.net
        module, sep, attr = net.partition(":")
        if net not in ("mlp", "conv") and not (sep and module and attr):
            raise ConfigError("policy.net", f"must be mlp, conv or 'package.module:factory', got {net!r}")
        if self.policy.search_value and net not in ("mlp", "conv"):
            raise ConfigError("policy.search_value", f"a second value head needs net mlp or conv, not {net!r}")
        _positive("policy.channels", self.policy.channels)
        _nonneg("policy.blocks", self.policy.blocks)
        for name in ("workers_per_learner", "envs_per_worker", "steps_per_batch", "max_inflight_batches",
                     "results_batch_size", "matches_per_request", "lanes", "episodes_per_opponent"):
            _positive(f"rollout.{name}", getattr(self.rollout, name))
        if self.rollout.opponent_inference not in ("inprocess", "serve"):
            raise ConfigError("rollout.opponent_inference", f"must be inprocess or serve, got {self.rollout.opponent_inference!r}")
        _nonneg("evaluator.count", self.evaluator.count)
        _positive("evaluator.games_per_pair", self.evaluator.games_per_pair)
        _unit("evaluator.exploitability_cpu_share", self.evaluator.exploitability_cpu_share, open_low=True)
        _unit("evaluator.games_cpu_share", self.evaluator.games_cpu_share, open_low=True)
        _nice("evaluator.nice", self.evaluator.nice)
        _nonneg("evaluator.probe_every_seconds", self.evaluator.probe_every_seconds)
        for name in ("probe_steps", "probe_eval_episodes", "probe_num_envs"):
            _positive(f"evaluator.{name}", getattr(self.evaluator, name))
        _nonneg("evaluator.probe_num_cpus", self.evaluator.probe_num_cpus)
        self._validate_anchors()
        if not (0 < self.serve.port < 65536):
            raise ConfigError("serve.port", f"must be a TCP port, got {self.serve.port}")
        if self.evaluator.exploitability is not None:
            _nonneg("evaluator.exploitability", self.evaluator.exploitability)
        if not isinstance(self.evaluator.publish_candidates, int) or self.evaluator.publish_candidates < 1:
            raise ConfigError("evaluator.publish_candidates",
                              f"must be a whole number >= 1, got {self.evaluator.publish_candidates!r}")
        if self.evaluator.publish not in PUBLISH:
            raise ConfigError("evaluator.publish", f"must be one of {', '.join(PUBLISH)}, got {self.evaluator.publish!r}")
        if self.evaluator.publish == "least_exploitable" and not (
                self.evaluator.exploitability is not None and self.evaluator.exploitability < self.evaluator.count):
            raise ConfigError("evaluator.publish", "least_exploitable is solved by the evaluator that measures "
                                                   "exploitability: set evaluator.exploitability to the index of one of "
                                                   f"the {self.evaluator.count} evaluators")
        for name in ("max_batch_size", "max_ongoing_requests", "play_sessions", "play_ttl_s"):
            _positive(f"serve.{name}", getattr(self.serve, name))
        _positive("snapshots.cache_size", self.snapshots.cache_size)
        _positive("snapshots.cache_mb", self.snapshots.cache_mb)
        _positive("snapshots.cache_idle_seconds", self.snapshots.cache_idle_seconds)
        _nonneg("serve.batch_wait_timeout_s", self.serve.batch_wait_timeout_s)
        _nonneg("serve.num_cpus", self.serve.num_cpus)
        _validate_placement("serve", self.serve.num_cpus, 0.0, self.serve.resources, "default")
        _positive("serve.num_replicas", self.serve.num_replicas)
        if self.serve.autoscaling is not None:
            _validate_autoscaling(self.serve.autoscaling)
        if self.serve.proxy_location not in SERVE_PROXY:
            raise ConfigError("serve.proxy_location", f"must be one of {', '.join(SERVE_PROXY)}, "
                                                      f"got {self.serve.proxy_location!r}")
        self.learner.validate()
        for section in ("rollout", "evaluator"):
            s = getattr(self, section)
            _validate_placement(section, s.num_cpus, s.num_gpus, s.resources, s.scheduling)
        if self.ray.storage_resource is not None and (
                not self.ray.storage_resource or self.ray.storage_resource in ("CPU", "GPU", "memory")):
            raise ConfigError("ray.storage_resource", f"must name a custom resource that the storage node "
                                                      f"declares, got {self.ray.storage_resource!r}")
        if self.run.max_minutes is not None:
            _positive("run.max_minutes", self.run.max_minutes)
        if self.run.max_env_steps is not None:
            _positive("run.max_env_steps", self.run.max_env_steps)
        _nonneg("run.seed", self.run.seed)
        if not self.run.storage:
            raise ConfigError("run.storage", "must not be empty")
        _positive("run.progress_every_seconds", self.run.progress_every_seconds)
        if self.ray.num_cpus is not None:
            _positive("ray.num_cpus", self.ray.num_cpus)
        port = self.ray.metrics_export_port
        if port is not None and (not 0 < port < 65536 or 10002 <= port <= 19999):
            raise ConfigError("ray.metrics_export_port", f"must be a TCP port outside Ray's worker ports "
                                                         f"10002-19999 (or null), got {port!r}")
        return self

    def _validate_anchors(self) -> None:
        """The anchors' syntax and ratings; what needs the game (mcts on a perfect-information game, a
        factory that imports) is checked by ``check_runnable`` (evaluation.anchors.check_anchor)."""
        from league.anchors import parse_anchor

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
        _positive("evaluator.anchor_every_seconds", self.evaluator.anchor_every_seconds)
        _positive("evaluator.anchor_games", self.evaluator.anchor_games)
        _nonneg("evaluator.anchor_num_cpus", self.evaluator.anchor_num_cpus)

    def role(self, agent_type) -> RoleConfig:
        return getattr(self.roles, getattr(agent_type, "value", agent_type))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _validate_autoscaling(a: dict) -> None:
    for name, value in a.items():
        if name not in AUTOSCALING_KEYS:
            raise ConfigError(f"serve.autoscaling.{name}", f"unknown key (known: {', '.join(AUTOSCALING_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"serve.autoscaling.{name}", f"must be a number, got {value!r}")
        if name.endswith("replicas") and not float(value).is_integer():
            raise ConfigError(f"serve.autoscaling.{name}", f"must be an integer, got {value!r}")
        (_nonneg if name in ("min_replicas", "upscale_delay_s", "downscale_delay_s") else _positive)(
            f"serve.autoscaling.{name}", value)
    lo, hi = a.get("min_replicas", 1), a.get("max_replicas")
    if hi is None:
        raise ConfigError("serve.autoscaling.max_replicas", "is required when serve.autoscaling is set")
    if lo > hi:
        raise ConfigError("serve.autoscaling.min_replicas", f"must be <= max_replicas ({hi}), got {lo}")


def _unit(key: str, value: float, open_low: bool = False) -> None:
    if not math.isfinite(value) or value > 1 or value < 0 or (open_low and value == 0):
        raise ConfigError(key, f"must be in {'(0' if open_low else '[0'}, 1], got {value}")


def _nice(key: str, value: int | None, null: str | None = None) -> None:
    """A process's nice value (actors.priority): an integer already (_coerce), 0 to 19; or None
    where ``null`` says what None means."""
    if value is None and null is not None:
        return
    if value is None or not 0 <= value <= 19:
        raise ConfigError(key, f"must be from 0 to 19{f' (or null: {null})' if null else ''}, got {value!r}")


def _positive(key: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be > 0, got {value}")


def _nonneg(key: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ConfigError(key, f"must be >= 0, got {value}")


# -- building dataclasses from plain data, with types checked -----------------

def from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, checking every key and type."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(prefix, f"must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            raise ConfigError(dotted, f"{_unknown(cls, key)} (known: {', '.join(sorted(names))})")
        kwargs[key] = _coerce(hints[key], value, dotted)
    return cls(**kwargs)


def _unknown(cls: type, key: str) -> str:
    """Why ``key`` is not one of ``cls``'s: unknown, or another role's key (a role's config holds only
    the keys its rules use)."""
    roles = typing.get_type_hints(RolesConfig)
    if cls not in roles.values():
        return "unknown key"
    owners = [name for name, tp in roles.items() if tp is not cls and key in {f.name for f in dataclasses.fields(tp)}]
    return f"a key of {' and '.join(owners)}, not of this role" if owners else "unknown key"


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is Any:
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"must be a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"must be a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(key, f"must be an integer, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(key, f"must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"must be a string, got {value!r}")
        return value
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(text, "an override must look like key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(key, "an override needs a dotted key before '='")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"cannot parse value {raw!r}: {exc}") from None
    return key.split("."), value


def _merge(base: dict, path: list[str], value: Any) -> None:
    node = base
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def load_config(path: str | os.PathLike | Mapping[str, Any] | None = None, overrides: Iterable[str] = ()) -> Config:
    """Defaults, then the YAML file (or a mapping of what such a file holds), then ``key=value``
    overrides; validated."""
    data: dict[str, Any] = {}
    if isinstance(path, Mapping):
        data = copy.deepcopy(dict(path))
    elif path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except OSError as exc:
            raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError("--config", f"{path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("--config", f"{path} must hold a mapping at top level")
        data = loaded or {}
    for text in overrides:
        keys, value = parse_override(text)
        _merge(data, keys, value)
    if isinstance(data.get("serve"), dict) and "lru_size" in data["serve"]:
        raise ConfigError("serve.lru_size", "renamed: use snapshots.cache_size (it sizes every snapshot cache)")
    return from_dict(Config, data).validate()
