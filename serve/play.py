"""Games a person plays against the Nash policy, run on the server with OpenSpiel.

A play session holds one OpenSpiel state, the seat of the person and the one
mixture member that plays the whole game for the league (sampled per game, as
``/nash/act`` samples a member per episode). The member sees exactly what a
league seat sees (``envs.openspiel.state_tensor``) and answers through an
``Agent`` callable, so this module needs no Ray and no torch.

The page that uses it holds no game rules: a session's view lists the legal
actions with their labels and, for board games, which cells play which action;
for card games it shows only the cards the person may see. Sessions are bounded
in number and expire after ``ttl_s`` idle seconds, so no client can exhaust
memory; a full table refuses new games (429) instead of evicting someone's game.

Plain logic, unit-tested without Ray (tests/test_play.py).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# (observation float32 (1, D), legal mask bool (1, A), rng) -> action
Agent = Callable[[np.ndarray, np.ndarray, np.random.Generator], int]

BOARD_GAMES = {"connect_four": (6, 7), "tic_tac_toe": (3, 3)}
KUHN_CARDS = "JQKA"  # rank order of Kuhn poker's cards (3 by default: J, Q, K)


class PlayError(Exception):
    """A play request that cannot be served (status 4xx)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass
class PlaySession:
    sid: str
    state: Any  # pyspiel.State
    human: int  # the person's seat
    agent_id: str
    agent: Agent
    rng: np.random.Generator
    last_used: float
    history: list[dict] = field(default_factory=list)


def playable(game_name: str) -> bool:
    """Whether a game can be played here: a sequential two-player OpenSpiel game."""
    from envs import is_matrix_game

    if is_matrix_game(game_name):
        return False
    import pyspiel

    from envs.openspiel import load_two_player_zero_sum

    try:
        game = load_two_player_zero_sum(game_name)
    except ValueError:
        return False
    return game.get_type().dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL


