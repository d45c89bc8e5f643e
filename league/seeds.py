"""Every random stream of a run derives from ``run.seed`` through numpy's ``SeedSequence``.

A stream is named by a path of strings and integers, ``("learner",
"main_agent-0")`` or ``("worker", "worker:main_agent-0:0", "lane", 1)``, turned
into the sequence's ``spawn_key``. Strings enter through a fixed hash
(BLAKE2b), never Python's ``hash()``, which is salted per process: the same
``run.seed`` gives the same streams in every process, on every machine and
after every restart. Distinct paths give statistically independent streams
(the SeedSequence guarantee), unlike seeds made by arithmetic (``seed * 1000 +
k``), which collide across runs whose seeds differ by a multiple.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _word(part: str | int) -> int:
    if isinstance(part, bool) or not isinstance(part, (str, int)):
        raise ValueError(f"a seed path holds strings and integers, got {part!r}")
    if isinstance(part, int):
        if part < 0:
            raise ValueError(f"a seed path integer must be >= 0, got {part}")
        return part
    return int.from_bytes(hashlib.blake2b(part.encode("utf-8"), digest_size=8).digest(), "little")


def seed_sequence(run_seed: int, *path: str | int) -> np.random.SeedSequence:
    """The seed sequence of stream ``path`` of a run seeded with ``run_seed`` (>= 0)."""
    if isinstance(run_seed, bool) or not isinstance(run_seed, (int, np.integer)) or run_seed < 0:
        raise ValueError(f"run.seed must be an integer >= 0, got {run_seed!r}")
    return np.random.SeedSequence(int(run_seed), spawn_key=tuple(_word(p) for p in path))


def generator(run_seed: int, *path: str | int) -> np.random.Generator:
    """A numpy generator on stream ``path``."""
    return np.random.default_rng(seed_sequence(run_seed, *path))


def seed_int(run_seed: int, *path: str | int, bits: int = 63) -> int:
    """An integer seed in [0, 2**bits) for libraries that take one (torch, game vectors)."""
    state = seed_sequence(run_seed, *path).generate_state(2, np.uint32)
    return (int(state[0]) | int(state[1]) << 32) & ((1 << bits) - 1)
