"""`podgpu report`'s arithmetic on literal samples, worked out by hand."""

from __future__ import annotations

import json

import pytest

from podgpu.accounting.report import (
    CounterIncrease,
    Prices,
    Report,
    Row,
    add_series,
    format_csv,
    format_json,
    format_table,
)
from podgpu.accounting.report_cli import parse_duration, parse_time
from podgpu.errors import ConfigError


def increase(values: list[float], born: bool, chunks: int = 1) -> float:
    inc = CounterIncrease(born_inside=born)
    size = max(1, len(values) // chunks)
    for i in range(0, len(values), size):
        inc.feed(values[i:i + size])
    return inc.increase


def test_increase_counts_rises_resets_and_births() -> None:
    assert increase([10, 12, 15], born=False) == 5          # present at the start: a baseline
    assert increase([3, 12, 15], born=True) == 15           # born inside: counted from 0
    assert increase([10, 12, 2, 5], born=False) == 2 + 2 + 3  # podgpu restarted after 12
    assert increase([10, 12, 2, 5, 1, 7], born=False, chunks=3) == 2 + 2 + 3 + 1 + 6
    assert increase([10, 10, 10], born=False) == 0          # finished pod in its grace period


def test_rows_aggregate_per_pod_and_cost() -> None:
    rows: dict[tuple[str, str], Row] = {}
    add_series(rows, "podgpu_pod_gpu_allocated_seconds_total",
               {"namespace": "ml", "pod": "a", "gpu": "0"}, 3600)
    add_series(rows, "podgpu_pod_gpu_allocated_seconds_total",
               {"namespace": "ml", "pod": "a", "gpu": "1"}, 7200)
    add_series(rows, "podgpu_pod_gpu_used_seconds_total",
               {"namespace": "ml", "pod": "a", "gpu": "0"}, 5400)
    add_series(rows, "podgpu_pod_gpu_energy_joules_total",
               {"namespace": "ml", "pod": "a", "gpu": "0"}, 7.2e6)
    add_series(rows, "podgpu_pod_gpu_allocated_seconds_total",
               {"namespace": "ai", "pod": "", "pod_uid": "u-1"}, 1800)
    (r,) = [r for r in rows.values() if r.pod == "a"]
    assert (r.gpu_hours, r.used_gpu_hours, r.kwh, r.efficiency) == (3.0, 1.5, 2.0, 0.5)
    assert r.cost(Prices(gpu_hour=2.0, kwh=0.25)) == 3.0 * 2.0 + 2.0 * 0.25
    report = Report(0, 3600, Prices(2.0, 0.25), sorted(rows.values(),
                                                     key=lambda x: (x.namespace, x.pod)))
    table = format_table(report).splitlines()
    assert table[1].split() == ["ai", "u-1", "0.500", "0.000", "0.0%", "0.000", "1.00"]
    assert table[-1].split() == ["TOTAL", "3.500", "1.500", "42.9%", "2.000", "7.50"]
    doc = json.loads(format_json(report))
    assert [ns["namespace"] for ns in doc["namespaces"]] == ["ai", "ml"]
    assert doc["total"]["cost"] == 7.5
    assert format_csv(report).splitlines()[2].startswith("ml,a,3.0,1.5,0.5,2.0,6.5")


def test_times_and_durations() -> None:
    assert parse_time("now-2h", "--start", 10_000.0) == 10_000.0 - 7200
    assert parse_time("2026-12-01T00:00:00Z", "--start", 0) == 1796083200.0
    assert parse_time("1796083200", "--end", 0) == 1796083200.0
    assert parse_duration("90s", "--step") == 90 and parse_duration("2w", "--last") == 1209600
    for bad in ("1.5.2", "-5", "nan", "2026-13-01T00:00:00Z"):
        with pytest.raises(ConfigError):
            parse_time(bad, "--start", 0)
    with pytest.raises(ConfigError):
        parse_duration("0s", "--step")
