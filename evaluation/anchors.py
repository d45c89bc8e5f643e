"""Fixed opponents ("anchors") that say how strong a policy is in absolute terms.

A league's payoff and Elo are relative: a pool of weak agents can look strong
against itself. An anchor is an opponent that never learns, so a score against
it means the same thing in every run:

- ``uniform``: a uniformly random legal action, played through the league's
  game protocol (``envs``), so every game the league runs has it;
- ``mcts:N``: OpenSpiel's C++ MCTS bot (UCT, Kocsis & Szepesvari 2006) with N
  simulations per move, a random-rollout evaluator and ``solve=True`` (proven
  wins and losses are backed up, so it never misses a forced win it has
  searched). It is the usual strength ladder for perfect-information games,
  from MCTS-10, which uniform random play rarely beats, to MCTS-1000, which
  AlphaZero-style agents beat (docs/results.md);
- ``pkg.module:factory``: a user's bot. On an OpenSpiel game ``factory(game)``
  gets the ``pyspiel.Game`` and returns an object whose ``step(state)``
  returns an action for the native ``pyspiel.State`` (``restart()`` is called
  between games when it has one). On any other game (a team game, a matrix or
  PettingZoo game, a user's ``VectorGame``) ``factory(game)`` gets the
  ``VectorGame`` (``envs``) and returns an object whose ``act(obs, mask)``
  returns one action per row, played through the game protocol like
  ``uniform``: its side's rows of a step (in a team game one row per acting
  agent, of every environment) in one call. ``evaluation.scripted:attack_nearest``
  is one, for MAgent2's battle.

A policy plays whole games against an anchor, seats alternating (game ``i``:
the policy is seat ``i % 2``), one member of a mixture drawn per game by its
weight. Its score is the game's own score in [0, 1] (``VectorGame.score``):
the return rescaled from the game's utility range (win 1, draw 0.5, loss 0 on
a win/loss game), or a team game's result (1 for the side with more
survivors, or whatever its scoring counts, 0.5 on a tie).
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Sequence

import numpy as np
import pyspiel

from envs import game_info, is_openspiel_game, make_game
from envs.base import NO_ACTION
from envs.openspiel import load_two_player_zero_sum, sample_chance, state_tensor
from evaluation.best_response import evaluate
from evaluation.search import PUCT, SearchSpec
from league.anchors import AnchorSpec, parse_anchor  # noqa: F401 (re-exported: the syntax needs no pyspiel)
from policies.net import sample_rows
from policies.rollout import EpisodeMixture, TwoSeatPlay

UCT_C = 2.0  # OpenSpiel's default exploration constant for MCTSBot
ROLLOUTS = 1  # random rollouts per leaf evaluation (OpenSpiel's examples use 1)
MAX_MEMORY_MB = 1000


class UniformBot:
    """A uniformly random legal action."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)

    def step(self, state) -> int:
        legal = state.legal_actions()
        return int(legal[self._rng.integers(len(legal))])


def make_bot(spec: AnchorSpec, game: pyspiel.Game, seed: int):
    """The bot that plays anchor ``spec`` on ``game``."""
    if spec.kind == "uniform":
        return UniformBot(seed)
    if spec.kind == "mcts":
        if game.get_type().information != pyspiel.GameType.Information.PERFECT_INFORMATION:
            raise ValueError(f"anchor {spec.name!r} needs a perfect-information game; "
                             f"{game.get_type().short_name} is not")
        evaluator = pyspiel.RandomRolloutEvaluator(ROLLOUTS, seed)
        return pyspiel.MCTSBot(game, evaluator, UCT_C, spec.simulations, MAX_MEMORY_MB, True, seed, False)
    bot = _load_factory(spec)(game)
    if not callable(getattr(bot, "step", None)):
        raise ValueError(f"anchor {spec.name!r}: {spec.factory}(game) returned {type(bot).__name__}, "
                         "which has no step(state) method")
    return bot


