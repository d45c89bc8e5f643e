"""Which torch device a learner trains on.

``learner.device``: ``auto`` trains on CUDA when the learner was given a GPU
(Ray sets CUDA_VISIBLE_DEVICES to the actor's GPUs, so ``cuda`` is the first
of those) and on the CPU otherwise; ``cpu``, ``cuda`` and ``cuda:N`` are taken
as they are. Snapshots and checkpoints are always written from CPU tensors
(policies.snapshot), so CPU-only rollout workers and replicas load them.
"""

from __future__ import annotations

import torch


def resolve_device(requested: str, gpu_ids, cuda_available: bool | None = None) -> torch.device:
    """The device for ``requested`` given the GPUs the actor holds (``ray.get_gpu_ids()``)."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "auto":
        return torch.device("cuda") if len(gpu_ids) > 0 and cuda_available else torch.device("cpu")
    if requested == "cuda" or requested.startswith("cuda:"):
        if not cuda_available:
            raise ValueError(f"learner.device={requested} but torch sees no CUDA device here "
                             f"(GPUs given to this actor: {list(gpu_ids)}); use learner.device=auto or cpu")
        return torch.device(requested)
    raise ValueError(f"learner.device must be auto, cpu, cuda or cuda:N, got {requested!r}")
