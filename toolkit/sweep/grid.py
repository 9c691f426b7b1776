"""TOML sweep grids: parsed and checked against the replay's config dataclass before any
cell runs, so a typo in cell 180 is an error at second 0, not after an hour.

A grid file::

    kind = "selections"        # selections | prefix | tiers | serving
    trace = "smollm2"          # or traces = ["a", "b"] (an axis)
    [fixed]
    mode = "plain"
    [axes]
    policy = ["lru", "arc", "opt"]
    buffer_tokens = [64, 128, 256]

Names in ``[fixed]`` and ``[axes]`` are exactly the config's fields (the CLI flags with
``-`` as ``_``). TOML has no null, so an optional field takes the string ``"none"`` for
None (its default). Cells are the Cartesian product of the axes in file order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.config import fingerprint
from toolkit.errors import ToolkitError
from toolkit.runtime.files import file_problem
from toolkit.sweep.kinds import Kind, kinds

TOP_KEYS = ("kind", "trace", "traces", "fixed", "axes")


class GridError(ToolkitError):
    """A grid file is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Cell:
    """One combination: its index in product order and the config it runs."""

    index: int
    fields: dict[str, Any]
    config: Any

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.config)


@dataclass(frozen=True)
class Grid:
    """A validated grid: its kind, fixed settings, axes (in file order) and cells."""

    kind: str
    fixed: dict[str, Any]
    axes: dict[str, list[Any]]
    source: str = "<grid>"

    def canonical_json(self) -> str:
        return json.dumps({"kind": self.kind, "fixed": self.fixed, "axes": self.axes},
                          sort_keys=True, separators=(",", ":"), default=_plain)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:12]

    @property
    def kind_spec(self) -> Kind:
        return kinds.get(self.kind)

    def cells(self) -> list[Cell]:
        names = list(self.axes)
        out = []
        for i, combo in enumerate(itertools.product(*(self.axes[n] for n in names))):
            fields = {**self.fixed, **dict(zip(names, combo, strict=True))}
            out.append(Cell(i, fields, self.kind_spec.build(fields)))
        return out


def _plain(v: Any) -> Any:
    """JSON form of a grid value: a nested config (``assumptions``) as its fields."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    return list(v)


def cell_json(fields: dict[str, Any]) -> str:
    """A cell's values as JSON, nested configs as their fields."""
    return json.dumps(fields, sort_keys=True, default=lambda v: _plain(v) if
                      dataclasses.is_dataclass(v) or isinstance(v, tuple) else str(v))


