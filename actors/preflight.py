"""What the launcher and the Python API check before Ray starts: the config as they build it
(``load_checked``: the default config, a file or a dict, and ``key=value`` overrides); the checks
that need the game and the code it names (``check_runnable``: the game exists and keeps the
protocol, the network builds for it, seed snapshots and anchors fit it); a store to resume holds
a league of the same game (``check_store``); and the snapshot caches hold a full pool of the
league's networks (``cache_warning``)."""

from __future__ import annotations

import copy
import fcntl
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pyspiel
import yaml

from actors.outbox import node_run_dir
from actors.placement import resolve_storage
from envs import GameInfo, game_info, is_openspiel_game, is_user_game, make_game, states
from envs.symmetry import game_symmetries
from envs.openspiel import load_two_player_zero_sum
from envs.protocol import check_game
from envs.teams import TeamError
from league.config import Config, ConfigError, load_config, parse_override
from league.store import recorded_game, recorded_meta

# The networks, anchors and searches import torch (about 2.5 CPU-seconds), so they are imported by the
# checks that build them: a config that fails to parse is one line at once.

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "kuhn_poker.yaml"
CLI_FIX = "--config {}"  # how the launcher's user names a config file (``load_checked``'s ``fix``)


def _check_replicas(cfg: Config) -> None:
    """A learner group trains one role instance in several processes; a grouped objective's shaper
    keeps its state in one."""
    if cfg.learner.replicas in (1, "auto"):
        return
    for role, role_cfg in cfg.roles.items():
        if role_cfg.count != 0 and role_cfg.objective.grouped:
            raise ConfigError("learner.replicas", f"roles.{role} plays grouped objectives (objective.k_opponents > 1 "
                                                  "or a shaper), whose state is one learner process's: keep 1")


def _check_curriculum(cfg: Config, info: GameInfo) -> None:
    """Each curriculum stage builds a game that the league's networks can play: the game's
    observation and actions, a team no larger than the game's; no grouped objective beside a
    curriculum (a stage's games are not reported, and a group's are)."""
    if not cfg.game.curriculum:
        return
    for role, role_cfg in cfg.roles.items():
        if role_cfg.objective.grouped:
            raise ConfigError("game.curriculum", f"a curriculum is not for grouped objectives (roles.{role}.objective)")
    for i, _ in enumerate(cfg.game.curriculum):
        _check_stage(cfg, i, info)


def _check_stage(cfg: Config, i: int, info: GameInfo) -> None:
    key = f"game.curriculum[{i}].params"
    try:
        stage = game_info(cfg.game.name, **cfg.game.stage_kwargs(i))
    except (ValueError, TypeError) as exc:
        message = str(exc).split(": ", 1)[1] if isinstance(exc, TeamError) else str(exc)
        raise ConfigError(key, (message.splitlines() or [type(exc).__name__])[0]) from None
    shape, game_shape = stage.obs_shape or (stage.obs_size,), info.obs_shape or (info.obs_size,)
    if (shape, stage.num_actions) != (game_shape, info.num_actions):
        raise ConfigError(key, f"the stage's game observes {shape} with {stage.num_actions} actions; the game "
                               f"observes {game_shape} with {info.num_actions}: a stage must keep both")
    if stage.team_size > info.team_size:
        raise ConfigError(key, f"the stage's teams have {stage.team_size} agents, more than the game's {info.team_size}")


def network_bytes(cfg: Config, info: GameInfo) -> int:
    """Bytes of weights of one of this league's networks (what a snapshot cache holds of it), for
    the game shape ``info`` (``check_runnable``'s)."""
    from policies.net import build_policy, policy_spec
    from policies.snapshot import weight_bytes

    return weight_bytes(build_policy(policy_spec(cfg.policy, info.obs_size, info.num_actions, info.obs_shape,
                                                 info.channels_last)))


