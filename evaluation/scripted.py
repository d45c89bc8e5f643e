"""Scripted policies: bots that play by a fixed rule, as anchors (``evaluation.anchors``).

``attack_nearest`` is the factory anchor ``evaluation.scripted:attack_nearest`` for
MAgent2's battle (Zheng et al. 2018, "MAgent: A Many-Agent Reinforcement
Learning Platform for Artificial Collective Intelligence", AAAI), played as a
team game (``envs.teams``). Every agent of its side follows one rule, from its
own observation alone:

1. an enemy in attack range (the 8 neighbouring cells): attack it, the one with
   the least HP first (damage is wasted on a healthy enemy while a weak one
   recovers);
2. else an enemy in view: move to the free cell within reach (up to 2 cells)
   that is nearest the nearest enemy (in Chebyshev distance, the attack range's
   metric; Euclidean distance breaks ties);
3. else: move toward the open part of its view (the mean offset of the cells
   that are not wall or off the map), which leads away from the map's edges
   toward the middle where the enemy is; in open ground, a random move.

Battle's observation is a 13x13 view of the agent's surroundings with its
channels last, flattened in C order into a row: ``view[6 + dy, 6 + dx]`` is the
cell at offset (dx, dy) from the agent, whose position is (x, y) in
``GridWorld.get_pos``. Its channels are obstacle (wall or off the map), my
team's presence, my team's HP (a fraction of 10), then with ``minimap_mode`` my
team's minimap, then the other team's presence and HP (and minimap, and the
extra features, which the bot does not read). Its 21 actions are 13 moves, to
the cells within radius 2 (``speed: 2``) in row-major order of (dy, dx), the
middle one (action 6) staying put, then 8 attacks, on the cells within radius
1.5 (``attack_range: CircleRange(1.5)``) but the agent's own, in the same order.
The factory checks the attack order against the engine's own table
(``GridWorld.get_view2attack``); ``tests/test_scripted.py`` checks the moves and
the observation against positions the engine reports.
"""

from __future__ import annotations

import numpy as np

VIEW = 13  # battle's view: radius 6 around the agent
MID = VIEW // 2
NUM_ACTIONS = 21
# (dx, dy) of each move action: the cells within radius 2, row-major over (dy, dx)
MOVES = [(dx, dy) for dy in range(-2, 3) for dx in range(-2, 3) if dx * dx + dy * dy <= 4]
STAY = MOVES.index((0, 0))
ATTACK_BASE = len(MOVES)
# (dx, dy) of each attack action ATTACK_BASE + i: the 8 neighbours, row-major over (dy, dx)
ATTACKS = [(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dx, dy) != (0, 0)]
OBSTACLE, MINE = 0, 1


def _cells(offsets) -> np.ndarray:
    """Flat view indices of (dx, dy) offsets."""
    return np.array([(MID + dy) * VIEW + (MID + dx) for dx, dy in offsets], dtype=np.int64)


