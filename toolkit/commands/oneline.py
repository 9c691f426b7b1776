"""The command line's convention for what goes wrong outside a command's own checks: a
usage error (unknown option, missing value) is one ``error:`` line with exit code 2, and
Ctrl-C is one line naming what was interrupted, with exit code 130.

Typer draws usage errors as a multi-line box and exits silently on Ctrl-C; the group
class here runs Typer's own ``main`` in non-standalone mode and prints the outcome itself.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

# Typer vendors click: its exception classes are reached through the one it exports.
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__
                        if c.__name__ == "ClickException")
INTERRUPTED = 130  # 128 + SIGINT, the shell's code for a process stopped by Ctrl-C
_REPORTED: list[bool] = []


def interrupted_reported() -> None:
    """A command that printed its own one-line Ctrl-C message (e.g. how far a sweep got)
    calls this before exiting 130, so the group does not print a second line."""
    _REPORTED.append(True)


def usage_line(e: Any) -> str:
    """A click usage error as one line naming the command and where help is."""
    where = e.ctx.command_path if getattr(e, "ctx", None) is not None else "toolkit"
    msg = " ".join(e.format_message().split())
    return f"error: {where}: {msg} (see {where} --help)"


def _command_words(args: list[str]) -> str:
    words = []
    for a in args:
        if a.startswith("-"):
            break
        words.append(a)
    return " ".join(["toolkit", *words[:2]])


class OneLineErrors(TyperGroup):
    """The top-level group: one-line usage errors and a one-line Ctrl-C message."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rc = super().main(argv, "toolkit", complete_var, False, **extra)
        except _USAGE_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as asked
                e.show()
            else:
                typer.echo(usage_line(e), err=True)
            sys.exit(e.exit_code)
        except _CLICK_EXCEPTION as e:
            typer.echo(f"error: {' '.join(e.format_message().split())}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        if rc == INTERRUPTED and not _REPORTED:  # Typer turns KeyboardInterrupt into Exit(130)
            typer.echo(f"\ninterrupted: {_command_words(argv)} (Ctrl-C); the store is intact "
                       "(every write is all-or-nothing: an interrupted one is finished or "
                       "discarded when the store is next opened)", err=True)
        sys.exit(rc if isinstance(rc, int) else 0)
