"""``toolkit plan``: size HBM, host DRAM and SSD and pick the accelerator for a recorded
workload (:mod:`toolkit.plan.search`).

``toolkit.plan(...)`` is this package called as a function (the module is callable), so
the facade name and the package name are one.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from toolkit.plan.config import PlanConfig


def plan(store: Any, trace: str | None = None, model: str | None = None,
         hardware: tuple[str, ...] | list[str] | str | None = None, *,
         config: PlanConfig | None = None, progress: bool | None = None, save: bool = True,
         **fields: Any) -> Any:
    """Plan a deployment for ``trace`` in ``store`` (a :class:`~toolkit.store.Store` or a
    path): the fields of :class:`PlanConfig` as keywords, or ``config``.

    Returns:
        :class:`toolkit.plan.search.PlanResult` (``.plans``, ``.to_json()``).
    """
    from toolkit.plan.search import plan as run
    from toolkit.store import Store, open_store

    if config is None:
        if isinstance(hardware, str):
            hardware = tuple(h.strip() for h in hardware.split(",") if h.strip())
        config = PlanConfig(trace=trace, model=model, hardware=tuple(hardware or ()),
                            **fields)
    if isinstance(store, Store):
        return run(store, config, progress=progress, save=save)
    with open_store(Path(store)) as s:
        return run(s, config, progress=progress, save=save)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["PlanConfig", "plan"]
