"""The one reader of a league run's store, for every tool that measures, exports or reports a run.

    with StoredRun("runs/kuhn", game="kuhn_poker") as run:
        ids, models, weights = run.nash_mixture()   # the latest published mixture
        model = run.agent("main_agent-0-v3")         # one snapshot

opens ``RUN_DIR/league.db`` read-only (``LeagueStore(readonly=True)``: SQLite ``mode=ro``; a tool
never writes to the run it reads) and refuses, before any work, with a ``league.errors.UsageError``
naming the option and the reason: a missing file, an empty (0-byte) file, a file that is not a
league store, and, with ``game``, a store that records another game. An unknown snapshot id is
refused naming the id and the first few ids the store holds. The folders the run's own modules
(a user's game, network, anchors) were imported from, as the store records them
(``league.imports``), join ``sys.path``, so a tool loads a user's game from any directory.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from league.errors import UsageError
from league.imports import add_import_folders
from league.store import LeagueStore, StoreError, game_of

if TYPE_CHECKING:
    from policies.net import PolicyNet

KNOWN_IDS_SHOWN = 5  # an unknown --agent lists this many of the ids the store holds


class StoredRun:
    """A league store opened read-only, its game checked (module docstring). ``option`` is the
    command-line option that named ``storage``, so that a refusal names what the user typed."""

    def __init__(self, storage: str | os.PathLike, game: str | None = None, option: str = "--storage"):
        self.storage = str(storage)
        try:
            self.store = LeagueStore(storage, create=False, readonly=True)
        except StoreError as exc:
            raise UsageError(option, exc) from None
        self.path = self.store.path
        self.game = game_of(self.store.get_meta("game"), self.store.get_meta("config"))
        self.game_params: dict[str, Any] = self.store.get_meta("game_params") or {}
        add_import_folders(self.store.get_meta("import_paths"))  # a user's game, network, anchors
        if game is not None and self.game is not None and game != self.game:
            self.store.close()
            raise UsageError(f"--game {game}", f"{self.path} holds a {self.game} league")

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "StoredRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def agent_ids(self) -> list[str]:
        """The snapshots in the pool now (those whose weights the store holds), oldest first."""
        return [r.agent_id for r in self.store.agents()]

    def agent(self, agent_id: str) -> PolicyNet:
        """Snapshot ``agent_id`` as a network; an id the store has no weights for is a UsageError
        naming it and the first ids it has."""
        try:
            blob = self.store.snapshot_blob(agent_id)
        except KeyError:
            known = self.agent_ids()
            shown = ", ".join(known[:KNOWN_IDS_SHOWN]) + (f", ... ({len(known)} in all)"
                                                          if len(known) > KNOWN_IDS_SHOWN else "")
            raise UsageError(f"--agent {agent_id}", f"no snapshot {agent_id!r} in {self.path} "
                                                    f"(known: {shown or 'none'})") from None
        # torch is loaded only when a network is asked for: a store is read and refused without it
        from policies.snapshot import policy_from_bytes

        return policy_from_bytes(blob)

    def nash(self) -> dict[str, Any]:
        """The latest published Nash mixture's row (``LeagueStore.latest_nash``); a UsageError when
        the league has published none yet."""
        nash = self.store.latest_nash()
        if not nash:
            raise UsageError("--storage", f"the league in {self.storage} has no published Nash mixture yet")
        return nash

    def nash_mixture(self) -> tuple[list[str], list[PolicyNet], list[float]]:
        """The latest published mixture's members of positive weight: ``(agent_ids, models, weights)``."""
        nash = self.nash()
        members = [(i, float(w)) for i, w in zip(nash["ids"], nash["weights"]) if float(w) > 0]
        return [i for i, _ in members], [self.agent(i) for i, _ in members], [w for _, w in members]

    def subject(self, agent_id: str | None = None) -> tuple[list[str], list[PolicyNet], list[float]]:
        """What a run plays when measured: its published mixture, or with ``agent_id`` that snapshot
        alone, weight 1."""
        if agent_id is None:
            return self.nash_mixture()
        return [agent_id], [self.agent(agent_id)], [1.0]


def stored_game(storage: str | os.PathLike, option: str = "--storage") -> tuple[str | None, dict[str, Any]]:
    """A run's game name (None where the store records none) and its parameters."""
    with StoredRun(storage, option=option) as run:
        return run.game, run.game_params


def load_agent(storage: str | os.PathLike, agent_id: str, game: str | None = None) -> PolicyNet:
    """Snapshot ``agent_id`` of the run in ``storage`` (``StoredRun.agent``)."""
    with StoredRun(storage, game) as run:
        return run.agent(agent_id)


def load_nash_mixture(storage: str | os.PathLike, game: str | None = None):
    """The run's latest published mixture: ``(agent_ids, models, weights)`` (``StoredRun.nash_mixture``)."""
    with StoredRun(storage, game) as run:
        return run.nash_mixture()


def load_subject(storage: str | os.PathLike, agent_id: str | None = None, game: str | None = None):
    """The run's published mixture, or snapshot ``agent_id`` alone (``StoredRun.subject``)."""
    with StoredRun(storage, game) as run:
        return run.subject(agent_id)
