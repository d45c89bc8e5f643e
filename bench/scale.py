"""What a league's pace would be on another machine, from unit costs measured on this one, without Ray.

    python -m bench.scale [--config configs/connect_four_ppo.yaml] [--set KEY=VALUE ...]
        [--cores 16] [--gpus 1] [--nodes 1] [--workers N] [--replicas R]
        [--device cpu|cuda] [--learner-speedup K] [--seconds 10] [--updates 3]

Each actor kind's work is run in this one process, one torch thread (as the actors run), and timed
in CPU-seconds (``time.process_time``), so the figures are what the work costs a core, not how
long it waited for one. Other processes on the machine still add to them (shared caches, memory
bandwidth), never take from them, so the worker's and the learner's cost is the least of several
rounds (the mean is in the JSON line too):

- rollout worker, ``c_w`` CPU-s per env step: the worker's own play (``policies.lanes``, through
  ``bench.step_cost``'s setting): the config's game in one vector of ``rollout.envs_per_worker``
  environments, the learner's policy, frozen opponents in process from a pool of
  ``league.pool_max_size`` snapshots of the config's network (``bench.step_cost.synthetic_weights``,
  each drawn opponent ``rollout.episodes_per_opponent`` episodes in a row), and pickling the
  transitions and results it sends. Served opponents (``opponent_inference: serve``) are measured
  in process too: served, their forward passes move to the Serve replicas;
- the learner's decision share ``s``: the learner's decisions per env step in the same loop. Its
  lanes record only the learner's side, also against its own live weights in self-play (the other
  seat plays the same policy, its decisions are not trained on), so in a two-player game whose
  players alternate ``s`` is 1/2 whatever the config's self-play share; a team game counts each of
  the learner's agents;
- the steps per game: env steps per finished episode, in the same loop;
- learner, ``c_l`` CPU-s per trained decision: an update as ``bench.learner`` times it (``concat``,
  ``ppo_update`` on ``rollout.steps_per_batch`` decisions, ``publish``) plus unpickling the pieces
  workers send. With ``--device cuda`` the update is also timed on the GPU (wall clock, the GPU
  waited for), and the speed-up ``k`` is the CPU's time per decision over the GPU's;
- coordinator, ``c_r`` CPU-s per reported game: a ``league.league.League`` on a store, its pool
  seeded with ``league.pool_max_size`` agents, drawing matches from its plan and taking per-pair
  result batches of ``rollout.results_batch_size`` games, as ``bench.coordinator``'s in-process
  loop; per env step that is ``c_r`` over the steps per game;
- evaluator, ``F`` cores, a fixed cost: the configured shares, not measured: each sampling
  evaluator ``evaluator.games_cpu_share`` (``league.sizing.SETTLED_EVALUATOR_CPUS`` where snapshots
  play greedily: each pair is two games, played once), the exact evaluator that measures exploitability
  ``evaluator.exploitability_cpu_share`` (other exact evaluators idle between snapshots), the
  anchor judge ``evaluator.anchor_num_cpus`` (1 when 0, unbounded) when there are anchors, the
  prober ``evaluator.probe_num_cpus`` when it probes.

The model (``predict``): a machine of ``C`` = cores x nodes cores, ``N`` rollout worker processes,
``L`` learners (the config's roles) of ``R`` replicas each, each learner process on one thread,
``k`` = the learner's GPU speed-up (``--learner-speedup``, or measured with ``--device cuda``)
where the machine has GPUs and the plan puts the learners on one (else 1: a learner bound by its
process's CPU, as on 16 cores with a GPU learner, docs/results.md). Every process is one thread, so it uses at most one core. The pace in env steps/s
is the least of

- workers: ``N / c_w`` (every worker on a core of its own);
- learner: ``L R k / (s c_l)`` (every learner process on a core of its own);
- coordinator: ``steps_per_game / c_r`` (one process);
- cores: ``(C - F) / (c_w + s c_l / k + c_r / steps_per_game)`` (every core busy);

and that term names the bound; ``evaluator`` when ``F >= C`` (the evaluators' shares leave no core).
Not in the model: Ray's own processes and messages (an idle actor process costs about 6 ms of CPU a
second), the coordinator's Nash solves, the evaluators' results reaching the coordinator, the
replicas' gradient all-reduce, and a process waiting on another (a worker waiting on its learner
frees its core for others, which the cores term counts as free). Search learners are not modelled.

The machine's league is the config as the launcher would size it there: its ``auto`` values come
to what ``league.sizing.plan`` decides for ``--cores``, ``--gpus`` and ``--nodes`` (the plan is
printed), the unit costs are measured on that config (its ``rollout.envs_per_worker``, ...),
``--replicas R`` sets ``learner.replicas`` and ``--workers`` the rollout workers in all.

Prints the plan, the measured unit costs and the prediction with its bound as a table, then one
JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.coordinator import Report, seeded_league
from bench.learner import rollout_pieces
from bench.nets import positions
from bench.step_cost import LEARNER, Setting, synthetic_weights
from envs import make_game
from evaluation.exploitability import is_exact
from league.config import Config, ConfigError, load_config
from league.errors import ArgumentParser, fail
from league.league import learner_ids
from league.matchmaking import MatchSampler
from league.sizing import SETTLED_EVALUATOR_CPUS, Resources, plan
from league.store import LeagueStore
from policies.device import resolve_device
from policies.net import ActorCritic, PolicySpec, build_policy, policy_spec
from policies.ppo import make_optimizer, ppo_update
from policies.rollout import Rollout
from policies.snapshot import policy_to_bytes

ROOT = Path(__file__).resolve().parents[1]
BOUNDS = ("workers", "learner", "coordinator", "cores", "evaluator")
ROUNDS = 5  # the worker's play is timed in rounds; the least CPU a step of a round is its cost


@dataclass(frozen=True)
class UnitCosts:
    """What each actor kind's work costs, in CPU-seconds (see the module's doc)."""

    worker_cpu_per_step: float  # c_w
    learner_cpu_per_decision: float  # c_l, the learner on its CPU
    decision_share: float  # s: the learner's decisions per env step
    coordinator_cpu_per_game: float  # c_r
    steps_per_game: float
    fixed_cores: float  # F: the evaluators', the judge's and the prober's configured shares


@dataclass(frozen=True)
class Machine:
    """A machine shape and the league's processes on it."""

    cores: float  # per node
    gpus: int = 0  # per node
    nodes: int = 1
    workers: int = 1  # rollout worker processes in all
    learners: int = 1  # learners (role instances)
    replicas: int = 1  # learner processes per learner
    learner_speedup: float = 1.0  # k, applied where the machine has GPUs


