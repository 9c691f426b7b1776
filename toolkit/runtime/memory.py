"""Memory the host can give a step, checked before the step allocates it.

Why: a replay sized by the numbers in a trace (a ``seq_len`` of 10^9, a buffer of 2^40
slots) would otherwise die in an OOM kill or a ``MemoryError`` traceback; the user gets a
one-line error naming what needed the memory instead.
"""

from __future__ import annotations

from toolkit.errors import ToolkitError


class ResourceError(ToolkitError):
    """A step would need more memory than the machine has available."""


def available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


UNCHECKED_BYTES = 64 * 2**20
"""Smaller needs are not checked: reading ``/proc/meminfo`` costs ~45 us, which a replay
planning thousands of cache-sized pieces would pay for each one."""


def check_memory(nbytes: float, what: str) -> None:
    """Raise :class:`ResourceError` if ``what`` needs more than the available memory."""
    if nbytes < UNCHECKED_BYTES:
        return
    avail = available_bytes()
    if avail is not None and nbytes > avail:
        raise ResourceError(f"{what} needs about {nbytes / 2**30:,.1f} GiB; "
                            f"{avail / 2**30:,.1f} GiB is available")


MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD_BYTES = 128 * 2**20
HEAP_ENV = "TOOLKIT_KEEP_HEAP"
"""Set to ``0`` to leave glibc's allocator as it is (see :func:`keep_freed_memory`)."""


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks of up to 32 MiB for reuse instead of unmapping them.

    Why: by default a NumPy array of over ~128 KiB-32 MiB is its own ``mmap`` and each
    free unmaps it, so the next array of that size faults in every page again. On the
    project VM a fault costs ~1.5 us: replaying the real Mooncake trace (a 1.1 ms kernel)
    spent ~1.3 ms faulting in its 1.4 MB stream and its 1.5 MB LRU links each time, and
    ~0.2 ms unmapping them. The cost is resident memory that is free but not returned:
    up to ``TRIM_THRESHOLD_BYTES`` at the top of each malloc arena (one per thread that
    allocates, up to 8 per core), plus holes below live blocks, which glibc never
    returns anyway. The 2-billion-access replay's peak RSS stayed within 433-618 MiB
    with or without it. Setting the thresholds explicitly also
    turns off glibc's own sliding threshold, for the whole process (a notebook's too),
    which is why ``import toolkit`` never calls it: the ``toolkit`` command does, before
    any command runs, and Python users opt in with ``toolkit.runtime.keep_freed_memory()``
    before their first replay.
    Returns whether it was applied (glibc only; not with ``TOOLKIT_KEEP_HEAP=0``).
    """
    import ctypes
    import os

    if os.environ.get(HEAP_ENV, "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD_BYTES)
                and mallopt(m_trim_threshold, TRIM_THRESHOLD_BYTES))
