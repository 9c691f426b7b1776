"""Progress of long replays (accesses done, rate, ETA) on a terminal or in a notebook.

Quiet unless asked for or attached to a terminal/notebook, and silent for the first 2 s,
so tests, ``--json`` output and short notebook cells never show a bar. In a notebook the
bar is a widget (needs ``ipywidgets``); without it the bar stays off rather than writing
text to the cell's stderr, which executed notebooks would record.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DELAY_S = 2.0


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _bar_class(enabled: bool | None) -> Any:
    """The tqdm class to use, or ``None`` for no bar."""
    if enabled is False:
        return None
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as notebook_tqdm
        except ImportError:
            return None
        return notebook_tqdm
    if enabled or (sys.stderr is not None and sys.stderr.isatty()):
        from tqdm.std import tqdm

        return tqdm
    return None


def _interactive() -> bool:
    """Whether a bar would show with ``enabled=None``."""
    return _bar_class(None) is not None


@contextmanager
def progress(total: int, desc: str, enabled: bool | None = None) -> Iterator[Any]:
    """A bar counting accesses; ``enabled=None`` = only on a terminal or in a notebook.

    Yields an object with ``update(n)``; a disabled bar costs nothing.
    """
    cls = _bar_class(enabled)
    if cls is None:
        from tqdm.std import tqdm as cls  # disabled below: one code path for callers

    bar = cls(total=total, desc=desc, unit="acc", unit_scale=True, delay=DELAY_S,
              disable=_bar_class(enabled) is None, leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
