"""Worker threads for replays: the kernels and planners are ``nogil`` numba, so threads
run them on every core without copying data into other processes."""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")

_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, threads, pool)
_POOL_LOCK = threading.Lock()


def shared_pool(threads: int) -> ThreadPoolExecutor:
    """This process's worker threads, at least ``threads`` of them, kept between replays.

    A pool made per replay gave each replay new threads, so each worker's decoding
    scratch (:func:`toolkit.replay.selections.thread_scratch`, ~33 MB for a k = 2048
    request) was allocated and faulted in again every time: the second worker's read of
    a 4M-position chunk took 2-8x longer, and 2 workers gave 1.35x one instead of ~1.7x.
    Callers never wait on a
    queued item they could run themselves (see :func:`thread_map`,
    :func:`ordered_results`), so replays nested in pool threads or run from several
    threads at once cannot deadlock on it. A forked child makes its own."""
    global _POOL
    threads = max(threads, resolve_workers(None))  # one size for every replay's asks
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] < threads:
            # a smaller pool is dropped, not shut down: a caller may still submit to it,
            # and its idle threads exit once it is collected
            _POOL = (os.getpid(), threads,
                     ThreadPoolExecutor(threads, thread_name_prefix="toolkit-worker"))
        return _POOL[2]


def _forget_pool() -> None:
    """In a forked child: the parent's threads are gone and its lock may be held."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


WORKERS_PER_CPU = 4
"""``--workers`` may ask for up to this many workers per usable CPU: more never runs
faster, and each worker holds its own scratch (a sweep worker is a whole process)."""


def usable_cpus() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def max_workers() -> int:
    """The most workers :func:`resolve_workers` accepts."""
    return WORKERS_PER_CPU * usable_cpus()


def resolve_workers(workers: int | None) -> int:
    """``None`` or ``0`` = every core this process may run on; at most
    :func:`max_workers` (a ``--workers`` of 10^9 is refused, not allocated)."""
    if workers is None or workers == 0:
        return usable_cpus()
    if workers < 0:
        raise ValueError(f"--workers must be >= 1 (or 0 for every core), got {workers}")
    if workers > max_workers():
        raise ValueError(f"--workers {workers:,} is more than {max_workers()} "
                         f"({WORKERS_PER_CPU} per CPU this process may use, "
                         f"{usable_cpus()})")
    return workers


def thread_map(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]``, in order, on up to ``workers`` threads."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    results: list[R] = [None] * len(items)  # type: ignore[list-item]
    todo = iter(range(len(items)))  # shared: a builtin iterator's next() is atomic
    first = next(todo)

    def drain() -> None:
        for i in todo:
            results[i] = fn(items[i])

    # the calling thread is one of the workers and takes the first item itself (a helper
    # started first would take it): what the caller has just decoded is still in its
    # core's cache (2 pool threads over a chunk the caller had just read ran no faster
    # than one thread)
    pool = shared_pool(min(workers, len(items)) - 1)
    helpers = [pool.submit(drain) for _ in range(min(workers, len(items)) - 1)]
    try:
        results[first] = fn(items[first])
        drain()
    finally:
        # a helper still queued (every pool thread busy) has nothing left to do
        started = [h for h in helpers if not h.cancel()]
        wait(started)
    for h in started:
        h.result()  # re-raises a helper's error
    return results


def ordered_results(work: Iterable[Callable[[], R]], workers: int) -> Iterator[R]:
    """Run ``work`` items on up to ``workers`` threads and yield results in order, with at
    most ``workers + 1`` items in flight (bounded memory for streamed chunks; the one
    beyond ``workers`` starts the moment a thread is free) and at most ``workers``
    running, whatever the shared pool's size. ``work`` may be a lazy iterable.
    ``workers=1`` runs everything on the calling thread."""
    if workers <= 1:
        for w in work:
            yield w()
        return
    pool = shared_pool(workers)
    running = threading.BoundedSemaphore(workers)

    def gated(w: Callable[[], R]) -> Callable[[], R]:
        def run() -> R:
            with running:
                return w()
        return run

    pending: deque[tuple[Future[R], Callable[[], R]]] = deque()
    it = iter(work)
    try:
        for w in itertools.islice(it, workers + 1):
            g = gated(w)
            pending.append((pool.submit(g), g))
        while pending:
            fut, g = pending.popleft()
            # not started yet (the pool's threads are busy elsewhere): run it here
            res = g() if fut.cancel() else fut.result()
            nxt = next(it, None)
            if nxt is not None:
                g = gated(nxt)
                pending.append((pool.submit(g), g))
            yield res
    finally:  # an error or a consumer that stopped: drop what has not started
        wait([f for f, _ in pending if not f.cancel()])


def read_ahead(read: Callable[[T], R], items: Iterable[T], depth: int) -> Iterator[R]:
    """``read(x)`` for each item, in order, done on one extra thread up to ``depth`` items
    ahead of the consumer (Parquet decoding releases the GIL, so it overlaps replay)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        it = iter(items)
        pending: deque[Future[R]] = deque(pool.submit(read, x)
                                          for x in itertools.islice(it, depth))
        while pending:
            res = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(read, nxt))
            yield res


def split_at(boundaries: np.ndarray, weight_before: np.ndarray,
             parts: int) -> list[tuple[int, int]]:
    """Cut ``[0, boundaries[-1])`` into up to ``parts`` ranges of about equal weight.

    Args:
        boundaries: allowed cut points, ascending, starting at 0 and ending at the total
            (e.g. segment starts plus the end).
        weight_before: cumulative weight at each boundary (same length).
        parts: wanted number of ranges.
    """
    total = float(weight_before[-1]) if weight_before.size else 0.0
    if parts <= 1 or boundaries.size <= 2 or total == 0:
        return [(int(boundaries[0]), int(boundaries[-1]))] if boundaries.size else []
    targets = total * np.arange(1, parts) / parts
    cut = np.unique(np.searchsorted(weight_before, targets))
    cuts = [int(boundaries[0])] + [int(boundaries[c]) for c in cut
                                   if 0 < c < boundaries.size - 1] + [int(boundaries[-1])]
    cuts = sorted(set(cuts))
    return list(zip(cuts[:-1], cuts[1:], strict=True))


#: How often a worker's watchdog thread looks for its parent (seconds).
PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Make this worker process exit when ``parent_pid`` (the process that started it)
    dies, SIGKILL included, so it stops committing cells nobody waits for: a ``kill -9``
    of ``toolkit sweep --workers 2`` left its workers (~350 MB each) running for minutes.

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``);
    everywhere, a daemon thread checks every :data:`PARENT_POLL_S` that the parent is still
    the one that started it (an orphan is re-parented, so ``getppid`` changes) and exits
    at once otherwise. A cell cut off before its commit leaves nothing (its staging is
    cleaned by the next open)."""
    import signal
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the watchdog alone
            pass
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(1)

    def watch() -> None:
        import time

        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="toolkit-parent-watch", daemon=True).start()


def parent_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host still exists (a zombie counts as gone only
    once reaped; ``die_with_parent`` covers the local pool's own workers)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
