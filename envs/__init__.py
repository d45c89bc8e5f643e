"""Games behind one vectorized two-player zero-sum protocol (see ``envs.base``).

``make_game(name, num_envs, seed=None, **params)`` builds a ``VectorGame``:

- ``"rps"`` / ``"rock_paper_scissors"``, ``"biased_rps"``, ``"matching_pennies"``:
  known matrix games with their Nash equilibrium as ``known_nash``;
- ``"matrix"`` with ``payoff=[[...], ...]``: any zero-sum matrix game (row
  player's payoffs);
- ``"pettingzoo:<env>"``: a PettingZoo AEC game (``envs.pettingzoo``), e.g.
  ``"pettingzoo:texas_holdem_v4"``, ``params`` going to its ``raw_env``; any
  importable AEC environment with action masks as ``"pettingzoo:mygame:env"``
  or ``"pettingzoo:mypkg.mygame:raw_env"``;
- ``"pettingzoo-parallel:module:factory"`` with ``teams={prefix: [P0, P1]}``: a
  PettingZoo parallel game of two teams (``envs.teams``), e.g.
  ``"pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"``;
  ``teams`` is the config's ``game.teams`` and is taken by these games only;
- ``"module:factory"``: a ``VectorGame`` a user writes (``envs.custom``),
  built as ``factory(num_envs=E, seed=S, **params)``;
- any other name: an OpenSpiel game (``"kuhn_poker"``, ``"leduc_poker"``,
  ``"tic_tac_toe"``, ``"connect_four"``, ...), ``params`` being its OpenSpiel
  parameters; ``"name(key=value,...)"`` strings work too.

``game_info(name, teams=None, **params)`` gives ``(obs_size, num_actions,
supports_exact, obs_shape, channels_last, team_size)`` without building a
vector of environments (one environment, for games brought by module path). ``is_user_game(name)`` says
whether a game is one a user brought, which ``envs.protocol.check_game`` checks
before a league starts.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from envs.base import NO_ACTION, SideBatch, StepResult, VectorGame, outcome_from_returns
from envs.custom import is_custom_game, make_custom_game
from envs.matrix import ALIASES, KNOWN_GAMES, MatrixGame, MatrixNash
from envs.pettingzoo import PettingZooGame, is_shipped, pettingzoo_info
from envs.teams import ParallelTeamGame, TeamError, is_parallel_game, team_info

__all__ = [
    "NO_ACTION",
    "SideBatch",
    "StepResult",
    "VectorGame",
    "outcome_from_returns",
    "MatrixGame",
    "MatrixNash",
    "GameInfo",
    "make_game",
    "game_info",
    "is_matrix_game",
    "is_user_game",
]


class GameInfo(NamedTuple):
    obs_size: int
    num_actions: int
    supports_exact: bool = False  # see VectorGame.supports_exact
    obs_shape: tuple[int, ...] = ()  # see VectorGame.obs_shape; () is (obs_size,)
    channels_last: bool = False  # see VectorGame.channels_last
    team_size: int = 1  # see VectorGame.team_size


def is_matrix_game(name: str) -> bool:
    return name == "matrix" or name in KNOWN_GAMES or name in ALIASES


def is_openspiel_game(name: str) -> bool:
    """Whether ``make_game`` builds ``name`` from OpenSpiel: any name that is not a matrix,
    PettingZoo, team or module-path game (it may still not be a registered OpenSpiel game)."""
    return not (is_matrix_game(name) or name.startswith("pettingzoo:") or is_parallel_game(name)
                or is_custom_game(name))


def is_user_game(name: str) -> bool:
    """A game brought by module path (``module:factory``, or a PettingZoo environment PettingZoo does
    not ship); ValueError when the name cannot be resolved."""
    if is_custom_game(name) or is_parallel_game(name):
        return True
    if isinstance(name, str) and name.startswith("pettingzoo:"):
        return not is_shipped(name)
    return False


def _no_teams(name: str, teams) -> None:
    if teams:
        raise TeamError("game.teams", f"{name} is a game of two single agents; only pettingzoo-parallel games "
                                      "have teams")


def make_game(name: str, num_envs: int, seed: int | None = None, teams: dict | None = None,
              **params) -> VectorGame:
    """Build ``num_envs`` environments of game ``name`` (see module docstring).
    Raises ValueError on an unknown name, bad parameters, or a game that is not
    two-player zero-sum (``envs.teams.TeamError`` on bad ``teams``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"game name must be a non-empty string, got {name!r}")
    if is_parallel_game(name):
        return ParallelTeamGame(name, num_envs, teams=teams, params=params or None, seed=seed)
    _no_teams(name, teams)
    if name == "matrix":
        if "payoff" not in params:
            raise ValueError('game "matrix" needs a payoff=[[...], ...] parameter (row player\'s payoffs)')
        payoff = params.pop("payoff")
        if params:
            raise ValueError(f'game "matrix" takes only payoff=..., got also {sorted(params)}')
        return MatrixGame(payoff, num_envs, name="matrix", seed=seed)
    if is_matrix_game(name):
        if params:
            raise ValueError(f"matrix game {name!r} takes no parameters, got {sorted(params)}")
        return MatrixGame.known(name, num_envs, seed=seed)
    if is_custom_game(name):
        return make_custom_game(name, num_envs, seed=seed, **params)
    if name.startswith("pettingzoo:"):
        return PettingZooGame(name, num_envs, params=params or None, seed=seed)
    from envs.openspiel import OpenSpielGame  # pyspiel import only when needed

    return OpenSpielGame(name, num_envs, params=params or None, seed=seed)


