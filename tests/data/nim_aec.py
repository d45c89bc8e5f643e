"""Nim with a pile of 5 stones, a user's own PettingZoo AEC game for the tests.

Loaded the way the league loads a user's AEC game, by module path:
``game: {name: "pettingzoo:tests.data.nim_aec", params: {render_mode: ansi}}``. The two
players take turns taking 1 stone (action 0) or 2 stones (action 1); whoever takes the last
stone wins (+1, the other -1): the take-away game of ``tests/data/takeaway.py`` with at most 2
taken. With 5 stones the first player wins by taking 2 and then leaving a multiple of 3. It names
no actions, so the league page labels them by index and shows the game's ANSI rendering.
"""

from __future__ import annotations

from tests.data.takeaway import raw_env as TakeAway


class raw_env(TakeAway):
    metadata = {"name": "nim_aec", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, stones: int = 5, render_mode: str | None = None):
        super().__init__(stones=stones, max_take=2, render_mode=render_mode)
