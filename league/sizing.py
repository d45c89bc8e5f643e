"""How a league sizes itself to the cluster it runs on: the ``auto`` values of a config resolved
from the cluster's resources, and the plan that says what was decided and why.

    resources = Resources.from_ray(ray.cluster_resources())      # one node: at most this machine's cores
    cfg, plan = plan(cfg, resources)
    print(plan)                                                   # one line a decision

``plan`` is pure (no Ray, no torch): it returns a new, checked config whose ``auto`` values are
numbers and choices, and leaves the given config alone. Values a config gives are kept and
listed as ``(config)``. The rules budget the cluster's CPUs, in this order:

1. what runs whatever the size: the coordinator, the evaluators (each at its
   ``evaluator.games_cpu_share`` of a core, or ``SETTLED_EVALUATOR_CPUS`` where snapshots play
   greedily and each pair is two games played once), the anchor judge and the prober where they run, the
   opponents replicas where frozen opponents are served;
2. each learner process a core, and ``FEED_CPUS`` cores of rollout workers to keep it busy (a
   learner process is the bound: its workers wait on it past that, docs/results.md, "16 cores
   and a GPU"); a learner or a worker that asks Ray for more CPUs (``num_cpus``) costs those;
3. exploiters (``count: auto``) beside the main agents, in AlphaStar's proportion (one main
   exploiter and two league exploiters a main agent), while each gets such a share;
4. replicas of every learner (``learner.replicas: auto``) while each replica gets such a share,
   or one replica a GPU where there are at least two GPUs a role instance;
5. the cores left to rollout workers, split between the learner processes
   (``rollout.workers_per_learner: auto``, at least one each); each worker's vector
   (``rollout.envs_per_worker: auto``) its share of a learner batch, from 64 to 2048 games.

Frozen opponents (``rollout.opponent_inference: auto``) and the learners' own moves
(``rollout.policy_inference: auto``, not a search learner's) are served on a GPU where the cluster
has one (one batch across workers), and played in the worker's own process otherwise (on CPUs a
served call costs more than the worker's own pass: docs/results.md, "Serving"). Learners with
``learner.device: auto`` and ``learner.num_gpus: 0`` get a share of the GPUs, with the served
opponents, where the cluster has any. Served opponents on a GPU get their share as
``serve.num_gpus`` (each replica's Ray request: ``serve.opponents``) where the config leaves it
at 0; a share the config gives is kept, and the learners share what it leaves.

On a 2-core machine without a GPU these rules give one worker per learner, one replica, no
exploiters beside the main agent, opponents in process and a worker's whole batch as its vector
(at most 2048): the shipped configs' plans before ``auto`` (tests/test_sizing.py).
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from league.config import AUTO, Config

__all__ = ["Decision", "Plan", "Resources", "plan"]

COORDINATOR_CPUS = 0.5  # its share of a core with many workers reporting (docs/results.md, "Scaling: one coordinator")
LEARNER_CPUS = 1.0  # a learner process runs its update at a full core, on the GPU too (its Python drives it)
# an evaluator of greedy snapshots in a deterministic game plays a new pair's two games once and waits
# (actors.evaluator, settled_score): a small share, whatever its games_cpu_share
SETTLED_EVALUATOR_CPUS = 0.05
FEED_CPUS = 3.0  # cores of rollout workers that keep one learner process busy (docs/results.md, "16 cores and a GPU")
EXPLOITERS_PER_MAIN = ("main_exploiter", "league_exploiter", "league_exploiter")  # AlphaStar's proportion, in order
MIN_ENVS, MAX_ENVS = 64, 2048  # vectorised games overtake a plain loop; a served call's cost is amortised
                               # (docs/results.md, "Networks and kernels" and "Serving")


@dataclass(frozen=True)
class Resources:
    """What a cluster offers the league: logical CPUs and GPUs (Ray's ``CPU`` and ``GPU``) and nodes
    (shown in the plan; Ray places the actors across them)."""

    cpus: float
    gpus: float = 0.0
    nodes: int = 1

    @classmethod
    def from_ray(cls, resources: Mapping[str, float], cores: int | None = None) -> "Resources":
        """From ``ray.cluster_resources()``: its ``CPU``, ``GPU`` and one ``node:<ip>`` key a node.
        Ray's CPUs are logical: the local Ray the launcher starts declares several a core
        (``actors.runtime``), and a test's Ray what it likes. So on one node, which is the machine
        the launcher runs on (locally, or as a job's entrypoint on the head), the CPUs are at most
        its ``cores`` (by default ``os.cpu_count()``); a cluster of several nodes counts what its
        nodes declare (``ray start`` declares each node's cores)."""
        nodes = max(1, sum(1 for key in resources if key.startswith("node:") and key != "node:__internal_head__"))
        cpus = float(resources.get("CPU", 0.0))
        if nodes == 1:
            cpus = min(cpus, float(cores or os.cpu_count() or 1))
        return cls(cpus=cpus, gpus=float(resources.get("GPU", 0.0)), nodes=nodes)

    @classmethod
    def local(cls) -> "Resources":
        """This machine as a local Ray sees it by default: its cores, no GPU (a GPU counts once Ray reports it)."""
        return cls(cpus=float(os.cpu_count() or 1))

    def __str__(self) -> str:
        gpus = f"{self.gpus:g} GPU{'' if self.gpus == 1 else 's'}" if self.gpus else "no GPU"
        return f"{self.cpus:g} CPUs, {gpus}, {self.nodes} node{'' if self.nodes == 1 else 's'}"


@dataclass(frozen=True)
class Decision:
    """One setting of the plan: its dotted key, the value it comes to, what else that means
    (``note``: where served opponents run, the learners' GPU share) and why (``(config)`` where the
    config gave it). ``learner.device``'s value is the device a learner trains on, which ``auto``
    in the config comes to."""

    key: str
    value: Any
    why: str
    note: str = ""

    def __str__(self) -> str:
        return f"{self.key} = {self.value}{' ' + self.note if self.note else ''}  {self.why}"


@dataclass(frozen=True)
class Plan:
    """What ``plan`` decided for a cluster: one ``Decision`` a setting, in the order the rules take
    them; ``opponents_device`` is where served frozen opponents run (``cpu`` or ``cuda``; None
    when they are played in the workers' processes) and ``opponents_num_gpus`` the GPU share of
    each opponents replica; ``budget`` says how the CPUs were counted."""

    resources: Resources
    decisions: list[Decision] = field(default_factory=list)
    opponents_device: str | None = None
    opponents_num_gpus: float = 0.0
    budget: str = ""

    def lines(self) -> list[str]:
        """The plan as the launcher prints it: a heading, the CPU budget, then one line a decision."""
        return [f"nash-league: plan for {self.resources}: {self.budget}", *(f"  {d}" for d in self.decisions)]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def value(self, key: str) -> Any:
        """The value decided for dotted ``key``."""
        return next(d.value for d in self.decisions if d.key == key)


def _gpu_share(users: int, gpus: float) -> float:
    """Each of ``users`` processes' share of ``gpus`` GPUs, so that they pack: a whole GPU each
    while there are enough, else 1/k of one for k processes a GPU (rounded down to a hundredth)."""
    if users <= gpus:
        return 1.0
    per_gpu = math.ceil(users / max(1, math.floor(gpus)))
    return math.floor(100 / per_gpu) / 100


def _left_share(users: int, gpus: float) -> float:
    """Each of ``users`` processes' share of the ``gpus`` GPUs left to them (0 where none is): as
    ``_gpu_share`` where a whole GPU is left, else the fraction split between them."""
    if gpus >= 1:
        return _gpu_share(users, gpus)
    return max(0.0, math.floor(100 * gpus / max(1, users)) / 100)


def _opponents_replicas(cfg: Config, most: bool) -> int:
    """Opponents replicas: ``serve.num_replicas``, or the autoscaling's fewest (``most``: its most)."""
    scaling = cfg.serve.autoscaling
    if not scaling:
        return cfg.serve.num_replicas
    return int(scaling["max_replicas"] if most else scaling.get("min_replicas", 1))


def _fixed_cpus(cfg: Config, served: bool) -> tuple[float, str]:
    """CPUs of what runs whatever the league's size, and what they are."""
    ev = cfg.evaluator
    settled = ev.exact and cfg.policy.snapshot_play == "greedy"
    share = min(SETTLED_EVALUATOR_CPUS, ev.games_cpu_share) if settled else ev.games_cpu_share
    parts = [("coordinator", COORDINATOR_CPUS), (f"{ev.count} evaluator(s)", ev.count * share)]
    if cfg.anchors:
        parts.append(("anchor judge", ev.anchor_num_cpus))
    if ev.probe_every_seconds > 0:
        parts.append(("prober", ev.probe_num_cpus))
    if served:
        parts.append(("opponents replicas", _opponents_replicas(cfg, most=False) * cfg.serve.num_cpus))
    total = sum(cpus for _, cpus in parts)
    return total, " + ".join(f"{name} {cpus:g}" for name, cpus in parts if cpus)


def plan(cfg: Config, resources: Resources) -> tuple[Config, Plan]:
    """``cfg`` with its ``auto`` values resolved for ``resources`` (a new config, checked), and the
    plan: what was decided and why, one ``Decision`` a setting (module docstring: the rules)."""
    out = copy.deepcopy(cfg)
    decisions: list[Decision] = []
    gpus = resources.gpus
    rollout, learner = out.rollout, out.learner

    # where frozen opponents play: first, since served ones take CPUs (and a GPU share) of their own
    inference_why = "(config)"
    if rollout.opponent_inference == AUTO:
        rollout.opponent_inference = "serve" if gpus > 0 else "inprocess"
        inference_why = ("(auto: a GPU serves one batch across workers)" if gpus > 0 else
                         "(auto: no GPU; on CPUs a served call costs more than the worker's own pass)")
    # the learners' own moves: served where a GPU serves (not a search learner's leaves: served, they measured
    # far slower than in the worker, docs/results.md "16 cores and an H200")
    searched = [name for name, role in out.roles.items() if role.count != 0 and role.learner == "search"]
    policy_why = "(config)"
    if rollout.policy_inference == AUTO:
        rollout.policy_inference = "serve" if gpus > 0 and not searched else "inprocess"
        if gpus > 0 and not searched:
            policy_why = "(auto: the GPU plays the learners' moves too, one batch across workers)"
        elif searched:
            policy_why = (f"(auto: roles.{searched[0]} learns from search, whose leaves are evaluated in the worker: "
                          "served, each simulation waits a round trip)")
        else:
            policy_why = "(auto: no GPU; on CPUs the worker's own pass costs less than a served call)"
    served = rollout.served  # the deployment runs where either is served
    # the learners take a share of the GPUs only where the config leaves it to the plan
    share_gpus = learner.device == AUTO and learner.num_gpus == 0 and gpus > 0

    fixed, fixed_what = _fixed_cpus(out, served)
    budget = resources.cpus - fixed
    # a process costs the larger of what it uses and what Ray reserves for it, so that Ray can place them all
    learner_cpus, worker_cpus = max(LEARNER_CPUS, learner.num_cpus), max(1.0, rollout.num_cpus)
    share = learner_cpus + FEED_CPUS  # what keeps one learner process busy
    budget_text = (f"{fixed:g} CPUs for the {fixed_what} leave {max(0.0, budget):g}; a learner process is kept "
                   f"busy by {share:g} ({learner_cpus:g} its own, {FEED_CPUS:g} its workers')")
    per_instance = 1 if learner.replicas == AUTO else learner.replicas

    # exploiters beside the main agents, while each learner instance (its replicas) gets its share
    roles = out.roles
    mains = sum(role.count for _, role in roles.items() if type(role).main)
    auto_roles = [name for name, role in roles.items() if role.count == AUTO]
    counts = {name: (0 if role.count == AUTO else role.count) for name, role in roles.items()}
    for name in [n for _ in range(mains) for n in EXPLOITERS_PER_MAIN if n in auto_roles]:
        if (sum(counts.values()) + 1) * per_instance * share > budget:
            break
        counts[name] += 1
    instances = sum(counts.values())
    for name, role in roles.items():
        if name in auto_roles:
            role.count = counts[name]
            decisions.append(Decision(f"roles.{name}.count", role.count, (
                f"(auto: {instances} learner(s) of {per_instance} process(es) fit; at most "
                f"{EXPLOITERS_PER_MAIN.count(name)} a main agent)")))
        elif not type(role).main:
            decisions.append(Decision(f"roles.{name}.count", role.count, "(config)"))

    # replicas of every learner instance, while each replica gets its share (or one a GPU)
    grouped = [name for name, role in out.roles.items() if role.count != 0 and role.objective.grouped]
    if learner.replicas == AUTO and grouped:  # a shaper's state is one process's
        learner.replicas = 1
        decisions.append(Decision("learner.replicas", 1, f"(auto: roles.{grouped[0]} plays grouped objectives)"))
    elif learner.replicas == AUTO:
        by_cores = max(1, math.floor(budget / (max(1, instances) * share)))
        gpus_each = math.floor(gpus / max(1, instances)) if share_gpus else 0
        # a replica on its own GPU still needs its own core and a worker's: GPUs do not add cores
        most = max(1, math.floor(budget / (max(1, instances) * (learner_cpus + worker_cpus))))
        learner.replicas = min(max(by_cores, gpus_each), most)
        why = (f"(auto: {learner.replicas} process(es) of each of {instances} learner(s) fit" if by_cores > 1 else
               f"(auto: the CPUs feed no second process of each of {instances} learner(s)")
        why += f"; {gpus:g} GPU(s), one a replica)" if learner.replicas > by_cores else ")"
        decisions.append(Decision("learner.replicas", learner.replicas, why))
    else:
        decisions.append(Decision("learner.replicas", learner.replicas, "(config)"))
    processes = instances * learner.replicas

    # served opponents on the GPUs: the share the config gives (serve.num_gpus), or sharing them with
    # the learners, or in what the learners leave
    given = out.serve.num_gpus if served else 0.0
    opponents_replicas = _opponents_replicas(out, most=True) if served and (gpus > 0 or given > 0) else 0
    opponents_num_gpus = given
    if opponents_replicas and not share_gpus and not given:
        free = gpus - processes * learner.num_gpus
        opponents_num_gpus = max(0.0, min(1.0, math.floor(100 * free / opponents_replicas) / 100))
    opponents_on_gpu = bool(opponents_replicas) and (share_gpus or opponents_num_gpus > 0)
    # the learner's device: auto with no GPUs asked for takes a share of the cluster's
    if share_gpus and given:
        learner.num_gpus = _left_share(processes, gpus - opponents_replicas * given)
    elif share_gpus:
        learner.num_gpus = _gpu_share(processes + (opponents_replicas if opponents_on_gpu else 0), gpus)
        opponents_num_gpus = learner.num_gpus if opponents_on_gpu else 0.0
    if share_gpus and learner.num_gpus > 0:
        decisions.append(Decision("learner.device", "cuda", (
            f"(auto: {gpus:g} GPU(s) shared by {processes} learner process(es)"
            f"{' and the opponents' if opponents_on_gpu else ''})"), f"with learner.num_gpus = {learner.num_gpus:g}"))
    elif share_gpus:
        decisions.append(Decision("learner.device", "cpu", f"(auto: the opponents replicas' serve.num_gpus = "
                                                           f"{given:g} leave no GPU to the learners)"))
    elif learner.device == AUTO:
        decisions.append(Decision("learner.device", "cuda", f"(auto: learner.num_gpus = {learner.num_gpus:g} "
                                                            f"from the config)") if learner.num_gpus > 0 else
                         Decision("learner.device", "cpu", "(auto: no GPU in the cluster)"))
    else:
        decisions.append(Decision("learner.device", learner.device, "(config)"))

    # rollout workers: the cores left after the learner processes, split between them
    if rollout.workers_per_learner == AUTO:
        left = budget - processes * learner_cpus
        rollout.workers_per_learner = max(1, math.floor(left / (max(1, processes) * worker_cpus)))
        decisions.append(Decision("rollout.workers_per_learner", rollout.workers_per_learner, (
            f"(auto: {max(0.0, left):g} CPUs left to workers over {processes} learner process(es), "
            f"{worker_cpus:g} a worker, at least one each)")))
    else:
        decisions.append(Decision("rollout.workers_per_learner", rollout.workers_per_learner, "(config)"))
    if rollout.envs_per_worker == AUTO:
        worker_share = rollout.steps_per_batch // rollout.workers_per_learner
        rollout.envs_per_worker = min(MAX_ENVS, max(MIN_ENVS, worker_share))
        decisions.append(Decision("rollout.envs_per_worker", rollout.envs_per_worker, (
            f"(auto: the worker's share of a batch, {worker_share} decisions, within {MIN_ENVS}-{MAX_ENVS})")))
    else:
        decisions.append(Decision("rollout.envs_per_worker", rollout.envs_per_worker, "(config)"))

    opponents_device = ("cuda" if opponents_on_gpu else "cpu") if served else None
    if opponents_on_gpu and not given:
        out.serve.num_gpus = opponents_num_gpus  # what gives each replica its GPU share (serve.opponents)
    note = (f"on {opponents_device}" + (f" with serve.num_gpus = {opponents_num_gpus:g}"
                                        f"{' (config)' if given else ''}" if opponents_on_gpu else "")
            if served else "in the workers' processes")
    decisions.append(Decision("rollout.opponent_inference", rollout.opponent_inference, inference_why,
                              note if rollout.opponent_inference == "serve" else "in the workers' processes"))
    decisions.append(Decision("rollout.policy_inference", rollout.policy_inference, policy_why,
                              note if rollout.policy_inference == "serve" else "in the workers' processes"))
    return out.validate(), Plan(resources, decisions, opponents_device, opponents_num_gpus, budget_text)
