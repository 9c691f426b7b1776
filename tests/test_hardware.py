"""Hardware and model specs: bundled data, provenance, loading, registration, overrides."""

from __future__ import annotations

import dataclasses
import tomllib
from importlib.resources import files

import pytest

from toolkit.hardware import (
    KINDS,
    HardwareSpec,
    SpecError,
    get_hardware,
    hardware_names,
    load_hardware,
    register_hardware,
)
from toolkit.hardware.spec import HARDWARE
from toolkit.models import get_model, indexer_layer_ids, load_model, model_names, register_model
from toolkit.registry import RegistryError

ALL_GPUS = ["b200", "b300", "gb200", "gb300", "h100", "h200", "mi300x", "mi325x", "mi355x",
            "rtx6000pro"]


def _gb200_dict() -> dict:
    text = files("toolkit.hardware").joinpath("specs", "gb200.toml").read_text("utf-8")
    return tomllib.loads(text)


class TestBundledHardware:
    def test_all_present(self):
        """Every accelerator the brief names ships as package data (and the RTX PRO 6000
        of sglang#33075's HiSparse run)."""
        assert hardware_names() == ALL_GPUS

    @pytest.mark.parametrize("name", ALL_GPUS)
    def test_every_value_has_kind_and_source(self, name):
        """No bare numbers: each field carries a valid kind and a non-empty source."""
        hw = get_hardware(name)
        sourced = {f.name for f in dataclasses.fields(HardwareSpec)} - {
            "name",
            "label",
            "vendor",
            "provenance",
            "price_history",
        }
        assert set(hw.provenance) == sourced
        for field, s in hw.provenance.items():
            assert s.kind in KINDS, field
            assert s.source, field
            assert getattr(hw, field) == s.value

    @pytest.mark.parametrize("name", ALL_GPUS)
    def test_prices_carry_vintage(self, name):
        """Every current price names its survey; history holds the Aug 2025 survey."""
        hw = get_hardware(name)
        assert hw.price_vintage("hyperscaler") == "2026-07"
        assert hw.price_vintage("rental") == "2026-07"
        assert hw.price_vintage("neocloud") == "intermediate"
        if name != "rtx6000pro":  # entered the registry after the Aug 2025 survey
            assert "2025-08" in [p.survey for p in hw.price_history]

    def test_rtx6000pro_sourced_figures(self):
        """RTX PRO 6000 Server (sglang#33075's card): 96 GB GDDR7 (97,887 MiB usable), 1.792
        TB/s, PCIe Gen5 x16 (64 GB/s) for host and GPU-to-GPU traffic, InferenceX-app's
        prices."""
        hw = get_hardware("rtx6000pro")
        assert (hw.hbm_bytes, hw.hbm_usable_bytes) == (96 * 2**30, 97887 * 2**20)
        assert hw.hbm_bandwidth_bytes_per_s == 1.792e12 and hw.host_link == "PCIe Gen5 x16"
        assert hw.host_link_peak_bytes_per_s == hw.scaleup_bandwidth_bytes_per_s == 64e9
        assert (hw.price_hyperscaler_usd_per_gpu_hour, hw.price_rental_usd_per_gpu_hour) == (
            0.68, 0.52)
        assert hw.sourced("host_mem_bytes_per_gpu").kind == "assumed"

    def test_gb200_headline_figures(self):
        """GB200's sourced values (InferenceX-app gpu-specs.ts, aiconfigurator)."""
        hw = get_hardware("gb200")
        assert hw.hbm_bytes == 192 * 2**30  # nominal GiB (one convention, see the spec note)
        assert hw.hbm_usable_bytes == 189471 * 2**20  # nvidia-smi MiB
        assert hw.hbm_bandwidth_bytes_per_s == 8e12
        assert (hw.dense_fp4_tflops, hw.dense_fp8_tflops, hw.dense_bf16_tflops) == (
            10000,
            5000,
            2500,
        )
        assert hw.host_mem_bytes_per_gpu == 240e9 and hw.host_mem_gpus_sharing == 2
        assert hw.h2d_single_bytes_per_s == 200e9
        assert hw.h2d_concurrent_bytes_per_s == 170e9
        assert hw.sourced("h2d_single_bytes_per_s").kind == "assumed"  # GB300 proxy
        assert hw.price_usd_per_gpu_hour("hyperscaler") == 1.86
        assert hw.price_usd_per_gpu_hour("rental") == 4.00
        assert hw.price_usd_per_gpu_hour("hyperscaler", survey="2025-08") == 2.21
        assert hw.power_all_in_w == 1870 and hw.tdp_w == 1200

    def test_prices_are_survey_values(self):
        """Every price is labelled a survey value with its vintage, never 'measured'."""
        for name in hardware_names():
            hw = get_hardware(name)
            for tier in ("hyperscaler", "neocloud", "rental"):
                s = hw.sourced(f"price_{tier}_usd_per_gpu_hour")
                assert s.kind == "survey" and s.vintage, (name, tier)

    def test_usable_hbm_convention(self):
        """Every accelerator: usable HBM <= nominal, both in bytes of one convention."""
        for name in hardware_names():
            hw = get_hardware(name)
            assert 0.9 * hw.hbm_bytes <= hw.hbm_usable_bytes <= hw.hbm_bytes, name
            assert hw.hbm_bytes % 2**30 == 0, name

    def test_scaleout_bandwidth_sourced(self):
        """Every accelerator names its scale-out NIC bandwidth with kind and source."""
        for name in hardware_names():
            s = get_hardware(name).sourced("scaleout_bandwidth_bytes_per_s")
            assert s.value in (50e9, 100e9) and s.source, name

    def test_gb300_measured_link(self):
        """GB300 H2D is the nvbandwidth measurement (Megatron-LM #6491)."""
        hw = get_hardware("gb300")
        assert hw.h2d_single_bytes_per_s == 211.5e9
        assert hw.h2d_concurrent_bytes_per_s == 172e9
        assert hw.d2h_single_bytes_per_s == 193.5e9
        assert hw.sourced("h2d_single_bytes_per_s").kind == "measured"
        assert "Megatron-LM" in hw.sourced("h2d_single_bytes_per_s").source
        assert hw.hbm_usable_bytes == 284208 * 2**20
        assert (hw.price_hyperscaler_usd_per_gpu_hour, hw.price_rental_usd_per_gpu_hour) == (
            2.31,
            5.00,
        )

    def test_mi355x_pcie_and_node_memory(self):
        """MI355X: PCIe Gen5 x16 at 64 GB/s nominal, 3 TB DDR5 per 8 GPUs."""
        hw = get_hardware("mi355x")
        assert hw.host_link == "PCIe Gen5 x16"
        assert hw.host_link_peak_bytes_per_s == 64e9
        assert hw.host_mem_bytes_per_gpu == 375e9 and hw.host_mem_gpus_sharing == 8
        assert hw.price_usd_per_gpu_hour() == 1.50
        assert hw.price_usd_per_gpu_hour("rental") == 2.90

    def test_hopper_has_no_fp4(self):
        """A quantity the part lacks is None, still with a source saying why."""
        hw = get_hardware("h100")
        assert hw.dense_fp4_tflops is None
        assert "FP4" in hw.sourced("dense_fp4_tflops").source

    def test_name_is_case_insensitive(self):
        """GB200 and gb200 are the same spec."""
        assert get_hardware("GB200") is get_hardware("gb200")


