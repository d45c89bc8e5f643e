"""Copies of single positions of a game: what a tree search and an exact evaluation walk.

A game whose next position follows from the current one and the mover's action alone
(deterministic, perfect information, two players taking turns) can be searched and, when small,
enumerated. Such a game offers a ``StateStore``: a fixed number of slots, each holding one
position, filled from a running ``VectorGame``'s environments (``set_roots``), from the game's
start (``set_initial``), or as a child of another slot (``expand``). Every call works on a batch
of slots at once and answers a ``Positions``: for each slot filled, the player to move, the
returns where the game ended there, and the mover's observation and legal mask, exactly as the
``VectorGame`` would show them to that seat. A tree search keeps its tree's statistics in arrays
and its positions in one store; the store's slots are the tree's nodes.

Which games have one (``state_store``):

- OpenSpiel's deterministic perfect-information sequential two-player games (tic-tac-toe,
  Connect Four, ...), by ``state.clone()``; the standard Connect Four board by bitboards instead
  (``envs.connect_four``: the same positions, a batch of moves in a few numpy operations);
- a user's ``VectorGame`` that declares ``perfect_information = True`` and offers
  ``copy_state(e)`` and ``restore_state(e, state)`` (``envs.custom``);
- a PettingZoo AEC game whose environment declares ``perfect_information = True``, by
  ``copy.deepcopy`` of the environment.

Any other game is refused with ``NotSearchable``, whose message says why in one line.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from envs.base import VectorGame

TERMINAL = -1  # ``Positions.player`` of a position where the game ended


class NotSearchable(ValueError):
    """The game cannot be searched or enumerated position by position; the message says why."""


class Positions(NamedTuple):
    """What a batch of filled slots holds, one row per slot, in the order asked.

    player:  (n,) int64, the seat to move, ``TERMINAL`` where the game ended;
    returns: (n, 2) float64, each seat's return of the game where it ended, 0 elsewhere;
    obs:     (n, obs_size) float32, the mover's observation (0 where the game ended);
    mask:    (n, num_actions) bool, the mover's legal actions (none where the game ended).
    """

    player: np.ndarray
    returns: np.ndarray
    obs: np.ndarray
    mask: np.ndarray


class StateStore:
    """``capacity`` slots of single positions of one game (module docstring).

    Attributes: ``num_actions``, ``obs_size``, ``capacity``. Slots are ints in [0, capacity);
    a slot is overwritten by the next call that fills it."""

    num_actions: int
    obs_size: int
    capacity: int

    def set_roots(self, slots: np.ndarray, game: VectorGame, envs: np.ndarray) -> Positions:
        """Copy the positions of ``game``'s environments ``envs`` into ``slots`` (same length)."""
        raise NotImplementedError

    def set_initial(self, slots: np.ndarray) -> Positions:
        """Fill ``slots`` with the game's first position (its opening move to make)."""
        raise NotImplementedError

    def expand(self, parents: np.ndarray, actions: np.ndarray, children: np.ndarray) -> Positions:
        """Fill ``children[i]`` with the position after the mover of ``parents[i]`` plays
        ``actions[i]`` (legal, in a position not ended). ``parents`` are left as they were."""
        raise NotImplementedError

    def keys(self, slots: np.ndarray) -> list:
        """A hashable key per slot, equal exactly when the positions are the same (for
        enumeration: transpositions merge)."""
        raise NotImplementedError


def state_store(game: VectorGame, capacity: int) -> StateStore:
    """The ``StateStore`` of ``game``'s kind with ``capacity`` slots; ``NotSearchable`` when the
    game offers none (module docstring)."""
    # imported here: those modules build on this one's Positions and NotSearchable
    from envs.custom import VectorGameStates
    from envs.matrix import MatrixGame
    from envs.openspiel import OpenSpielGame, OpenSpielStates, is_standard_connect_four
    from envs.pettingzoo import PettingZooGame, PettingZooStates, declares_perfect_information
    from envs.teams import ParallelTeamGame

    name = game.name
    if isinstance(game, OpenSpielGame):
        if is_standard_connect_four(game.game):
            from envs.connect_four import ConnectFourStates

            return ConnectFourStates(capacity)
        return OpenSpielStates(game.game, capacity, name)
    if isinstance(game, MatrixGame):
        raise NotSearchable(f"{name}: search and exact enumeration need players taking turns; in a matrix game "
                            "both move at once (evaluation.exploitability solves it exactly)")
    if isinstance(game, ParallelTeamGame) or getattr(game, "team_size", 1) != 1:
        raise NotSearchable(f"{name}: search and exact enumeration need two single players taking turns; in a "
                            "team game every agent of both sides moves at once")
    if isinstance(game, PettingZooGame):
        if declares_perfect_information(game):
            return PettingZooStates(game, capacity)
    elif getattr(game, "perfect_information", False) is True:
        if game.simultaneous:
            raise NotSearchable(f"{name}: declares perfect_information = True but simultaneous = True; search "
                                "and exact enumeration need players taking turns")
        return VectorGameStates(game, capacity)
    raise NotSearchable(f"{name}: search and exact enumeration need a game that declares perfect_information = "
                        "True and copies its positions (docs/custom-games.md)")


def check_searchable(game: VectorGame) -> None:
    """``NotSearchable`` naming why ``game`` cannot be searched; nothing when it can."""
    state_store(game, 1)
