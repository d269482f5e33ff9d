"""`podgpu report`'s arithmetic: counter samples -> GPU-hours, kWh and cost per pod (pure).

A counter's increase over the range is computed from its raw samples, not with PromQL's
`increase()` (which extrapolates to the range's edges): the sum of its rises, a fall counting as
a reset to 0 (podgpu restarted), and a series that first appears inside the range counted from 0
(podgpu's counters start at 0 when a pod is first seen). Series are summed per (namespace, pod)
after that, never before, so one series disappearing cannot look like a reset of the sum.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from podgpu.accounting.render import ALLOCATED, ENERGY, USED

METRICS = (ALLOCATED, USED, ENERGY)
JOULES_PER_KWH = 3.6e6


@dataclass
class CounterIncrease:
    """The running increase of one series over a range fed in time order, chunk by chunk."""

    born_inside: bool
    last: float | None = None
    increase: float = 0.0

    def feed(self, values: Iterable[float]) -> None:
        for v in values:
            last = self.last
            if last is None:
                if self.born_inside:
                    self.increase += v
            elif v >= last:
                self.increase += v - last
            else:
                self.increase += v  # a reset: podgpu restarted and counts from 0 again
            self.last = v


@dataclass
class Row:
    namespace: str
    pod: str
    allocated_seconds: float = 0.0
    used_seconds: float = 0.0
    energy_joules: float = 0.0

    @property
    def gpu_hours(self) -> float:
        return self.allocated_seconds / 3600.0

    @property
    def used_gpu_hours(self) -> float:
        return self.used_seconds / 3600.0

    @property
    def kwh(self) -> float:
        return self.energy_joules / JOULES_PER_KWH

    @property
    def efficiency(self) -> float | None:
        """Used over allocated GPU-hours, None when nothing was allocated."""
        return self.used_seconds / self.allocated_seconds if self.allocated_seconds > 0 else None

    def cost(self, prices: Prices) -> float:
        return self.gpu_hours * prices.gpu_hour + self.kwh * prices.kwh

    def add(self, other: Row) -> None:
        self.allocated_seconds += other.allocated_seconds
        self.used_seconds += other.used_seconds
        self.energy_joules += other.energy_joules


@dataclass(frozen=True)
class Prices:
    gpu_hour: float = 0.0
    """Currency units per allocated GPU-hour."""
    kwh: float = 0.0
    """Currency units per kWh of GPU energy."""


@dataclass
class Report:
    start: float
    end: float
    prices: Prices
    rows: list[Row] = field(default_factory=list)

    def namespaces(self) -> list[tuple[str, Row, list[Row]]]:
        """(namespace, its total, its pods) sorted by namespace, pods by name."""
        out: dict[str, tuple[Row, list[Row]]] = {}
        for r in sorted(self.rows, key=lambda r: (r.namespace, r.pod)):
            total, pods = out.setdefault(r.namespace, (Row(r.namespace, ""), []))
            total.add(r)
            pods.append(r)
        return [(ns, t, p) for ns, (t, p) in out.items()]

    def total(self) -> Row:
        t = Row("", "")
        for r in self.rows:
            t.add(r)
        return t


def add_series(rows: dict[tuple[str, str], Row], metric: str, labels: dict[str, str],
               increase: float) -> None:
    """Add one series' increase to its pod's row."""
    key = (labels.get("namespace", ""), labels.get("pod", "") or labels.get("pod_uid", ""))
    row = rows.get(key)
    if row is None:
        row = rows[key] = Row(*key)
    if metric == ALLOCATED:
        row.allocated_seconds += increase
    elif metric == USED:
        row.used_seconds += increase
    elif metric == ENERGY:
        row.energy_joules += increase


# --- output --------------------------------------------------------------------------------

COLUMNS = ("namespace", "pod", "gpu_hours", "used_gpu_hours", "efficiency", "kwh", "cost")
HEADERS = ("NAMESPACE", "POD", "GPU-HOURS", "USED GPU-HOURS", "EFFICIENCY", "KWH", "COST")


def _cells(r: Row, prices: Prices) -> tuple[str, ...]:
    eff = r.efficiency
    return (r.namespace, r.pod, f"{r.gpu_hours:.3f}", f"{r.used_gpu_hours:.3f}",
            "-" if eff is None else f"{100 * eff:.1f}%", f"{r.kwh:.3f}", f"{r.cost(prices):.2f}")


def format_table(report: Report) -> str:
    """Per namespace: its pods, then a `(total)` line; a TOTAL line at the end."""
    lines: list[Sequence[str]] = [HEADERS]
    for ns, total, pods in report.namespaces():
        lines.extend(_cells(p, report.prices) for p in pods)
        lines.append((ns, "(total)", *_cells(total, report.prices)[2:]))
    lines.append(("TOTAL", "", *_cells(report.total(), report.prices)[2:]))
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADERS))]
    out = []
    for line in lines:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths,
                                                                                   strict=True))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"


def format_csv(report: Report) -> str:
    """One line per pod (no subtotals: a spreadsheet sums them), full precision."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for _, _, pods in report.namespaces():
        for p in pods:
            eff = p.efficiency
            w.writerow((p.namespace, p.pod, repr(p.gpu_hours), repr(p.used_gpu_hours),
                        "" if eff is None else repr(eff), repr(p.kwh), repr(p.cost(report.prices))))
    return buf.getvalue()


def _json_row(r: Row, prices: Prices) -> dict[str, object]:
    return {"gpu_hours": r.gpu_hours, "used_gpu_hours": r.used_gpu_hours,
            "efficiency": r.efficiency, "kwh": r.kwh, "cost": r.cost(prices)}


def format_json(report: Report) -> str:
    doc = {
        "start": report.start, "end": report.end,
        "prices": {"gpu_hour": report.prices.gpu_hour, "kwh": report.prices.kwh},
        "namespaces": [
            {"namespace": ns, **_json_row(total, report.prices),
             "pods": [{"pod": p.pod, **_json_row(p, report.prices)} for p in pods]}
            for ns, total, pods in report.namespaces()],
        "total": _json_row(report.total(), report.prices),
    }
    return json.dumps(doc, indent=2) + "\n"


FORMATS = {"table": format_table, "csv": format_csv, "json": format_json}