class TestOverridesAndRegistration:
    def test_override_bare_number(self):
        """A bare override becomes an 'assumed' user override, recording the old value."""
        hw = get_hardware("gb200", overrides={"price_hyperscaler_usd_per_gpu_hour": 2.0})
        assert hw.price_usd_per_gpu_hour() == 2.0
        s = hw.sourced("price_hyperscaler_usd_per_gpu_hour")
        assert (s.kind, s.source) == ("assumed", "user override")
        assert "1.86" in s.note
        assert get_hardware("gb200").price_usd_per_gpu_hour() == 1.86  # registry untouched

    def test_override_with_provenance(self):
        """A table override keeps the caller's kind and source."""
        hw = get_hardware(
            "mi355x",
            overrides={
                "h2d_single_bytes_per_s": {
                    "value": 55e9,
                    "kind": "measured",
                    "source": "our rocm-bandwidth-test",
                }
            },
        )
        assert hw.h2d_single_bytes_per_s == 55e9
        assert hw.sourced("h2d_single_bytes_per_s").kind == "measured"

    def test_override_unknown_field_raises(self):
        """A typo in an override names the field."""
        with pytest.raises(SpecError, match="hbm_byte"):
            get_hardware("gb200", overrides={"hbm_byte": 1})

    def test_load_and_register_dict(self):
        """A user spec from a dict registers under its own name; duplicates raise."""
        data = _gb200_dict()
        data["name"] = "gb200-test-variant"
        data["hbm_bytes"] = {"value": 1.0, "kind": "assumed", "source": "test"}
        spec = register_hardware(data)
        try:
            assert get_hardware("gb200-test-variant").hbm_bytes == 1.0
            with pytest.raises(RegistryError, match="already registered"):
                register_hardware(spec)
        finally:
            HARDWARE._items.pop("gb200-test-variant")

    def test_load_from_path(self, tmp_path):
        """load_hardware reads a TOML file outside the package."""
        path = files("toolkit.hardware").joinpath("specs", "h200.toml")
        target = tmp_path / "mine.toml"
        target.write_text(path.read_text("utf-8").replace('name = "h200"', 'name = "mine"'))
        assert load_hardware(target).name == "mine"

    def test_missing_field_is_named(self):
        """A spec missing a field fails with the field's name and the fix."""
        data = _gb200_dict()
        del data["tdp_w"]
        with pytest.raises(SpecError, match="tdp_w"):
            load_hardware(data)

    def test_missing_source_is_rejected(self):
        """A value without a source is refused."""
        data = _gb200_dict()
        data["tdp_w"] = {"value": 1200.0, "kind": "vendor"}
        with pytest.raises(SpecError, match="tdp_w.*source"):
            load_hardware(data)

    def test_bad_kind_is_rejected(self):
        """kind must be vendor, measured, derived, assumed, survey or fitted."""
        data = _gb200_dict()
        data["tdp_w"] = {"value": 1200.0, "kind": "guess", "source": "x"}
        with pytest.raises(SpecError, match="kind"):
            load_hardware(data)

    def test_price_without_vintage_is_rejected(self):
        """A price must say which survey it comes from."""
        data = _gb200_dict()
        del data["price_rental_usd_per_gpu_hour"]["vintage"]
        with pytest.raises(SpecError, match="vintage"):
            load_hardware(data)

    def test_unknown_survey_lists_known(self):
        """Asking for a survey the spec lacks lists the ones it has."""
        with pytest.raises(SpecError, match="2025-08"):
            get_hardware("gb200").price_usd_per_gpu_hour("hyperscaler", survey="1999-01")


