"""Every field NVML can read is read: a DCGM field that DCGM itself reads from NVML (an NVML
field id, or nvmlDeviceGet* calls) and that the installed nvidia-ml-py binding has, is in
podgpu's catalog with an NVML source, never `podgpu_field_unavailable` "not readable through
NVML".

Where DCGM reads each field is restated in tests/fixtures/dcgm/dcgm-nvml-sources.csv from
NVIDIA/DCGM's dcgmlib/src/dcgm_fields.cpp and DcgmCacheManager.cpp
(scripts/gen-dcgm-nvml-sources). Left out, each for a reason stated here: DCGM_FT_BINARY fields
(dcgm-exporter cannot export them: its collector's toString converts INT64, DOUBLE and STRING
only, internal/pkg/collector/gpu_collector.go) and names go-dcgm does not know (dcgm-exporter
refuses a list naming them)."""

from __future__ import annotations

import csv
from pathlib import Path

import pynvml
import pytest

from podgpu.fields import names
from podgpu.fields.catalog import lookup
from podgpu.fields.metriclist import NOT_READABLE, parse_metric_list

TABLE = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm" / "dcgm-nvml-sources.csv"


def rows() -> list[dict[str, str]]:
    lines = [ln for ln in TABLE.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def nvml_has(row: dict[str, str]) -> list[str]:
    """The NVML field id and functions of `row` that this binding defines."""
    have = [n for n in [row["nvml_field"], *row["nvml_functions"].split()]
            if n and hasattr(pynvml, n)]
    return have


READABLE = [r for r in rows() if r["dcgm_type"] != "DCGM_FT_BINARY"
            and r["name"] in names.ids() and nvml_has(r)]


def test_the_table_is_dcgms() -> None:
    by_name = {r["name"]: r for r in rows()}
    # spot facts of dcgm_fields.cpp, so an empty or shifted table fails
    assert by_name["DCGM_FI_DEV_ROW_REMAP_PENDING"]["nvml_field"] == "NVML_FI_DEV_REMAPPED_PENDING"
    assert by_name["DCGM_FI_DEV_POWER_VIOLATION"]["nvml_field"] == "NVML_FI_DEV_PERF_POLICY_POWER"
    assert "nvmlDeviceGetBAR1MemoryInfo" in by_name["DCGM_FI_DEV_BAR1_TOTAL"]["nvml_functions"]
    assert len(READABLE) > 100


@pytest.mark.parametrize("row", READABLE, ids=[r["name"] for r in READABLE])
def test_a_field_nvml_has_is_read_through_nvml(row: dict[str, str]) -> None:
    f = lookup(row["name"])
    assert f is not None, f"{row['name']}: NVML has {nvml_has(row)}, podgpu does not read it"
    assert f.source.kind in ("fv", "call", "system", "rate", "event", "exporter", "gpm")


def test_row_remap_pending_has_an_nvml_source_and_is_no_unavailable_row() -> None:
    f = lookup("DCGM_FI_DEV_ROW_REMAP_PENDING")
    assert f is not None and f.source.kind == "fv" and f.source.ref == "NVML_FI_DEV_REMAPPED_PENDING"
    ml = parse_metric_list("DCGM_FI_DEV_ROW_REMAP_PENDING, gauge, remap pending\n")
    assert [x.name for x in ml.fields] == ["DCGM_FI_DEV_ROW_REMAP_PENDING"]
    assert not any(NOT_READABLE in w for w in ml.warnings)