def cache_warning(cfg: Config, info: GameInfo) -> str | None:
    """A warning when a full pool of this league's networks (``network_bytes``) would not fit
    the snapshot caches of the processes that play the whole pool: Serve replicas
    or in-process workers when a role samples by PFSP (``alphastar``, ``pfsp``), and an evaluator
    that samples games. Such a process draws an opponent per episode, so past the cache it
    reloads snapshots from the store for most episodes (docs/operations.md). None when it fits."""
    # an auto count (league.sizing) may come to learners: warned about as one that does
    pfsp = any(r.count != 0 and r.sampling in ("alphastar", "pfsp") for _, r in cfg.roles.items())
    sampling_evaluator = cfg.evaluator.count > 0 and not (cfg.evaluator.exact and info.supports_exact)
    if not (pfsp or sampling_evaluator):
        return None
    snapshot_bytes = network_bytes(cfg, info)
    fits = min(cfg.snapshots.cache_size, cfg.snapshots.cache_bytes // max(1, snapshot_bytes))
    if cfg.league.pool_max_size <= fits:
        return None
    need_mb = math.ceil(cfg.league.pool_max_size * snapshot_bytes / 2**20)
    return (f"snapshots.cache_mb={cfg.snapshots.cache_mb:g} holds {fits} of this league's networks "
            f"({snapshot_bytes / 1024:.0f} KB each) but league.pool_max_size is {cfg.league.pool_max_size}: "
            f"processes that play the whole pool will reload most opponents from the store once it holds more; "
            f"raise snapshots.cache_mb to {need_mb} or lower league.pool_max_size to {fits} (docs/operations.md)")


def resume_warning(cfg: Config) -> str | None:
    """A warning when ``run.storage`` holds a league whose roles learned another way (``ppo`` or
    ``search``) than this config's, or whose network was another (``policy.net``, ``hidden``,
    ``activation``, ...): each learner resumes from its checkpoint, network and optimizer, keeps
    that network, and goes on learning the config's way. None for a new run, an old store that kept
    no config, or nothing changed."""
    meta = recorded_meta(cfg.run.storage)
    recorded = (meta or {}).get("config")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("roles"), dict):
        return None
    learners = []
    for role, role_cfg in cfg.roles.items():
        before = recorded["roles"].get(role)
        if role_cfg.count != 0 and isinstance(before, dict) and before.get("count", 0) != 0:
            was = before.get("learner", "ppo")
            if was != role_cfg.learner:
                learners.append(f"{role} learned with {was}")
    network = _network_changes(recorded.get("policy"), cfg)
    changed = ([", ".join(learners)] if learners else []) + ([f"network had {', '.join(network)}"] if network else [])
    if not changed:
        return None
    return (f"run.storage {cfg.run.storage} holds a league whose {' and whose '.join(changed)}: its learners resume "
            f"from their checkpoints, networks included, and learn as this config says from here; a new "
            f"run.storage starts afresh")


def _network_changes(before: Any, cfg: Config) -> list[str]:
    """The recorded config's network settings (``policies.net.ARCHITECTURE``) that differ from
    ``cfg``'s, as ``"policy.activation tanh, not relu"``; a setting the record lacks is not compared."""
    if not isinstance(before, dict):
        return []
    from policies.net import ARCHITECTURE

    return [f"policy.{name} {before[name]}, not {getattr(cfg.policy, name)}" for name in ARCHITECTURE
            if name in before and before[name] != getattr(cfg.policy, name)]


