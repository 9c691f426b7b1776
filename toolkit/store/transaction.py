"""All-or-nothing writes and what makes them so: transactions, the lone small write, the
store lock, and recovery of writes that a dead process left behind (the protocol is in
the :mod:`toolkit.store` docstring)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from toolkit.errors import StoreError
from toolkit.store import layout, parts, trash, views
from toolkit.store.layout import (
    COMMIT_MARKER,
    LANDS_LAST,
    OLD_PREFIX,
    SMALL_PREFIX,
    STAGING_DIR,
    STALE_STAGING_S,
)

if TYPE_CHECKING:
    from toolkit.store.state import StoreState


class Transaction:
    """Files staged for one all-or-nothing write (the protocol: :mod:`toolkit.store`)."""

    def __init__(self, store: StoreState) -> None:
        self.store = store
        self.dir = store.root / STAGING_DIR / f"tx-{uuid.uuid4().hex}"
        self.dir.mkdir(parents=True)
        # A lock on our own staging directory tells other processes we are alive.
        self._fd = os.open(self.dir, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.entries: dict[tuple[str, str], bool] = {}  # (table, key) -> replace
        self.expelled: set[tuple[str, str]] = set()  # compacted keys to drop (Store.delete)

    def stage(self, table: str, key: str, replace: bool) -> Path:
        """Path to write ``table``/``key`` to; refuses a taken name early."""
        if (table, key) in self.entries:
            raise StoreError(f"{table} {key!r} is written twice in one transaction")
        if self.store._key_exists(table, key) and not replace:
            raise StoreError(
                f"{table} {key!r} already exists in {self.store.root}; "
                "pass --replace to overwrite"
            )
        self.entries[(table, key)] = replace
        return self.dir / layout.staged_name(table, key)

    def commit(self) -> None:
        if not self.entries and not self.expelled:
            return
        with self.store._lock(exclusive=True):
            recover_locked(self.store, skip=self.dir.name)
            for (table, key), replace in self.entries.items():
                if not replace and self.store._key_exists(table, key):
                    raise StoreError(
                        f"{table} {key!r} already exists in {self.store.root} (written by "
                        "another process meanwhile); pass --replace to overwrite"
                    )
            # a replaced key that lives in a compacted part leaves it (its part rewritten)
            drop = self.expelled | {e for e in self.entries
                                    if e[1] in parts.compacted(self.store, e[0])}
            moves, deletes = parts.expel_ops(self.store, self.dir, drop)
            self.commit_ops(moves, deletes)

    def commit_ops(self, moves: list[tuple[str, str]], deletes: list[str]) -> None:
        """The commit point: write the marker, apply it, remove it. Caller holds the
        exclusive store lock."""
        staged = [(layout.staged_name(t, k), f"{t}/{k}.parquet") for t, k in sorted(self.entries)]
        plan = {"entries": [], "moves": staged + moves, "deletes": deletes}
        replaced = [self.store._key_path(t, k) for (t, k), r in self.entries.items() if r]
        with trash.freed_later(replaced, self.store.root / STAGING_DIR):
            if len(self.entries) == 1 and not moves and not deletes:
                # one file: its rename is atomic on its own, so no marker to write, read
                # back and remove (a third of a one-row run write's commit); a death
                # before the rename leaves staging that the next open removes
                apply_commit(self.store.root, self.dir, plan)
                return
            marker = self.dir / COMMIT_MARKER
            tmp = self.dir / (COMMIT_MARKER + ".tmp")
            tmp.write_text(json.dumps(plan))
            os.replace(tmp, marker)  # the commit point
            apply_commit(self.store.root, self.dir, plan)
            marker.unlink()

    def close(self) -> None:
        """Drop the staging directory, unless it committed but could not finish renaming
        (then the next open completes it)."""
        if not (self.dir / COMMIT_MARKER).exists():
            try:  # committed: every staged file has been renamed out
                os.rmdir(self.dir)
            except OSError:  # files left (a failed or abandoned write)
                shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self._fd)


def locked(path: Path) -> bool:
    """Whether another open file description holds a flock on ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def apply_commit(root: Path, tx_dir: Path, marker: object) -> list[str]:
    """Carry out a committed transaction (idempotent, so a crash midway is rolled forward):
    rename its staged files into place, then delete what it replaced. ``marker`` is the
    COMMIT file's content: a list of (table, key) (older stores) or a dict with
    ``entries``, ``moves`` (staged, final; paths relative to the staging/store dirs) and
    ``deletes``.

    Files land in :data:`LANDS_LAST` tables after every other (whatever order the marker
    lists them in), so a sweep cell is never ``done`` while its run is missing. A rename
    or delete the file system refuses (a directory made read-only or immutable) raises
    :class:`StoreError` naming the directory and the fix; the marker stays, and the next
    write or open completes the rest once the directory is writable again.
    """
    if isinstance(marker, list):
        marker = {"entries": marker, "moves": [], "deletes": []}
    assert isinstance(marker, dict)
    moves = [(f"{t}/{k}.parquet", f"{t}/{k}.parquet") for t, k in marker["entries"]]
    moves += [tuple(m) for m in marker.get("moves", [])]
    moves.sort(key=lambda m: m[1].split("/", 1)[0] in LANDS_LAST)  # stable: order kept
    moved = []
    for staged_rel, final_rel in moves:
        staged, final = tx_dir / staged_rel, root / final_rel
        try:
            try:  # the table directory is there but for a table's first file
                os.replace(staged, final)
            except FileNotFoundError:
                if not staged.exists():
                    continue  # moved already (a commit rolled forward a second time)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, final)
        except OSError as e:
            raise _stuck(root, tx_dir, final, e, "move a file into") from None
        moved.append(final_rel.removesuffix(".parquet"))
    for rel in marker.get("deletes", []):
        try:
            (root / rel).unlink(missing_ok=True)
        except OSError as e:
            raise _stuck(root, tx_dir, root / rel, e, "delete a replaced file from") from None
    return moved