class PlayTable:
    """Every game in progress on one API replica."""

    def __init__(self, game_name: str, params: dict | None = None, max_sessions: int = 256, ttl_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        from envs.openspiel import load_two_player_zero_sum, state_tensor

        if max_sessions < 1 or ttl_s <= 0:
            raise ValueError("max_sessions must be >= 1 and ttl_s > 0")
        self.name = game_name.split("(")[0]
        self.game = load_two_player_zero_sum(game_name, params)
        self.tensor = state_tensor(self.game)
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.clock = clock
        self.sessions: dict[str, PlaySession] = {}

    # -- lifecycle -----------------------------------------------------------------
    def purge(self) -> int:
        """Forget sessions idle for longer than the TTL; how many went."""
        now = self.clock()
        gone = [sid for sid, s in self.sessions.items() if now - s.last_used > self.ttl_s]
        for sid in gone:
            del self.sessions[sid]
        return len(gone)

    def start(self, agent_id: str, agent: Agent, seat: int = 0, seed: int | None = None) -> dict:
        """A new game with the person in ``seat`` (0 moves first); the league moves first when it has to."""
        if type(seat) is not int or seat not in (0, 1):
            raise PlayError("'seat' must be 0 (you move first) or 1", 422)
        self.purge()
        if len(self.sessions) >= self.max_sessions:
            raise PlayError(f"{self.max_sessions} games are in progress; try again in a few minutes", 429)
        sid = secrets.token_urlsafe(16)
        rng = np.random.default_rng(seed if seed is not None else secrets.randbits(64))
        session = PlaySession(sid, self.game.new_initial_state(), seat, agent_id, agent, rng, self.clock())
        self._advance(session)
        self.sessions[sid] = session
        return self.view(sid)

    def end(self, sid: str) -> None:
        self._session(sid)
        del self.sessions[sid]

    def _session(self, sid: Any) -> PlaySession:
        s = self.sessions.get(sid) if isinstance(sid, str) else None
        if s is None or self.clock() - s.last_used > self.ttl_s:
            self.sessions.pop(sid, None) if isinstance(sid, str) else None
            raise PlayError("unknown or expired game; start a new one", 404)
        s.last_used = self.clock()
        return s

    # -- moves ---------------------------------------------------------------------
    def move(self, sid: str, action: Any) -> dict:
        """The person plays ``action``; the league answers until it is the person's turn or the game ends."""
        s = self._session(sid)
        if s.state.is_terminal():
            raise PlayError("the game is over; start a new one", 409)
        if type(action) is not int:
            raise PlayError("'action' must be an integer action id from 'legal_actions'", 422)
        legal = s.state.legal_actions(s.human)
        if action not in legal:
            raise PlayError(f"action {action} is not legal here; legal: {legal}", 422)
        self._apply(s, action, "you")
        self._advance(s)
        return self.view(sid)

    def _apply(self, s: PlaySession, action: int, by: str) -> None:
        label = s.state.action_to_string(s.state.current_player(), action)
        s.state.apply_action(action)
        s.history.append({"by": by, "action": action, "label": label})

    def _advance(self, s: PlaySession) -> None:
        """Resolve chance and play the league's moves until the person is to move or the game is over."""
        from envs.openspiel import sample_chance

        while not s.state.is_terminal():
            if s.state.is_chance_node():
                s.state.apply_action(sample_chance(s.state.chance_outcomes(), float(s.rng.random())))
                continue
            player = s.state.current_player()
            if player == s.human:
                return
            obs = np.asarray(self.tensor(s.state, player), dtype=np.float32)[None]
            mask = np.asarray(s.state.legal_actions_mask(player), dtype=bool)[None]
            action = int(s.agent(obs, mask, s.rng))
            if not mask[0, action]:  # a policy masks illegal actions; never let a bug corrupt the game
                raise RuntimeError(f"agent {s.agent_id} chose illegal action {action}")
            self._apply(s, action, "league")

    # -- what the person sees ---------------------------------------------------------
    def view(self, sid: str) -> dict:
        s = self._session(sid)
        st = s.state
        terminal = st.is_terminal()
        out: dict[str, Any] = {
            "session": s.sid, "game": self.name, "you": s.human, "agent_id": s.agent_id,
            "to_move": None if terminal else ("you" if st.current_player() == s.human else "league"),
            "terminal": terminal, "history": list(s.history), "legal_actions": [], "result": None,
            "returns": None, "board": None, "cards": None,
            "expires_in_s": self.ttl_s,
        }
        if terminal:
            mine = float(st.returns()[s.human])
            out["returns"] = {"you": mine, "league": float(st.returns()[1 - s.human])}
            out["result"] = "win" if mine > 0 else "loss" if mine < 0 else "draw"
        else:
            out["legal_actions"] = [{"action": a, "label": st.action_to_string(s.human, a)}
                                    for a in st.legal_actions(s.human)]
        if self.name in BOARD_GAMES:
            out["board"] = self._board(s)
        elif self.name == "kuhn_poker":
            out["cards"] = self._cards(s)
        else:
            out["text"] = (st.information_state_string(s.human) if self.game.get_type().provides_information_state_string
                           else st.observation_string(s.human))
        return out

    def _board(self, s: PlaySession) -> dict:
        rows, cols = BOARD_GAMES[self.name]
        cells = [list(line) for line in str(s.state).split("\n") if line][:rows]
        marks = {"x": "you" if s.human == 0 else "league", "o": "league" if s.human == 0 else "you"}
        grid = [[marks.get(c, "") for c in line] for line in cells]
        clicks = []
        if not s.state.is_terminal() and s.state.current_player() == s.human:
            for a in s.state.legal_actions(s.human):
                where = [[r, a] for r in range(rows)] if self.name == "connect_four" else [[a // cols, a % cols]]
                clicks.append({"action": a, "cells": where})
        return {"rows": rows, "cols": cols, "cells": grid, "clicks": clicks}

    def _cards(self, s: PlaySession) -> dict:
        """Kuhn poker: the person's card always, the league's only once the game is over (a showdown or a fold
        is when a player would see it at a table; revealing it on a fold shows what the policy held)."""
        dealt = [int(t) for t in str(s.state).split()[:2] if t.isdigit()]
        name = lambda c: KUHN_CARDS[c] if c < len(KUHN_CARDS) else str(c)  # noqa: E731
        you = name(dealt[s.human]) if len(dealt) > s.human else None
        league = name(dealt[1 - s.human]) if s.state.is_terminal() and len(dealt) == 2 else None
        return {"you": you, "league": league}