def predict(units: UnitCosts, machine: Machine) -> dict:
    """The predicted env steps/s, the bound (the least term) and every term (``paces``)."""
    u, m = units, machine
    k = m.learner_speedup if m.gpus > 0 else 1.0
    cores = m.cores * m.nodes
    coordinator_per_step = u.coordinator_cpu_per_game / u.steps_per_game
    paces = {
        "workers": m.workers / u.worker_cpu_per_step,
        "learner": m.learners * m.replicas * k / (u.decision_share * u.learner_cpu_per_decision),
        "coordinator": 1.0 / coordinator_per_step,
        "cores": max(0.0, cores - u.fixed_cores) / (u.worker_cpu_per_step + u.decision_share
                                                     * u.learner_cpu_per_decision / k + coordinator_per_step),
    }
    bound = min(paces, key=paces.get)
    if cores <= u.fixed_cores:
        bound = "evaluator"
    pace = paces[bound] if bound != "evaluator" else 0.0
    # the cores each kind uses at that pace
    used = {"workers": pace * u.worker_cpu_per_step,
            "learner": pace * u.decision_share * u.learner_cpu_per_decision / k,
            "coordinator": pace * coordinator_per_step, "evaluator": min(u.fixed_cores, cores)}
    return {"env_steps_per_s": pace, "bound": bound, "paces": paces, "cores_used": used, "learner_speedup": k,
            "cores": cores}


def fixed_cores(cfg: Config) -> float:
    """The evaluators', anchor judge's and prober's configured CPU shares (see the module's doc)."""
    ev = cfg.evaluator
    exact = ev.exact and is_exact(make_game(cfg.game.name, 1, **cfg.game.params))
    cores = 0.0
    settled = ev.exact and cfg.policy.snapshot_play == "greedy"  # a pair is two games, played once
    for index in range(ev.count):
        if not exact:
            cores += min(SETTLED_EVALUATOR_CPUS, ev.games_cpu_share) if settled else ev.games_cpu_share
        elif ev.exploitability == index:
            cores += ev.exploitability_cpu_share
    if cfg.anchors:
        cores += ev.anchor_num_cpus or 1.0
    if ev.probe_every_seconds > 0:
        cores += ev.probe_num_cpus
    return cores


