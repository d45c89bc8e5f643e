"""nash-league from Python: start a league, read its status and its Nash, stop it.

``LeagueRun`` is the launcher's league (``actors.league_run``); docs/user-guide.md shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from league.config import ConfigError

if TYPE_CHECKING:
    from actors.league_run import LeagueRun
    from actors.preflight import StorageInUse

__all__ = ["ConfigError", "LeagueRun", "StorageInUse"]


def __getattr__(name: str) -> Any:
    """``LeagueRun`` and ``StorageInUse`` on first use: ``LeagueRun`` imports Ray and
    ``StorageInUse``'s module the games, and the console script (this package's ``cli``) checks a
    config before either is imported, so that a bad one is one line."""
    if name == "LeagueRun":
        from actors.league_run import LeagueRun

        return LeagueRun
    if name == "StorageInUse":
        from actors.preflight import StorageInUse

        return StorageInUse
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
