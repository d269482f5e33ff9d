"""Metric lists in dcgm-exporter's 3-column CSV format: `DCGM field, Prometheus type, help`.

Rules (reference/dcgm-exporter.md §3.1): `#` starts a comment line, blank lines are skipped, every
cell is trimmed, a help text with a comma is CSV-quoted. A row typed `label` turns a string field
into a label on every series instead of a metric. Any problem is a `MetricListError` naming the
file, the line and what is wrong, so `podgpu serve` can exit 2 before it starts anything.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from importlib import resources

from podgpu.errors import MetricListError
from podgpu.fields.catalog import Field, closest, lookup

VALID_TYPES = ("gauge", "counter", "label")
REJECTED_TYPES = {
    "histogram": "a DCGM field is one number per cycle, not a distribution; use gauge or counter",
    "summary": "a DCGM field is one number per cycle, not a distribution; use gauge or counter",
}
# dcgm-exporter names podgpu knows but does not produce yet: skipped with a warning, not refused,
# so an existing list keeps working.
NOT_PRODUCED = {
    "DCGM_EXP_GPU_HEALTH_STATUS": "DCGM health watches have no NVML equivalent",
    "DCGM_EXP_P2P_STATUS": "P2P status is not read yet",
}
DEFAULT_NAME = "default-counters.csv"


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One active row: the catalog field, the type to print in `# TYPE`, the help text."""

    field: Field
    prom_type: str
    help: str
    line: int

    @property
    def name(self) -> str:
        return self.field.name


@dataclass(frozen=True, slots=True)
class MetricList:
    """The parsed list: metric rows in file order, label rows, and warnings for skipped rows."""

    path: str
    metrics: tuple[MetricRow, ...]
    labels: tuple[MetricRow, ...]
    warnings: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every field a backend must read (metrics and labels) in file order."""
        return tuple(r.field for r in self.metrics + self.labels)

    def without(self, names: set[str]) -> MetricList:
        """The same list without some metric rows (e.g. DCP rows on a node without GPM)."""
        keep = tuple(r for r in self.metrics if r.name not in names)
        return MetricList(self.path, keep, self.labels, self.warnings)


def parse_metric_list(text: str, path: str = "<string>") -> MetricList:
    """Parse CSV text; raises MetricListError on the first problem."""
    metrics: list[MetricRow] = []
    labels: list[MetricRow] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            cells = next(csv.reader(io.StringIO(raw), skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise MetricListError(path, lineno, f"not valid CSV ({exc}); an unclosed quote?") from None
        cells = [c.strip() for c in cells]
        if len(cells) != 3:
            raise MetricListError(
                path, lineno,
                f"expected 3 fields (DCGM field, Prometheus type, help), found {len(cells)}: "
                f"{stripped!r}; quote a help text that contains a comma",
            )
        name, ptype, help_ = cells
        if name in NOT_PRODUCED:
            warnings.append(f"{path}:{lineno}: skipping {name}: {NOT_PRODUCED[name]}")
            continue
        fld = lookup(name)
        if fld is None:
            hint = closest(name)
            suggestion = f"; closest known: {', '.join(hint)}" if hint else ""
            raise MetricListError(path, lineno, f"unknown DCGM field {name!r}{suggestion}")
        if ptype in REJECTED_TYPES:
            raise MetricListError(path, lineno, f"type {ptype!r} for {name}: {REJECTED_TYPES[ptype]}")
        if ptype not in VALID_TYPES:
            raise MetricListError(
                path, lineno, f"unknown Prometheus type {ptype!r} for {name}; use one of "
                f"{', '.join(VALID_TYPES)}",
            )
        if ptype == "label" and fld.value_type != "str":
            raise MetricListError(
                path, lineno, f"{name} is a {fld.value_type} field and cannot be a label; use "
                f"{fld.prom_type}",
            )
        if ptype != "label" and fld.value_type == "str":
            raise MetricListError(
                path, lineno, f"{name} is a string field; it can only be typed label",
            )
        if fld.name in seen:
            raise MetricListError(
                path, lineno, f"{fld.name} is already listed on line {seen[fld.name]}",
            )
        seen[fld.name] = lineno
        row = MetricRow(fld, ptype, help_, lineno)
        (labels if ptype == "label" else metrics).append(row)
    return MetricList(path, tuple(metrics), tuple(labels), tuple(warnings))


def load_metric_list(path: str) -> MetricList:
    """Read and parse a metric list file; unreadable files are MetricListError at line 0."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise MetricListError(path, 0, f"not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise MetricListError(path, 0, f"cannot read: {exc.strerror or exc}") from None
    return parse_metric_list(text, path)


def default_text() -> str:
    """The embedded default list (same active rows as dcgm-exporter's default-counters.csv)."""
    return resources.files("podgpu.fields").joinpath(DEFAULT_NAME).read_text(encoding="utf-8")


def load_default() -> MetricList:
    return parse_metric_list(default_text(), f"<embedded {DEFAULT_NAME}>")