class TestModels:
    def test_names_and_aliases(self):
        """GLM-5.1 resolves to GLM-5, GLM-5.3 to GLM-5.2."""
        assert model_names() == ["deepseek-v3.2", "dsr1", "glm-5", "glm-5.2"]
        assert get_model("GLM-5.1") is get_model("glm-5")
        assert get_model("glm-5.3") is get_model("glm-5.2")

    def test_indexshare_21_full_57_shared(self):
        """GLM-5.2: Full iff i<3 or (i-2)%4==0 -> 21 Full, 57 Shared of 78."""
        m = get_model("glm-5.2")
        full = m.indexer_layers
        assert (m.index_topk_freq, m.index_skip_topk_offset) == (4, 3)
        assert len(full) == 21 and m.num_layers - len(full) == 57
        assert full == tuple(i for i in range(78) if i < 3 or (i - 2) % 4 == 0)
        assert full[:5] == (0, 1, 2, 6, 10) and full[-1] == 74

    def test_no_sharing_models_index_every_layer(self):
        """DeepSeek-V3.2 and GLM-5/5.1 run an indexer on every layer."""
        assert len(get_model("deepseek-v3.2").indexer_layers) == 61
        assert len(get_model("glm-5.1").indexer_layers) == 78
        assert indexer_layer_ids(5, 1, 0) == (0, 1, 2, 3, 4)

    @pytest.mark.parametrize(
        ("name", "fp8", "bf16", "indexer"),
        [
            ("deepseek-v3.2", 40_016, 70_272, 8_052),
            ("glm-5", 51_168, 89_856, 10_296),
            ("glm-5.2", 51_168, 89_856, 2_772),
        ],
    )
    def test_per_token_kv_bytes(self, name, fp8, bf16, indexer):
        """Whole-model per-token KV matches the derived table (MLA rows + indexer keys)."""
        m = get_model(name)
        assert m.mla_bytes_per_token("fp8") == fp8
        assert m.mla_bytes_per_token("bf16") == bf16
        assert m.indexer_bytes_per_token() == indexer

    def test_geometry(self):
        """Row bytes 656/1152/132, top-k 2048, heads 128 vs 64, params 744B/40B."""
        ds, glm = get_model("deepseek-v3.2"), get_model("glm-5")
        for m in (ds, glm):
            assert (m.mla_row_bytes_fp8, m.mla_row_bytes_bf16, m.indexer_row_bytes) == (
                656,
                1152,
                132,
            )
            assert m.index_topk == 2048
        assert (ds.num_query_heads, glm.num_query_heads) == (128, 64)
        assert (ds.index_n_heads, glm.index_n_heads) == (64, 32)
        assert (glm.total_params, glm.active_params) == (744e9, 40e9)
        assert glm.weight_bytes("fp8") == 744e9 and glm.weight_bytes("bf16") == 1488e9
        assert get_model("glm-5.2").sourced("total_params").kind == "assumed"

    def test_register_model_with_alias(self):
        """A user model registers under its name and aliases."""
        text = files("toolkit.models").joinpath("specs", "glm-5.toml").read_text("utf-8")
        data = tomllib.loads(text)
        data["name"], data["aliases"] = "my-dsa", ["my-dsa-alias"]
        register_model(data)
        from toolkit.models.spec import MODELS

        try:
            assert get_model("my-dsa-alias").name == "my-dsa"
        finally:
            MODELS._items.pop("my-dsa")
            MODELS._items.pop("my-dsa-alias")

    def test_inconsistent_bf16_row_rejected(self):
        """BF16 row bytes must equal 2 x (kv_lora_rank + rope dim)."""
        text = files("toolkit.models").joinpath("specs", "glm-5.toml").read_text("utf-8")
        data = tomllib.loads(text)
        data["mla_row_bytes_bf16"] = {"value": 1000, "kind": "assumed", "source": "test"}
        with pytest.raises(SpecError, match="mla_row_bytes_bf16"):
            load_model(data)
