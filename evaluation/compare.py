"""League vs self-play, or one config vs another, at equal wall-clock time, on several games and seeds.

    python -m evaluation.compare --game kuhn_poker|leduc_poker|connect_four|all
        [--game ...] [--minutes 10] [--seeds 3] [--probe-steps 600000] [--storage DIR]
    python -m evaluation.compare [--game GAME] --config PATH [--versus PATH] [...the same options]

For each game, both sides start from the same config, ``configs/<game>.yaml`` (``--config PATH``
instead: one game, ``--game`` then only names its folder under ``--storage`` and defaults to the
config's file name):

- **league**: the config as is, with its roles;
- **self-play**: the same config with only the roles and what is published
  changed (``SELFPLAY_OVERRIDES``: the main role samples ``self``, every other
  role's count is 0, ``evaluator.publish=nash``), so learner
  settings (``ppo``, ``policy``, ``rollout``), the evaluator and the main agent's
  snapshot cadence are the same; it publishes the meta-game Nash over its own
  snapshots (the league side of ``configs/leduc_poker.yaml`` publishes the least
  exploitable mixture of its snapshots instead).

With ``--versus PATH`` the second side runs that config as is instead of self-play (no
``SELFPLAY_OVERRIDES``; the search learner's config against the PPO one of a game, say): two
configs side by side from the same seeds, each side named after its config's file name
(``configs/connect_four.yaml``: ``connect_four``; two configs of one name are
refused). Both configs must play the same game with the same params (refused before any run
otherwise); ``--set`` reaches both sides in either mode. Below, "the league" and "self-play" are
the first and the second side.

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

with ``env_steps_per_s``, ``trained_agent_steps_per_s`` (agent decisions the learners trained
on) and ``learner_updates_per_s`` (the learners' final versions summed: one an update, one an
exploiter's reset) in each side's record (median and values; all over the run's seconds). A side
with a search learner (``roles.<role>.learner: search``) also reports ``positions_searched_per_s``:
those learners' trained decisions per second, since every decision a search learner trains on is
the root of one search its rollout worker ran (a move of the learner's, searched).

With ``--versus`` the line names the sides by their labels instead, and says which config each
ran (paths relative to the repository where they lie in it)::

    {"bench": "config_vs_config", "game": ..., "minutes": ..., "seeds": [...], "measure": ...,
     "sides": {"first": {"label": "connect_four", "config": "configs/connect_four.yaml"},
               "second": {"label": "connect_four_ppo", "config": "configs/connect_four_ppo.yaml"}},
     "connect_four": {...a side's record...}, "connect_four_ppo": {...},
     "head_to_head": {...},  # the first side's score against the second
     "anchors": {"mcts:100": {"connect_four": {...}, "connect_four_ppo": {...}}, ...}, ...}

(no ``config`` or ``selfplay_overrides`` keys: neither side is self-play; a label that is one of
the line's own keys, ``REPORT_KEYS``, is refused).

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
the coordinator's start to its last write. With ``--versus`` the kept sides are taken with
``--first-from DIR`` and ``--second-from DIR`` (stores ``DIR/GAME/LABEL-seedN``, JSON keys
``first_from``, ``second_from``); ``--league-from``/``--selfplay-from`` are refused there, and the
first two without ``--versus``.

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
from envs.base import uniform_legal
from envs.openspiel import load_two_player_zero_sum
from evaluation.anchors import parse_anchor, protocol_envs, score_against
from evaluation.best_response import ProbeConfig, evaluate, probe
from evaluation.exploitability import exact_nash_conv, is_exact
from evaluation.stored_run import StoredRun, load_nash_mixture, load_subject
from evaluation.search import SearchSpec, check_searchable
from league.config import ROLE_CONFIGS, ConfigError, load_config
from league.sizing import Resources, plan
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
# the JSON line's own keys: a side's label (its config's file name, with --versus) must be none of them
REPORT_KEYS = ("bench", "game", "minutes", "seeds", "measure", "config", "sides", "selfplay_overrides", "set",
               "league_from", "selfplay_from", "first_from", "second_from", "probe_steps", "probe_eval_episodes",
               "anchors", "anchor_games", "search", "head_to_head", "random_play", "seconds")
KEPT_KEYS = ("league_from", "selfplay_from", "first_from", "second_from")  # --SIDE-from, both modes
Z95 = 1.959964


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of a comparison: its label (its record's key in the JSON line, its stores' folder
    name ``LABEL-seedN``), the config it runs, the overrides that make it this side over that config
    (self-play's ``SELFPLAY_OVERRIDES``; none for a config run as is) and the option that takes it
    from kept stores instead (``--SIDE-from``)."""

    label: str
    config: Path
    overrides: tuple[str, ...] = ()
    kept_option: str = ""

    @property
    def kept_key(self) -> str:
        """The kept option as an argparse attribute and a JSON key: ``--first-from`` -> ``first_from``."""
        return self.kept_option.removeprefix("--").replace("-", "_")


