"""What every long step shares: progress feedback, worker pools, memory checks.

Process-wide settings live here too but are never applied on import: the CLI entry point
calls :func:`keep_freed_memory`, and Python users opt in by calling it themselves.
"""

from toolkit.runtime.memory import ResourceError, check_memory, keep_freed_memory

__all__ = ["ResourceError", "check_memory", "keep_freed_memory"]
