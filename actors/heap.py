"""The C heap of a long-lived actor that allocates and frees large numpy arrays.

glibc's malloc serves a block of 128 KiB or more with its own mmap, returned to the system when
freed, but raises that threshold to the size of each such block freed (up to 32 MiB), after which
blocks that size come from the heap. An actor that builds and drops arrays of a few MiB round after
round (the exact evaluator's profiles and sequence-form LPs, the coordinator's Nash solves over the
pool) then grows a heap it never hands back: its resident memory climbs for hours while its Python
objects stay flat. Fixing the threshold keeps large blocks out of the heap, and trimming after a
round hands back the heap's free pages.

Both are glibc's (``mallopt``, ``malloc_trim``); elsewhere they do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default start, now kept
TRIM_EVERY_SECONDS = 30.0  # how often a long-lived actor hands its heap's free pages back


@functools.lru_cache(maxsize=1)
def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc only)
    except (OSError, AttributeError):
        return None
    return libc


def available() -> bool:
    """Whether this process's C library is glibc with ``mallopt`` and ``malloc_trim``."""
    return _libc() is not None


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve every block of ``nbytes`` or more with mmap for the rest of the process's life. True
    where glibc took it."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, int(nbytes)) == 1)


def trim() -> bool:
    """Hand the heap's free pages back to the system. True where glibc released some."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
