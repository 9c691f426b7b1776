"""Progress of long replays (accesses done, rate, ETA) on a terminal or in a notebook.

Quiet unless asked for or attached to a terminal/notebook, and silent for the first 2 s,
so tests, ``--json`` output and short notebook cells never show a bar.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DELAY_S = 2.0


def _interactive() -> bool:
    if sys.stderr is not None and sys.stderr.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


@contextmanager
def progress(total: int, desc: str, enabled: bool | None = None) -> Iterator[Any]:
    """A bar counting accesses; ``enabled=None`` = only on a terminal or in a notebook.

    Yields an object with ``update(n)``; a disabled bar costs nothing.
    """
    from tqdm.auto import tqdm

    show = _interactive() if enabled is None else enabled
    bar = tqdm(total=total, desc=desc, unit="acc", unit_scale=True, delay=DELAY_S,
               disable=not show, leave=False, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