def _check_search_learners(cfg: Config, info: GameInfo) -> None:
    """A role that learns from search needs a game whose positions copy (envs.states)."""
    # an auto count (league.sizing) may come to learners: checked as one that does
    searched = [role for role, role_cfg in cfg.roles.items() if role_cfg.count != 0 and role_cfg.learner == "search"]
    if not searched:
        return
    key = f"roles.{searched[0]}.learner"
    if info.team_size > 1:
        raise ConfigError(key, f"search plays games of one agent a side; {cfg.game.name} is a team game")
    if cfg.ppo.magnet_coef > 0:
        raise ConfigError(key, "the search learner has no magnet: ppo.magnet_coef applies to PPO learners only")
    if cfg.game.curriculum:
        raise ConfigError(key, "the search learner plays the game itself: game.curriculum is for PPO learners")
    for role in searched:
        objective = cfg.role(role).objective
        if objective.grouped:  # its value target is the game's outcome, which a shaped reward replaces
            raise ConfigError(f"roles.{role}.objective", "objective.k_opponents > 1 and shapers are for PPO "
                                                         "learners; this role learns from search")
    game = _require_searchable(cfg, key)
    if cfg.search_learner.symmetries:
        try:
            game_symmetries(game)
        except ValueError as exc:
            raise ConfigError("search_learner.symmetries", str(exc).splitlines()[0]) from None


def _require_searchable(cfg: Config, key: str, why: str = ""):
    """The config's game (one environment) where it is deterministic with perfect information and
    copies its positions (envs.states); else ConfigError on ``key`` (its message ``why`` and the
    game's reason, one line)."""
    try:
        game = make_game(cfg.game.name, 1, seed=cfg.run.seed, **cfg.game.kwargs)
        states.check_searchable(game)
    except ValueError as exc:
        raise ConfigError(key, why + str(exc).splitlines()[0]) from None
    return game


def _check_greedy_snapshots(cfg: Config) -> None:
    """A snapshot that always plays its most probable move can be an equilibrium only where a pure
    strategy can: in a deterministic game of perfect information (the games search plays)."""
    if cfg.policy.snapshot_play == "greedy":
        _require_searchable(cfg, "policy.snapshot_play", "greedy needs a deterministic game of perfect information: ")


def check_runnable(cfg: Config) -> GameInfo:
    """The checks that need the game and the code a config names, after ``load_config``: the game
    exists (and a game brought by module path keeps the protocol of envs/base.py), the network builds
    for it, seed snapshots hold a network this config may load, anchors can play it. Returns the
    game's ``envs.GameInfo``. The launcher calls it before Ray starts, with a user's module
    folders on ``sys.path``."""
    from evaluation.anchors import check_anchor
    from evaluation.exploitability import is_exact
    from evaluation.search import check_searchable
    from policies.net import PolicyNetError, build_policy, policy_spec
    from policies.snapshot import snapshot_spec

    name = cfg.game.name
    if is_openspiel_game(name):
        if name.split("(")[0] not in pyspiel.registered_names():
            raise ConfigError("game.name", f"unknown game {name!r} (e.g. kuhn_poker, leduc_poker, "
                                           "connect_four, tic_tac_toe, biased_rps, rps)")
    try:
        info = game_info(name, **cfg.game.kwargs)
        if is_user_game(name):  # a game the user brought keeps the protocol, or nothing starts
            game = make_game(name, 4, seed=cfg.run.seed, **cfg.game.kwargs)
            try:
                check_game(game, seed=cfg.run.seed)
            except ValueError as exc:
                raise ValueError(f"game {name!r}: {exc}") from None
    except TeamError as exc:  # a bad game.teams value, or a game whose agents do not fit it
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1].splitlines()[0]) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError("game.name", str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    _check_curriculum(cfg, info)
    _check_replicas(cfg)
    if info.team_size > 1:
        for role, role_cfg in cfg.roles.items():
            objective = role_cfg.objective
            if objective.k_opponents > 1 or objective.shaper is not None:
                raise ConfigError(f"roles.{role}.objective", "grouped objectives (k_opponents > 1, a shaper) are "
                                                             "for games of one agent a side, not team games")
    _check_search_learners(cfg, info)
    _check_greedy_snapshots(cfg)
    if cfg.evaluator.publish == "least_exploitable" and not (
            info.supports_exact or is_exact(make_game(name, 1, seed=cfg.run.seed, **cfg.game.kwargs))):
        raise ConfigError("evaluator.publish", f"least_exploitable needs a game with exact evaluation (Kuhn, Leduc, "
                                               f"matrix games, small games of perfect information); {name} has "
                                               f"none: use nash")

    try:  # a bad factory path, a module with the wrong interface, conv on a flat game
        build_policy(policy_spec(cfg.policy, info.obs_size, info.num_actions, info.obs_shape, info.channels_last))
    except PolicyNetError as exc:
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1].splitlines()[0]) from None
    except ValueError as exc:
        raise ConfigError("policy", str(exc).splitlines()[0]) from None

    for i, snap in enumerate(cfg.league.seed_snapshots):
        if not Path(snap).is_file():
            raise ConfigError(f"league.seed_snapshots[{i}]", f"no such file: {snap}")
        # a file from elsewhere may name only the shipped networks or the configured factory: loading
        # a snapshot imports and calls the factory its spec names
        try:
            net = snapshot_spec(Path(snap).read_bytes()).net
        except ValueError as exc:
            raise ConfigError(f"league.seed_snapshots[{i}]", str(exc).splitlines()[0]) from None
        if net not in ("mlp", "conv", cfg.policy.net):
            raise ConfigError(f"league.seed_snapshots[{i}]", f"{snap} holds a {net!r} network; a seed snapshot "
                                                              f"may hold mlp, conv or the policy.net of this config")
    if cfg.search.simulations:
        if not is_openspiel_game(name):
            raise ConfigError("search.simulations", f"search plays a perfect-information OpenSpiel game; {name} is not one")

        try:
            check_searchable(load_two_player_zero_sum(name, cfg.game.kwargs or None))
        except ValueError as exc:
            raise ConfigError("search.simulations", str(exc).splitlines()[0]) from None
        if not cfg.anchors:
            raise ConfigError("search.simulations", "the searching policy is scored against the anchors: list some")
    if cfg.anchors:

        for i, anchor in enumerate(cfg.anchors):
            try:
                check_anchor(anchor, name, cfg.game.kwargs)
            except ValueError as exc:
                raise ConfigError(f"anchors[{i}]", str(exc).splitlines()[0]) from None
    return info


