"""Freeing replaced files off the writer's path: a replaced file keeps a second name in
staging until one background thread per process unlinks it, so a commit's rename does
not wait for the file system to free the old file's blocks."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from toolkit.store.layout import OLD_PREFIX


def keep_old(final: Path, staging: Path) -> str | None:
    """A second name in ``staging`` for the file ``final`` that a write is about to
    replace, so the rename does not free its blocks: on the project VM a rename over a
    file took 0.2-0.4 ms against 0.06 with this link first, and the freeing happens on
    a background thread (:func:`discard_later`). None when there is no such file or
    the file system refuses a hard link (the rename then frees it, as usual). Such an
    entry is never needed: recovery removes it silently once stale (by its ctime, the
    link's time), whoever dies when."""
    old = os.path.join(staging, f"{OLD_PREFIX}{uuid.uuid4().hex}.parquet")
    try:
        os.link(final, old)
    except OSError:
        return None
    return old


@contextlib.contextmanager
def freed_later(finals: list[Path], staging: Path) -> Iterator[None]:
    """Around the renames that replace ``finals``: each gets a second name first
    (:func:`keep_old`), handed to the trash thread when the block ends, whatever
    happened in it (such a name is never needed)."""
    olds = [old for final in finals if (old := keep_old(final, staging)) is not None]
    try:
        yield
    finally:
        for old in olds:
            discard_later(old)


_TRASH: tuple[int, ThreadPoolExecutor] | None = None
_TRASH_LOCK = threading.Lock()
_TRASH_PENDING: list[Future[None]] = []


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # recovery may have removed it first
        os.unlink(path)


def discard_later(path: str) -> None:
    """Unlink ``path`` on this process's one trash thread (a new one after a fork: a
    forked child has the executor but not its thread)."""
    global _TRASH
    with _TRASH_LOCK:
        if _TRASH is None or _TRASH[0] != os.getpid():
            _TRASH = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="toolkit-trash"))
            _TRASH_PENDING.clear()
        _TRASH_PENDING[:] = [f for f in _TRASH_PENDING if not f.done()]
        try:
            _TRASH_PENDING.append(_TRASH[1].submit(unlink_quietly, path))
            return
        except RuntimeError:  # interpreter shutting down: no new futures (the write
            pass  # itself has landed), so free it here
    unlink_quietly(path)


def forget_trash() -> None:
    """In a forked child: the parent's lock may have been held by another thread."""
    global _TRASH, _TRASH_LOCK
    _TRASH, _TRASH_LOCK = None, threading.Lock()
    _TRASH_PENDING.clear()


os.register_at_fork(after_in_child=forget_trash)


def drain_trash() -> None:
    """Wait until every replaced file handed to :func:`discard_later` is gone (the
    executor also finishes them at interpreter exit)."""
    with _TRASH_LOCK:
        pending = list(_TRASH_PENDING) if _TRASH and _TRASH[0] == os.getpid() else []
    for f in pending:
        f.result()
