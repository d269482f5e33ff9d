"""The field catalog (every DCGM field podgpu can export) and the dcgm-exporter CSV loader."""

from podgpu.fields.catalog import BY_NAME, CATALOG, Field, Source, lookup
from podgpu.fields.metriclist import (
    MetricList,
    MetricRow,
    load_default,
    load_metric_list,
    parse_metric_list,
)

__all__ = [
    "BY_NAME",
    "CATALOG",
    "Field",
    "MetricList",
    "MetricRow",
    "Source",
    "load_default",
    "load_metric_list",
    "lookup",
    "parse_metric_list",
]
