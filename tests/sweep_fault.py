"""A sweep kind for fault tests: a prefix replay whose worker can be made to die.

Importing this module registers the kind ``fault``; a spawned pool worker imports it when
it unpickles a cell's config, so the kind exists there too. Test-only: never imported by
the toolkit.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from toolkit.sweep.kinds import Kind, kinds


@dataclass(frozen=True)
class FaultConfig:
    """A prefix replay of ``trace`` at ``capacity_blocks``; the worker running the cell
    with ``capacity_blocks == die_at`` SIGKILLs itself first (as the OOM killer would)."""

    trace: str
    capacity_blocks: int = 1
    die_at: int = -1
    sleep_s: float = 0.0


def _run(store, cfg: FaultConfig, threads: int) -> str:
    from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix

    if cfg.capacity_blocks == cfg.die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(cfg.sleep_s)
    return replay_prefix(store, PrefixReplayConfig(cfg.trace, "lru",
                                                   cfg.capacity_blocks))["run_id"]


if "fault" not in kinds:
    kinds.register("fault", Kind("fault", FaultConfig, "replay_runs", "requests", _run))