def comparison(config: str | os.PathLike, versus: str | os.PathLike | None = None) -> tuple[Side, Side]:
    """The two sides, in run order's pairing (the first is the head-to-head's scorer): without
    ``versus``, the league (``config`` as is) and self-play (``config`` with ``SELFPLAY_OVERRIDES``);
    with it, ``config`` and ``versus`` as they are, labelled by their file names (ValueError where
    the two have one name, or a name that is a key of the JSON line)."""
    config = Path(config)
    if versus is None:
        return (Side(SIDES[0], config, (), "--league-from"),
                Side(SIDES[1], config, tuple(SELFPLAY_OVERRIDES), "--selfplay-from"))
    versus = Path(versus)
    if config.stem == versus.stem:
        raise ValueError(f"--versus {versus}: both sides' configs are named {config.stem!r} (their labels); "
                         "copy one under another name")
    for path in (config, versus):
        if path.stem in REPORT_KEYS:
            raise ValueError(f"{'--versus' if path is versus else '--config'} {path}: {path.stem!r} is a key of the "
                             "JSON line; copy the config under another name")
    return Side(config.stem, config, (), "--first-from"), Side(versus.stem, versus, (), "--second-from")


def self_play_sides(sides: Sequence[Side]) -> bool:
    """Whether ``sides`` are league against self-play (not two configs, ``--versus``)."""
    return sides[1].overrides == tuple(SELFPLAY_OVERRIDES)


def shown(path: Path) -> str:
    """A config's path as the JSON shows it: relative to the repository where it lies in it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def say(text: str) -> None:
    print(f"league_vs_selfplay: {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# Pure helpers (tests/test_compare.py)
# ----------------------------------------------------------------------------
def config_path(game: str) -> Path:
    return CONFIGS / f"{game}.yaml"


def parse_games(values: Sequence[str] | None, config: str | os.PathLike | None = None) -> list[str]:
    """The games of repeated ``--game`` values, ``all`` meaning the three of ALL_GAMES;
    duplicates dropped, order kept. A game needs a shipped ``configs/<game>.yaml``. With ``config``
    (``--config``) one game, whose ``--game`` names only its folder (no shipped config needed),
    by default the config's file name."""
    if config is not None:
        if values and (len(values) > 1 or values[0] == "all"):
            raise ValueError(f"--config {config}: one game's config; give at most one --game (its folder's name)")
        return [values[0] if values else Path(config).stem]
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


