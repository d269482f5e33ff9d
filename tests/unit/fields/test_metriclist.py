from __future__ import annotations

import os
from pathlib import Path

import pytest

from podgpu.errors import MetricListError
from podgpu.fields import load_default, load_metric_list, parse_metric_list
from podgpu.fields.metriclist import (
    describe_source,
    empty_list_warning,
    read_list_file,
    resolve_list_path,
)

# The 26 active rows of dcgm-exporter 4.8.x etc/default-counters.csv
# (dcgm-exporter's source), in file order.
DCGM_EXPORTER_DEFAULT_ACTIVE = [
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
]
COUNTERS = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"}


def test_default_list_has_dcgm_exporters_active_rows_in_order() -> None:
    ml = load_default()
    names = [r.name for r in sorted(ml.metrics + ml.labels, key=lambda r: r.line)]
    assert names == DCGM_EXPORTER_DEFAULT_ACTIVE
    assert [r.name for r in ml.labels] == ["DCGM_FI_DRIVER_VERSION"]
    assert {r.name for r in ml.metrics if r.prom_type == "counter"} == COUNTERS


def test_etc_copy_is_the_embedded_list() -> None:
    root = Path(__file__).resolve().parents[3]
    etc = load_metric_list(str(root / "etc" / "default-counters.csv"))
    assert [r.name for r in etc.metrics] == [r.name for r in load_default().metrics]


def test_comments_blank_lines_trimming_and_quoted_help() -> None:
    ml = parse_metric_list(
        "# comment\n\n  DCGM_FI_DEV_GPU_UTIL ,  gauge ,  GPU utilization (in %).  \n"
        'DCGM_FI_DEV_FB_USED, gauge, "Used, in MiB"\n'
    )
    assert [(r.name, r.prom_type, r.help, r.line) for r in ml.metrics] == [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 3),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Used, in MiB", 4),
    ]


def test_dcgm_46_alias_is_emitted_under_the_old_name() -> None:
    ml = parse_metric_list("DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, temp\n")
    assert ml.metrics[0].name == "DCGM_FI_DEV_GPU_TEMP"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("DCGM_FI_DEV_GPU_UTIL, gauge\n", 1, "expected 3 fields"),
        ("# c\nDCGM_FI_DEV_GPU_UTIL, gauge, a, b\n", 2, "found 4"),
        ("DCGM_FI_DEV_GPU_UTILL, gauge, x\n", 1, "closest known: DCGM_FI_DEV_GPU_UTIL"),
        ("DCGM_FI_DEV_GPU_UTIL, gague, x\n", 1, "unknown Prometheus type 'gague'"),
        ('DCGM_FI_DEV_GPU_UTIL, gauge, "unterminated\n', 1, "unclosed quote"),
    ],
)
def test_bad_rows_name_file_line_and_problem(text: str, line: int, needle: str) -> None:
    with pytest.raises(MetricListError) as exc:
        parse_metric_list(text, "my.csv")
    assert exc.value.path == "my.csv"
    assert exc.value.line == line
    assert needle in str(exc.value)
    assert str(exc.value).startswith(f"my.csv:{line}: ")


def test_every_exporter_row_is_a_metric() -> None:
    ml = parse_metric_list("DCGM_EXP_P2P_STATUS, counter, p2p\nDCGM_EXP_GPU_HEALTH_STATUS, "
                           "counter, h\nDCGM_EXP_XID_ERRORS_COUNT, counter, x\n"
                           "DCGM_EXP_CLOCK_EVENTS_COUNT, counter, c\n", "l.csv")
    assert [r.field.id for r in ml.metrics] == [9004, 9003, 9001, 9002]
    assert ml.warnings == () and ml.unavailable == ()


def test_alias_and_1x_rows_keep_the_lists_spelling() -> None:
    # dcgm-exporter exports a row under the name the list gives it; queries on it must not go empty
    ml = parse_metric_list("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\n"
                           "dcgm_gpu_temp, gauge, t\nDCGM_FI_DEV_BOARD_SERIAL, label, s\n")
    assert [(r.out, r.name) for r in ml.metrics] == [
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
        ("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"),
    ]
    assert [(r.out, r.name) for r in ml.labels] == [("DCGM_FI_DEV_BOARD_SERIAL",
                                                    "DCGM_FI_DEV_SERIAL")]


