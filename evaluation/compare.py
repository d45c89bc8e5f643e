"""League vs self-play at equal wall-clock time, on several games and seeds.

    python -m evaluation.compare --game kuhn_poker|leduc_poker|connect_four|all
        [--game ...] [--minutes 10] [--seeds 3] [--probe-steps 600000] [--storage DIR]

For each game, both sides start from the same shipped config, ``configs/<game>.yaml``:

- **league**: the config as shipped, with its roles;
- **self-play**: the same config with only the roles and what is published
  changed (``SELFPLAY_OVERRIDES``: the main role samples ``self``, every other
  role's count is 0, ``evaluator.publish=nash``), so learner
  settings (``ppo``, ``policy``, ``rollout``), the evaluator and the main agent's
  snapshot cadence are the same; it publishes the meta-game Nash over its own
  snapshots (the league side of ``configs/leduc_poker.yaml`` publishes the least
  exploitable mixture of its snapshots instead).

Each run goes through the real launcher (``python -m actors.launch``) in a
fresh storage folder for ``--minutes``, the sides alternating with the same
seeds (league seed 1, self-play seed 1, league seed 2, ...). After each run the
published Nash mixture is measured in this process (no Ray):

- games that support exact evaluation (Kuhn, Leduc): the exact NashConv
  (``evaluation.exploitability``);
- the others (Connect Four): the approximate exploitability, the return of a
  PPO best response trained against the mixture for ``--probe-steps``
  decisions (``evaluation.best_response``; the same budget and probe seed for
  both sides), plus the head-to-head score of the two mixtures of each seed:
  every member of the league's mixture plays whole games against the
  self-play mixture (one member drawn per game), seats alternated, episodes
  allocated by Nash weight; the league's score is in [0, 1] (0.5: even).

Both sides also report their env steps/s (the store's env-step counter over the
run's seconds, start-up included) and, where the game has anchors (``--anchors``;
by default ``mcts:100,mcts:1000`` on perfect-information OpenSpiel games, else the
config's ``anchors``), each
published mixture's score against them (``evaluation.anchors``: seats alternating,
one member drawn per game, ``--anchor-games`` games per anchor). With ``--search
SIMULATIONS`` (or a config whose ``search`` section is on) each mixture is scored
against the anchors a second time with its members playing PUCT search guided by
their networks (``evaluation.search``, docs/search.md), into ``search.anchors``: what
the league learned shows in ``anchors``, what it plays like with search beside it.
The anchors are scored in ``--jobs`` processes at once (default: the machine's
cores; no league runs while they play), each anchor with the same games and seed as
in one process.

Progress goes to stderr (the launcher's output too); stdout gets one JSON line
per game, printed when that game is done::

    {"bench": "league_vs_selfplay", "game": ..., "minutes": ..., "seeds": [...],
     "measure": "nash_conv" | "approx_exploitability",
     "league": {"median", "range", "values", "support", "run_seconds", "measure_seconds", ...},
     "selfplay": {...same...},
     "head_to_head": {"score", "ci95", "median", "range", "values", ...},  # non-exact games only
     "anchors": {"mcts:100": {"league": {"median", "values", ...}, "selfplay": {...}}, ...},
     "search": {"simulations", ..., "anchors": {...as anchors...}}  # with search only
    }

with ``env_steps_per_s`` and ``trained_agent_steps_per_s`` (agent decisions the learners trained
on; median and values) in each side's record.

With ``--storage DIR`` the stores are kept in ``DIR/GAME/SIDE-seedN``, each with the run's
record beside it (``SIDE-seedN.run.json``: its seconds, minutes and the config it played by,
``played_config``). ``--selfplay-from DIR`` takes the self-play side from such kept stores instead
of running it again (the league side alone runs, half the time), where the kept runs played by the
config this bench's self-play would (a ``--set`` of the main agent's mix, which self-play never
reads, is the same run; ``ppo.lr`` is not): the measures are the same, but self-play's env steps/s
are then of a run at another time, not side by side (``selfplay_from`` in the JSON says so).
``--league-from DIR`` does the same for the league side; with both, nothing runs and the bench
measures kept runs alone: runs made on another machine (a GPU machine lent for minutes, say) are
measured where CPU time is cheap, with the same seeds and budgets as there. A kept store
without its record (kept before records were written) takes its seconds from the store itself,
the coordinator's start to its last write.

Lower is better for the measure. Run it alone under the Ray lock; a real table
(three games, 3 seeds, 10-30 minutes each) takes hours. Ctrl-C or SIGTERM stops the
running launcher the way it stops itself (its results flushed) before the bench exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyspiel
import torch

from envs import NO_ACTION, game_info, is_matrix_game, make_game
from envs.openspiel import load_two_player_zero_sum
from evaluation.anchors import parse_anchor, protocol_envs, score_against
from evaluation.best_response import ProbeConfig, evaluate, probe
from evaluation.exploitability import exact_nash_conv
from evaluation.stored_run import StoredRun, load_nash_mixture, load_subject
from evaluation.search import SearchSpec, check_searchable
from league.config import ROLE_CONFIGS, ConfigError, load_config
from league.errors import ArgumentParser, UsageError, fail
from policies.rollout import EpisodeMixture

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
ALL_GAMES = ("kuhn_poker", "leduc_poker", "connect_four")
SIDES = ("league", "selfplay")
# Only the roles differ: the self-play side is the shipped config's main agent alone, playing itself.
MAIN = next(name for name, c in ROLE_CONFIGS.items() if c.main)
SELFPLAY_OVERRIDES = (f"roles.{MAIN}.sampling=self", *(f"roles.{name}.count=0" for name in ROLE_CONFIGS if name != MAIN),
                      "evaluator.publish=nash")
BENCH_KEYS = ("run.storage", "run.seed", "run.max_minutes")  # the bench sets these per run
Z95 = 1.959964


def say(text: str) -> None:
    print(f"league_vs_selfplay: {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# Pure helpers (tests/test_bench_league_vs_selfplay.py)
# ----------------------------------------------------------------------------
def config_path(game: str) -> Path:
    return CONFIGS / f"{game}.yaml"


def parse_games(values: Sequence[str] | None) -> list[str]:
    """The games of repeated ``--game`` values, ``all`` meaning the three of ALL_GAMES;
    duplicates dropped, order kept. A game needs a shipped ``configs/<game>.yaml``."""
    games: list[str] = []
    for value in values or ["kuhn_poker"]:
        for game in ALL_GAMES if value == "all" else [value]:
            if not config_path(game).is_file():
                shipped = sorted(p.stem for p in CONFIGS.glob("*.yaml"))
                raise ValueError(f"--game {game}: no configs/{game}.yaml (shipped: {', '.join(shipped)}; or all)")
            if game not in games:
                games.append(game)
    return games


def check_extra_overrides(extra: Sequence[str]) -> None:
    """``--set`` overrides apply to both sides; the bench owns storage, seed and duration."""
    for text in extra:
        key = text.split("=", 1)[0].strip()
        if "=" not in text or not key:
            raise ValueError(f"--set {text!r}: expected key=value")
        if key in BENCH_KEYS:
            raise ValueError(f"--set {key}: the bench sets {', '.join(BENCH_KEYS)} itself")


def run_overrides(side: str, *, minutes: float, storage: str | os.PathLike, seed: int,
                  extra: Sequence[str] = ()) -> list[str]:
    """The launcher's dotted overrides for one run: the shared ones (``extra``), the
    side's roles (self-play only), then the run's own budget, storage and seed."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    roles = list(SELFPLAY_OVERRIDES) if side == "selfplay" else []
    minutes_text = f"{minutes:.6f}".rstrip("0").rstrip(".")  # YAML reads "1e-05" as a string
    return [*extra, *roles, f"run.max_minutes={minutes_text}", f"run.storage={storage}", f"run.seed={seed}",
            "run.progress_every_seconds=30"]