def run_overrides(side: str | Side, *, minutes: float, storage: str | os.PathLike, seed: int,
                  extra: Sequence[str] = ()) -> list[str]:
    """The launcher's dotted overrides for one run: the shared ones (``extra``), the
    side's own (self-play's roles; none for a config run as is), then the run's own budget,
    storage and seed. ``side``: a ``Side``, or a name of SIDES (league against self-play)."""
    if isinstance(side, Side):
        roles = list(side.overrides)
    elif side in SIDES:
        roles = list(SELFPLAY_OVERRIDES) if side == "selfplay" else []
    else:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    minutes_text = f"{minutes:.6f}".rstrip("0").rstrip(".")  # YAML reads "1e-05" as a string
    return [*extra, *roles, f"run.max_minutes={minutes_text}", f"run.storage={storage}", f"run.seed={seed}",
            "run.progress_every_seconds=30"]


def run_order(seeds: Sequence[int], sides: Sequence[Any] = SIDES) -> list[tuple[int, Any]]:
    """(seed, side) in the order the runs go: the sides alternate, seed by seed, so a slow drift
    of the machine's speed falls on both, and which side goes first alternates with the seed
    (the first side, the league, on odd seeds, the second, self-play or ``--versus``, on even
    ones), so whatever the first run of a pair meets (what the run before left running, a cold
    cache) falls on both sides too. By the seed's own parity, so separate invocations
    (``--first-seed``) keep the same order."""
    first, second = sides
    return [(seed, side) for seed in seeds for side in ((first, second) if seed % 2 else (second, first))]


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
    for name in ("config", "versus"):
        path = getattr(args, name)
        if path is not None and not Path(path).is_file():
            raise ValueError(f"--{name} {path}: no such file")
    # the kept sides' options are named after the sides: the league and self-play, or first and second
    versus = args.versus is not None
    for key in ("first_from", "second_from") if not versus else ("league_from", "selfplay_from"):
        if getattr(args, key) is not None:
            option = "--" + key.replace("_", "-")
            raise ValueError(f"{option}: only without --versus (with it: --first-from, --second-from)" if versus else
                             f"{option}: only with --versus (league against self-play: --league-from, --selfplay-from)")
    for key in KEPT_KEYS:
        folder = getattr(args, key)
        if folder is not None and not Path(folder).is_dir():
            raise ValueError(f"--{key.replace('_', '-')} {folder}: no such folder")


# ----------------------------------------------------------------------------
# Runs and measurements
# ----------------------------------------------------------------------------
def check_configs(game: str, extra: Sequence[str], sides: Sequence[Side] | None = None) -> tuple[str, dict, bool]:
    """Load both sides' configs as the launcher will (a bad value stops the bench before
    any run, naming the key); (game name, game params, exact evaluation supported). ``sides``
    (``comparison``; by default league against self-play from ``configs/<game>.yaml``): self-play
    needs a main agent and a league side that differs from it; two configs (``--versus``) must
    play the same game with the same params (a ``UsageError`` naming both otherwise)."""
    first, second = sides or comparison(config_path(game))
    cfgs = [load_config(side.config, run_overrides(side, minutes=1, storage="unused", seed=0, extra=extra))
            for side in (first, second)]
    if self_play_sides((first, second)):
        where = shown(first.config)
        cfg = cfgs[1]
        if getattr(cfg.roles, MAIN).count < 1:
            raise ValueError(f"{where}: self-play needs roles.{MAIN}.count >= 1")
        if cfgs[0] == cfg:
            raise ValueError(f"{where} already is self-play (no exploiters, the main agent plays itself, the meta-game "
                             "Nash published): nothing to compare; give the league side roles with --set, e.g. "
                             "--set roles.ROLE.count=1 for an exploiter role (the self-play side keeps none)")
    else:
        played = [(c.game.name, dict(c.game.kwargs)) for c in cfgs]
        if played[0] != played[1]:
            text = [f"{n} {json.dumps(k, sort_keys=True, default=str)}" if k else n for n, k in played]
            raise UsageError(f"--versus {shown(second.config)}", f"plays {text[1]}, --config {shown(first.config)} "
                                                                  f"plays {text[0]}; both sides must play one game")
        cfg = cfgs[0]
    info = game_info(cfg.game.name, **cfg.game.kwargs)
    exact = info.supports_exact or (info.team_size == 1 and is_exact(make_game(cfg.game.name, 1, **cfg.game.kwargs)))
    return cfg.game.name, dict(cfg.game.kwargs), bool(exact)


