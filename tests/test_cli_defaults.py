"""Every CLI option whose value ends up in a config dataclass has that field's default.

The commands read these defaults from the dataclasses (``commands.common.field_default``);
options of configs that still live in heavy modules repeat them, and this test keeps both
kinds from drifting. To cover another command, add a row to ``CONFIG_OPTIONS``: options are
matched to fields by name, ``renames`` maps the others (with a conversion where the CLI
takes another unit or a comma-separated list) or exempts one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import typer

from toolkit.cli import app
from toolkit.cost.config import CompareConfig
from toolkit.engram.hashing import EngramConfig, default_layer_ids
from toolkit.replay.config import EngramReplayConfig, PrefixReplayConfig, SelectionReplayConfig
from toolkit.replay.tiers.config import TierReplayConfig
from toolkit.synth.selections import SyntheticSelectionConfig


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


#: An option (parameter name) -> config field, or (field, CLI value -> field value), or None
#: for an option whose None default means "work it out from the other options".
Renames = dict[str, str | tuple[str, Callable[[Any], Any]] | None]

#: Command path -> (config dataclass, options named otherwise than their field).
CONFIG_OPTIONS: dict[tuple[str, ...], tuple[type, Renames]] = {
    ("replay", "prefix"): (PrefixReplayConfig, {}),
    ("replay", "selections"): (SelectionReplayConfig, {}),
    ("replay", "engram"): (EngramReplayConfig, {
        "table_gb": ("table_bytes", lambda gb: gb * 1e9),
        "max_batch": "max_batch_per_gpu",
    }),
    ("cost", "compare"): (CompareConfig, {
        "interactivity": ("interactivity", _floats),
        # a string option: a number of seconds or 'none'
        "max_p90_ttft_s": ("max_p90_ttft_s", lambda s: None if s == "none" else float(s)),
    }),
    ("synth", "selections"): (SyntheticSelectionConfig, {}),
    ("replay", "tiers"): (TierReplayConfig, {
        "host_gb": None,  # None = the pool from --host-ratio
        # GB through the model's KV bytes per token; 0 (off) and -1 (unbounded) map as is
        "storage_gb": ("storage_tokens", lambda gb: int(gb) if gb in (0, -1) else None),
    }),
    ("record", "engram"): (EngramConfig, {
        "ngram": ("ngram_orders", _ints),
        "layers": ("layer_ids", default_layer_ids),
        "layer_ids": None,  # None = the ids of --layers, checked through "layers"
    }),
}


def _command(path: tuple[str, ...]) -> Any:
    """The click command behind ``toolkit PATH`` (typer may bring its own click)."""
    cmd = typer.main.get_command(app)
    for name in path:
        assert hasattr(cmd, "get_command"), f"{' '.join(path)}: {cmd.name} has no subcommands"
        sub = cmd.get_command(None, name)
        assert sub is not None, f"no command `toolkit {' '.join(path)}`"
        cmd = sub
    return cmd


def _checked(path: tuple[str, ...]) -> list[tuple[str, Any, str, Any]]:
    """(option, CLI default as the config gets it, field, field default) per mapped option."""
    config, renames = CONFIG_OPTIONS[path]
    fields = {f.name: f for f in dataclasses.fields(config)}
    options = {p.name: p for p in _command(path).params if p.param_type_name == "option"}
    missing = sorted(set(renames) - set(options))
    assert not missing, f"toolkit {' '.join(path)} has no option(s) {missing}"
    rows = []
    for name, opt in options.items():
        target = renames[name] if name in renames else (name if name in fields else None)
        if target is None:
            continue
        field, convert = (target, lambda v: v) if isinstance(target, str) else target
        f = fields[field]
        if f.default is dataclasses.MISSING:
            continue  # a required value (or a factory): nothing to keep in step
        rows.append((name, convert(opt.default), field, f.default))
    return rows


class TestCliDefaults:
    @pytest.mark.parametrize("path", list(CONFIG_OPTIONS), ids=" ".join)
    def test_option_defaults_equal_field_defaults(self, path: tuple[str, ...]) -> None:
        """Each option mapped to a config field defaults to the field's default."""
        rows = _checked(path)
        assert rows, f"no option of toolkit {' '.join(path)} maps to a config field"
        drift = [(o, cli, f, d) for o, cli, f, d in rows if cli != d]
        assert not drift, f"toolkit {' '.join(path)}: CLI default != config default: {drift}"

    def test_defaults_read_from_configs_are_shown_in_help(self) -> None:
        """A default read from a dataclass still appears in --help as before."""
        from typer.testing import CliRunner

        res = CliRunner().invoke(app, ["replay", "engram", "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0
        for shown in ("default: dram", "default: gb200", "default: deepseek-v3.2",
                      "default: 200.0", "default: 8192", "default: 256"):
            assert shown in res.output