class AttackNearest:
    """The rule of the module docstring, for a side's rows of battle observations.

    ``act(obs, mask)`` takes (n, 13 * 13 * C) observations and (n, 21) legal masks (battle gives
    every action) and returns n actions; each row is decided on its own, so rows of different
    environments and agents mix freely."""

    def __init__(self, channels: int, enemy_channel: int, seed: int = 0):
        self.channels = int(channels)
        self.enemy = int(enemy_channel)
        self.rng = np.random.default_rng(seed)
        ys, xs = np.divmod(np.arange(VIEW * VIEW), VIEW)
        dx, dy = xs - MID, ys - MID
        self._moves, self._attacks = _cells(MOVES), _cells(ATTACKS)
        mdx = np.array([m[0] for m in MOVES])[:, None]
        mdy = np.array([m[1] for m in MOVES])[:, None]
        # distance from each move's destination to each view cell, Chebyshev plus a Euclidean tie-break
        cheb = np.maximum(np.abs(dx[None] - mdx), np.abs(dy[None] - mdy))
        self._reach = cheb + 1e-3 * np.hypot(dx[None] - mdx, dy[None] - mdy)  # (13 moves, 169 cells)
        self._dirs = np.stack([mdx[:, 0], mdy[:, 0]], axis=1).astype(np.float64)  # (13, 2)
        self._offsets = np.stack([dx, dy], axis=1).astype(np.float64)  # (169, 2)

    def act(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        n = len(obs)
        view = obs.reshape(n, VIEW * VIEW, self.channels)
        wall = view[:, :, OBSTACLE] > 0
        friend = view[:, :, MINE] > 0
        enemy = view[:, :, self.enemy] > 0
        hp = view[:, :, self.enemy + 1]
        blocked = (wall | friend | enemy)[:, self._moves]  # a move into an occupied cell fails
        blocked[:, STAY] = False
        actions = np.full(n, STAY, dtype=np.int64)

        near = enemy[:, self._attacks]  # (n, 8)
        attack = near.any(axis=1)
        target = np.where(near, hp[:, self._attacks], np.inf).argmin(axis=1)
        actions[attack] = ATTACK_BASE + target[attack]

        seen = enemy.any(axis=1) & ~attack
        if seen.any():
            dist = np.where(enemy[seen][:, None, :], self._reach[None], np.inf).min(axis=2)  # (k, 13)
            actions[seen] = np.where(blocked[seen], np.inf, dist).argmin(axis=1)

        explore = ~enemy.any(axis=1)
        if explore.any():
            rows = np.flatnonzero(explore)
            free = ~wall[rows]
            heading = (free @ self._offsets) / np.maximum(free.sum(axis=1, keepdims=True), 1)  # (k, 2)
            gain = heading @ self._dirs.T  # (k, 13): how far each move goes along the heading
            gain = np.where(blocked[rows], -np.inf, gain)
            gain[:, STAY] = -np.inf
            towards = np.linalg.norm(heading, axis=1) >= 0.5
            noise = self.rng.random(gain.shape)  # open ground: a random free move
            choice = np.where(towards[:, None], gain + 1e-6 * noise, np.where(np.isfinite(gain), noise, -np.inf))
            pick = choice.argmax(axis=1)
            stuck = ~np.isfinite(choice.max(axis=1))  # boxed in: stay
            actions[rows] = np.where(stuck, STAY, pick)

        mask = np.asarray(mask, dtype=bool)
        illegal = ~mask[np.arange(n), actions]
        if illegal.any():  # battle has no masks; a variant with masks gets a random legal action
            for i in np.flatnonzero(illegal).tolist():
                actions[i] = int(self.rng.choice(np.flatnonzero(mask[i])))
        return actions


def attack_nearest(game) -> AttackNearest:
    """The ``evaluation.scripted:attack_nearest`` anchor for a MAgent2 battle ``VectorGame``
    (``envs.teams``); ValueError naming what does not fit."""
    name = getattr(game, "name", type(game).__name__)
    shape = tuple(getattr(game, "obs_shape", ()))
    envs = getattr(game, "envs", None)
    raw = getattr(envs[0], "unwrapped", envs[0]) if envs else None
    grid = getattr(raw, "env", None)
    if len(shape) != 3 or shape[:2] != (VIEW, VIEW) or game.num_actions != NUM_ACTIONS \
            or not hasattr(grid, "get_view2attack") or not hasattr(raw, "minimap_mode"):
        raise ValueError(f"attack_nearest plays MAgent2's battle (a {VIEW}x{VIEW} view, {NUM_ACTIONS} actions, "
                         f"through pettingzoo-parallel:); {name} has observations {shape} and "
                         f"{game.num_actions} actions")
    base, table = grid.get_view2attack(raw.handles[0])
    want = np.full((VIEW, VIEW), -1)
    for i, (dx, dy) in enumerate(ATTACKS):
        want[MID + dy, MID + dx] = i
    if int(base) != ATTACK_BASE or not np.array_equal(np.asarray(table), want):
        raise ValueError(f"attack_nearest: {name}'s attacks are not battle's (8 neighbours after {ATTACK_BASE} moves)")
    enemy = 4 if raw.minimap_mode else 3  # a minimap channel follows each team's HP
    return AttackNearest(shape[2], enemy, seed=int(getattr(game, "seed", None) or 0))