def measure_worker(cfg: Config, seconds: float, seed: int = 0) -> dict:
    """A worker's CPU-seconds per env step, the learner's decisions per env step and the env steps
    per finished game (see the module's doc)."""
    torch.manual_seed(seed)
    one = make_game(cfg.game.name, 1, **cfg.game.params)
    spec = policy_spec(cfg.policy, one.obs_size, one.num_actions, one.obs_shape, one.channels_last)
    live, frozen = synthetic_weights(cfg.league.pool_max_size)
    learner = build_policy(spec).eval()
    snapshots = {f"{LEARNER}-v{i + 1}": policy_to_bytes(build_policy(spec)) for i in range(len(frozen))}
    setting = Setting("league", cfg, learner, snapshots, live, frozen, cfg.rollout.episodes_per_opponent, seed)
    lanes = setting.lanes

    def play(span: float) -> tuple[int, int, int, float, float]:
        steps, games = lanes.counts["env_steps"], lanes.counts["episodes"]
        decisions, n = 0, 0
        cpu, wall = time.process_time(), time.perf_counter()
        while time.perf_counter() - wall < span:
            lanes.step()
            decisions += sum(len(lane.learner) for lane in lanes.lanes)  # the learner's decisions prepared
            n += 1
            if n % setting.every == 0:  # what a worker sends: its transitions, its games
                rollout, _ = lanes.take_groups("bench", None)
                batch = lanes.take_batch("bench", n, LEARNER)
                pickle.dumps((rollout, batch), protocol=5)
        return (lanes.counts["env_steps"] - steps, decisions, lanes.counts["episodes"] - games,
                time.process_time() - cpu, time.perf_counter() - wall)

    play(min(seconds, 2.0))  # warm: the snapshot cache filled, every episode under way
    rounds = [play(seconds / ROUNDS) for _ in range(ROUNDS)]
    steps, decisions, games, cpu, wall = (sum(r[i] for r in rounds) for i in range(5))
    return {"cpu_per_step": min(r[3] / r[0] for r in rounds if r[0]), "cpu_per_step_mean": cpu / steps,
            "decision_share": decisions / steps, "steps_per_game": steps / max(games, 1), "env_steps": steps,
            "games": games, "cpu_s": cpu, "wall_s": wall, "envs": cfg.rollout.envs_per_worker, "pool": len(frozen),
            "episodes_per_opponent": cfg.rollout.episodes_per_opponent}


def measure_learner(cfg: Config, device_name: str, updates: int) -> dict:
    """The learner's CPU-seconds (and wall seconds) per trained decision on ``device_name``: a
    warm-up update, then ``updates`` timed ones (see the module's doc)."""
    device = resolve_device(device_name, [])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    one = make_game(cfg.game.name, 1, **cfg.game.params)
    spec = policy_spec(cfg.policy, one.obs_size, one.num_actions, one.obs_shape, one.channels_last)
    n = cfg.rollout.steps_per_batch
    obs, mask = positions(cfg.game.name, n)
    pieces = rollout_pieces(obs, mask, max(1, cfg.rollout.workers_per_learner))
    sent = [pickle.dumps(p, protocol=5) for p in pieces]  # as the workers' pieces arrive
    decisions = sum(len(p) for p in pieces)
    torch.manual_seed(0)
    model = build_policy(spec).to(device)
    optimizer = make_optimizer(model, cfg.ppo)

    def update() -> None:
        data = Rollout.concat([pickle.loads(b) for b in sent])
        ppo_update(model, optimizer, data, cfg.ppo)
        sync()
        policy_to_bytes(model)

    update()  # warm-up
    cpus, walls = [], []
    for _ in range(updates):
        cpu, wall = time.process_time(), time.perf_counter()
        update()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {"device": str(device), "cpu_per_decision": min(cpus) / decisions,
            "cpu_per_decision_mean": sum(cpus) / (updates * decisions), "wall_per_decision": min(walls) / decisions,
            "decisions_per_update": decisions, "updates": updates, "net": spec.net}