def game_info(name: str, teams: dict | None = None, **params) -> GameInfo:
    """``(obs_size, num_actions, supports_exact, obs_shape, channels_last, team_size)`` of a game,
    cheaply (no environments built)."""
    if is_parallel_game(name):
        size, actions, shape, channels_last, team_size = team_info(name, teams, **params)
        return GameInfo(size, actions, obs_shape=shape, channels_last=channels_last, team_size=team_size)
    _no_teams(name, teams)
    if name == "matrix":
        if "payoff" not in params:
            raise ValueError('game "matrix" needs a payoff=[[...], ...] parameter')
        shape = np.asarray(params["payoff"], dtype=float).shape
        if len(shape) != 2:
            raise ValueError(f"payoff must be a 2-D matrix, got shape {shape}")
        return GameInfo(obs_size=2, num_actions=int(max(shape)), supports_exact=MatrixGame.supports_exact,
                        obs_shape=(2,))
    if is_matrix_game(name):
        payoff, _ = KNOWN_GAMES[ALIASES.get(name, name)]
        return GameInfo(obs_size=2, num_actions=max(len(payoff), len(payoff[0])),
                        supports_exact=MatrixGame.supports_exact, obs_shape=(2,))
    if is_custom_game(name):
        game = make_custom_game(name, 1, seed=0, **params)
        return GameInfo(obs_size=int(game.obs_size), num_actions=int(game.num_actions), supports_exact=False,
                        obs_shape=tuple(int(d) for d in game.obs_shape), channels_last=bool(game.channels_last))
    if name.startswith("pettingzoo:"):
        size, actions, shape, channels_last = pettingzoo_info(name, **params)
        return GameInfo(size, actions, obs_shape=shape, channels_last=channels_last)
    # pyspiel is imported only when an OpenSpiel game is asked for
    from envs.openspiel import load_two_player_zero_sum, state_tensor_shape, supports_exact, uses_information_state

    game = load_two_player_zero_sum(name, params or None)
    size = (
        game.information_state_tensor_size()
        if uses_information_state(game)
        else game.observation_tensor_size()
    )
    return GameInfo(obs_size=int(size), num_actions=int(game.num_distinct_actions()),
                    supports_exact=supports_exact(game, params or None),
                    obs_shape=state_tensor_shape(game, int(size)))