def run_order(seeds: Sequence[int]) -> list[tuple[int, str]]:
    """(seed, side) in the order the runs go: the sides alternate, seed by seed, so a slow drift
    of the machine's speed falls on both, and which side goes first alternates with the seed
    (the league on odd seeds, self-play on even ones), so whatever the first run of a pair meets
    (what the run before left running, a cold cache) falls on both sides too. By the seed's own
    parity, so separate invocations (``--first-seed``) keep the same order."""
    return [(seed, side) for seed in seeds for side in (SIDES if seed % 2 else SIDES[::-1])]


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, [min, max] and the values themselves (in seed order)."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("no values to summarise")
    return {"median": statistics.median(v), "range": [min(v), max(v)], "values": v}


def allocate_episodes(weights: Sequence[float], total: int, minimum: int) -> list[int]:
    """Episodes per mixture member: proportional to its weight (largest remainders),
    at least ``minimum`` each, so every member of the support is measured."""
    w = [float(x) for x in weights]
    if not w or any(x < 0 for x in w) or not sum(w) > 0:
        raise ValueError(f"need non-negative weights with a positive sum, got {w}")
    if total < 1 or minimum < 1:
        raise ValueError(f"total and minimum must be >= 1, got {total}, {minimum}")
    share = [total * x / sum(w) for x in w]
    counts = [math.floor(s) for s in share]
    for i in sorted(range(len(w)), key=lambda i: counts[i] - share[i])[: total - sum(counts)]:
        counts[i] += 1
    return [max(minimum, c) for c in counts]