def test_real_dcgm_fields_podgpu_cannot_read_are_warnings_not_errors() -> None:
    # ids from go-dcgm's table: a field DCGM has that NVML alone cannot give (DCGM_FI_DEV_COUNT
    # is read; DCGM_FI_PROCESS_NAME, id 3, is a per-process DCGM record)
    ml = parse_metric_list("DCGM_FI_PROCESS_NAME, gauge, p\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n"
                           "DCGM_FI_DRIVER_VERSION, gauge, v\n", "l.csv")
    assert [r.name for r in ml.metrics] == ["DCGM_FI_DEV_GPU_UTIL"]
    assert [(u.name, u.id, u.line, u.reason) for u in ml.unavailable] == [
        ("DCGM_FI_PROCESS_NAME", 3, 1, "not readable through NVML"),
        ("DCGM_FI_DRIVER_VERSION", 1, 3, "a string field; list it with type label"),
    ]
    assert ml.warnings[0].startswith("l.csv:1: DCGM_FI_PROCESS_NAME (DCGM field 3) will not be")


def test_histogram_and_summary_are_accepted_as_gauges_and_repeats_ignored() -> None:
    ml = parse_metric_list("DCGM_FI_DEV_GPU_UTIL, histogram, x\nDCGM_FI_DEV_FB_USED, summary, y\n"
                           "DCGM_FI_DEV_GPU_UTIL, gauge, again\n", "l.csv")
    assert [(r.name, r.prom_type, r.help) for r in ml.metrics] == [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "x"), ("DCGM_FI_DEV_FB_USED", "gauge", "y")]
    assert any("typed histogram" in w for w in ml.warnings)
    assert ml.warnings[-1] == ("l.csv:3: DCGM_FI_DEV_GPU_UTIL is already listed on line 1; "
                               "this row is ignored")


def test_a_numeric_field_may_be_a_label_as_in_dcgm_exporter() -> None:
    ml = parse_metric_list("DCGM_FI_DEV_PSTATE, label, p\n")
    assert [r.name for r in ml.labels] == ["DCGM_FI_DEV_PSTATE"] and ml.metrics == ()


def test_health_status_pulls_in_what_it_is_derived_from() -> None:
    ml = parse_metric_list("DCGM_EXP_GPU_HEALTH_STATUS, gauge, h\n")
    names = [f.name for f in ml.fields]
    assert names[0] == "DCGM_EXP_GPU_HEALTH_STATUS"
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE"} <= set(names)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(MetricListError, match="cannot read"):
        load_metric_list(str(tmp_path / "nope.csv"))
    with pytest.raises(MetricListError, match="not a regular file"):
        load_metric_list(str(tmp_path))


def test_non_utf8_list_is_read_with_a_warning_naming_the_line(tmp_path: Path) -> None:
    """dcgm-exporter's Go CSV reader takes any bytes; podgpu too, with a warning."""
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(b"# ok\nDCGM_FI_DEV_GPU_TEMP, gauge, Temp\xe9rature du GPU\n"
                    b"DCGM_FI_DEV_POWER_USAGE, gauge, W\n")
    ml = load_metric_list(str(bad))
    assert [r.name for r in ml.metrics] == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    assert ml.metrics[0].help == "Temp\ufffdrature du GPU"
    assert any(w.startswith(f"{bad}:2: not UTF-8") for w in ml.warnings), ml.warnings


def test_fifo_and_endless_files_are_refused_without_blocking(tmp_path: Path) -> None:
    """`-f` on a FIFO would hang start-up and `-f /dev/zero` would read forever."""
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(MetricListError, match="not a regular file"):
        load_metric_list(str(fifo))
    with pytest.raises(MetricListError, match="not a regular file"):
        load_metric_list("/dev/zero")


def test_size_cap_names_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text("# padding\n" * 10 + "DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert read_list_file(str(big), limit=10_000)[0].endswith("t\n")
    with pytest.raises(MetricListError, match=r"big.csv:0: larger than 100 bytes"):
        read_list_file(str(big), limit=100)


def test_label_only_and_comment_only_lists_parse_and_are_flagged() -> None:
    """dcgm-exporter starts on them; podgpu starts too and says no metric will be exported."""
    labels = parse_metric_list("DCGM_FI_DRIVER_VERSION, label, driver\n", "l.csv")
    assert not labels.metrics and [r.name for r in labels.labels] == ["DCGM_FI_DRIVER_VERSION"]
    assert "l.csv: the metric list has no metric rows" in (empty_list_warning(labels) or "")
    assert empty_list_warning(parse_metric_list("# nothing\n\n", "c.csv")) is not None
    assert empty_list_warning(load_default()) is None


def test_default_path_is_used_when_present(tmp_path: Path) -> None:
    mounted = tmp_path / "default-counters.csv"
    assert resolve_list_path(None, str(mounted)) is None  # nothing there: embedded
    mounted.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert resolve_list_path(None, str(mounted)) == str(mounted)
    assert resolve_list_path("/x.csv", str(mounted)) == "/x.csv"  # -f wins
    assert "default path" in describe_source(str(mounted), None)
    assert "embedded" in describe_source(None, None)
