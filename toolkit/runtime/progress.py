"""Feedback during long work: progress bars, a status line for single long calls, and a
notice naming each kernel numba compiles, once per kernel ever (later runs load it from
the cache; ``toolkit warm-up``, run by ``make setup``, compiles them all up front).

Quiet unless asked for or attached to a terminal or a notebook, and silent for the first
2 s, so tests, ``--json`` output and short notebook cells never show anything. In a
notebook the bar is a widget when ``ipywidgets`` is installed (the ``dev`` extra has it),
else tqdm's text bar on the cell's stderr. ``TOOLKIT_PROGRESS=0`` turns everything off
(``make notebooks`` and the notebook tests set it, so executed notebooks never record a
bar); ``TOOLKIT_PROGRESS=1`` turns it on even when piped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DELAY_S = 2.0
ENV = "TOOLKIT_PROGRESS"


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def turned_off() -> bool:
    """Whether ``TOOLKIT_PROGRESS`` turns all feedback off (also DuckDB's own bar: see
    :class:`toolkit.store.Store`)."""
    return os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off")


def _bar_class(enabled: bool | None) -> Any:
    """The tqdm class to use, or ``None`` for no bar."""
    if enabled is False:
        return None
    if enabled is None:
        if turned_off():
            return None
        env = os.environ.get(ENV, "").strip().lower()
        enabled = True if env in ("1", "true", "yes", "on") else None
    if _in_notebook():
        try:
            import ipywidgets  # noqa: F401
            from tqdm.notebook import tqdm as notebook_tqdm
        except ImportError:  # a text bar on the cell's stderr still beats silence
            from tqdm.std import tqdm as text_tqdm

            return text_tqdm
        return notebook_tqdm
    if enabled or (sys.stderr is not None and sys.stderr.isatty()):
        from tqdm.std import tqdm

        return tqdm
    return None


def interactive(enabled: bool | None = None) -> bool:
    """Whether feedback would show (``enabled=None``: on a terminal or in a notebook)."""
    return _bar_class(enabled) is not None


_interactive = interactive  # the name callers used before


def _bar(enabled: bool | None, **kwargs: Any) -> Any:
    cls = _bar_class(enabled)
    disable = cls is None
    if cls is None:
        from tqdm.std import tqdm as cls  # disabled: one code path for callers
    return cls(delay=DELAY_S, disable=disable, leave=False, dynamic_ncols=True, **kwargs)


@contextmanager
def progress(total: int, desc: str, enabled: bool | None = None,
             unit: str = "acc") -> Iterator[Any]:
    """A bar counting ``unit`` (accesses by default); ``enabled=None`` = only on a terminal
    or in a notebook.

    Yields an object with ``update(n)``; a disabled bar costs nothing.
    """
    bar = _bar(enabled, total=total, desc=desc, unit=unit, unit_scale=True)
    try:
        yield bar
    finally:
        bar.close()


class Status:
    """Handle of :func:`status`: :meth:`write` prints a line without tearing the status."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def write(self, text: str) -> None:
        if self._bar.disable:
            print(text, flush=True)
        else:
            from tqdm.std import tqdm

            tqdm.write(text)  # clears the status line, prints, redraws it


@contextmanager
def status(desc: str, enabled: bool | None = None) -> Iterator[Status]:
    """Elapsed time for long work that cannot count its progress (a single kernel call,
    a multi-part job): a line ``desc: 0:12`` refreshed twice a second after the first 2 s.

    Yields a :class:`Status` whose ``write`` prints output lines above the status line.
    """
    bar = _bar(enabled, total=None, desc=desc, bar_format="{desc}: {elapsed}")
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.5):
            bar.update(0)  # redraws the elapsed time, honouring the delay (refresh() would not)

    ticker = None if bar.disable else threading.Thread(target=tick, daemon=True)
    if ticker is not None:
        ticker.start()
    try:
        yield Status(bar)
    finally:
        done.set()
        if ticker is not None:
            ticker.join()
        bar.close()


def _marker_dir() -> Path | None:
    """Where the compile notice remembers which kernels it has announced: next to numba's
    cache (``NUMBA_CACHE_DIR``, else the package's ``__pycache__``), so a wiped cache
    announces its kernels again; ``None`` when neither place is writable."""
    from numba.core.config import CACHE_DIR

    base = Path(CACHE_DIR) if CACHE_DIR else Path(__file__).resolve().parents[1] / "__pycache__"
    d = base / "toolkit-compiled"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK) else None


def _kernel_id(data: Any) -> tuple[str, str]:
    """(kernel name, marker file name) of a ``numba:compile`` event: one marker per kernel
    and argument types, since each new type combination compiles again."""
    import hashlib

    fn = getattr(data.get("dispatcher"), "py_func", None)
    name = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "kernel"
    sig = hashlib.sha1(f"{name}{data.get('args')}".encode()).hexdigest()[:16]
    return name, f"{name.rsplit('.', 1)[-1]}-{sig}"


def _compile_listener(announce: bool = True) -> Any:
    """A numba ``numba:compile`` listener: names each kernel being compiled the first time
    it is ever compiled on this machine (a marker per kernel next to numba's cache), and
    counts kernels and seconds. Cache loads raise no such event, so later runs are quiet."""
    from numba.core import event

    markers = _marker_dir() if announce else None

    class CompileNotice(event.Listener):
        def __init__(self) -> None:
            self.depth, self.kernels, self.seconds, self._t0 = 0, 0, 0.0, 0.0
            self._lock = threading.Lock()
            self._pending: list[Path] = []

        def on_start(self, event: Any) -> None:
            with self._lock:
                if self.depth == 0:
                    self._t0 = time.perf_counter()
                    name, marker = _kernel_id(event.data)
                    path = markers / marker if markers is not None else None
                    if announce and (path is None or not path.exists()):
                        _say(f"compiling kernel {name} (first use; cached for later runs)...")
                        if path is not None:
                            self._pending.append(path)
                self.depth += 1

        def on_end(self, event: Any) -> None:
            with self._lock:
                self.depth -= 1
                self.kernels += 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - self._t0
                    for path in self._pending:  # announced once, after it compiled
                        with contextlib.suppress(OSError):
                            path.touch()
                    self._pending.clear()

    return CompileNotice()


def _say(text: str) -> None:
    from tqdm.std import tqdm

    tqdm.write(text, file=sys.stderr)  # above any bar in progress


@contextmanager
def compile_notice(enabled: bool | None = None) -> Iterator[None]:
    """Tell a terminal (never a notebook, whose outputs are recorded) which numba kernels
    are being compiled, the first time each is (seconds per kernel, once per machine)."""
    show = enabled is not False and interactive(enabled) and not _in_notebook()
    if not show:
        yield
        return
    from toolkit.runtime import aot

    listener: Any = None
    open_ = True

    def attach() -> None:  # when numba is imported: not at all if no kernel compiles
        nonlocal listener
        if open_:
            from numba.core import event

            listener = _compile_listener()
            event.register("numba:compile", listener)

    aot.on_numba(attach)
    try:
        yield
    finally:
        open_ = False
        if listener is not None:
            from numba.core import event

            event.unregister("numba:compile", listener)
            if listener.kernels:
                _say(f"compiled {listener.kernels} kernel(s) in {listener.seconds:.0f} s")
