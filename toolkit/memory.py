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
