"""Learner groups: one role instance trained by ``learner.replicas`` learner processes, data parallel.

Replica 0 is the role instance's learner as the rest of the league knows it (``learner:<id>``): it
talks to the coordinator (progress, snapshots, checkpoints, resets) and answers the other
learners' rollout workers for live weights. Replicas 1..N-1 (``learner:<id>:<k>``) each take
the batches of their own rollout workers. Every update is the update of one learner on the
union of the replicas' batches (``policies.replica_group``): the replicas end each update with the
same parameters, the same version and the same step count.

The replicas meet in a ``torch.distributed`` process group (gloo; NCCL where every replica has a
GPU of its own) through this module's ``Rendezvous`` actor, one per group: replica 0 posts its
address, the others wait for it, and all join. A replica that dies breaks the group: the others
fail at their next collective and exit, Ray restarts each of them, and the restarted replicas meet
in the next generation, where replica 0 (restored from the role instance's last checkpoint, as any
restarted learner is) sends its whole state to the others. Nothing the coordinator acknowledged is
lost: results and snapshots never pass through a follower, and replica 0's snapshots go through
its outbox as a single learner's do.

The replicas are placed by a Ray placement group of one bundle each: packed on one node, or spread
over the nodes with ``learner.scheduling: spread``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING

import ray

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

JOIN_POLL_SECONDS = 0.2
# A collective starts only once every replica is ready for it (``RendezvousImpl.barrier``): a peer
# that does not answer within this long is gone.
COLLECTIVE_TIMEOUT_SECONDS = 300.0


class RendezvousImpl:
    """Where the replicas of one group meet, generation after generation, and agree on each update.

    ``join(rank, address)`` enters the current generation, or opens the next one when ``rank`` is
    already in it (a restarted replica: the generation it was in is broken). ``address(generation)``
    is replica 0's ``(host, port)`` once every rank has joined that generation, None while some
    are missing, and "stale" when a later generation was opened meanwhile (the caller joins again).

    ``barrier(generation, rank, update)`` returns "go" once every replica of the generation is ready
    for that update, so that no replica waits inside a collective for a peer that will not come:
    "stop" once the league is stopping (``stop()``: the replicas keep their batches and train no
    more), and "broken" when a later generation was opened (the caller's group lost a replica).
    """

    def __init__(self, size: int):
        self.size = int(size)
        # numbered from the clock: a restarted rendezvous never reopens a generation some replica is in
        self.generation = time.time_ns()
        self.members: set[int] = set()
        self.leader: tuple[str, int] | None = None
        self.stopping = False
        self.ready: dict[tuple[int, int], set[int]] = {}
        self.events: dict[tuple[int, int], asyncio.Event] = {}
        self.changed = asyncio.Event()  # set (and replaced) whenever a generation breaks or the league stops

    def join(self, rank: int, address: tuple[str, int] | None = None) -> int:
        if rank in self.members:
            self.generation += 1
            self.members, self.leader = set(), None
            self.ready, self.events = {}, {}
            self._wake()
        self.members.add(int(rank))
        if rank == 0:
            self.leader = (str(address[0]), int(address[1]))
        return self.generation

    def address(self, generation: int):
        if generation != self.generation:
            return "stale"
        if len(self.members) == self.size and self.leader is not None:
            return self.leader
        return None

    async def barrier(self, generation: int, rank: int, update: int) -> str:
        key = (int(generation), int(update))
        while True:
            if self.stopping:
                return "stop"
            if generation != self.generation:
                return "broken"
            arrived = self.ready.setdefault(key, set())
            arrived.add(int(rank))
            event = self.events.setdefault(key, asyncio.Event())
            if len(arrived) == self.size:
                event.set()
            if event.is_set():
                return "go"
            changed = self.changed
            waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(changed.wait())]
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()

    def stop(self) -> bool:
        self.stopping = True
        self._wake()
        return True

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


Rendezvous = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(RendezvousImpl)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def join_group(rendezvous, rank: int, size: int, backend: str):
    """Join the group's current generation: its number and this process's
    ``policies.replica_group.ReplicaGroup`` of ``size``."""
    from policies.replica_group import ReplicaGroup

    host = ray.util.get_node_ip_address()
    while True:
        mine = (host, free_port(host)) if rank == 0 else None
        generation = ray.get(rendezvous.join.remote(rank, mine))
        while (address := ray.get(rendezvous.address.remote(generation))) is None:
            time.sleep(JOIN_POLL_SECONDS)
        if address == "stale":
            continue
        log.info("replica %d/%d joins generation %d at %s:%d", rank, size, generation, *address)
        return generation, ReplicaGroup.join(address[0], address[1], rank, size, backend=backend,
                                             timeout_s=COLLECTIVE_TIMEOUT_SECONDS)


def broadcast_bytes(group, data: bytes | None) -> bytes:
    """Replica 0's ``data`` on every replica (the others pass None)."""
    import torch  # here: the rendezvous actor's process, which imports this module, needs no torch

    size = torch.tensor([len(data) if group.rank == 0 else 0], dtype=torch.int64)
    group.broadcast_([size])
    payload = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if group.rank == 0
               else torch.empty(int(size.item()), dtype=torch.uint8))
    group.broadcast_([payload])
    return payload.numpy().tobytes()


def backend_for(device: torch.device, gpus_per_replica: float) -> str:
    """NCCL where each replica has a GPU of its own; gloo otherwise (it also moves CUDA tensors)."""
    return "nccl" if device.type == "cuda" and gpus_per_replica >= 1 else "gloo"


def replica_name(learner_id: str, rank: int) -> str:
    return f"learner:{learner_id}" if rank == 0 else f"learner:{learner_id}:{rank}"


def replica_options(section, placement_group, rank: int) -> dict:
    """The ``.options(...)`` that put replica ``rank`` in its bundle of the group's placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from actors.placement import learner_options

    options = learner_options(section)
    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
        placement_group=placement_group, placement_group_bundle_index=rank)
    return options


def placement_for(section, replicas: int):
    """One bundle per replica (the learner's CPUs, GPUs and custom resources): packed on a node, or
    spread over the nodes with ``learner.scheduling: spread``."""
    from ray.util.placement_group import placement_group

    bundle = {"CPU": float(section.num_cpus)}
    if section.num_gpus:
        bundle["GPU"] = float(section.num_gpus)
    bundle.update({k: float(v) for k, v in section.resources.items()})
    bundle = {k: v for k, v in bundle.items() if v > 0} or {"CPU": 0.01}
    strategy = "SPREAD" if section.scheduling == "spread" else "PACK"
    return placement_group([dict(bundle) for _ in range(replicas)], strategy=strategy)
