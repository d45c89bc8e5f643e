"""A board game's symmetries, as index permutations of its observation and its actions.

A symmetry maps every position to an equivalent one: the same game value, with each move's value
carried to the mapped move. The search learner (``search_learner.symmetries``) trains each drawn
position under one of its game's symmetries, chosen at random, so one search teaches the network
what it found in every equivalent position (AlphaZero's augmentation, Silver et al. 2018).

``Symmetries`` holds them as gathers: the transformed observation is ``obs[..., obs[k]]`` and the
transformed action vector (legal mask, policy target, logits) ``x[..., actions[k]]``; the identity
is the first. A game declares its own as a ``symmetries`` attribute (``VectorGame``); for
OpenSpiel's Connect Four (left-right mirror) and tic-tac-toe (the square's eight) this module knows
them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Symmetries:
    obs: np.ndarray  # (S, obs_size) int64: gather indices of each symmetry's observation
    actions: np.ndarray  # (S, num_actions) int64: gather indices of each symmetry's action vector

    def __post_init__(self):
        obs, actions = np.asarray(self.obs), np.asarray(self.actions)
        if obs.ndim != 2 or actions.ndim != 2 or len(obs) != len(actions) or len(obs) < 1:
            raise ValueError(f"symmetries: obs and actions must be (S, n) with the same S >= 1, "
                             f"got shapes {obs.shape} and {actions.shape}")
        for name, perm in (("obs", obs), ("actions", actions)):
            if not (np.sort(perm, axis=1) == np.arange(perm.shape[1])).all():
                raise ValueError(f"symmetries: each row of {name} must be a permutation of 0..{perm.shape[1] - 1}")
        if not ((obs[0] == np.arange(obs.shape[1])).all() and (actions[0] == np.arange(actions.shape[1])).all()):
            raise ValueError("symmetries: the first must be the identity")
        object.__setattr__(self, "obs", obs.astype(np.int64))
        object.__setattr__(self, "actions", actions.astype(np.int64))

    def __len__(self) -> int:
        return len(self.obs)

    def fits(self, obs_size: int, num_actions: int) -> bool:
        return self.obs.shape[1] == obs_size and self.actions.shape[1] == num_actions


def board(shape: tuple[int, int, int], moves: str, group: str) -> Symmetries:
    """The symmetries of a (channels, height, width) board whose planes are the observation:
    ``moves`` "cells" (a move per square, row-major) or "columns" (a move per column);
    ``group`` "mirror" (left-right) or "square" (the eight rotations and reflections, H == W)."""
    c, h, w = shape
    grid = np.arange(h * w).reshape(h, w)
    if group == "mirror":
        maps = [grid, grid[:, ::-1]]
    elif group == "square" and h == w:
        maps = [np.rot90(g, k) for g in (grid, grid.T) for k in range(4)]
    else:
        raise ValueError(f"board symmetries: unknown group {group!r} for a {h}x{w} board")
    obs, actions = [], []
    for m in maps:
        cells = m.reshape(-1)
        obs.append((np.arange(c)[:, None] * h * w + cells[None, :]).reshape(-1))
        if moves == "cells":
            actions.append(cells)
        elif moves == "columns":
            actions.append(m[0] % w)
        else:
            raise ValueError(f"board symmetries: unknown moves {moves!r}")
    return Symmetries(np.stack(obs), np.stack(actions))


# OpenSpiel games whose observation is (channels, height, width) board planes: (moves, group)
_OPENSPIEL_BOARDS = {"connect_four": ("columns", "mirror"), "tic_tac_toe": ("cells", "square")}


def openspiel_symmetries(name: str, obs_shape: tuple[int, ...], num_actions: int) -> Symmetries | None:
    """The known symmetries of OpenSpiel's game ``name`` (its default parameters' board), else None."""
    known = _OPENSPIEL_BOARDS.get(name)
    if known is None or len(obs_shape) != 3:
        return None
    found = board(tuple(obs_shape), *known)
    return found if found.fits(int(np.prod(obs_shape)), num_actions) else None


def game_symmetries(game) -> Symmetries | None:
    """``game``'s declared symmetries (its ``symmetries`` attribute), checked against its sizes;
    None where it declares none."""
    found = getattr(game, "symmetries", None)
    if found is None:
        return None
    if not isinstance(found, Symmetries):
        found = Symmetries(*found)
    if not found.fits(game.obs_size, game.num_actions):
        raise ValueError(f"symmetries: shaped for {found.obs.shape[1]} observations and {found.actions.shape[1]} "
                         f"actions, the game has {game.obs_size} and {game.num_actions}")
    return found