def searched_roles(side: Side, extra: Sequence[str]) -> tuple[str, ...]:
    """The roles of ``side``'s run whose learner is the search learner (``roles.<role>.learner:
    search``) and that have learners."""
    cfg = load_config(side.config, run_overrides(side, minutes=1, storage="unused", seed=0, extra=extra))
    # an auto count (league.sizing) may come to learners: counted as one that does
    return tuple(name for name, role in cfg.roles.items() if role.count != 0 and role.learner == "search")


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


def launch(config: Path, overrides: list[str]) -> float:
    """One league run of ``config`` through the real launcher; its output goes to our stderr.
    Seconds taken."""
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    cmd = [sys.executable, "-m", "actors.launch", "--config", str(Path(config).resolve()), *overrides]
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


def learner_rates(storage: Path, run_seconds: float, searched: Sequence[str] = ()) -> dict[str, float]:
    """Over the run's wall-clock seconds, start-up included: the learners' updates (their final
    versions summed, as the store keeps them: one an update, one an exploiter's reset), and with
    ``searched`` (``searched_roles``) the positions those roles' learners searched: their trained
    decisions, each the root of one search (a search learner trains on its searched moves alone)."""
    seconds = max(run_seconds, 1e-9)
    with StoredRun(storage) as run:
        learners = run.store.learners()
    out = {"learner_updates_per_s": sum(float(r["version"]) for r in learners) / seconds}
    if searched:
        out["positions_searched_per_s"] = sum(float(r["step"]) for r in learners if r["role"] in searched) / seconds
    return out


RUN_RECORD = ".run.json"
# a main agent that plays only itself reads none of its opponent mix
SELF_PLAY_KEYS = ("count", "sampling", "snapshot_every_steps", "objective")


def played_config(game: str, side: str | Side, extra: Sequence[str]) -> dict:
    """What a side's run plays by: its config without the bench's per-run keys, the keys a main
    agent that plays only itself never reads, and the settings of roles it has none of. Two
    self-play runs with equal ``played_config`` train alike, whatever ``--set`` changed the
    league side's mix. ``side``: a ``Side``, or a name of SIDES (from ``configs/<game>.yaml``)."""
    if not isinstance(side, Side):
        side = {s.label: s for s in comparison(config_path(game))}[side]
    # auto values as this machine's local Ray resolves them (league.sizing), so that a kept run's
    # record, written with the values it ran by, compares with numbers
    loaded = load_config(side.config, run_overrides(side, minutes=1, storage="unused", seed=0, extra=extra))
    cfg = dataclasses.asdict(plan(loaded, Resources.local())[0])
    cfg.pop("run")
    for name, role in cfg["roles"].items():
        if role["count"] == 0:
            cfg["roles"][name] = {"count": 0}
        elif name == MAIN and role["sampling"] == "self":
            # the learner too where it is not PPO's, so records written before it was a key still match
            keys = SELF_PLAY_KEYS + (("learner",) if role["learner"] != "ppo" else ())
            cfg["roles"][name] = {k: role[k] for k in keys}
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


def kept_option(args: argparse.Namespace, side: Side) -> str | None:
    """The folder ``side``'s ``--SIDE-from`` names, or None."""
    return getattr(args, side.kept_key)


def kept_stores(game: str, args: argparse.Namespace, side: Side) -> dict[int, tuple[Path, float]]:
    """``--SIDE-from``: each seed's kept store of ``side`` and its run's seconds (``kept_run``;
    ValueError before any run where one is missing or played by another config); {} without it."""
    if kept_option(args, side) is None:
        return {}
    config = played_config(game, side, args.set)
    stores = {seed: kept_folder(args, game, side) / f"{side.label}-seed{seed}"
              for seed in range(args.first_seed, args.first_seed + args.seeds)}
    return {seed: (store, kept_run(store, args.minutes, config, side.kept_option)) for seed, store in stores.items()}


