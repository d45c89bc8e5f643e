"""The agent pool: every frozen snapshot the league has produced.

A record names a snapshot (id, version, role, the learner that produced it,
its parent, when and at which learner step it was taken). The pool keeps at
most ``max_size`` records; eviction drops the oldest record that neither
carries Nash weight nor is the latest snapshot of a learner, so the current
Nash mixture and every learner's newest self stay playable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable, Protocol

from league.config import ROLE_CONFIGS, RoleConfig
log = logging.getLogger(__name__)


class RoleName(str, Enum):
    """A role's name as records and the store hold it: ``AgentType`` has one member per role config
    (``league.config.ROLE_CONFIGS``), its name the role's in capitals, its value the role's."""

    @property
    def config(self) -> type[RoleConfig]:
        """The role's config class (``main``: whether it is the main role)."""
        return ROLE_CONFIGS[self.value]

    @classmethod
    def main(cls) -> "RoleName":
        """The main role: what exploiters target, what seed snapshots and untyped records join as."""
        return next(t for t in cls if t.config.main)

    @classmethod
    def parse(cls, value: "RoleName | str") -> "RoleName":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            try:
                return cls[str(value).upper()]
            except KeyError:
                choices = ", ".join(t.value for t in cls)
                raise ValueError(f"unknown agent type {value!r}; expected one of {choices}") from None


AgentType = RoleName("AgentType", [(name.upper(), name) for name in ROLE_CONFIGS], module=__name__)


@dataclass
class AgentRecord:
    agent_id: str
    version: int
    agent_type: AgentType
    learner_id: str | None = None
    parent_id: str | None = None
    step: int = 0
    created_at: float = field(default_factory=time.time)
    metadata: dict[str, Any] = field(default_factory=dict)
    snapshot_path: str | None = None

    @property
    def id(self) -> str:
        return self.agent_id

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["agent_type"] = self.agent_type.value
        return d


class PoolManifest(Protocol):
    """A pool's records kept outside the pool, read once and told every change."""

    def records(self) -> list[AgentRecord]: ...

    def changed(self, added: AgentRecord | None = None, removed: Iterable[str] = ()) -> None: ...


class AgentPool:
    """Records of frozen agents, in insertion order.

    ``manifest``: where the records are read from and every change is written to (``records()``,
    ``changed(added, removed)``), as the predecessor tutorial's persistent pool does
    (``league.tutorial``). The league itself persists its pool through ``league.membership``.
    """

    def __init__(self, manifest: PoolManifest | None = None, max_size: int | None = None):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._records: dict[str, AgentRecord] = {}
        self._versions: dict[str, int] = {}
        self._protected: set[str] = set()
        self._manifest = manifest
        if manifest is not None:
            for record in manifest.records():
                self.insert(record)

    # -- queries ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._records

    def get(self, agent_id: str) -> AgentRecord:
        try:
            return self._records[agent_id]
        except KeyError:
            raise ValueError(f"unknown agent id {agent_id!r}") from None

    def list(
        self,
        agent_type: AgentType | str | None = None,
        learner_id: str | None = None,
    ) -> list[AgentRecord]:
        kind = AgentType.parse(agent_type) if agent_type is not None else None
        return [
            r
            for r in self._records.values()
            if (kind is None or r.agent_type == kind) and (learner_id is None or r.learner_id == learner_id)
        ]

    def ids(self) -> list[str]:
        return list(self._records)

    def latest(self, learner_id: str) -> AgentRecord | None:
        records = self.list(learner_id=learner_id)
        return records[-1] if records else None

    def counts_by_type(self) -> dict[str, int]:
        counts = {t.value: 0 for t in AgentType}
        for r in self._records.values():
            counts[r.agent_type.value] += 1
        return counts

    # -- changes ---------------------------------------------------------
    def add(
        self,
        snapshot_path: str | None = None,
        agent_type: AgentType | str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        learner_id: str | None = None,
        parent_id: str | None = None,
        step: int = 0,
        agent_id: str | None = None,
        created_at: float | None = None,
    ) -> AgentRecord:
        """Add a snapshot (of the main role unless ``agent_type`` says); returns its record. Evicts
        beyond ``max_size``."""
        kind = AgentType.main() if agent_type is None else AgentType.parse(agent_type)
        lineage = learner_id or kind.value
        version = self._versions.get(lineage, 0) + 1
        if agent_id is None:
            agent_id = f"{lineage}-v{version}"
        if agent_id in self._records:
            raise ValueError(f"agent id {agent_id!r} is already in the pool")
        if parent_id is not None and not isinstance(parent_id, str):
            raise ValueError(f"parent_id must be a string, got {type(parent_id).__name__}")
        record = AgentRecord(
            agent_id=agent_id,
            version=version,
            agent_type=kind,
            learner_id=learner_id,
            parent_id=parent_id,
            step=int(step),
            created_at=time.time() if created_at is None else float(created_at),
            metadata=dict(metadata or {}),
            snapshot_path=snapshot_path,
        )
        self.insert(record)
        evicted = self.evict()
        if self._manifest is not None:
            self._manifest.changed(record, [r.agent_id for r in evicted])
        return record

    def insert(self, record: AgentRecord) -> None:
        """Insert an existing record as is (restoring from storage)."""
        if record.agent_id in self._records:
            raise ValueError(f"agent id {record.agent_id!r} is already in the pool")
        self._records[record.agent_id] = record
        lineage = record.learner_id or record.agent_type.value
        self._versions[lineage] = max(self._versions.get(lineage, 0), record.version)

    def remove(self, agent_id: str) -> AgentRecord:
        record = self.get(agent_id)
        del self._records[agent_id]
        self._protected.discard(agent_id)
        if self._manifest is not None:
            self._manifest.changed(removed=[agent_id])
        return record

    def protect(self, agent_ids: Iterable[str]) -> None:
        """Mark the agents that must not be evicted (those with Nash weight)."""
        self._protected = {a for a in agent_ids if a in self._records}

    def evictable(self) -> list[str]:
        """Ids that eviction may drop, oldest first."""
        latest = {r.learner_id: r.agent_id for r in self._records.values() if r.learner_id is not None}
        keep = self._protected | set(latest.values())
        return [a for a in self._records if a not in keep]

    def evict(self) -> list[AgentRecord]:
        """Drop the oldest evictable records until the pool fits ``max_size``."""
        if self.max_size is None or len(self._records) <= self.max_size:
            return []
        excess = len(self._records) - self.max_size
        victims = self.evictable()[:excess]
        if len(victims) < excess:
            log.warning(
                "pool holds %d agents (max %d) but only %d can be evicted: the rest carry Nash "
                "weight or are a learner's latest snapshot",
                len(self._records), self.max_size, len(victims),
            )
        removed = [self._records.pop(a) for a in victims]
        return removed