def import_paths(config: str | None) -> list[str]:
    """Folders a user's game module (``game.name: "module:factory"``) is imported from, besides the
    installed packages: the current directory and the config file's folder, absolute. The launcher
    puts them on its own ``sys.path`` and, for a local Ray, on every worker's ``PYTHONPATH``."""
    folders = [os.getcwd()]
    if config:
        folders.append(str(Path(config).resolve().parent))
    return list(dict.fromkeys(folders))


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` written over it, section by section (a value that is not a mapping
    replaces what ``base`` holds there)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _default_content() -> dict[str, Any]:
    """What the default config file holds (nothing where the file is not there, as in a bare install)."""
    if not DEFAULT_CONFIG.exists():
        return {}
    with open(DEFAULT_CONFIG, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def _leaf_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of a config dict's settings."""
    keys = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        keys += _leaf_keys(value, dotted + ".") if isinstance(value, Mapping) and value else [dotted]
    return keys


def _shown(path: Path) -> str:
    """``path`` as a user in this directory types it: relative below the current directory, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _blame_default(exc: ConfigError, config: Mapping[str, Any] | None, overrides: Iterable[str],
                   fix: str) -> ConfigError | None:
    """A ``game.name`` error naming the real fix when ``exc`` comes from a setting the user did not
    make, of the default config (made for its game), which the user's ``game.name`` (an override,
    or in a dict config) does not fit: the game's own config, ``fix`` formatted with its path.
    None when the user made that setting, or kept the default config's game."""
    user_keys, game = list(_leaf_keys(config or {})), (config or {}).get("game", {})
    game = game.get("name") if isinstance(game, Mapping) else None
    for text in overrides:
        try:
            keys, value = parse_override(text)
        except ConfigError:
            return None
        user_keys.append(".".join(keys))
        if keys == ["game", "name"]:
            game = value
    default_game = (_default_content().get("game") or {}).get("name")
    if not exc.key or not isinstance(game, str) or game == default_game or any(
            exc.key == k or exc.key.startswith(k + ".") or k.startswith(exc.key + ".") for k in user_keys):
        return None
    why = str(exc)[len(exc.key) + 2:]
    own = DEFAULT_CONFIG.parent / f"{game.split('(')[0]}.yaml"
    remedy = (f"run it with {fix.format(_shown(own))}" if own.is_file() else
              f"give it a config of its own with {fix.format('FILE')} (configs/ holds examples)")
    return ConfigError("game.name", f"{game} needs its own config, not the default {_shown(DEFAULT_CONFIG)} (made for "
                                    f"{default_game}): {remedy} (with the default, {exc.key}: {why})")


LOCK_NAME = "launcher.lock"  # in the run's node folder (actors.outbox.node_run_dir): held by its launcher


class StorageInUse(RuntimeError):
    """Another launcher runs a league on this storage folder."""

    def __init__(self, storage: str, holder: str):
        self.storage, self.holder = storage, holder
        super().__init__(f"storage {storage} is in use by another launcher (pid {holder}); stop it first "
                         "or choose another run.storage")


def open_lock(storage: str, create: bool = True):
    """The run's ``launcher.lock``, open and locked by this process (None where ``create`` is off and
    there is none); ``StorageInUse`` naming the holder's pid where another process holds it."""
    path = node_run_dir(storage)
    if not create and not (path / LOCK_NAME).exists():
        return None
    path.mkdir(parents=True, exist_ok=True)
    f = open(path / LOCK_NAME, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise StorageInUse(storage, holder) from None
    return f


def check_storage_free(cfg: Config) -> None:
    """``StorageInUse`` where another launcher holds ``run.storage``: the launcher says so before it
    checks the network (which loads torch) and before Ray starts. The lock is not kept:
    ``actors.runtime.lock_storage`` takes it. Nothing is written."""
    f = open_lock(resolve_storage(cfg.run.storage)[0], create=False)
    if f is not None:
        f.close()


def load_checked(config: str | os.PathLike | Mapping[str, Any] | None = None, overrides: Iterable[str] = (),
                 fix: str = CLI_FIX, first: Callable[[Config], None] | None = None):
    """Config and game shape (``load_config``, then ``check_runnable``) for a config given as a
    YAML file's path, or as None or a dict: the default config (``configs/kuhn_poker.yaml``, what
    the launcher runs without ``--config``) with the dict's settings over it. Then the ``key=value``
    overrides. A user's game module imports from here or next to the file. An error from a
    setting of the default config that the user's game does not fit names the game's own config,
    as ``fix`` (``"--config {}"`` for the launcher) says to give it. ``first(cfg)`` runs on the
    parsed config before the game and network checks."""
    path = None if config is None or isinstance(config, Mapping) else os.fspath(config)
    overrides = list(overrides)
    if path is not None:
        source: Any = path
    elif DEFAULT_CONFIG.exists():
        source = _merged(_default_content(), config or {})
    else:
        source = config
    try:
        cfg = load_config(source, overrides)
        if first is not None:
            first(cfg)
        for folder in import_paths(path):
            if folder not in sys.path:
                sys.path.append(folder)
        return cfg, check_runnable(cfg)
    except ConfigError as exc:
        blamed = None if path is not None else _blame_default(exc, config, overrides, fix)
        if blamed is None:
            raise
        raise blamed from None


def check_store(cfg: Config) -> None:
    """A store in ``run.storage`` (a run to resume) holds a league of this config's game, or
    nothing starts: found here before Ray starts (the coordinator refuses it too, but only once Ray
    and the actors are up)."""
    game = recorded_game(cfg.run.storage)
    if game is not None and game != cfg.game.name:
        raise ConfigError("run.storage", f"{cfg.run.storage} holds a {game} league, not {cfg.game.name}: give "
                                         f"{cfg.game.name} a new storage folder (run.storage=NEW_FOLDER), or "
                                         f"resume that run with its {game} config")