def _stuck(root: Path, tx_dir: Path, path: Path, e: OSError, what: str) -> StoreError:
    """The one-line error for a committed write that cannot be completed."""
    return StoreError(
        f"{path.parent}: cannot {what} this directory ({e.strerror or e}), so a committed "
        f"write ({tx_dir.relative_to(root)}) is not complete; {_fix(e)} and rerun: the "
        "write completes first. Until then writes to this store are refused, and no sweep "
        "cell is marked done without its result")


def _fix(e: OSError) -> str:
    """What the user does about ``e``, a failed rename or unlink in a table directory."""
    import errno

    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make the directory writable again (chmod u+w, or chattr -i if made immutable)"
    return "fix that (free space, the disk, the mount)"


def write_small(store: StoreState, table: str, key: str, payload: bytes | pa.Buffer,
                replace: bool) -> bool:
    """One small table written outside a transaction (a run row, a short curve): its
    single rename is atomic on its own, so it needs no staging directory, marker or
    lock file of its own. Encoded in memory and staged as one file, flock-ed while
    it lives (see :func:`recover_entry`): a one-row write takes ~0.5 ms against ~1.0
    through a transaction, a third of a replay of the real Mooncake trace. False (and
    nothing written) if ``key`` lives in a compacted part: that needs the part
    rewritten, in a transaction."""
    if key in parts.compacted(store, table):
        return False
    if not replace and store._key_path(table, key).exists():
        raise StoreError(f"{table} {key!r} already exists in {store.root}; "
                         "pass --replace to overwrite")
    view = memoryview(payload)
    staging = store.root / STAGING_DIR
    name = f"{SMALL_PREFIX}{uuid.uuid4().hex}.{layout.staged_name(table, key)}"
    staged: Path | None = staging / name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(staged, flags, 0o666)
    except FileNotFoundError:
        staging.mkdir(parents=True, exist_ok=True)
        fd = os.open(staged, flags, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alive: recovery leaves it
        while view:
            view = view[os.write(fd, view):]
        with store._lock(exclusive=True):
            recover_locked(store, skip=name)
            if key in parts.compacted(store, table):  # compacted meanwhile by another process
                return False
            final = store._key_path(table, key)
            if not replace and final.exists():
                raise StoreError(
                    f"{table} {key!r} already exists in {store.root} (written by "
                    "another process meanwhile); pass --replace to overwrite")
            with trash.freed_later([final] if replace else [], staging):
                try:
                    try:  # the table directory is there but for a table's first file
                        os.replace(staged, final)
                    except FileNotFoundError:
                        final.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(staged, final)
                except OSError as e:  # nothing written: the staged file is removed below
                    raise StoreError(
                        f"{final.parent}: cannot write {table} {key!r} into this directory "
                        f"({e.strerror or e}); {_fix(e)} and rerun") from None
            staged = None
    finally:
        os.close(fd)
        if staged is not None:
            staged.unlink(missing_ok=True)
    views.after_own_write(store, {table})
    return True


def recover(store: StoreState) -> None:
    """:func:`recover_locked` under the store lock, for a store being opened or queried:
    what cannot be done (a read-only store, a directory a committed write cannot move
    into) is noted, not raised, so the store still reads; a write raises it."""
    staging = store.root / STAGING_DIR
    if staging.is_dir() and any(staging.iterdir()):
        try:
            with store._lock(exclusive=True):
                recover_locked(store)
        except StoreError as e:
            store._note(str(e))
        except OSError as e:  # e.g. a read-only store: report, don't refuse to read
            store._note(f"{staging}: could not clean up: {e}")


def recover_locked(store: StoreState, skip: str | None = None) -> None:
    """Roll forward committed transactions of dead processes; remove their stale
    uncommitted files. Caller holds the exclusive store lock. ``skip``: the name of
    the caller's own staging entry (alive, and not to be probed for its lock)."""
    staging = store.root / STAGING_DIR
    if not staging.is_dir():
        return
    now = time.time()
    for entry in sorted(staging.iterdir()):
        if entry.name == skip:
            continue
        try:
            recover_entry(store, entry, now)
        except FileNotFoundError:  # its live owner finished and removed it meanwhile
            continue


def recover_entry(store: StoreState, entry: Path, now: float) -> None:
    """One staging entry of :func:`recover_locked`; raises FileNotFoundError if the
    entry vanishes while looked at (its owner closes without the store lock)."""
    if entry.name.startswith(OLD_PREFIX):  # a replaced file's second name: garbage
        # (see trash.keep_old), left to its writer's trash thread while young, so that
        # the next write does not free it inline; removed without a note
        if now - entry.lstat().st_ctime > STALE_STAGING_S:
            entry.unlink(missing_ok=True)
        return
    if entry.is_dir() and entry.name.startswith("tx-"):
        fd = os.open(entry, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a live writer
            marker = entry / COMMIT_MARKER
            if marker.exists():
                moved = apply_commit(store.root, entry, json.loads(marker.read_text()))
                store._note(f"completed a write interrupted after its commit: "
                            f"{', '.join(moved) or 'nothing left to move'}")
            elif now - entry.stat().st_mtime > STALE_STAGING_S:
                store._note(f"removed {entry.relative_to(store.root)}: an interrupted "
                            "write that never committed")
            else:
                return
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)
    elif now - entry.lstat().st_mtime > STALE_STAGING_S:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith(SMALL_PREFIX) and locked(entry):
            return  # a live small write (see write_small)
        else:
            entry.unlink(missing_ok=True)
        store._note(f"removed stale {entry.relative_to(store.root)}")


def dead_commit(store: StoreState) -> bool:
    """Whether staging holds a committed transaction whose writer died before finishing
    it (its marker there, its directory unlocked): until someone completes it, a table
    may show both the files it replaced and their replacements."""
    staging = store.root / STAGING_DIR
    try:
        with os.scandir(staging) as it:
            txs = [e.path for e in it if e.name.startswith("tx-")]
    except (FileNotFoundError, NotADirectoryError):
        return False
    for tx in txs:
        try:
            if os.path.exists(os.path.join(tx, COMMIT_MARKER)) and not locked(Path(tx)):
                return True
        except FileNotFoundError:  # finished meanwhile
            continue
    return False


def complete_dead_commits(store: StoreState) -> None:
    """Complete what :func:`dead_commit` finds, so an open store never queries half of
    another process's commit (reopening is not needed)."""
    if dead_commit(store):
        recover(store)