def kept_folder(args: argparse.Namespace, game: str, side: Side) -> Path:
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
            actions[b.env, side, b.agent] = uniform_legal(rng, b.mask)
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


def search_spec(game: str, name: str, params: dict, args: argparse.Namespace, sides: Sequence[Side] | None = None):
    """The search both mixtures are also scored with: ``--search`` if given (ValueError where the
    game cannot be searched), else the config's ``search`` section where it is on (with two configs,
    the first's where on, else the second's), else None."""
    if args.search:
        try:
            check_searchable(load_two_player_zero_sum(name, params or None))
        except Exception as exc:  # not an OpenSpiel game at all, or not one search can play
            raise ValueError(f"--search: {str(exc).splitlines()[0]}") from None
        return SearchSpec(simulations=args.search, rollout_weight=args.rollout_weight)
    for config in dict.fromkeys(side.config for side in sides or comparison(config_path(game))):
        cfg = load_config(config, list(args.set)).search
        if cfg.simulations:
            return cfg
    return None


def head_to_head(game: str, params: dict, league_storage: Path, selfplay_storage: Path, episodes: int,
                 seed: int, num_envs: int = 256, agent: str | None = None) -> dict:
    """The league mixture's mean score in [0, 1] against the self-play mixture (any first run's
    against a second's): each league member plays whole games (seats alternated) against the
    self-play mixture, which draws one member per game; members' episodes by Nash weight,
    weighted back by Nash weight.
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
               kept: dict[str, dict[int, tuple[Path, float]]] | None = None,
               sides: Sequence[Side] | None = None) -> dict:
    """Both sides' runs and measures for one game; ``search`` (``search_spec``) scores the mixtures
    with search too; ``kept`` (a side's ``kept_stores``, by label) gives that side's stores instead
    of runs; ``sides`` (``comparison``): by default league against self-play from ``configs/<game>.yaml``."""
    kept = kept or {}
    sides = tuple(sides or comparison(config_path(game)))
    first, second = sides
    labels = [side.label for side in sides]
    name, params, exact = check_configs(game, args.set, sides)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    t_start = time.perf_counter()
    if args.anchors is not None:
        anchors = args.anchors
    else:  # MCTS on perfect-information OpenSpiel games, else the config's own (battle: uniform, scripted)
        anchors = default_anchors(name, params) or list(load_config(first.config, list(args.set)).anchors)
    searched = {side.label: searched_roles(side, args.set) for side in sides}
    recs: dict[str, dict[str, list]] = {
        side.label: {"values": [], "support": [], "ci95": [], "run_seconds": [], "measure_seconds": [],
                     "env_steps_per_s": [], "trained_agent_steps_per_s": [], "learner_updates_per_s": [],
                     **({"positions_searched_per_s": []} if searched[side.label] else {}),
                     "anchors": {a: [] for a in anchors}, "search_anchors": {a: [] for a in anchors}}
        for side in sides}
    search = search if anchors else None
    stores: dict[tuple[str, int], Path] = {}
    measure_name = "nash_conv" if exact else "approx_exploitability"
    for seed, side in run_order(seeds, sides):
        label = side.label
        if kept.get(label):
            storage, run_s = kept[label][seed]
            say(f"{game} {label} seed {seed}: kept in {storage} ({run_s:.0f} s run)")
        else:
            storage = root / game / f"{label}-seed{seed}"
            say(f"{game} {label} seed {seed}: {args.minutes:g} min run in {storage}")
            run_s = launch(side.config, run_overrides(side, minutes=args.minutes, storage=storage, seed=seed,
                                                      extra=args.set))
            if args.storage is not None:
                write_run_record(storage, run_s, args.minutes, played_config(game, side, args.set))
        stores[label, seed] = storage
        t0 = time.perf_counter()
        m = measure(name, params, exact, storage, args.probe_steps, args.probe_eval_episodes, seed)
        measure_s = time.perf_counter() - t0
        rec = recs[label]
        rec["values"].append(m["value"])
        rec["support"].append(m["support"])
        rec["ci95"].append(m.get("ci95"))
        rec["run_seconds"].append(round(run_s, 1))
        rec["measure_seconds"].append(round(measure_s, 1))
        for key, rate in stored_rates(storage, run_s).items():
            rec[key].append(round(rate, 1))
        for key, rate in learner_rates(storage, run_s, searched[label]).items():
            rec[key].append(round(rate, 3 if key == "learner_updates_per_s" else 1))  # updates/s: often below 1
        scores, searched_scores = (anchor_scores(name, params, storage, anchors, args.anchor_games, seed, search,
                                                 args.jobs) if anchors else ({}, {}))
        for a, score in scores.items():
            rec["anchors"][a].append(score)
        for a, score in searched_scores.items():
            rec["search_anchors"][a].append(score)
        say(f"{game} {label} seed {seed}: {measure_name} {m['value']:.4f}"
            + (f" [{m['ci95'][0]:.4f}, {m['ci95'][1]:.4f}]" if "ci95" in m else "")
            + f" (Nash support {m['support']}; run {run_s:.0f} s, measure {measure_s:.0f} s; "
            + f"{rec['env_steps_per_s'][-1]:.0f} env steps/s, {rec['learner_updates_per_s'][-1]:.2f} updates/s)"
            + "".join(f"; vs {a} {score:.3f}" for a, score in scores.items())
            + "".join(f"; with search vs {a} {score:.3f}" for a, score in searched_scores.items()))
    self_play = self_play_sides(sides)
    out: dict[str, Any] = {"bench": "league_vs_selfplay" if self_play else "config_vs_config", "game": name,
                           "minutes": args.minutes, "seeds": seeds, "measure": measure_name}
    if self_play:
        out.update(config=shown(first.config), selfplay_overrides=list(SELFPLAY_OVERRIDES))
    else:  # which config each label ran
        out["sides"] = {pos: {"label": side.label, "config": shown(side.config)}
                        for pos, side in zip(("first", "second"), sides)}
    out["set"] = list(args.set)
    for side in sides:
        if kept.get(side.label):
            out[side.kept_key] = str(kept_folder(args, game, side))
    if not exact:
        out["probe_steps"] = args.probe_steps
        out["probe_eval_episodes"] = args.probe_eval_episodes
    per_anchor = {label: recs[label].pop("anchors") for label in labels}
    per_anchor_search = {label: recs[label].pop("search_anchors") for label in labels}
    rate_keys = ("env_steps_per_s", "trained_agent_steps_per_s", "learner_updates_per_s", "positions_searched_per_s")
    for label in labels:
        rec = recs[label]
        if exact:
            rec.pop("ci95")
        rates = {key: summary(rec.pop(key)) for key in rate_keys if key in rec}
        out[label] = {**summary(rec.pop("values")), **rec, **rates}
    if anchors:
        out["anchors"] = {a: {label: summary(per_anchor[label][a]) for label in labels} for a in anchors}
        out["anchor_games"] = args.anchor_games
    if search is not None:
        out["search"] = {**dataclasses.asdict(search), "anchors": {
            a: {label: summary(per_anchor_search[label][a]) for label in labels} for a in anchors}}
    if not exact:
        per_seed = []
        for seed in seeds:
            t0 = time.perf_counter()
            h = head_to_head(name, params, stores[first.label, seed], stores[second.label, seed], args.h2h_episodes,
                             seed)
            say(f"{game} head-to-head seed {seed}: {first.label} scores {h['score']:.4f} [{h['ci95'][0]:.4f}, "
                f"{h['ci95'][1]:.4f}] against {second.label} over {h['episodes']} games "
                f"({time.perf_counter() - t0:.0f} s)")
            per_seed.append(h)
        score, ci = mean_of_estimates([(h["score"], h["ci95"]) for h in per_seed])
        s = summary([h["score"] for h in per_seed])
        out["head_to_head"] = {"score": score, "ci95": ci, "median": s["median"], "range": s["range"],
                               "values": s["values"], "ci95_per_seed": [h["ci95"] for h in per_seed],
                               "episodes": [h["episodes"] for h in per_seed]}
    if params.get("teams") is not None:  # a team game: learning's pace beside random play's, in agent steps
        envs = load_config(first.config, list(args.set)).rollout.envs_per_worker
        rand = random_stepping(name, params, envs)
        out["random_play"] = rand
        for label in labels:  # agent steps of the league's env steps, at random play's agents per env step
            med = out[label]["env_steps_per_s"]["median"]
            out[label]["agent_steps_per_s_est"] = round(med * rand["agents_per_env_step"], 1)
            out[label]["vs_random_play"] = round(med / rand["env_steps_per_s"], 3)
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def parse_args(argv=None) -> argparse.Namespace:
    probe = ProbeConfig()
    parser = ArgumentParser(
        prog="python -m evaluation.compare",
        description="League vs self-play from the same config, or one config vs another (--versus), at equal "
                    "wall-clock time; one JSON line per game.")
    parser.add_argument("--game", action="append", metavar="GAME",
                        help=f"a game with a shipped configs/GAME.yaml, or all ({', '.join(ALL_GAMES)}); "
                             "repeatable (default kuhn_poker); with --config, at most one: the name of its folder "
                             "under --storage (default the config's file name)")
    parser.add_argument("--config", metavar="PATH",
                        help="the first side's config (default configs/GAME.yaml): the league's, or with --versus "
                             "the first of the two")
    parser.add_argument("--versus", metavar="PATH",
                        help="the second side runs this config as is instead of self-play (one game, the same as "
                             "--config's); the sides are named by their configs' file names")
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
    parser.add_argument("--first-from", metavar="DIR",
                        help="with --versus: take the first side from the stores a bench kept with --storage DIR "
                             "(DIR/GAME/LABEL-seedN) instead of running it, as --league-from does")
    parser.add_argument("--second-from", metavar="DIR",
                        help="with --versus: take the second side from kept stores, as --selfplay-from does")
    args = parser.parse_args(argv)
    try:
        validate_args(args)
        args.games = parse_games(args.game, args.config)
        if args.versus is not None:
            if len(args.games) > 1:
                raise ValueError(f"--versus {args.versus}: one game's config; give one --game")
            game_sides(args.games[0], args)  # the two labels, before anything runs
    except ValueError as exc:
        parser.error(str(exc))
    return args


def game_sides(game: str, args: argparse.Namespace) -> tuple[Side, Side]:
    """``game``'s two sides under ``args``: from ``--config`` (else ``configs/<game>.yaml``), and
    ``--versus`` where given."""
    return comparison(args.config or config_path(game), args.versus)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    # SIGTERM unwinds like Ctrl-C: the running launcher is stopped, a temporary folder removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    keep = args.storage is not None
    root = Path(args.storage).resolve() if keep else Path(tempfile.mkdtemp(prefix="league_vs_selfplay_"))
    try:
        searches, kept, sides = {}, {}, {}
        for game in args.games:  # before any run: a bad config or a used folder stops the bench at once
            sides[game] = game_sides(game, args)
            name, params, _ = check_configs(game, args.set, sides[game])
            searches[game] = search_spec(game, name, params, args, sides[game])
            if keep and (root / game).exists() and any((root / game).iterdir()):
                raise ValueError(f"--storage {root}: {root / game} is not empty (the launcher would resume those runs)")
            kept[game] = {side.label: kept_stores(game, args, side) for side in sides[game]}
        for game in args.games:
            print(json.dumps(bench_game(game, args, root, searches[game], kept[game], sides[game])), flush=True)
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
