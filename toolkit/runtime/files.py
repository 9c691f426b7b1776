"""The one check every reader of a user's file makes before opening it: a regular file (or,
for a reader of directories, a directory), symlinks followed.

``/dev/zero`` read without end (a MemoryError traceback), a FIFO with no writer hung, and
``Path.is_file()`` being false for both made some readers say "no such file" of a file that
exists. ``stat`` never blocks, so the check is made before any ``open``.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from toolkit.errors import ToolkitError

#: Most SQL ``toolkit sql -`` reads from standard input (a statement, not a data file).
MAX_STDIN_BYTES = 16 << 20


class NotAFile(ToolkitError):
    """A path given as an input file is missing, a directory, or not a regular file."""


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def file_problem(path: str | Path, *, directory: bool | None = False) -> str | None:
    """Why ``path`` cannot be read as an input file (``directory``: as an input
    directory; ``None``: either), as a phrase to follow ``"{path}: "``; None when it can."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file or directory"
    except NotADirectoryError:
        return "no such file or directory (a parent is not a directory)"
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if stat.S_ISDIR(mode):
        return None if directory is not False else "is a directory; expected a file"
    if directory is True:
        return "expected a directory"
    if not stat.S_ISREG(mode):
        return f"not a regular file ({_kind(mode)}); give a file"
    return None


def regular_file(path: str | Path, *, directory: bool | None = False) -> Path:
    """``path`` if it is a regular file (or directory, with ``directory``).

    Raises:
        NotAFile: one line naming the path and why.
    """
    problem = file_problem(path, directory=directory)
    if problem is not None:
        raise NotAFile(f"{path}: {problem}")
    return Path(path)


def read_stdin_text(limit: int = MAX_STDIN_BYTES) -> str:
    """Standard input as text, at most ``limit`` bytes: a pipe, a file or a terminal, not a
    device such as ``/dev/zero`` (which never ends).

    Raises:
        NotAFile: standard input is a device, or holds more than ``limit`` bytes.
    """
    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):  # replaced by a test runner: no fd
        data = sys.stdin.read(limit + 1)
    else:
        if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and not os.isatty(fd):
            raise NotAFile(f"standard input: not a regular file ({_kind(mode)}); pipe or "
                           "redirect a file of SQL")
        data = sys.stdin.read(limit + 1)
    if len(data) > limit:
        raise NotAFile(f"standard input: more than {limit:,} characters of SQL; give a "
                       "statement, not data")
    return data
