"""How many examples a property test draws.

`make test` (CI) must finish in 10 minutes on 2 cores with the kernels compiled cold, so a
property test marked ``slow`` draws a third of its examples there; `make test-all` sets
``TOOLKIT_FULL_EXAMPLES=1`` and draws them all (`pytest -m slow` picks just those tests).
Both runs draw fresh random examples, so CI still explores over time.
"""

from __future__ import annotations

import os

FULL = os.environ.get("TOOLKIT_FULL_EXAMPLES") == "1"


def examples(full: int) -> int:
    """``full`` under `make test-all`, a third of it (at least 10) otherwise."""
    return full if FULL else max(10, full // 3)
