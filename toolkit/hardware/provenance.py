"""Values that carry where they came from, and the thin TOML layer that reads them.

Why: every figure a cost report prints must be traceable to a datasheet, a measurement,
a derivation or an explicit assumption; a bare number in a spec file is a silent guess.
Specs keep plain numbers in their fields (``spec.hbm_bytes`` is a float) and the
provenance beside them (``spec.provenance["hbm_bytes"]``), so arithmetic stays simple.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from toolkit.errors import ToolkitError
from toolkit.registry import Registry

Kind = Literal["vendor", "measured", "derived", "assumed", "survey", "fitted"]
KINDS: tuple[str, ...] = ("vendor", "measured", "derived", "assumed", "survey", "fitted")
"""vendor: a datasheet, or a tool/survey quoting one (reference tags V, S, R).
measured: observed on hardware (M).
derived: arithmetic over other sourced values (D). assumed: a proxy or a guess, with why.
survey: a market price from a survey (InferenceX $/GPU-hr), valid for its vintage only.
fitted: estimated from measured points by a fit that names its data."""


class SpecError(ToolkitError):
    """A spec file or dict is malformed; the message names the spec, field and fix."""


@dataclasses.dataclass(frozen=True)
class Sourced:
    """One value with its provenance.

    Attributes:
        value: the number (SI units as the field name says) or text; None when the
            quantity does not exist on this part (e.g. FP4 on Hopper).
        kind: vendor | measured | derived | assumed.
        source: where it comes from, or the reasoning for an assumption.
        note: caveats such as disagreeing sources.
        vintage: when a time-varying value (a price) was observed.
    """

    value: float | int | str | None
    kind: Kind
    source: str
    note: str = ""
    vintage: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if not self.source:
            raise SpecError("source must say where the value comes from (or why it is assumed)")


def parse_sourced(raw: Any, where: str) -> Sourced:
    """Read ``{value, kind, source[, note, vintage]}``; errors name ``where``."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a table with value, kind and source; got {raw!r}")
    unknown = set(raw) - {"value", "kind", "source", "note", "vintage"}
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}")
    for key in ("kind", "source"):
        if key not in raw:
            raise SpecError(f"{where}: missing {key!r}")
    try:
        return Sourced(
            value=raw.get("value"),
            kind=raw["kind"],
            source=raw["source"],
            note=raw.get("note", ""),
            vintage=raw.get("vintage", ""),
        )
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


S = TypeVar("S")
_NOT_SOURCED = {"provenance", "price_history", "aliases"}


def build_spec(cls: type[S], data: Mapping[str, Any], where: str, plain: Mapping[str, Any]) -> S:
    """Build frozen ``cls`` from a spec mapping: sourced tables for every numeric field.

    Args:
        cls: a frozen dataclass with a ``provenance`` field and the sourced fields.
        data: the parsed TOML (or a user dict) holding one table per sourced field.
        where: spec name/file for error messages.
        plain: already-parsed non-sourced fields (name, label, ...).
    """
    names = [f.name for f in dataclasses.fields(cls)]
    sourced_fields = [n for n in names if n not in plain and n not in _NOT_SOURCED]
    unknown = set(data) - set(sourced_fields) - set(plain) - _NOT_SOURCED
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {sorted(unknown)}; check spelling and units")
    missing = [n for n in sourced_fields if n not in data]
    if missing:
        raise SpecError(
            f"{where}: missing field(s) {missing}; give each a table with value, kind, "
            "source (omit value if the quantity does not exist, kind='assumed' if unknown)"
        )
    prov = {n: parse_sourced(data[n], f"{where}: {n}") for n in sourced_fields}
    values = {n: _number(p.value, f"{where}: {n}") for n, p in prov.items()}
    return cls(**plain, **values, provenance=MappingProxyType(prov))  # type: ignore[call-arg]


def _number(v: Any, where: str) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SpecError(f"{where}: value must be a number, text or absent; got {v!r}")
    return v


def read_toml(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """Return (mapping, label for errors) from a TOML path or an already-built dict."""
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict), str(path_or_dict.get("name", "<dict>"))
    path = Path(path_or_dict)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh), str(path)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None


def bundled_spec_texts(package: str) -> list[tuple[str, dict[str, Any]]]:
    """Parse every ``specs/*.toml`` shipped in ``package`` (works from a wheel or zip)."""
    out = []
    for entry in sorted(files(package).joinpath("specs").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out.append((f"{package}/specs/{entry.name}", tomllib.loads(entry.read_text("utf-8"))))
    return out


def with_overrides(spec: S, overrides: Mapping[str, Any], where: str) -> S:
    """Copy of ``spec`` with fields replaced; provenance records the override.

    An override value may be a bare number (recorded as kind "assumed", source "user
    override") or a full ``{value, kind, source}`` table.
    """
    prov = dict(spec.provenance)  # type: ignore[attr-defined]
    changes: dict[str, Any] = {}
    for name, raw in overrides.items():
        if name not in prov:
            raise SpecError(
                f"{where}: cannot override unknown field {name!r}; known: {sorted(prov)}"
            )
        if isinstance(raw, Mapping):
            s = parse_sourced(raw, f"{where}: override {name}")
        else:
            old = prov[name]
            s = Sourced(
                raw,
                "assumed",
                "user override",
                note=f"was {old.value!r} ({old.source})",
                vintage="user override" if old.vintage else "",
            )
        prov[name] = s
        changes[name] = _number(s.value, f"{where}: override {name}")
    return dataclasses.replace(spec, **changes, provenance=MappingProxyType(prov))  # type: ignore[type-var]


class SpecRegistry(Registry[S]):
    """The registry of one spec family (hardware, models): its built-ins are the TOML files
    under ``<package>/specs/``, parsed and registered on first use, so importing the package
    reads no file; third-party specs come from the ``<package>`` entry-point group.

    Names are case-insensitive (stored lower-case); a spec's ``aliases`` are registered too.

    Args:
        family: human name for error messages ("hardware", "model").
        package: package holding ``specs/*.toml``; also the entry-point group.
        load: builds one spec from a parsed TOML table (a file without a top-level
            ``name`` is named after its file stem).
    """

    def __init__(self, family: str, package: str, load: Callable[[Mapping[str, Any]], S]
                 ) -> None:
        super().__init__(family, package)
        self._package = package
        self._load = load
        self._builtins_loaded = False

    def _ensure_builtins(self) -> None:
        if self._builtins_loaded:
            return
        self._builtins_loaded = True  # before registering: register() comes back here
        for where, data in bundled_spec_texts(self._package):
            data.setdefault("name", Path(where).stem)
            self.add(self._load(data))

    def add(self, spec: S) -> S:
        """Register ``spec`` under its name and aliases; a taken name raises."""
        self.register(spec.name, spec)  # type: ignore[attr-defined]
        for alias in getattr(spec, "aliases", ()):
            self.register(alias, spec)
        return spec

    def register(self, name: str, obj: S) -> S:
        self._ensure_builtins()
        return super().register(name.lower(), obj)

    def get(self, name: str) -> S:
        self._ensure_builtins()
        return super().get(name.lower())

    def names(self) -> list[str]:
        self._ensure_builtins()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._ensure_builtins()
        return isinstance(name, str) and super().__contains__(name.lower())

    def spec(self, name: str, overrides: Mapping[str, Any] | None = None) -> S:
        """The spec registered as ``name``, optionally with fields overridden (recorded in
        its provenance)."""
        spec = self.get(name)
        return with_overrides(spec, overrides, spec.name) if overrides else spec  # type: ignore[attr-defined]
