from __future__ import annotations

import pynvml
import pytest

from podgpu.fields.catalog import ALIASES, BY_NAME, CATALOG, closest, lookup


def test_ids_and_names_are_unique() -> None:
    assert len({f.id for f in CATALOG}) == len(CATALOG)
    assert len({f.name for f in CATALOG}) == len(CATALOG)


def test_issue_required_fields_are_in_the_catalog() -> None:
    required = [
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_PSTATE",
        "DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ]
    for name in required:
        assert name in BY_NAME, name


@pytest.mark.parametrize("f", CATALOG, ids=lambda f: f.name)
def test_every_nvml_name_a_source_uses_exists_in_pynvml(f) -> None:  # type: ignore[no-untyped-def]
    for ref in (f.source.ref, f.source.arg):
        if ref.startswith(("NVML_", "nvml")):
            assert hasattr(pynvml, ref), f"{f.name}: pynvml has no {ref}"


def test_dcgm_ids_from_the_reference() -> None:
    # NVML's API reference
    assert lookup("DCGM_FI_DEV_GPU_UTIL").id == 203  # type: ignore[union-attr]
    assert lookup("DCGM_FI_DEV_FB_USED").id == 252  # type: ignore[union-attr]
    assert lookup("DCGM_FI_PROF_DRAM_ACTIVE").id == 1005  # type: ignore[union-attr]
    assert lookup("DCGM_FI_DEV_CLOCKS_EVENT_REASONS").id == 112  # type: ignore[union-attr]


def test_unit_conversions_are_declared_once() -> None:
    assert lookup("DCGM_FI_DEV_POWER_USAGE").source.scale == pytest.approx(0.001)  # type: ignore[union-attr]
    assert lookup("DCGM_FI_DEV_FB_FREE").source.scale == pytest.approx(1 / 1048576)  # type: ignore[union-attr]
    assert lookup("DCGM_FI_PROF_SM_ACTIVE").source.scale == pytest.approx(0.01)  # type: ignore[union-attr]
    assert lookup("DCGM_FI_PROF_PCIE_TX_BYTES").source.scale == 1048576  # type: ignore[union-attr]


def test_aliases_resolve_and_unknown_names_get_suggestions() -> None:
    for alias, name in ALIASES.items():
        assert lookup(alias) is BY_NAME[name]
    assert lookup("DCGM_FI_NOPE") is None
    assert "DCGM_FI_DEV_FB_USED" in closest("DCGM_FI_DEV_FB_USD")
