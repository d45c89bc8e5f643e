"""nash-league from Python: start a league, read its status and its Nash, stop it.

``LeagueRun`` is the launcher's league (``actors.launch``); docs/user-guide.md shows it.
"""

from actors.launch import LeagueRun, StorageInUse
from league.config import ConfigError

__all__ = ["ConfigError", "LeagueRun", "StorageInUse"]
