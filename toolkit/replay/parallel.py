"""Worker threads for replays: the kernels and planners are ``nogil`` numba, so threads
run them on every core without copying data into other processes."""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(workers: int | None) -> int:
    """``None`` or ``0`` = every core this process may run on."""
    if workers is None or workers == 0:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)
    if workers < 0:
        raise ValueError(f"workers must be >= 1 (or 0/None for every core), got {workers}")
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
    # core's cache (on the 2-vCPU VM, 2 pool threads over a chunk the caller had just read
    # ran no faster than one thread; benchmarks/RESULTS.md)
    with ThreadPoolExecutor(max_workers=min(workers, len(items)) - 1) as pool:
        helpers = [pool.submit(drain) for _ in range(min(workers, len(items)) - 1)]
        results[first] = fn(items[first])
        drain()
        for h in helpers:
            h.result()  # re-raises a helper's error
    return results


def ordered_results(work: Iterable[Callable[[], R]], workers: int) -> Iterator[R]:
    """Run ``work`` items on up to ``workers`` threads and yield results in order, with at
    most ``workers + 1`` items in flight (bounded memory for streamed chunks; ``work`` may
    be a lazy iterable). ``workers=1`` runs everything on the calling thread."""
    if workers <= 1:
        for w in work:
            yield w()
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[R]] = deque()
        it = iter(work)
        for w in itertools.islice(it, workers + 1):
            pending.append(pool.submit(w))
        while pending:
            res = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(nxt))
            yield res


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
