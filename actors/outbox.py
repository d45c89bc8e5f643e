"""Outbox: a sender's durable record of what it sent and what was acknowledged.

A rollout worker, an evaluator or a learner can be killed at any instant,
including after the coordinator committed its message and before the reply
arrived. The outbox makes such a message exactly-once:

1. ``stage(seq, arrays)`` writes the message to ``SOURCE.pending.npz`` before
   it is sent (numbered by ``next_seq``, so no sequence number is ever reused,
   not even by a restarted sender);
2. ``acked(seq, n, ids)`` adds it to the sender's ledger ``SOURCE.json`` (batches,
   items, ids acknowledged) once the reply came, and drops the pending file;
3. a restarted sender finds the pending message (``pending()``) and sends it again
   under the same ``seq``; the coordinator is idempotent per (source, seq), so
   it is stored once whichever side of the commit the kill fell on.

A rollout worker playing in groups (``objective.k_opponents``) stages a *delivery*
(``stage_delivery``): the complete groups' result batch, their transitions and their
``EpisodeGroups``, in one file, acknowledged once both the coordinator and the learner
replied. The learner is idempotent per (source, seq) too (:class:`DeliveryLog`), so a
group reaches it once, and its games the store once, whichever replies the kill cut off.

Files live in this node's own folder for the run (:func:`node_run_dir`), never
inside ``run.storage``, which only the coordinator opens; they are replaced atomically
(write + rename), which survives a killed process; they are not fsynced, so a
power cut may lose the last acknowledgement record (never a stored result).
The ledger is the senders' own account that tests and ``operations.chaos`` compare
with the store: items acknowledged == items stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import zipfile
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from league.messages import EpisodeGroups, ResultBatch

if TYPE_CHECKING:  # the launcher reads its lock's folder (node_run_dir) before torch loads
    from policies.rollout import Rollout


def node_run_dir(storage: str | os.PathLike) -> Path:
    """This node's own folder for the run stored at ``storage`` (senders' outboxes, the
    launcher's lock and session marker), named after the storage path.

    It lies under the node's temporary directory, not inside ``run.storage``: only the
    coordinator opens the store's folder, so that on a cluster no other node needs it
    (docs/cluster.md)."""
    path = os.path.abspath(os.fspath(storage))
    key = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "nash-league" / "runs" / f"{Path(path).name}-{key}"


def outbox_dir(storage: str | os.PathLike) -> Path:
    return node_run_dir(storage) / "outbox"


class Outbox:
    def __init__(self, storage: str | os.PathLike, source: str):
        self.source = source
        folder = outbox_dir(storage)
        folder.mkdir(parents=True, exist_ok=True)
        name = quote(source, safe="")
        self.ledger_path = folder / f"{name}.json"
        self.pending_path = folder / f"{name}.pending.npz"
        self.ledger = read_ledger(self.ledger_path) or {"source": source, "seq": 0, "batches": 0, "items": 0, "ids": []}
        pending = self.pending()
        if self.ledger["seq"] == 0:
            # no ledger (first life, or a node without the run's folder): start from the clock,
            # far above anything a past life of this sender could have used
            self.ledger["seq"] = int(time.time() * 1000) * 1000
        if pending is not None:
            self.ledger["seq"] = max(self.ledger["seq"], pending[0])
        self.staged = None if pending is None else pending[0]  # the staged message's seq (kept, not re-read)

    def next_seq(self) -> int:
        """A sequence number never used before by this source (also across restarts)."""
        # not persisted here: a number that was sent is either staged (pending) or acknowledged
        # (in the ledger), and a restarted sender starts above both
        self.ledger["seq"] += 1
        return self.ledger["seq"]

    def stage(self, seq: int, arrays: dict[str, Any]) -> None:
        """Keep a message until it is acknowledged (``arrays``: name -> numpy array or scalar)."""
        tmp = self.pending_path.with_suffix(".tmp.npz")
        np.savez(tmp, seq=np.int64(seq), **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, self.pending_path)
        self.staged = seq

    def pending(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """The staged, unacknowledged message (seq, arrays), if any (never unpickled)."""
        if not self.pending_path.exists():
            return None
        try:
            with np.load(self.pending_path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # unreadable: treated as never sent
            self._unstage()
            return None
        return int(arrays.pop("seq")), arrays

    def acked(self, seq: int, items: int, ids: list[str] | None = None) -> None:
        """The coordinator stored message ``seq`` (``items`` results, or snapshot ``ids``)."""
        if self.staged != seq:
            return  # acknowledged before (a retry of a message already booked)
        if self.ledger.get("last_acked") == seq:
            # booked by a life killed between writing the ledger and dropping the message
            self._unstage()
            return
        self.ledger["last_acked"] = seq
        self.ledger["batches"] += 1
        self.ledger["items"] += int(items)
        self.ledger["ids"].extend(ids or [])
        self.ledger["seq"] = max(self.ledger["seq"], seq)
        self._write_ledger()
        self._unstage()

    def drop(self) -> None:
        """Give up the staged message (the coordinator rejected it as invalid: it is not stored)."""
        self._unstage()

    def _unstage(self) -> None:
        self.pending_path.unlink(missing_ok=True)
        self.staged = None

    def _write_ledger(self) -> None:
        tmp = self.ledger_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.ledger))
        os.replace(tmp, self.ledger_path)

    @property
    def items(self) -> int:
        return int(self.ledger["items"])

    # -- result batches (league.messages.ResultBatch) -------------------------------
    def stage_batch(self, batch) -> None:
        self.stage(batch.seq, batch.to_arrays())

    def pending_batch(self):
        """The staged result batch (a ``ResultBatch`` under its original seq), if any."""
        pending = self.pending()
        return None if pending is None else ResultBatch.from_arrays(self.source, *pending)

    # -- group deliveries (objective.k_opponents: games, transitions and groups as one) ----
    def stage_delivery(self, batch, rollout, groups) -> None:
        """Keep a grouped worker's delivery until the coordinator and the learner both acknowledged it:
        the groups' games (``batch``, a ResultBatch), their transitions (``rollout``, a
        ``policies.rollout.Rollout``) and their ``EpisodeGroups`` (numbered ``batch.seq``), written as one
        file in one step, so that a kill leaves all of it staged or none of it."""
        if groups.seq != batch.seq or groups.source != self.source:
            raise ValueError(f"a delivery's groups must carry its number {batch.seq} and source {self.source!r}")
        self.stage(batch.seq, {**batch.to_arrays(),
                               **{f"r_{f.name}": getattr(rollout, f.name) for f in fields(rollout)},
                               "g_ids": groups.ids, "g_version": groups.version,
                               "g_opponents": np.array(groups.opponents, dtype=str), "g_opponent": groups.opponent,
                               "g_outcomes": groups.outcomes, "g_played": groups.played, "g_acted": groups.acted})

    def pending_delivery(self):
        """The staged message as ``(ResultBatch, Rollout | None, EpisodeGroups | None)`` under its original
        seq (a plain result batch comes with two Nones), or None when nothing is staged."""
        pending = self.pending()
        if pending is None:
            return None
        seq, arr = pending
        batch = ResultBatch.from_arrays(self.source, seq, arr)
        if "g_ids" not in arr:
            return batch, None, None
        from policies.rollout import Rollout

        rollout = Rollout(**{f.name: arr[f"r_{f.name}"] for f in fields(Rollout) if f"r_{f.name}" in arr})
        groups = EpisodeGroups(self.source, arr["g_ids"], arr["g_version"], tuple(arr["g_opponents"].tolist()),
                               arr["g_opponent"], arr["g_outcomes"], arr["g_played"], arr["g_acted"], seq=seq)
        return batch, rollout, groups


class DeliveryLog:
    """A receiver's record of the numbered deliveries it took: each ``(source, seq)`` is taken once.

    The receiving side of an outbox whose sender does not see a reply as a store would: a learner
    taking group deliveries keeps no table of them, only this window of the last ``window`` numbers
    per source. That suffices because a sender has one delivery staged at a time and re-sends only
    that one, so a repeat is always among its latest numbers.
    """

    def __init__(self, window: int = 1024):
        self.window = int(window)
        self._seen: dict[str, dict[int, int]] = {}  # source -> seq -> groups in it, oldest first
        self.taken = 0  # deliveries taken
        self.groups = 0  # groups in them
        self.repeats = 0  # deliveries refused as taken before

    def take(self, source: str, seq: int, groups: int = 0) -> bool:
        """True the first time ``(source, seq)`` arrives (it is booked), False for a repeat."""
        seen = self._seen.setdefault(source, {})
        if seq in seen:
            self.repeats += 1
            return False
        seen[seq] = int(groups)
        if len(seen) > self.window:
            del seen[next(iter(seen))]
        self.taken += 1
        self.groups += int(groups)
        return True

    def recent(self, source: str) -> dict[int, int]:
        """The numbers taken lately from ``source`` (at most ``window``), with the groups each brought."""
        return dict(self._seen.get(source, {}))


def read_ledger(path: str | os.PathLike) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def ledgers(storage: str | os.PathLike) -> list[dict[str, Any]]:
    """Every sender's ledger of a run, with ``pending`` True where a message awaits its acknowledgement."""
    out = []
    folder = outbox_dir(storage)
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        ledger = read_ledger(path)
        if ledger is not None:
            pending = path.with_name(path.name[: -len(".json")] + ".pending.npz")
            out.append({**ledger, "pending": pending.exists()})
    return out