def _load_factory(spec: AnchorSpec):
    module_name, _, attr = spec.factory.rpartition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"anchor {spec.name!r}: cannot load {spec.factory}: {exc}") from None
    if not callable(factory):
        raise ValueError(f"anchor {spec.name!r}: {spec.factory} is not callable")
    return factory


def make_protocol_bot(spec: AnchorSpec, game):
    """The bot of factory anchor ``spec`` on a game that is not an OpenSpiel game: ``factory(game)``
    with the ``VectorGame``, which must have ``act(obs, mask)``."""
    factory = _load_factory(spec)
    try:
        bot = factory(game)
    except ValueError as exc:
        raise ValueError(f"anchor {spec.name!r}: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # a user's factory that does not fit the game: one line, not a traceback
        raise ValueError(f"anchor {spec.name!r}: {spec.factory}(game) failed: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not callable(getattr(bot, "act", None)):
        raise ValueError(f"anchor {spec.name!r}: {spec.factory}(game) returned {type(bot).__name__}, which has "
                         f"no act(obs, mask) method (a game that is not an OpenSpiel game is played through "
                         f"its VectorGame)")
    return bot


def check_anchor(text: str, game_name: str, params: dict | None = None) -> None:
    """What ``score_against`` needs of an anchor and the game, checked without playing: a
    sequential two-player OpenSpiel game for ``mcts:N`` (perfect information) and for a factory's
    ``step(state)`` bot, which is loaded; on any other game a factory's bot, built on one
    environment of the game, with ``act(obs, mask)``. ValueError naming what is wrong."""
    spec = parse_anchor(text)
    if spec.kind == "uniform":  # plays through the game protocol: any game the league runs
        return
    if not is_openspiel_game(game_name):
        if spec.kind == "mcts":
            raise ValueError(f"anchor {spec.name!r} needs a sequential OpenSpiel game; {game_name} is not one")
        make_protocol_bot(spec, make_game(game_name, 1, seed=0, **(params or {})))
        return
    try:
        game = load_two_player_zero_sum(game_name, params or None)
    except ValueError as exc:
        raise ValueError(f"anchor {spec.name!r} needs an OpenSpiel game: {exc}") from None
    if game.get_type().dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise ValueError(f"anchor {spec.name!r} needs a sequential game; {game_name} is simultaneous-move")
    if spec.kind == "mcts" and game.get_type().information != pyspiel.GameType.Information.PERFECT_INFORMATION:
        raise ValueError(f"anchor {spec.name!r} needs a perfect-information game; {game_name} is not")
    if spec.kind == "factory":
        _load_factory(spec)


def member_action(model, tensor, state, player: int, num_actions: int, rng: np.random.Generator) -> int:
    """``model``'s move (None: uniform play) for ``player`` at OpenSpiel ``state``, drawn from its
    probabilities over the legal moves; ``tensor`` is the game's ``state_tensor``."""
    mask = np.zeros((1, num_actions), dtype=bool)
    mask[0, state.legal_actions(player)] = True
    if model is None:  # uniform random play
        probs = mask / mask.sum()
    else:
        obs = np.asarray(tensor(state, player), dtype=np.float32)[None]
        probs = model.probs(obs, mask).astype(np.float64)
    return int(sample_rows(probs, rng)[0])


def play_game(game: pyspiel.Game, model, bot, policy_seat: int, rng: np.random.Generator,
              search: SearchSpec | None = None, search_rng: np.random.Generator | None = None) -> float:
    """One whole game, ``model`` (an actor-critic, or None for uniform play) in
    ``policy_seat``, ``bot`` in the other; the policy's return. With ``search`` the policy
    plays with PUCT search guided by its network (``evaluation.search``), drawing on ``search_rng``."""
    tensor = state_tensor(game)
    searcher = PUCT(game, model, search, search_rng if search_rng is not None else rng) if search is not None else None
    num_actions = game.num_distinct_actions()
    state = game.new_initial_state()
    if hasattr(bot, "restart"):
        bot.restart()
    while not state.is_terminal():
        if state.is_chance_node():
            state.apply_action(sample_chance(state.chance_outcomes(), rng.random()))
            continue
        player = state.current_player()
        if player == policy_seat and searcher is not None:
            action = searcher.step(state)
        elif player == policy_seat:
            action = member_action(model, tensor, state, player, num_actions, rng)
        else:
            action = int(bot.step(state))
        state.apply_action(action)
    return float(state.returns()[policy_seat])


def score_against(game_name: str, params: dict | None, models: Sequence[Any], weights: Sequence[float],
                  anchor: str, games: int, seed: int = 0, search: SearchSpec | None = None) -> dict:
    """Mean score in [0, 1] of the mixture (``models`` drawn per game by ``weights``;
    a ``None`` model plays uniformly) against ``anchor`` over ``games`` games,
    seats alternating, with a 95% normal-approximation interval. With ``search`` each member
    plays with PUCT search guided by its network (a perfect-information OpenSpiel game)."""
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    spec = parse_anchor(anchor)
    w = np.asarray(weights, dtype=np.float64)
    if len(models) != len(w) or len(w) == 0 or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError("models and weights must be non-empty, of equal length, weights finite, >= 0, not all 0")
    w = w / w.sum()
    rng = np.random.default_rng(seed)
    if spec.kind == "mcts" and not is_openspiel_game(game_name):
        raise ValueError(f"anchor {spec.name!r} needs a sequential OpenSpiel game; {game_name} is not one")
    if search is not None:  # PUCT refuses a game it cannot search
        if not is_openspiel_game(game_name):
            raise ValueError(f"search needs a perfect-information OpenSpiel game; {game_name} is not one")
        scores = _scores_against_bot(game_name, params, models, w, spec, games, seed, rng, search)
    elif spec.kind == "uniform" or (spec.kind == "factory" and not is_openspiel_game(game_name)):
        scores = _scores_through_protocol(game_name, params, models, w, spec, games, rng)
    else:
        scores = _scores_against_bot(game_name, params, models, w, spec, games, seed, rng)
    mean = float(scores.mean())
    half = 1.959964 * float(scores.std(ddof=1)) / math.sqrt(games) if games > 1 else float("nan")
    return {"anchor": spec.name, "score": mean, "ci95": [mean - half, mean + half], "games": games}


class _UniformPlayer:
    """Uniform random play in the learner's seat of ``collect_rollout`` (the ``act`` interface)."""

    def act(self, obs, mask, generator=None, deterministic: bool = False):
        mask = np.asarray(mask, dtype=bool)
        probs = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
        n = len(mask)
        return sample_rows(probs, generator), np.zeros(n, np.float32), np.zeros(n, np.float32)


def protocol_envs(game_name: str, params: dict | None, games: int) -> int:
    """Environments stepped together: up to 64 games at once, fewer in a team game, whose every
    agent's decisions are held until its episode ends (``collect_rollout``); an even number where
    it can be, as each batch of games seats the policy in seat ``e % 2`` of environment ``e``."""
    team_size = game_info(game_name, **(params or {})).team_size
    envs = max(1, min(games, 64 // team_size))
    return envs - envs % 2 if team_size > 1 and envs > 1 else envs


def _scores_through_protocol(game_name: str, params: dict | None, models, w: np.ndarray, spec: AnchorSpec,
                             games: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random play, or a factory's ``act(obs, mask)`` bot, through the game protocol
    (``envs``), so any game the league runs has these anchors; each member plays its share of the
    games (drawn by weight), seats alternating, scored by the game's own ``score``."""
    game = make_game(game_name, protocol_envs(game_name, params, games), seed=int(rng.integers(2**31)),
                     **(params or {}))
    anchor = EpisodeMixture([None], [1.0], rng) if spec.kind == "uniform" else _protocol_anchor(spec, game, rng)
    out = []
    for model, n in zip(models, rng.multinomial(games, w)):
        if n:
            player = _UniformPlayer() if model is None else model
            out.append(evaluate(game, player, anchor, int(n), rng, greedy=False, seats="alternate",
                                value="game_score")[:n])
    return np.concatenate(out)


def _protocol_anchor(spec: AnchorSpec, game, rng: np.random.Generator):
    """Anchor ``spec`` as ``anchor(obs, mask) -> actions`` on the ``VectorGame`` ``game``."""
    if spec.kind == "uniform":
        return lambda obs, mask: _UniformPlayer().act(obs, mask, generator=rng)[0]
    bot = make_protocol_bot(spec, game)

    def anchor(obs, mask):
        actions = np.asarray(bot.act(obs, mask)).reshape(-1)
        if len(actions) != len(obs):
            raise ValueError(f"anchor {spec.name!r}: act returned {len(actions)} actions for {len(obs)} rows")
        return actions
    return anchor


def survivors_trace(game_name: str, params: dict | None, model, anchor: str, seat: int = 0,
                    seed: int = 0) -> dict:
    """One game of a team game, ``model`` (its side in ``seat``) against ``anchor``, with the agents
    each side has acting at every step: what the league page draws as the latest evaluation.
    ``{"anchor", "seat", "survivors": [[policy's, anchor's], ...] (one pair a step, the start
    included), "score"}``; ``score`` is the game's own score of the policy's side."""
    spec = parse_anchor(anchor)
    if spec.kind == "mcts" or (spec.kind == "factory" and is_openspiel_game(game_name)):
        raise ValueError(f"anchor {spec.name!r}: a survivors trace is played through the game protocol "
                         f"(uniform, or a factory anchor of a game that is not an OpenSpiel game)")
    rng = np.random.default_rng(seed)
    game = make_game(game_name, 1, seed=seed, **(params or {}))
    bot = _protocol_anchor(spec, game, rng)
    play = TwoSeatPlay(game, np.array([seat]))
    game.reset(seed)
    survivors = []
    while True:
        alive = game.alive()[0].sum(axis=1)
        survivors.append([int(alive[seat]), int(alive[1 - seat])])
        mine, theirs = play.decisions()
        actions = np.full((1, 2, game.team_size), NO_ACTION, dtype=np.int64)
        if len(mine.rows):
            actions[mine.rows, mine.seats, mine.agents] = model.act(mine.obs, mine.mask, generator=rng)[0]
        if len(theirs.rows):
            actions[theirs.rows, theirs.seats, theirs.agents] = bot(theirs.obs, theirs.mask)
        result = game.step_team(actions)
        if result.done[0]:
            returns = result.returns[:1]
            if getattr(game, "scoring", None) == "survivors":  # the returns are who stands at the end
                survivors.append([int(returns[0, seat]), int(returns[0, 1 - seat])])
            score = float(game.score(returns)[0])
            return {"anchor": spec.name, "seat": int(seat), "survivors": survivors,
                    "score": score if seat == 0 else 1.0 - score}


def _scores_against_bot(game_name: str, params: dict | None, models, w: np.ndarray, spec: AnchorSpec,
                        games: int, seed: int, rng: np.random.Generator,
                        search: SearchSpec | None = None) -> np.ndarray:
    """Whole games on native OpenSpiel states against an MCTS or user bot, seats alternating."""
    game = load_two_player_zero_sum(game_name, params or None)
    lo, hi = float(game.min_utility()), float(game.max_utility())
    bot = make_bot(spec, game, seed)
    # the search's own stream: the bot's (a uniform bot seeded ``seed``) must not replay its draws
    search_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
    scores = np.empty(games)
    for i in range(games):
        model = models[int(rng.choice(len(models), p=w))]
        ret = play_game(game, model, bot, policy_seat=i % 2, rng=rng, search=search, search_rng=search_rng)
        scores[i] = (ret - lo) / (hi - lo) if hi > lo else 0.5
    return scores
