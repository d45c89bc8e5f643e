"""A group of learner replicas that train one policy data parallel, over ``torch.distributed``.

The updates (``policies.ppo.ppo_update``, ``policies.expert.expert_update``) take a
:class:`ReplicaGroup` and are then the update of ONE learner on the concatenation of the replicas'
batches (replica 0's rows first, then replica 1's, ...): every replica draws the same global
shuffle, trains on the rows of each global minibatch that are its own, and the replicas sum their
gradients (each already divided by the global minibatch's row count) before clipping and stepping,
so that all of them step identically and keep identical parameters.

:meth:`ReplicaGroup.single` is the group of one, the default: it never touches
``torch.distributed`` and every collective is a no-op. :meth:`ReplicaGroup.join` joins a group of
``size`` processes (gloo on CPU, NCCL on GPU) through a ``tcp://`` rendezvous at replica 0's address;
:meth:`ReplicaGroup.leave` ends it. Collectives take tensors on any device: with NCCL a CPU tensor
goes through the process's CUDA device and back.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import torch
from torch import nn


class ReplicaGroup:
    """This process's place in a group of ``size`` replicas: ``rank`` (0 is the first) and the
    collectives the updates use."""

    def __init__(self, rank: int = 0, size: int = 1, backend: str | None = None):
        self.rank, self.size, self.backend = int(rank), int(size), backend
        # where the backend's collectives run: NCCL only on CUDA tensors
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    @classmethod
    def single(cls) -> "ReplicaGroup":
        """The group of one: no ``torch.distributed``, every collective a no-op."""
        return cls()

    @classmethod
    def join(cls, address: str, port: int, rank: int, size: int, backend: str = "gloo",
             timeout_s: float = 600.0) -> "ReplicaGroup":
        """Join the group of ``size`` whose replica 0 listens on ``address:port`` (it opens the port;
        every replica calls this with the same address). Returns when all ``size`` have joined."""
        import torch.distributed as dist

        if backend not in ("gloo", "nccl"):
            raise ValueError(f"a replica group's backend is gloo or nccl, got {backend!r}")
        if not 0 <= rank < size:
            raise ValueError(f"replica rank {rank} out of a group of {size}")
        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a torch.distributed group")
        dist.init_process_group(backend, init_method=f"tcp://{address}:{int(port)}", rank=int(rank),
                                world_size=int(size), timeout=datetime.timedelta(seconds=float(timeout_s)))
        return cls(rank, size, backend)

    def leave(self) -> None:
        """End this process's membership (the group of one has none)."""
        if self.size > 1 or self.backend is not None:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        self.backend = None

    # -- collectives ------------------------------------------------------------------
    def _run(self, op, tensor: torch.Tensor) -> torch.Tensor:
        """``op(t)`` on ``tensor``, or on its copy on the backend's device, copied back."""
        if tensor.device == self.device or (self.backend == "gloo" and tensor.device.type == "cpu"):
            op(tensor)
            return tensor
        moved = tensor.to(self.device)
        op(moved)
        tensor.copy_(moved)
        return tensor

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replace ``tensor`` by its sum over the replicas (in place; returned)."""
        if self.size == 1:
            return tensor
        import torch.distributed as dist

        if tensor.dtype == torch.bool:
            raise TypeError("sum_ takes numbers, not bool")
        return self._run(lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM), tensor)

    def rows_before(self, n_local: int) -> tuple[int, int]:
        """``(offset, total)``: this replica's rows are rows ``offset .. offset + n_local`` of the
        group's concatenated batch of ``total`` rows."""
        if self.size == 1:
            return 0, int(n_local)
        import torch.distributed as dist

        counts = [torch.zeros(1, dtype=torch.int64, device=self.device) for _ in range(self.size)]
        dist.all_gather(counts, torch.tensor([int(n_local)], dtype=torch.int64, device=self.device))
        counts = [int(c.item()) for c in counts]
        return sum(counts[:self.rank]), sum(counts)

    def broadcast_(self, module_or_tensors: nn.Module | Iterable[torch.Tensor], src: int = 0) -> None:
        """Give every replica replica ``src``'s values of a module's parameters and buffers, or of
        the tensors given (in place)."""
        if self.size == 1:
            return
        import torch.distributed as dist

        tensors = (list(module_or_tensors.parameters()) + list(module_or_tensors.buffers())
                   if isinstance(module_or_tensors, nn.Module) else list(module_or_tensors))
        with torch.no_grad():
            for t in tensors:
                if t.dtype == torch.bool:  # the backends move bytes, not bools
                    carried = self._run(lambda x: dist.broadcast(x, src=src), t.to(torch.uint8))
                    t.copy_(carried.bool())
                else:
                    self._run(lambda x: dist.broadcast(x, src=src), t)

    def shared_generator(self, generator: torch.Generator | None) -> torch.Generator | None:
        """The generator every replica draws the same shuffles from: ``generator`` when given (the
        caller seeds it alike on every replica) or in the group of one (None: torch's default);
        else a new one seeded by replica 0's draw from torch's default generator."""
        if generator is not None or self.size == 1:
            return generator
        seed = torch.randint(0, 2**62, (1,), dtype=torch.int64)
        self.broadcast_([seed])
        return torch.Generator().manual_seed(int(seed.item()))

    def sum_gradients_(self, parameters: list[nn.Parameter], extra: torch.Tensor) -> torch.Tensor:
        """Sum the parameters' gradients and ``extra`` (a 1-D float tensor of per-step statistics,
        on the parameters' device) over the replicas, in one flat buffer. A parameter without a
        gradient on one replica counts as zero there, and stays without one only when it has none
        on every replica (as one learner's would: Adam skips it). Returns the summed ``extra``."""
        if self.size == 1:
            return extra
        device, dtype = extra.device, extra.dtype
        parts = [p.grad.reshape(-1).to(dtype) if p.grad is not None else torch.zeros(p.numel(), device=device,
                                                                                     dtype=dtype)
                 for p in parameters]
        has = torch.tensor([p.grad is not None for p in parameters], dtype=dtype, device=device)
        flat = self.sum_(torch.cat(parts + [has, extra]))
        start = 0
        counted = flat[-len(extra) - len(parameters):-len(extra)].tolist() if parameters else []
        for p, n_has in zip(parameters, counted):
            n = p.numel()
            if n_has > 0:
                grad = flat[start:start + n].view_as(p).to(p.dtype)
                if p.grad is None:
                    p.grad = grad.clone()
                else:
                    p.grad.copy_(grad)
            else:
                p.grad = None
            start += n
        return flat[len(flat) - len(extra):].clone()  # not a view: the buffer is the size of the net