def stratified_mean_ci(samples: Sequence[Sequence[float]], weights: Sequence[float]) -> tuple[float, list[float]]:
    """Mean of a mixture measured stratum by stratum: ``sum_i w_i mean_i`` (weights
    normalised), with the normal-approximation 95% interval from
    ``var = sum_i w_i^2 s_i^2 / n_i``. A stratum needs at least two samples."""
    if len(samples) != len(weights) or not samples:
        raise ValueError(f"need one sample list per weight, got {len(samples)} and {len(weights)}")
    total = float(sum(weights))
    if any(w < 0 for w in weights) or not total > 0:
        raise ValueError(f"need non-negative weights with a positive sum, got {list(weights)}")
    mean = var = 0.0
    for s, w in zip(samples, weights):
        if len(s) < 2:
            raise ValueError(f"every stratum needs at least 2 samples, got {len(s)}")
        p = w / total
        mean += p * statistics.fmean(s)
        var += p * p * statistics.variance(s) / len(s)
    half = Z95 * math.sqrt(var)
    return mean, [mean - half, mean + half]


def mean_of_estimates(estimates: Sequence[tuple[float, Sequence[float]]]) -> tuple[float, list[float]]:
    """Mean of independent estimates, each with a symmetric 95% interval: the interval of
    the mean is their half-widths added in quadrature over K (sampling noise of the
    games played, not the spread between seeds, which ``summary`` reports)."""
    if not estimates:
        raise ValueError("no estimates")
    k = len(estimates)
    mean = sum(m for m, _ in estimates) / k
    half = math.sqrt(sum(((hi - lo) / 2) ** 2 for _, (lo, hi) in estimates)) / k
    return mean, [mean - half, mean + half]


def validate_args(args: argparse.Namespace) -> None:
    """Raise ValueError naming the option, before anything runs."""
    if not (math.isfinite(args.minutes) and args.minutes > 0):
        raise ValueError(f"--minutes must be > 0, got {args.minutes}")
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.first_seed < 0:
        raise ValueError(f"--first-seed must be >= 0, got {args.first_seed}")
    if args.anchors is not None:
        args.anchors = [a.strip() for a in args.anchors.split(",") if a.strip()]
        for a in args.anchors:
            try:
                parse_anchor(a)
            except ValueError as exc:
                raise ValueError(f"--anchors: {exc}") from None
    for name in ("probe_steps", "probe_eval_episodes", "h2h_episodes", "anchor_games", "jobs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.search < 0:
        raise ValueError(f"--search must be >= 0, got {args.search}")
    if not (0.0 <= args.rollout_weight <= 1.0):
        raise ValueError(f"--rollout-weight must be in [0, 1], got {args.rollout_weight}")
    check_extra_overrides(args.set)
    for side in SIDES:
        folder = kept_option(args, side)
        if folder is not None and not Path(folder).is_dir():
            raise ValueError(f"--{side}-from {folder}: no such folder")


# ----------------------------------------------------------------------------
# Runs and measurements
# ----------------------------------------------------------------------------
def check_configs(game: str, extra: Sequence[str]) -> tuple[str, dict, bool]:
    """Load both sides' configs as the launcher will (a bad value stops the bench before
    any run, naming the key); (game name, game params, exact evaluation supported)."""
    cfgs = {side: load_config(config_path(game), run_overrides(side, minutes=1, storage="unused", seed=0, extra=extra))
            for side in SIDES}
    cfg = cfgs["selfplay"]
    if getattr(cfg.roles, MAIN).count < 1:
        raise ValueError(f"configs/{game}.yaml: self-play needs roles.{MAIN}.count >= 1")
    if cfgs["league"] == cfg:
        raise ValueError(f"configs/{game}.yaml already is self-play (no exploiters, the main agent plays itself, the meta-game Nash "
                         "published): "
                         "nothing to compare; give the league side roles with --set, e.g. "
                         "--set roles.ROLE.count=1 for an exploiter role (the self-play side keeps none)")
    info = game_info(cfg.game.name, **cfg.game.kwargs)
    return cfg.game.name, dict(cfg.game.kwargs), bool(info.supports_exact)


def wait_or_stop(proc: subprocess.Popen, grace_s: float = 120.0) -> int:
    """``proc``'s exit status. If this process is interrupted while it waits (Ctrl-C, or SIGTERM
    under ``main``), ``proc`` gets SIGTERM, the launcher's signal to flush its results and stop,
    and ``grace_s`` seconds before SIGKILL; then the interruption goes on. No run outlives the bench."""
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def launch(game: str, overrides: list[str]) -> float:
    """One league run through the real launcher; its output goes to our stderr. Seconds taken."""
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    cmd = [sys.executable, "-m", "actors.launch", "--config", str(config_path(game)), *overrides]
    t0 = time.perf_counter()
    code = wait_or_stop(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sys.stderr, stderr=sys.stderr))
    if code != 0:
        raise RuntimeError(f"the launcher exited with status {code}: {' '.join(cmd[2:])}")
    return time.perf_counter() - t0


