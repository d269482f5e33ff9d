"""podgpu reads metric lists as a lenient superset of dcgm-exporter: forms Go's encoding/csv
(Comment '#', strict quotes, a fixed cell count) plus dcgm-exporter's space trimming would refuse
are read as meant (docs/compatibility.md); the forms both refuse stay refused, naming the line.

What dcgm-exporter does, restated from internal/pkg/counters/counter_config.go and Go's
encoding/csv: a `"` in an unquoted cell is ErrBareQuote; a quoted cell after a space is an
unquoted cell with a bare quote; cells are trimmed of spaces only, so a tab before the type makes
an unknown type; a comment must start the line and a whitespace-only line is a one-cell row
(wrong number of fields)."""

from __future__ import annotations

import pytest

from podgpu.errors import ConfigError
from podgpu.fields.metriclist import parse_metric_list

ROW = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"


def rows(text: str) -> list[tuple[str, str]]:
    return [(m.name, m.help) for m in parse_metric_list(text, "l.csv").metrics]


@pytest.mark.parametrize(("text", "help_"), [
    ('DCGM_FI_DEV_GPU_UTIL, gauge, GPU "busy" share\n', 'GPU "busy" share'),  # bare quotes
    ('DCGM_FI_DEV_GPU_UTIL, gauge, "GPU, busy"\n', "GPU, busy"),  # quoted after a space
    ("DCGM_FI_DEV_GPU_UTIL,\tgauge,\tGPU utilization (in %).\n", "GPU utilization (in %)."),
    ("   # an indented comment\n\t# a tabbed one\n" + ROW, "GPU utilization (in %)."),
    (" \t \n" + ROW + "\t\n", "GPU utilization (in %)."),  # lines of only blanks
])
def test_forms_dcgm_exporter_refuses_are_read_as_meant(text: str, help_: str) -> None:
    assert rows(text) == [("DCGM_FI_DEV_GPU_UTIL", help_)]


@pytest.mark.parametrize(("text", "needle"), [
    ('DCGM_FI_DEV_GPU_UTIL, gauge, "GPU utilization\n', "l.csv:1: not valid CSV"),
    ("DCGM_FI_DEV_GPU_UTIL, gauge\n", "l.csv:1: expected 3 fields"),
    ("DCGM_FI_DEV_GPU_UTIL, gauge, a, b\n", "l.csv:1: expected 3 fields"),
    ("DCGM_FI_DEV_GPU_UTIL, gaug, x\n", "l.csv:1: unknown Prometheus type 'gaug'"),
])
def test_forms_both_refuse_stay_refused_naming_the_line(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        parse_metric_list(text, "l.csv")
