"""Accelerator specs as data: one TOML file per GPU under ``specs/``, every value sourced.

``get_hardware("gb200").hbm_bandwidth_bytes_per_s`` is a number;
``.sourced("hbm_bandwidth_bytes_per_s")`` says where it came from. Add your own with
:func:`register_hardware` (a spec, a TOML path or a dict) or the ``toolkit.hardware``
entry-point group (the entry point must resolve to a :class:`HardwareSpec`).
"""

from toolkit.hardware.provenance import KINDS, Sourced, SpecError
from toolkit.hardware.spec import (
    HARDWARE,
    PRICE_TIERS,
    HardwareSpec,
    PricePoint,
    get_hardware,
    hardware_names,
    load_hardware,
    register_hardware,
)

__all__ = [
    "HARDWARE",
    "KINDS",
    "PRICE_TIERS",
    "HardwareSpec",
    "PricePoint",
    "Sourced",
    "SpecError",
    "get_hardware",
    "hardware_names",
    "load_hardware",
    "register_hardware",
]