def _hints(cls: type) -> dict[str, Any]:
    """The config's field types. A name imported only for type checkers (a config keeps its
    module light for the CLI) reads as ``Any``: such a field takes the value as written."""
    try:
        return typing.get_type_hints(cls)
    except NameError:
        import sys

        ns = vars(sys.modules[cls.__module__])
        out: dict[str, Any] = {}
        for c in reversed(cls.__mro__):
            for name, ann in getattr(c, "__annotations__", {}).items():
                try:
                    out[name] = eval(ann, dict(ns)) if isinstance(ann, str) else ann
                except NameError:
                    out[name] = Any
        return out


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` from TOML as the field's type, or a GridError naming ``where``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value == "none" and type(None) in args and str not in inner:
            return None
        errors = []
        for a in inner:
            try:
                return _coerce(value, a, where)
            except GridError as e:
                errors.append(str(e))
        raise GridError(errors[0] if errors else f"{where}: bad value {value!r}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise GridError(f"{where}: expected a table of {hint.__name__} fields, got {value!r}")
        sub = _hints(hint)
        unknown = sorted(set(value) - set(sub))
        if unknown:
            raise GridError(f"{where}: unknown field(s) {unknown} of {hint.__name__}; known: "
                            f"{', '.join(sub)}")
        try:
            return hint(**{k: _coerce(v, sub[k], f"{where}.{k}") for k, v in value.items()})
        except (ValueError, TypeError) as e:
            raise GridError(f"{where}: {e}") from None
    if origin is tuple:
        elem = args[0] if args else Any
        items = value if isinstance(value, list) else [value]  # "gb200" -> ("gb200",)
        return tuple(_coerce(v, elem, f"{where}[{i}]") for i, v in enumerate(items))
    if origin is dict:
        if not isinstance(value, dict):
            raise GridError(f"{where}: expected a table, got {value!r}")
        return {str(k): _coerce(v, args[1] if args else Any, f"{where}.{k}")
                for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    name = getattr(hint, "__name__", str(hint))
    raise GridError(f"{where}: expected {name}, got {value!r}")


def parse_grid(text: str, source: str = "<grid>") -> Grid:
    """Parse and validate a grid; every error names ``source`` and the key."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{source}: not valid TOML: {e}") from None
    unknown = sorted(set(doc) - set(TOP_KEYS))
    if unknown:
        raise GridError(f"{source}: unknown top-level key(s) {unknown}; known: "
                        f"{', '.join(TOP_KEYS)} (config fields go under [fixed] or [axes])")
    if "kind" not in doc:
        raise GridError(f"{source}: key 'kind' is missing; one of {', '.join(kinds.names())}")
    if not isinstance(doc["kind"], str) or doc["kind"] not in kinds:
        raise GridError(f"{source}: kind {doc['kind']!r} is unknown; known: "
                        f"{', '.join(kinds.names())}")
    kind = kinds.get(doc["kind"])
    fixed_raw = doc.get("fixed", {})
    axes_raw = doc.get("axes", {})
    for name, t in (("fixed", fixed_raw), ("axes", axes_raw)):
        if not isinstance(t, dict):
            raise GridError(f"{source}: '{name}' must be a table ([{name}])")
    if "trace" in doc and "traces" in doc:
        raise GridError(f"{source}: give 'trace' or 'traces', not both")
    if "trace" in doc:
        fixed_raw = {"trace": doc["trace"], **fixed_raw}
    if "traces" in doc:
        axes_raw = {"trace": doc["traces"], **axes_raw}
    both = sorted(set(fixed_raw) & set(axes_raw))
    if both:
        raise GridError(f"{source}: key {both[0]!r} is both fixed and an axis")
    hints = _hints(kind.config)
    fields = [f.name for f in dataclasses.fields(kind.config) if f.name not in kind.hidden]
    for section, table in (("fixed", fixed_raw), ("axes", axes_raw)):
        for key in table:
            if key not in fields:
                raise GridError(f"{source}: [{section}] {key!r} is not a field of a "
                                f"{kind.name} replay; known: {', '.join(fields)}")
    fixed = {k: _coerce(v, hints[k], f"{source}: [fixed] {k}") for k, v in fixed_raw.items()}
    axes: dict[str, list[Any]] = {}
    for key, values in axes_raw.items():
        where = f"{source}: [axes] {key}"
        if not isinstance(values, list):
            raise GridError(f"{where}: an axis is a list of values, got {values!r}")
        if not values:
            raise GridError(f"{where}: empty axis (give at least one value)")
        coerced = [_coerce(v, hints[key], f"{where}[{i}]") for i, v in enumerate(values)]
        if len(set(map(_freeze, coerced))) != len(coerced):
            raise GridError(f"{where}: repeated value(s); each cell must be distinct")
        axes[key] = coerced
    missing = [f.name for f in dataclasses.fields(kind.config)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               and f.name not in fixed and f.name not in axes]
    if missing:
        raise GridError(f"{source}: required field(s) {missing} are neither fixed nor an axis")
    grid = Grid(kind.name, fixed, axes, source)
    _check_values(grid)
    return grid


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if dataclasses.is_dataclass(v):
        return _freeze(dataclasses.asdict(v))
    return v


def _check_values(grid: Grid) -> None:
    """Build each fixed and axis value on its own against the defaults (errors name that
    key), then every cell (errors name the cell's values): the config's own checks and the
    kind's registry look-ups (policy, hardware, model) run before anything replays.

    A value that is only valid beside another key's value (``offload_policy = "lru"`` with
    ``engine_semantics = "vllm"``) is checked with the fixed values, and passes when some
    cell containing it builds: a value is blamed only when no cell can hold it.
    """
    kind = grid.kind_spec
    required = [f.name for f in dataclasses.fields(kind.config)
                if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    base = {k: grid.fixed[k] if k in grid.fixed else grid.axes[k][0] for k in required}
    names = list(grid.axes)
    cells = [dict(zip(names, combo, strict=True))
             for combo in itertools.product(*(grid.axes[n] for n in names))]

    def where(key: str, v: Any) -> str:
        return f"{grid.source}: [{'fixed' if key in grid.fixed else 'axes'}] {key} = {v!r}"

    def some_cell_holds(key: str, v: Any) -> bool:
        for cell in cells:
            if key in cell and cell[key] != v:
                continue
            try:
                _build(kind, {**grid.fixed, **cell}, "")
                return True
            except GridError:
                continue
        return False

    def build_one(key: str, v: Any, context: dict[str, Any]) -> None:
        try:
            _build(kind, {**context, key: v}, where(key, v))
        except GridError as e:
            if some_cell_holds(key, v):
                return
            # a required field's own bad value fails every build: name that field
            blamed = str(e).split(": ", 2)[-1].split(" ", 1)[0].split(":")[0].split(".")[0]
            if blamed != key and blamed in base:
                raise GridError(f"{where(blamed, base[blamed])}: "
                                f"{str(e).split(': ', 2)[-1]}") from None
            raise
    for key, v in grid.fixed.items():
        build_one(key, v, base)
    for key, values in grid.axes.items():
        for v in values:
            build_one(key, v, {**base, **grid.fixed})
    for i, cell in enumerate(cells):
        shown = ", ".join(f"{k}={v!r}" for k, v in cell.items()) or "the only cell"
        _build(kind, {**grid.fixed, **cell}, f"{grid.source}: cell {i} ({shown})")


def _build(kind: Kind, fields: dict[str, Any], where: str) -> Any:
    from toolkit.registry import RegistryError

    try:
        return kind.check(kind.build(fields))
    except (ValueError, TypeError, RegistryError, ToolkitError) as e:
        raise GridError(f"{where}: {e}") from None


MAX_GRID_BYTES = 1 << 20
"""Largest grid file read (1 MiB: a grid of thousands of cells is a few KiB); a device
or a huge file given as ``--grid`` is refused before any of it is read."""


def load_grid(path: str | Path) -> Grid:
    """Read and validate a grid file (a regular file of at most ``MAX_GRID_BYTES``)."""

    path = Path(path)
    try:
        if (problem := file_problem(path)) is not None:
            raise GridError(f"{path}: --grid {problem}")
        st = path.stat()
        if st.st_size > MAX_GRID_BYTES:
            raise GridError(f"{path}: --grid file is {st.st_size:,} bytes; a grid file is at "
                            f"most {MAX_GRID_BYTES:,} bytes")
        with path.open("rb") as fh:
            data = fh.read(MAX_GRID_BYTES + 1)  # the file may grow after the stat
    except OSError as e:
        raise GridError(f"{path}: cannot read grid file: {e.strerror or e}") from None
    if len(data) > MAX_GRID_BYTES:
        raise GridError(f"{path}: --grid file is over {MAX_GRID_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GridError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_grid(text, str(path))
