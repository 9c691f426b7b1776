"""The plugin registry: duplicates refused, third-party entry points discovered, and a plain
Python policy running through the same replay as the compiled ones."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from toolkit import registry as registry_mod
from toolkit.policies import policies
from toolkit.policies.reference import PythonLRU
from toolkit.registry import Registry, RegistryError
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.synth.selections import SyntheticSelectionConfig, generate


def test_duplicate_names_refused():
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    with pytest.raises(RegistryError, match="thing 'a' is already registered"):
        reg.register("a", 2)


def test_entry_points_are_discovered(monkeypatch):
    """A third-party package's `[project.entry-points."toolkit.policies"]` entry appears
    under its name, loaded lazily on first lookup."""
    ep = EntryPoint("py-lru", "toolkit.policies.reference:PythonLRU", "toolkit.policies")
    monkeypatch.setattr(registry_mod, "entry_points",
                        lambda group: [ep] if group == "toolkit.policies" else [])
    reg: Registry[type] = Registry("policy", entry_point_group="toolkit.policies")
    assert reg.names() == ["py-lru"] and reg.get("py-lru") is PythonLRU


def test_unknown_name_lists_known():
    with pytest.raises(RegistryError, match="unknown policy 'nope'; known: arc, clock"):
        policies.get("nope")


def test_python_policy_runs_through_selection_replay(store, monkeypatch):
    """SYNTHETIC trace: a registered plain-Python LRU gives the compiled LRU's per-row hits."""
    monkeypatch.setitem(policies._items, "py-lru", PythonLRU())
    cfg = SyntheticSelectionConfig(requests=2, prompt_tokens=400, steps=5, layers=2, k=32,
                                   sinks=2, recent_window=8, seed=4)
    store.write_many(generate(cfg, "syn"), "syn")
    runs = {p: replay_selections(store, SelectionReplayConfig("syn", p, 48)) for p in
            ("lru", "py-lru")}
    assert runs["lru"]["misses"] == runs["py-lru"]["misses"] > 0
    per = store.query("SELECT r.policy, list(s.hits ORDER BY request_id, layer, step) AS h "
                      "FROM selection_replay s JOIN selection_runs r USING (run_id) "
                      "GROUP BY r.policy ORDER BY r.policy").rows()
    assert per[0][1] == per[1][1]
