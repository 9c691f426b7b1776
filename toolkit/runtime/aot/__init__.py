"""Kernels compiled ahead of time: the replay path without importing numba.

A process that loads one cached numba kernel first pays ~0.8 s CPU before any toolkit code
runs (``import numba`` and the refresh of its CPU target, which imports SciPy's BLAS
wrappers), more than a warm CLI replay of 16.8M accesses needs in all. ``make setup``
therefore compiles the kernels of the replay path into extension modules
(:mod:`toolkit.runtime.aot.build`, numba's ``pycc`` with explicit signatures), and the
modules that define those kernels take ``nb``, ``types``, ``intrinsic`` and ``ir`` from
here instead of from numba and llvmlite:

- no extension (never built, its build failed, or ``TOOLKIT_AOT=0``), or numba already
  imported: they are numba's own objects, and nothing changes;
- otherwise ``nb.njit`` returns a :class:`LazyKernel`: a call whose argument types match
  an exported signature runs the compiled function; any other call imports numba, which
  turns every lazy kernel into the numba dispatcher it stands for (and rebinds the
  module globals that held stand-ins), so a kernel never runs as Python and another
  signature still compiles on first use as before. A kernel with exported signatures
  stays a stand-in after that, so a process that also runs numba's kernels (the demo, a
  tier replay, ``toolkit warm-up``) still runs the compiled ones and never compiles them
  again; no kernel calls such a kernel (``tests/test_startup_aot.py`` checks), so none
  needs it as a numba global.

The extension is used only while the sources it was built from are unchanged (a hash of
those files is recorded next to it): after an edit or a ``git pull`` the kernels are
numba's again, never run stale, until ``python -m toolkit.runtime.aot.build`` runs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

ENV = "TOOLKIT_AOT"
"""``TOOLKIT_AOT=0`` turns the compiled extension off (numba's kernels everywhere)."""

HERE = Path(__file__).resolve().parent
PACKAGE = "toolkit.runtime.aot"
EXTENSION = f"{PACKAGE}._kernels0"
"""The build's first module (``_kernels<i>``, one per process that compiled)."""
STAMP = HERE / "_kernels.json"
"""Written by the build: module and symbol per kernel and argument types, and the hash of
the source files the kernels were compiled from."""

_LOCK = threading.RLock()
_LAZY: list[Any] = []
_BOUND = False
_ON_NUMBA: list[Any] = []


def _wanted() -> bool:
    if os.environ.get(ENV, "1") == "0" or "numba" in sys.modules:
        return False
    return STAMP.is_file() and importlib.util.find_spec(EXTENSION) is not None


ACTIVE = _wanted()
"""Whether this process started with the stand-ins (decided once, at import)."""


def arg_key(a: Any) -> str | None:
    """numba's type of one argument, as the build spells it (``i4[:]``, ``u1[:]r``,
    ``i8``, ``b``), or None for anything the extension has no signature for."""
    t = type(a)
    if t is bool:
        return "b"
    if t is int:
        return "i8" if -(1 << 63) <= a < (1 << 63) else None
    if t is float:
        return "f8"
    if isinstance(a, np.generic):
        return "b" if a.dtype.kind == "b" else f"{a.dtype.kind}{a.dtype.itemsize}"
    if t is not np.ndarray or a.ndim != 1:
        return None
    flags = a.flags
    if not (flags.c_contiguous and flags.aligned) or a.dtype.byteorder not in "=|":
        return None
    kind = "b1" if a.dtype.kind == "b" else f"{a.dtype.kind}{a.dtype.itemsize}"
    return f"{kind}[:]" + ("" if flags.writeable else "r")


_TABLE: dict[str, dict[tuple[str | None, ...], Any]] | None = None


def _source_hash(files: list[str]) -> str:
    h = hashlib.sha256()
    root = HERE.parents[2]
    for rel in files:
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def _load_table() -> dict[str, dict[tuple[str | None, ...], Any]]:
    """``module:function`` -> {argument keys: compiled function}; empty if the extension
    is missing or older than its sources."""
    global _TABLE
    with _LOCK:
        if _TABLE is not None:
            return _TABLE
        table: dict[str, dict[tuple[str | None, ...], Any]] = {}
        try:
            stamp = json.loads(STAMP.read_text())
            if stamp["sources_sha256"] == _source_hash(stamp["sources"]):
                modules: dict[str, Any] = {}
                for e in stamp["exports"]:
                    name = e["module"]
                    if name not in modules:
                        modules[name] = importlib.import_module(f"{PACKAGE}.{name}")
                    table.setdefault(e["kernel"], {})[tuple(e["args"])] = getattr(
                        modules[name], e["symbol"])
        except (OSError, ImportError, KeyError, ValueError, AttributeError):
            table = {}
        _TABLE = table
        return table


def compiled(kernel: str) -> dict[tuple[str | None, ...], Any]:
    """The extension's functions for ``module:function`` (empty when not in use)."""
    return _load_table().get(kernel, {}) if ACTIVE else {}


class LazyKernel:
    """Stands for ``numba.njit(**options)(py_func)`` until numba is imported; see the
    module docstring."""

    def __init__(self, py_func: Any, options: dict[str, Any]) -> None:
        self.py_func = py_func
        self.options = options
        self.real: Any = None
        self._aot: dict[tuple[str | None, ...], Any] | None = None
        self.__name__ = py_func.__name__
        self.__qualname__ = py_func.__qualname__
        self.__module__ = py_func.__module__
        self.__doc__ = py_func.__doc__
        self.__wrapped__ = py_func
        with _LOCK:
            if _BOUND:
                self.real = _njit(self)
            else:
                _LAZY.append(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._aot is None:
            self._aot = compiled(f"{self.__module__}:{self.__name__}")
        if self._aot and not kwargs:
            fn = self._aot.get(tuple(arg_key(a) for a in args))
            if fn is not None:
                return fn(*args)
        return self.dispatcher()(*args, **kwargs)

    def dispatcher(self) -> Any:
        """The numba dispatcher (imports numba)."""
        if self.real is None:
            import numba  # noqa: F401  # binds every stand-in (see _Watch)
        return self.real

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("real", "_aot", "py_func", "options"):
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)

    def __repr__(self) -> str:
        return f"<LazyKernel {self.__module__}.{self.__qualname__}>"


class LazyIntrinsic:
    """Stands for ``numba.extending.intrinsic(fn)``: used only inside kernels, so it is
    needed only once numba compiles one (by then it has been rebound)."""

    def __init__(self, fn: Any, options: dict[str, Any]) -> None:
        self.fn, self.options, self.real = fn, options, None
        self.__name__ = fn.__name__
        self.__module__ = fn.__module__
        with _LOCK:
            if _BOUND:
                self.real = _intrinsic(self)
            else:
                _LAZY.append(self)


class _Module:
    """Stands for a module (``numba``, ``numba.types``, ``llvmlite.ir``) until first use."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


class _Numba(_Module):
    def njit(self, *args: Any, **options: Any) -> Any:
        if args and callable(args[0]) and len(args) == 1 and not options:
            return _kernel(args[0], {})
        if args:  # explicit signatures: numba's own
            return importlib.import_module("numba").njit(*args, **options)
        return lambda f: _kernel(f, options)


def _kernel(py_func: Any, options: dict[str, Any]) -> Any:
    """A stand-in; once numba is imported, numba's own dispatcher for a kernel the
    extension does not hold (a module imported after numba gets the same objects as one
    imported before it)."""
    if _BOUND and not compiled(f"{py_func.__module__}:{py_func.__name__}"):
        return _numba_njit(py_func, options)
    return LazyKernel(py_func, options)


def _intrinsic_stub(*args: Any, **options: Any) -> Any:
    if args and callable(args[0]):
        return LazyIntrinsic(args[0], options)
    return lambda f: LazyIntrinsic(f, options)


def _numba_njit(py_func: Any, options: dict[str, Any]) -> Any:
    import numba

    return numba.njit(**options)(py_func)


def _njit(k: LazyKernel) -> Any:
    return _numba_njit(k.py_func, k.options)


def _intrinsic(i: LazyIntrinsic) -> Any:
    from numba.extending import intrinsic as real

    return real(**i.options)(i.fn) if i.options else real(i.fn)


def on_numba(callback: Any) -> None:
    """Run ``callback()`` once numba is imported (now if it is)."""
    with _LOCK:
        if "numba" in sys.modules and not (ACTIVE and not _BOUND):
            callback()
        else:
            _ON_NUMBA.append(callback)


def _bind(numba_module: Any) -> None:
    """numba has just been imported: every stand-in becomes numba's own object."""
    global _BOUND, types, intrinsic, ir
    with _LOCK:
        if _BOUND:
            return
        import llvmlite.ir
        import numba.core.types
        from numba.extending import intrinsic as real_intrinsic
        from numba.extending import typeof_impl

        @typeof_impl.register(LazyKernel)
        def _typeof_lazy(val: LazyKernel, c: Any) -> Any:
            return typeof_impl(val.dispatcher(), c)

        stubs = {id(nb): numba_module, id(types): numba.core.types,
                 id(intrinsic): real_intrinsic, id(ir): llvmlite.ir}
        for obj in _LAZY:
            obj.real = _njit(obj) if isinstance(obj, LazyKernel) else _intrinsic(obj)
        _LAZY.clear()
        # ``nb`` stays the stand-in: a kernel module imported from now on still gets a
        # LazyKernel for a kernel the extension holds (:func:`_kernel`)
        types, intrinsic, ir = numba.core.types, real_intrinsic, llvmlite.ir
        _BOUND = True
        for name, mod in list(sys.modules.items()):
            if not name.startswith("toolkit") or mod is None or name == __name__:
                continue
            d = vars(mod)
            for attr, val in list(d.items()):
                if isinstance(val, LazyKernel) and compiled(f"{val.__module__}:{val.__name__}"):
                    continue  # keeps running its compiled signatures (only Python calls it)
                if isinstance(val, (LazyKernel, LazyIntrinsic)):
                    d[attr] = val.real
                elif id(val) in stubs:
                    d[attr] = stubs[id(val)]
        callbacks = _ON_NUMBA[:]
        _ON_NUMBA.clear()
    for cb in callbacks:
        cb()


class _Watch(importlib.abc.MetaPathFinder):
    """Binds the stand-ins the moment numba itself is imported, by anything."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "numba":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _bind(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if ACTIVE:
    nb: Any = _Numba("numba")
    types: Any = _Module("numba.core.types")
    intrinsic: Any = _intrinsic_stub
    ir: Any = _Module("llvmlite.ir")
    sys.meta_path.insert(0, _Watch())
else:
    import llvmlite.ir as ir
    import numba as nb
    from numba import types
    from numba.extending import intrinsic

    _BOUND = True
