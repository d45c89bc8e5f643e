"""Checks of a loaded config that need the game and the code it names, run by the launcher before
Ray starts: the game exists and keeps the protocol, the network builds for it, seed snapshots and
anchors fit it, and the snapshot caches hold a full pool of its networks."""

from __future__ import annotations

import math
from pathlib import Path

import pyspiel

from envs import GameInfo, game_info, is_openspiel_game, is_user_game, make_game
from envs.openspiel import load_two_player_zero_sum
from envs.protocol import check_game
from envs.teams import TeamError
from evaluation.anchors import check_anchor
from evaluation.search import check_searchable
from league.config import Config, ConfigError
from policies.net import PolicyNetError, build_policy, policy_spec
from policies.snapshot import snapshot_spec, weight_bytes


def _check_curriculum(cfg: Config, info: GameInfo) -> None:
    """Each curriculum stage builds a game that the league's networks can play: the game's
    observation and actions, a team no larger than the game's; no grouped objective beside a
    curriculum (a stage's games are not reported, and a group's are)."""
    if not cfg.game.curriculum:
        return
    for role in ("main_agent", "main_exploiter", "league_exploiter"):
        if getattr(cfg.roles, role).objective.grouped:
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
    return weight_bytes(build_policy(policy_spec(cfg.policy, info.obs_size, info.num_actions, info.obs_shape,
                                                 info.channels_last)))


def cache_warning(cfg: Config, info: GameInfo) -> str | None:
    """A warning when a full pool of this league's networks (``network_bytes``) would not fit
    the snapshot caches of the processes that play the whole pool: Serve replicas
    or in-process workers when a role samples by PFSP (``alphastar``, ``pfsp``), and an evaluator
    that samples games. Such a process draws an opponent per episode, so past the cache it
    reloads snapshots from the store for most episodes (docs/operations.md). None when it fits."""
    roles = [getattr(cfg.roles, r) for r in ("main_agent", "main_exploiter", "league_exploiter")]
    pfsp = any(r.count > 0 and r.sampling in ("alphastar", "pfsp") for r in roles)
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


def check_runnable(cfg: Config) -> GameInfo:
    """The checks that need the game and the code a config names, after ``load_config``: the game
    exists (and a game brought by module path keeps the protocol of envs/base.py), the network builds
    for it, seed snapshots hold a network this config may load, anchors can play it. Returns the
    game's ``envs.GameInfo``. The launcher calls it before Ray starts, with a user's module
    folders on ``sys.path``."""
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
    if info.team_size > 1:
        for role in ("main_agent", "main_exploiter", "league_exploiter"):
            objective = getattr(cfg.roles, role).objective
            if objective.k_opponents > 1 or objective.shaper is not None:
                raise ConfigError(f"roles.{role}.objective", "grouped objectives (k_opponents > 1, a shaper) are "
                                                             "for games of one agent a side, not team games")
    if cfg.evaluator.publish == "least_exploitable" and not info.supports_exact:
        raise ConfigError("evaluator.publish", f"least_exploitable needs a game with exact evaluation (Kuhn, Leduc, "
                                               f"matrix games); {name} has none: use nash")

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
