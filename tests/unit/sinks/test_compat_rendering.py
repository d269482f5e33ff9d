"""dcgm-exporter-compatible rendering: list spellings kept, XID descriptions, unavailable rows, 1.x labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from podgpu.fields import parse_metric_list
from podgpu.fields.xid import UNKNOWN, describe
from podgpu.model import Device, Sample, Snapshot
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions

DEV = Device(index=0, uuid="GPU-0f000000-0000-0000-0000-000000000000",
             pci_bus_id="00000000:18:00.0", device_name="nvidia0", model="NVIDIA H100 80GB HBM3")


def body(csv: str, values: dict[str, int | float | str]) -> str:
    snap = Snapshot(taken_at=1.0, samples=(Sample(DEV, values),))
    opts = RenderOptions(LabelOptions(hostname="node-a"))
    return render(snap, parse_metric_list(csv), opts).decode()


def samples(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def test_xid_descriptions_from_nvidias_catalog() -> None:
    # wording from NVIDIA's published catalog page (docs.nvidia.com/deploy/xid-errors,
    # "Analyzing Xid Errors with the Xid Catalog"), read independently of the generated table
    assert describe(8) == "GPU stopped processing"
    assert describe(13) == "Graphics Engine Exception"
    assert describe(11) == "Invalid or corrupted push buffer stream"
    assert describe(0) == "No Error"
    assert describe(100_000) == UNKNOWN and describe(-1) == UNKNOWN


def test_xid_metric_carries_err_code_and_err_msg_after_the_labels() -> None:
    text = body("DCGM_FI_DEV_XID_ERRORS, gauge, x\nDCGM_FI_DRIVER_VERSION, label, d\n",
                {"DCGM_FI_DEV_XID_ERRORS": 13, "DCGM_FI_DRIVER_VERSION": "580.1"})
    [labels] = samples(text)["DCGM_FI_DEV_XID_ERRORS"]
    assert labels["err_code"] == "13" and labels["err_msg"] == "Graphics Engine Exception"
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    assert line.index("DCGM_FI_DRIVER_VERSION=") < line.index("err_code=") < line.index("err_msg=")
    unknown = body("DCGM_FI_DEV_XID_ERRORS, gauge, x\n", {"DCGM_FI_DEV_XID_ERRORS": 4242})
    assert samples(unknown)["DCGM_FI_DEV_XID_ERRORS"][0]["err_msg"] == "Unknown Error"


def test_alias_rows_are_exported_under_the_lists_name() -> None:
    text = body("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\nDCGM_FI_DEV_BOARD_SERIAL, label, s\n",
                {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 4, "DCGM_FI_DEV_SERIAL": "1650923000000"})
    got = samples(text)
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" not in got
    [labels] = got["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    assert labels["DCGM_FI_DEV_BOARD_SERIAL"] == "1650923000000"


def test_unreadable_rows_are_listed_once_per_node() -> None:
    text = body("DCGM_FI_PROCESS_NAME, gauge, p\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n",
                {"DCGM_FI_DEV_GPU_UTIL": 7})
    got = samples(text)["podgpu_field_unavailable"]
    assert got == [{"field": "DCGM_FI_PROCESS_NAME", "reason": "not readable through NVML"}]


def test_numeric_label_row_uses_dcgm_value_text() -> None:
    text = body("DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_POWER_MGMT_LIMIT, label, l\n",
                {"DCGM_FI_DEV_GPU_UTIL": 7, "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0})
    assert samples(text)["DCGM_FI_DEV_GPU_UTIL"][0]["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == "700.000000"