def measure_coordinator(cfg: Config, seconds: float, matches: int = 512) -> dict:
    """The coordinator's CPU-seconds per reported game: a ``League`` on a store in a temporary
    folder, its pool seeded with ``league.pool_max_size`` agents (tiny policies: a report never
    reads weights), matches drawn from its plans and reported in per-pair batches."""
    pool = cfg.league.pool_max_size
    blob = policy_to_bytes(ActorCritic(PolicySpec(obs_size=11, num_actions=2, hidden=(8,))))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as root:
        cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, storage=root))
        with LeagueStore(root) as store:
            league = seeded_league(store, cfg, pool, blob)
            learners = list(league.learners)
            samplers = {lid: MatchSampler(lid, np.random.default_rng(i), cfg.league.match_plan_seconds)
                        for i, lid in enumerate(learners)}
            reports = {lid: Report() for lid in learners}
            games, seq, rounds = 0, 0, 0
            cpu, wall = time.process_time(), time.perf_counter()
            while time.perf_counter() - wall < seconds or not games:
                lid = learners[rounds % len(learners)]
                rounds += 1
                sampler, report = samplers[lid], reports[lid]
                if sampler.due(time.time()):
                    sampler.asked(time.time())
                    sampler.update(league.match_plan(lid, sampler.version))
                report.add(sampler.draw(matches), rng)
                if report.n >= cfg.rollout.results_batch_size:
                    seq += 1
                    games += report.n
                    league.report_results(report.take("bench", seq, lid))
            cpu = time.process_time() - cpu
    return {"cpu_per_game": cpu / games, "games": games, "pool": pool,
            "results_batch_size": cfg.rollout.results_batch_size}


def measure(cfg: Config, seconds: float, updates: int, device: str) -> dict:
    """Every unit cost of ``cfg`` on this machine, and the GPU's speed-up where ``device`` is one."""
    torch.set_num_threads(1)  # as every actor runs
    worker = measure_worker(cfg, seconds)
    learner = measure_learner(cfg, "cpu", updates)
    gpu = measure_learner(cfg, device, updates) if device != "cpu" else None
    coordinator = measure_coordinator(cfg, min(seconds, 5.0))
    units = UnitCosts(worker_cpu_per_step=worker["cpu_per_step"],
                      learner_cpu_per_decision=learner["cpu_per_decision"],
                      decision_share=worker["decision_share"],
                      coordinator_cpu_per_game=coordinator["cpu_per_game"],
                      steps_per_game=worker["steps_per_game"], fixed_cores=fixed_cores(cfg))
    speedup = None if gpu is None else learner["cpu_per_decision"] / gpu["wall_per_decision"]
    return {"units": units, "worker": worker, "learner": learner, "learner_gpu": gpu, "coordinator": coordinator,
            "measured_speedup": speedup}


