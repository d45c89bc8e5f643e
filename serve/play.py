"""Games a person plays against the Nash policy, run on the server.

A play session holds one game, the seat of the person and the one mixture member
that plays the whole game for the league (sampled per game, as ``/nash/act``
samples a member per episode). The member sees exactly what a league seat sees
and answers through an ``Agent`` callable, so this module needs no Ray and no
torch.

Every game the league runs can be played. A sequential OpenSpiel game is held as
an OpenSpiel state (the league's seat observes ``envs.openspiel.state_tensor``);
any other game (PettingZoo, matrix, simultaneous OpenSpiel games) as a
``VectorGame`` of one environment (``envs.make_game``), whose ``observe`` is what
the league's seat sees, whose ``render_text`` is the text the person reads and
whose ``action_name`` labels the actions. In a simultaneous-move game the league
chooses from its own observation when the person moves, without seeing the
person's action.

The page that uses it holds no game rules: a session's view lists the legal
actions with their labels and, for board games, which cells play which action;
for Kuhn poker it shows only the cards the person may see; for every other game
a text: OpenSpiel's information-state (or observation) string of the person's
seat, or the ``VectorGame``'s ``render_text`` as of the person's latest turn.
Sessions are bounded in number and expire after ``ttl_s`` idle seconds, so no
client can exhaust memory; a full table refuses new games (429) instead of
evicting someone's game. Views are plain JSON values.

Plain logic, unit-tested without Ray (tests/test_play.py).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from envs import is_matrix_game, make_game
from envs.base import NO_ACTION
from envs.pettingzoo import is_pettingzoo_game

_ENV = np.zeros(1, dtype=np.int64)  # a VectorGame session's one environment, for observe()

# (observation float32 (1, D), legal mask bool (1, A), rng) -> action
Agent = Callable[[np.ndarray, np.ndarray, np.random.Generator], int]
# (OpenSpiel state, rng) -> action: a member that searches from the game's own state (evaluation.search)
Searcher = Callable[[Any, np.random.Generator], int]

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
    returns: tuple[float, float] | None = None  # a VectorGame session's returns once its game ended
    text: str = ""  # a VectorGame session's text as of the person's latest turn
    search: Searcher | None = None  # in a sequential OpenSpiel game: the member plays through search


def playable(game_name: str, params: dict | None = None) -> bool:
    """Whether a game can be played here: any game ``envs.make_game`` builds (every game the league runs)."""
    try:
        make_game(game_name, 1, seed=0, **dict(params or {}))
    except (ValueError, TypeError):
        return False
    return True


def _sequential_openspiel(game_name: str, params: dict | None):
    """The OpenSpiel game, when ``game_name`` is a sequential one (played on its own states), else None
    (any other game ``envs.make_game`` builds: matrix, PettingZoo, a user's ``VectorGame``)."""
    if is_matrix_game(game_name) or is_pettingzoo_game(game_name):
        return None
    # pyspiel only for a game that may be OpenSpiel's, as in envs.make_game
    import pyspiel

    from envs.openspiel import load_two_player_zero_sum

    try:
        game = load_two_player_zero_sum(game_name, params)
    except ValueError:  # not OpenSpiel's
        return None
    return game if game.get_type().dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL else None


class PlayTable:
    """Every game in progress on one API replica."""

    def __init__(self, game_name: str, params: dict | None = None, max_sessions: int = 256, ttl_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        if max_sessions < 1 or ttl_s <= 0:
            raise ValueError("max_sessions must be >= 1 and ttl_s > 0")
        self.name = game_name.split("(")[0]
        self.game_name, self.params = game_name, dict(params or {})
        self.game = _sequential_openspiel(game_name, params)  # None: sessions hold a VectorGame
        if self.game is not None:
            from envs.openspiel import state_tensor  # pyspiel: an OpenSpiel game only

            self.tensor = state_tensor(self.game)
        else:
            make_game(game_name, 1, seed=0, **self.params)  # a ValueError now, not at the first game
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

    def start(self, agent_id: str, agent: Agent, seat: int = 0, seed: int | None = None,
              search: Searcher | None = None) -> dict:
        """A new game with the person in ``seat`` (0 moves first); the league moves first when it has to.
        With ``search`` (sequential OpenSpiel games only) the member's moves come from it, on the
        game's state, instead of from ``agent`` on its seat's observation."""
        if type(seat) is not int or seat not in (0, 1):
            raise PlayError("'seat' must be 0 (you move first) or 1", 422)
        self.purge()
        if len(self.sessions) >= self.max_sessions:
            raise PlayError(f"{self.max_sessions} games are in progress; try again in a few minutes", 429)
        sid = secrets.token_urlsafe(16)
        rng = np.random.default_rng(seed if seed is not None else secrets.randbits(64))
        if self.game is not None:
            state = self.game.new_initial_state()
        else:
            state = make_game(self.game_name, 1, seed=int(rng.integers(2**63)), **self.params)
        session = PlaySession(sid, state, seat, agent_id, agent, rng, self.clock(),
                              search=search if self.game is not None else None)
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
        if self._terminal(s):
            raise PlayError("the game is over; start a new one", 409)
        if type(action) is not int:
            raise PlayError("'action' must be an integer action id from 'legal_actions'", 422)
        legal = self._legal(s)
        if action not in legal:
            raise PlayError(f"action {action} is not legal here; legal: {legal}", 422)
        if self.game is None:
            self._step(s, action)
        else:
            self._apply(s, action, "you")
        self._advance(s)
        return self.view(sid)

    def _terminal(self, s: PlaySession) -> bool:
        return s.returns is not None if self.game is None else s.state.is_terminal()

    def _legal(self, s: PlaySession) -> list[int]:
        if self.game is not None:
            return s.state.legal_actions(s.human)
        return np.flatnonzero(s.state.observe(s.human, _ENV)[1][0]).tolist()

    def _league_action(self, s: PlaySession) -> int:
        """The league's action in a VectorGame session, from what its seat observes."""
        obs, mask = s.state.observe(1 - s.human, _ENV)
        action = int(s.agent(obs, mask, s.rng))
        if not mask[0, action]:  # a policy masks illegal actions; never let a bug corrupt the game
            raise RuntimeError(f"agent {s.agent_id} chose illegal action {action}")
        return action

    def _step(self, s: PlaySession, action: int | None) -> None:
        """One step of a VectorGame session: the person's ``action`` (None: the league moves alone)
        and, where the league's seat moves too, its action."""
        g, league = s.state, 1 - s.human
        acts = np.full((1, 2), NO_ACTION, dtype=np.int64)
        moves = []
        if action is not None:
            acts[0, s.human] = action
            moves.append(("you", action, g.action_name(0, action)))
        if g.movers()[0, league]:
            acts[0, league] = a = self._league_action(s)
            moves.append(("league", a, g.action_name(0, a)))
        result = g.step(acts)
        s.history.extend({"by": by, "action": int(a), "label": label} for by, a, label in moves)
        if result.done[0]:  # the game has already reset itself: keep only the returns
            s.returns = (float(result.returns[0, 0]), float(result.returns[0, 1]))

    def _apply(self, s: PlaySession, action: int, by: str) -> None:
        label = s.state.action_to_string(s.state.current_player(), action)
        s.state.apply_action(action)
        s.history.append({"by": by, "action": action, "label": label})

    def _advance(self, s: PlaySession) -> None:
        """Resolve chance and play the league's moves until the person is to move or the game is over."""
        if self.game is None:
            while s.returns is None:
                if s.state.movers()[0, s.human]:
                    s.text = s.state.render_text(0)
                    return
                self._step(s, None)
            return
        from envs.openspiel import sample_chance  # pyspiel: an OpenSpiel game only (self.game is one)

        while not s.state.is_terminal():
            if s.state.is_chance_node():
                s.state.apply_action(sample_chance(s.state.chance_outcomes(), float(s.rng.random())))
                continue
            player = s.state.current_player()
            if player == s.human:
                return
            mask = np.asarray(s.state.legal_actions_mask(player), dtype=bool)[None]
            if s.search is not None:
                action = int(s.search(s.state.clone(), s.rng))
            else:
                obs = np.asarray(self.tensor(s.state, player), dtype=np.float32)[None]
                action = int(s.agent(obs, mask, s.rng))
            if not mask[0, action]:  # a policy masks illegal actions; never let a bug corrupt the game
                raise RuntimeError(f"agent {s.agent_id} chose illegal action {action}")
            self._apply(s, action, "league")

    # -- what the person sees ---------------------------------------------------------
    def view(self, sid: str) -> dict:
        s = self._session(sid)
        if self.game is None:
            return self._text_view(s)
        import pyspiel

        st = s.state
        terminal = st.is_terminal()
        out: dict[str, Any] = {
            "session": s.sid, "game": self.name, "you": s.human, "agent_id": s.agent_id,
            "to_move": None if terminal else ("you" if st.current_player() == s.human else "league"),
            "terminal": terminal, "history": list(s.history), "legal_actions": [], "result": None,
            "returns": None, "board": None, "cards": None, "search": s.search is not None,
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
            gtype = self.game.get_type()
            if gtype.information == pyspiel.GameType.Information.PERFECT_INFORMATION:
                out["text"] = str(st)  # nothing is hidden: the whole position (Nim's piles, not its move list)
            else:
                out["text"] = (st.information_state_string(s.human) if gtype.provides_information_state_string
                               else st.observation_string(s.human))
        return out

    def _text_view(self, s: PlaySession) -> dict:
        """The view of a VectorGame session: the game's text and its actions by name."""
        terminal = s.returns is not None
        out: dict[str, Any] = {
            "session": s.sid, "game": self.name, "you": s.human, "agent_id": s.agent_id,
            "to_move": None if terminal else "you", "terminal": terminal, "history": list(s.history),
            "legal_actions": [], "result": None, "returns": None, "board": None, "cards": None,
            "search": False, "text": s.text, "expires_in_s": self.ttl_s,
        }
        if terminal:
            mine, theirs = s.returns[s.human], s.returns[1 - s.human]
            out["returns"] = {"you": mine, "league": theirs}
            out["result"] = "win" if mine > theirs else "loss" if mine < theirs else "draw"
        else:
            out["legal_actions"] = [{"action": a, "label": s.state.action_name(0, a)} for a in self._legal(s)]
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