def measure(game: str, params: dict, exact: bool, storage: Path, probe_steps: int, probe_eval_episodes: int,
            seed: int) -> dict:
    """The quality of the league's published Nash mixture in ``storage``."""
    try:
        ids, models, weights = load_nash_mixture(storage)
    except ValueError as exc:  # no snapshot yet, so nothing published: the budget is too small
        raise RuntimeError(f"{exc}: no snapshot within the run's minutes; give more --minutes, or snapshot "
                           "sooner on both sides (--set roles.<role>.snapshot_every_steps=N)") from None
    out: dict[str, Any] = {"support": len(ids)}
    if exact:
        out["value"] = exact_nash_conv(make_game(game, 1, **params), models, weights)["nash_conv"]
    else:
        # a team game holds every agent's decisions of a running episode: fewer environments
        envs = ProbeConfig().num_envs if params.get("teams") is None else protocol_envs(game, params, 64)
        result = probe(game, models, weights, ProbeConfig(steps=probe_steps, eval_episodes=probe_eval_episodes,
                                                           num_envs=envs, seed=seed), params)
        out.update(value=result["br_return"], ci95=result["ci95"])
    return out


def stored_rates(storage: Path, run_seconds: float) -> dict[str, float]:
    """Over the run's wall-clock seconds, start-up included: its env steps (the store's counter),
    and the agent decisions its learners trained on (their stored steps: in a team game one per
    acting agent of the learner's side)."""
    seconds = max(run_seconds, 1e-9)
    with StoredRun(storage) as run:
        return {"env_steps_per_s": float(run.store.counters().get("env_steps", 0.0)) / seconds,
                "trained_agent_steps_per_s": sum(float(r["step"]) for r in run.store.learners()) / seconds}


RUN_RECORD = ".run.json"
# a main agent that plays only itself reads none of its opponent mix
SELF_PLAY_KEYS = ("count", "sampling", "snapshot_every_steps", "objective")


def played_config(game: str, side: str, extra: Sequence[str]) -> dict:
    """What a side's run plays by: its config without the bench's per-run keys, the keys a main
    agent that plays only itself never reads, and the settings of roles it has none of. Two
    self-play runs with equal ``played_config`` train alike, whatever ``--set`` changed the
    league side's mix."""
    cfg = dataclasses.asdict(load_config(config_path(game), run_overrides(side, minutes=1, storage="unused", seed=0,
                                                                           extra=extra)))
    cfg.pop("run")
    for name, role in cfg["roles"].items():
        if role["count"] == 0:
            cfg["roles"][name] = {"count": 0}
        elif name == MAIN and role["sampling"] == "self":
            cfg["roles"][name] = {k: role[k] for k in SELF_PLAY_KEYS}
    return json.loads(json.dumps(cfg, sort_keys=True, default=str))


def write_run_record(storage: Path, run_seconds: float, minutes: float, config: dict) -> None:
    """Beside a kept store: what ``kept_run`` reads back when a later bench takes it as its self-play side."""
    record = {"run_seconds": run_seconds, "minutes": minutes, "config": config}
    storage.with_name(storage.name + RUN_RECORD).write_text(json.dumps(record, sort_keys=True) + "\n")