def report(config: str, cfg: Config, measured: dict, machine: Machine, prediction: dict) -> dict:
    """Print the table; return the JSON line's object."""
    u = measured["units"]
    w, l, c = measured["worker"], measured["learner"], measured["coordinator"]
    print(f"{cfg.game.name}, {l['net']} ({config}); CPU-seconds on this machine ({torch.get_num_threads()} thread)")
    print(f"{'actor kind':<13s} {'unit cost':>14s}  per")
    print(f"{'worker':<13s} {u.worker_cpu_per_step * 1e6:11.2f} us  env step ({w['envs']} envs, pool {w['pool']}, "
          f"{w['episodes_per_opponent']} episodes per opponent; {w['env_steps']} steps in {w['wall_s']:.1f} s; "
          f"least of {ROUNDS} rounds, mean {w['cpu_per_step_mean'] * 1e6:.2f} us)")
    print(f"{'learner':<13s} {u.learner_cpu_per_decision * 1e6:11.2f} us  trained decision "
          f"({l['decisions_per_update']} an update; least of {l['updates']} updates, mean "
          f"{l['cpu_per_decision_mean'] * 1e6:.2f} us; wall {l['wall_per_decision'] * 1e6:.2f} us)")
    if measured["learner_gpu"] is not None:
        g = measured["learner_gpu"]
        print(f"{'learner ' + g['device']:<13s} {g['wall_per_decision'] * 1e6:11.2f} us  trained decision (wall; "
              f"cpu {g['cpu_per_decision'] * 1e6:.2f} us): speed-up {measured['measured_speedup']:.2f}")
    print(f"{'  share':<13s} {u.decision_share:14.3f}  learner decisions per env step")
    print(f"{'coordinator':<13s} {u.coordinator_cpu_per_game * 1e6:11.2f} us  reported game (pool {c['pool']}; "
          f"{u.steps_per_game:.1f} env steps a game: {u.coordinator_cpu_per_game / u.steps_per_game * 1e6:.3f} "
          "us an env step)")
    print(f"{'evaluator':<13s} {u.fixed_cores:11.2f} cores (configured shares, fixed)")
    print(f"machine: {machine.cores:g} cores x {machine.nodes} nodes, {machine.gpus} GPUs a node, {machine.workers} "
          f"workers, {machine.learners} learners x {machine.replicas} replicas, learner speed-up "
          f"{prediction['learner_speedup']:g}")
    print(f"{'bound term':<13s} {'env steps/s':>14s}")
    for name, pace in sorted(prediction["paces"].items(), key=lambda kv: kv[1]):
        print(f"{name:<13s} {pace:14.0f}" + ("  <- bound" if name == prediction["bound"] else ""))
    print(f"predicted: {prediction['env_steps_per_s']:.0f} env steps/s, bound by the {prediction['bound']}; cores used "
          + ", ".join(f"{k} {v:.2f}" for k, v in prediction["cores_used"].items()))
    rounded = lambda d: {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in d.items()}
    return {"bench": "scale", "config": config, "game": cfg.game.name, "units": rounded(dataclasses.asdict(u)),
            "worker": rounded(w), "learner": rounded(l),
            "learner_gpu": None if measured["learner_gpu"] is None else rounded(measured["learner_gpu"]),
            "coordinator": rounded(c), "measured_speedup": measured["measured_speedup"],
            "machine": dataclasses.asdict(machine),
            "prediction": {"env_steps_per_s": round(prediction["env_steps_per_s"], 1), "bound": prediction["bound"],
                           "paces": {k: round(v, 1) for k, v in prediction["paces"].items()},
                           "cores_used": {k: round(v, 3) for k, v in prediction["cores_used"].items()}}}


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "connect_four_ppo.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a dotted config override")
    parser.add_argument("--cores", type=float, default=16.0, help="cores a node (default 16)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs a node (default 0)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--workers", type=int, default=None,
                        help="rollout worker processes in all (default: rollout.workers_per_learner x learners "
                             "x replicas, as the config and its plan for the machine say)")
    parser.add_argument("--replicas", type=int, default=None,
                        help="learner processes per learner (learner groups): learner.replicas=R")
    parser.add_argument("--device", default="cpu", help="also time the learner on this device (cuda, cuda:N): "
                                                        "its speed-up over the CPU is k")
    parser.add_argument("--learner-speedup", type=float, default=None,
                        help="k, the learner's speed-up on a GPU (default: measured with --device cuda, else 1)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds the worker's play is timed")
    parser.add_argument("--updates", type=int, default=3, help="learner updates timed")
    args = parser.parse_args(argv)
    if min(args.cores, args.nodes, args.seconds, args.updates) <= 0 or args.gpus < 0 or any(
            v is not None and v <= 0 for v in (args.workers, args.replicas, args.learner_speedup)):
        parser.error("--cores, --nodes, --replicas, --seconds, --updates, --workers and --learner-speedup "
                     "must be > 0, --gpus >= 0")
    overrides = args.set + ([f"learner.replicas={args.replicas}"] if args.replicas else [])
    resources = Resources(cpus=args.cores * args.nodes, gpus=float(args.gpus * args.nodes), nodes=args.nodes)
    try:
        # the config's auto values come to what the launcher would decide on that machine
        cfg, sized = plan(load_config(args.config, overrides), resources)
        if any(cfg.role(r).learner != "ppo" for r in set(learner_ids(cfg).values())):
            return fail("bench.scale", f"{args.config}: search learners are not modelled (PPO only)")
        if args.device != "cpu":
            resolve_device(args.device, [])
    except (ConfigError, ValueError) as exc:
        return fail("bench.scale", exc)
    learners = len(learner_ids(cfg))
    measured = measure(cfg, args.seconds, args.updates, args.device)
    on_gpu = str(sized.value("learner.device")).startswith("cuda")
    speedup = (args.learner_speedup or measured["measured_speedup"] or 1.0) if on_gpu else 1.0
    workers = args.workers or cfg.rollout.workers_per_learner * learners * cfg.learner.replicas
    machine = Machine(cores=args.cores, gpus=args.gpus, nodes=args.nodes, workers=workers, learners=learners,
                      replicas=cfg.learner.replicas, learner_speedup=speedup)
    prediction = predict(measured["units"], machine)
    print("\n".join(sized.lines()))
    out = report(args.config, cfg, measured, machine, prediction)
    out["plan"] = {d.key: d.value for d in sized.decisions}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