def kept_run(storage: Path, minutes: float, config: dict, option: str = "--selfplay-from") -> float:
    """The wall-clock seconds of the kept run in ``storage`` (``option``: ``--SIDE-from``). Raises
    ValueError where it is missing, or its record says it ran for other minutes or by another
    ``played_config`` (naming the first key that differs); a store without a record gives the span
    of its own writes, the coordinator's first start to its last event, measurement or rating."""
    record_path = storage.with_name(storage.name + RUN_RECORD)
    recorded = record_path.exists()
    with StoredRun(storage, option=option) as run:  # opened either way: a record without its store is refused
        starts, last = ([], None) if recorded else (run.store.events("coordinator_start"), run.store.last_write_time())
    if recorded:
        try:
            record = json.loads(record_path.read_text())
            kept_minutes, kept_config, seconds = float(record["minutes"]), dict(record["config"]), float(record["run_seconds"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{option}: {record_path} is not a run record ({exc!r})") from None
        if kept_minutes != float(minutes):
            raise ValueError(f"{option}: {storage} ran {kept_minutes:g} min, this bench {minutes:g}")
        differs = first_difference(kept_config, config)
        if differs:
            raise ValueError(f"{option}: {storage} ran with {differs}")
        return seconds
    if not starts or last is None:
        raise ValueError(f"{option}: {storage} holds no run")
    say(f"{storage}: no {RUN_RECORD} record (its config unchecked), its seconds taken from the store's writes")
    return last - starts[0]["time"]


def kept_option(args: argparse.Namespace, side: str) -> str | None:
    """The folder ``--SIDE-from`` names, or None."""
    return getattr(args, f"{side}_from")


def kept_stores(game: str, args: argparse.Namespace, side: str) -> dict[int, tuple[Path, float]]:
    """``--SIDE-from``: each seed's kept store of ``side`` and its run's seconds (``kept_run``;
    ValueError before any run where one is missing or played by another config); {} without it."""
    if kept_option(args, side) is None:
        return {}
    config = played_config(game, side, args.set)
    stores = {seed: kept_folder(args, game, side) / f"{side}-seed{seed}"
              for seed in range(args.first_seed, args.first_seed + args.seeds)}
    return {seed: (store, kept_run(store, args.minutes, config, f"--{side}-from")) for seed, store in stores.items()}


def kept_folder(args: argparse.Namespace, game: str, side: str) -> Path:
    """Where ``--SIDE-from`` keeps ``game``'s stores of ``side``."""
    return Path(kept_option(args, side)).resolve() / game


def first_difference(kept: Any, now: Any, key: str = "") -> str | None:
    """``KEY = KEPT, this bench's NOW`` for the first dotted key whose values differ, else None."""
    if isinstance(kept, dict) and isinstance(now, dict):
        for k in sorted(set(kept) | set(now)):
            found = first_difference(kept.get(k), now.get(k), f"{key}.{k}" if key else k)
            if found:
                return found
        return None
    return None if kept == now else f"{key} = {kept!r}, this bench's {now!r}"


def random_stepping(game: str, params: dict, num_envs: int, seconds: float = 5.0, seed: int = 0) -> dict:
    """Uniformly random actions through the game's team view (the path the league plays on), on
    ``num_envs`` environments (the config's ``rollout.envs_per_worker``), for ``seconds``: env steps
    per second and agent steps (live agents' actions, both sides) per second and per env step."""
    g = make_game(game, num_envs, seed=seed, **params)
    rng = np.random.default_rng(seed)
    env_steps = agent_steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        actions = np.full((g.num_envs, 2, g.team_size), NO_ACTION, dtype=np.int64)
        for side in (0, 1):
            b = g.observe_side(side)
            actions[b.env, side, b.agent] = (rng.random(b.mask.shape) * b.mask).argmax(axis=1)
            agent_steps += len(b.env)
        g.step_team(actions)
        env_steps += g.num_envs
    elapsed = time.perf_counter() - start
    return {"env_steps_per_s": round(env_steps / elapsed, 1), "agent_steps_per_s": round(agent_steps / elapsed, 1),
            "agents_per_env_step": round(agent_steps / max(env_steps, 1), 3), "num_envs": num_envs}


def default_anchors(game: str, params: dict) -> list[str]:
    """MCTS at 100 and 1,000 simulations on perfect-information OpenSpiel games, else none."""
    if is_matrix_game(game) or ":" in game:
        return []
    info = load_two_player_zero_sum(game, params or None).get_type().information
    return ["mcts:100", "mcts:1000"] if info == pyspiel.GameType.Information.PERFECT_INFORMATION else []


def _scores(game: str, params: dict, storage: Path, tasks: Sequence[tuple[str, object]], games: int,
            seed: int) -> list[float]:
    """The published mixture in ``storage``, loaded once, scored against each ``(anchor, search)``."""
    _, models, weights = load_nash_mixture(storage)
    return [score_against(game, params, models, weights, a, games, seed, spec)["score"] for a, spec in tasks]


def _anchor_score(game: str, params: dict, storage: Path, anchor: str, games: int, seed: int, search) -> float:
    """One anchor's score: a worker process's job in ``anchor_scores(jobs=N)``, on one thread."""
    torch.set_num_threads(1)
    return _scores(game, params, storage, [(anchor, search)], games, seed)[0]


def anchor_scores(game: str, params: dict, storage: Path, anchors: Sequence[str], games: int, seed: int,
                  search=None, jobs: int = 1) -> tuple[dict, dict]:
    """The published mixture's score against each anchor (``evaluation.anchors``), and with ``search``
    (a ``evaluation.search.SearchSpec``) its score when its members search their moves ({} without).
    With ``jobs`` above 1 the anchors are scored in that many processes at once, searched ones first
    (the slowest); each anchor's games and seed are the same as in one process, so are its scores."""
    tasks = [(a, spec) for spec in ((search,) if search is not None else ()) + (None,) for a in anchors]
    if jobs <= 1 or len(tasks) <= 1:  # one process: the mixture is loaded once
        done = {(a, spec is None): score for (a, spec), score in zip(tasks, _scores(game, params, storage, tasks,
                                                                                     games, seed))}
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {(a, spec is None): pool.submit(_anchor_score, game, params, storage, a, games, seed, spec)
                       for a, spec in tasks}
            done = {key: f.result() for key, f in futures.items()}
    plain = {a: done[a, True] for a in anchors}
    return plain, ({a: done[a, False] for a in anchors} if search is not None else {})


def search_spec(game: str, name: str, params: dict, args: argparse.Namespace):
    """The search both mixtures are also scored with: ``--search`` if given (ValueError where the
    game cannot be searched), else the config's ``search`` section where it is on, else None."""
    if args.search:
        try:
            check_searchable(load_two_player_zero_sum(name, params or None))
        except Exception as exc:  # not an OpenSpiel game at all, or not one search can play
            raise ValueError(f"--search: {str(exc).splitlines()[0]}") from None
        return SearchSpec(simulations=args.search, rollout_weight=args.rollout_weight)
    cfg = load_config(config_path(game), list(args.set)).search
    return cfg if cfg.simulations else None


def head_to_head(game: str, params: dict, league_storage: Path, selfplay_storage: Path, episodes: int,
                 seed: int, num_envs: int = 256, agent: str | None = None) -> dict:
    """The league mixture's mean score in [0, 1] against the self-play mixture: each league
    member plays whole games (seats alternated) against the self-play mixture, which draws
    one member per game; members' episodes by Nash weight, weighted back by Nash weight.
    ``agent``: the snapshot of that id in each store plays instead of its mixture (two runs'
    main agents after the same number of decisions trained on, say)."""
    _, league_models, league_w = load_subject(league_storage, agent)
    _, selfplay_models, selfplay_w = load_subject(selfplay_storage, agent)
    rng = np.random.default_rng(seed)
    if params.get("teams") is not None:  # a team game holds every agent's decisions of a running game
        num_envs = protocol_envs(game, params, num_envs)
    g = make_game(game, num_envs, seed=seed, **params)
    opponent = EpisodeMixture(selfplay_models, selfplay_w, rng)
    counts = allocate_episodes(league_w, episodes, minimum=num_envs)
    scores = []
    for model, n in zip(league_models, counts):  # the game's own score: a team game's 1 / 0.5 / 0
        scores.append(evaluate(g, model, opponent, n, rng, greedy=False, seats="alternate",
                               value="game_score").tolist())
    mean, ci = stratified_mean_ci(scores, league_w)
    return {"score": mean, "ci95": ci, "episodes": sum(len(s) for s in scores)}


def bench_game(game: str, args: argparse.Namespace, root: Path, search=None,
               kept: dict[str, dict[int, tuple[Path, float]]] | None = None) -> dict:
    """Both sides' runs and measures for one game; ``search`` (``search_spec``) scores the mixtures
    with search too; ``kept`` (a side's ``kept_stores``) gives that side's stores instead of runs."""
    kept = kept or {}
    name, params, exact = check_configs(game, args.set)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    t_start = time.perf_counter()
    if args.anchors is not None:
        anchors = args.anchors
    else:  # MCTS on perfect-information OpenSpiel games, else the config's own (battle: uniform, scripted)
        anchors = default_anchors(name, params) or list(load_config(config_path(game), list(args.set)).anchors)
    sides: dict[str, dict[str, list]] = {s: {"values": [], "support": [], "ci95": [], "run_seconds": [],
                                             "measure_seconds": [], "env_steps_per_s": [],
                                             "trained_agent_steps_per_s": [],
                                             "anchors": {a: [] for a in anchors},
                                             "search_anchors": {a: [] for a in anchors}} for s in SIDES}
    search = search if anchors else None
    stores: dict[tuple[str, int], Path] = {}
    measure_name = "nash_conv" if exact else "approx_exploitability"
    for seed, side in run_order(seeds):
        if kept.get(side):
            storage, run_s = kept[side][seed]
            say(f"{game} {side} seed {seed}: kept in {storage} ({run_s:.0f} s run)")
        else:
            storage = root / game / f"{side}-seed{seed}"
            say(f"{game} {side} seed {seed}: {args.minutes:g} min run in {storage}")
            run_s = launch(game, run_overrides(side, minutes=args.minutes, storage=storage, seed=seed, extra=args.set))
            if args.storage is not None:
                write_run_record(storage, run_s, args.minutes, played_config(game, side, args.set))
        stores[side, seed] = storage
        t0 = time.perf_counter()
        m = measure(name, params, exact, storage, args.probe_steps, args.probe_eval_episodes, seed)
        measure_s = time.perf_counter() - t0
        rec = sides[side]
        rec["values"].append(m["value"])
        rec["support"].append(m["support"])
        rec["ci95"].append(m.get("ci95"))
        rec["run_seconds"].append(round(run_s, 1))
        rec["measure_seconds"].append(round(measure_s, 1))
        for key, rate in stored_rates(storage, run_s).items():
            rec[key].append(round(rate, 1))
        scores, searched = (anchor_scores(name, params, storage, anchors, args.anchor_games, seed, search, args.jobs)
                            if anchors else ({}, {}))
        for a, score in scores.items():
            rec["anchors"][a].append(score)
        for a, score in searched.items():
            rec["search_anchors"][a].append(score)
        say(f"{game} {side} seed {seed}: {measure_name} {m['value']:.4f}"
            + (f" [{m['ci95'][0]:.4f}, {m['ci95'][1]:.4f}]" if "ci95" in m else "")
            + f" (Nash support {m['support']}; run {run_s:.0f} s, measure {measure_s:.0f} s; "
            + f"{rec['env_steps_per_s'][-1]:.0f} env steps/s)"
            + "".join(f"; vs {a} {score:.3f}" for a, score in scores.items())
            + "".join(f"; with search vs {a} {score:.3f}" for a, score in searched.items()))
    out: dict[str, Any] = {"bench": "league_vs_selfplay", "game": name, "minutes": args.minutes, "seeds": seeds,
                           "measure": measure_name, "config": f"configs/{game}.yaml",
                           "selfplay_overrides": list(SELFPLAY_OVERRIDES), "set": list(args.set)}
    for side in SIDES:
        if kept.get(side):
            out[f"{side}_from"] = str(kept_folder(args, game, side))
    if not exact:
        out["probe_steps"] = args.probe_steps
        out["probe_eval_episodes"] = args.probe_eval_episodes
    per_anchor = {side: sides[side].pop("anchors") for side in SIDES}
    per_anchor_search = {side: sides[side].pop("search_anchors") for side in SIDES}
    for side in SIDES:
        rec = sides[side]
        if exact:
            rec.pop("ci95")
        steps, trained = rec.pop("env_steps_per_s"), rec.pop("trained_agent_steps_per_s")
        out[side] = {**summary(rec.pop("values")), **rec, "env_steps_per_s": summary(steps),
                     "trained_agent_steps_per_s": summary(trained)}
    if anchors:
        out["anchors"] = {a: {side: summary(per_anchor[side][a]) for side in SIDES} for a in anchors}
        out["anchor_games"] = args.anchor_games
    if search is not None:
        out["search"] = {**dataclasses.asdict(search), "anchors": {
            a: {side: summary(per_anchor_search[side][a]) for side in SIDES} for a in anchors}}
    if not exact:
        per_seed = []
        for seed in seeds:
            t0 = time.perf_counter()
            h = head_to_head(name, params, stores["league", seed], stores["selfplay", seed], args.h2h_episodes, seed)
            say(f"{game} head-to-head seed {seed}: league scores {h['score']:.4f} [{h['ci95'][0]:.4f}, "
                f"{h['ci95'][1]:.4f}] over {h['episodes']} games ({time.perf_counter() - t0:.0f} s)")
            per_seed.append(h)
        score, ci = mean_of_estimates([(h["score"], h["ci95"]) for h in per_seed])
        s = summary([h["score"] for h in per_seed])
        out["head_to_head"] = {"score": score, "ci95": ci, "median": s["median"], "range": s["range"],
                               "values": s["values"], "ci95_per_seed": [h["ci95"] for h in per_seed],
                               "episodes": [h["episodes"] for h in per_seed]}
    if params.get("teams") is not None:  # a team game: learning's pace beside random play's, in agent steps
        envs = load_config(config_path(game), list(args.set)).rollout.envs_per_worker
        rand = random_stepping(name, params, envs)
        out["random_play"] = rand
        for side in SIDES:  # agent steps of the league's env steps, at random play's agents per env step
            med = out[side]["env_steps_per_s"]["median"]
            out[side]["agent_steps_per_s_est"] = round(med * rand["agents_per_env_step"], 1)
            out[side]["vs_random_play"] = round(med / rand["env_steps_per_s"], 3)
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def parse_args(argv=None) -> argparse.Namespace:
    probe = ProbeConfig()
    parser = ArgumentParser(
        prog="python -m evaluation.compare",
        description="League vs self-play from the same config at equal wall-clock time; one JSON line per game.")
    parser.add_argument("--game", action="append", metavar="GAME",
                        help=f"a game with a shipped configs/GAME.yaml, or all ({', '.join(ALL_GAMES)}); "
                             "repeatable (default kuhn_poker)")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock minutes of each run")
    parser.add_argument("--seeds", type=int, default=3, help="runs per side (seeds first-seed, first-seed+1, ...)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--probe-steps", type=int, default=probe.steps,
                        help="training decisions of the best-response probe (games without exact evaluation)")
    parser.add_argument("--probe-eval-episodes", type=int, default=probe.eval_episodes)
    parser.add_argument("--h2h-episodes", type=int, default=20_000,
                        help="head-to-head games per seed (at least 256 per league Nash member)")
    parser.add_argument("--anchors", metavar="A,B,...",
                        help="fixed opponents to score both mixtures against (uniform, mcts:N, pkg.module:factory); "
                             "default mcts:100,mcts:1000 on perfect-information OpenSpiel games, the config's "
                             "anchors elsewhere; '' for none")
    parser.add_argument("--anchor-games", type=int, default=100, help="games per anchor and run (default 100)")
    parser.add_argument("--search", type=int, default=0, metavar="SIMULATIONS",
                        help="also score both mixtures against the anchors with their members playing PUCT search, "
                             "SIMULATIONS a move (evaluation.search; default: the config's search section where on)")
    parser.add_argument("--rollout-weight", type=float, default=0.0,
                        help="with --search: a leaf's value mixes one random rollout in at this weight (default 0)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes that score the anchors after a run, at once (default: the machine's cores; "
                             "no league runs then)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a dotted config override applied to both sides")
    parser.add_argument("--storage", metavar="DIR",
                        help="keep the runs' stores in DIR/GAME/SIDE-seedN (default: a temporary folder, removed)")
    parser.add_argument("--league-from", metavar="DIR",
                        help="take the league side from the stores a bench kept with --storage DIR (same --minutes "
                             "and config) instead of running it; with --selfplay-from too nothing runs: the kept "
                             "runs are measured")
    parser.add_argument("--selfplay-from", metavar="DIR",
                        help="take the self-play side from the stores an earlier bench kept with --storage DIR "
                             "(same --minutes, self-play's config the same) instead of running it; its env steps/s "
                             "are then not side by side")
    args = parser.parse_args(argv)
    try:
        validate_args(args)
        args.games = parse_games(args.game)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    # SIGTERM unwinds like Ctrl-C: the running launcher is stopped, a temporary folder removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    keep = args.storage is not None
    root = Path(args.storage).resolve() if keep else Path(tempfile.mkdtemp(prefix="league_vs_selfplay_"))
    try:
        searches, kept = {}, {}
        for game in args.games:  # before any run: a bad config or a used folder stops the bench at once
            name, params, _ = check_configs(game, args.set)
            searches[game] = search_spec(game, name, params, args)
            if keep and (root / game).exists() and any((root / game).iterdir()):
                raise ValueError(f"--storage {root}: {root / game} is not empty (the launcher would resume those runs)")
            kept[game] = {side: kept_stores(game, args, side) for side in SIDES}
        for game in args.games:
            print(json.dumps(bench_game(game, args, root, searches[game], kept[game])), flush=True)
    except UsageError as exc:
        return fail(exc)
    except (ConfigError, ValueError, RuntimeError) as exc:
        return fail("evaluation.compare", exc, 2 if isinstance(exc, ValueError) else 1)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
