"""Metric lists in dcgm-exporter's 3-column CSV format: `DCGM field, Prometheus type, help`.

Rules (dcgm-exporter's source): `#` starts a comment line, blank lines are skipped, every
cell is trimmed, a help text with a comma is CSV-quoted. A row typed `label` turns a field into a
label on every series instead of a metric.

Any list dcgm-exporter accepts starts podgpu: every DCGM name and alias resolves through
the generated name table; a real field podgpu cannot read is a warning and an `UnavailableRow`
(podgpu_field_unavailable), `histogram`/`summary` rows are exported as gauges, a repeated row is
ignored with a warning. Only a malformed row or a name that is no DCGM field at all is a
`MetricListError` naming the file, the line and what is wrong, so `podgpu serve` exits 2 before
it starts anything.
"""

from __future__ import annotations

import csv
import io
import os
from typing import NamedTuple

from podgpu.errors import MetricListError
from podgpu.fields.catalog import BY_NAME, Field, closest, dcgm_id, lookup
from podgpu.files import FileReadError, packaged, read_bytes

VALID_TYPES = ("gauge", "counter", "histogram", "summary", "label")
# dcgm-exporter echoes `histogram`/`summary` into `# TYPE` over a plain sample, which strict
# parsers reject; one number per cycle is a gauge, so podgpu prints `# TYPE ... gauge` for them.
RENDERED_AS = {"histogram": "gauge", "summary": "gauge"}
NOT_READABLE = "not readable through NVML"
STRING_AS_NUMBER = "a string field; list it with type label"
DEFAULT_NAME = "default-counters.csv"
DEFAULT_PATH = "/etc/dcgm-exporter/default-counters.csv"
"""dcgm-exporter's `-f` default: a chart that mounts its own list there expects it to be used."""
MAX_LIST_BYTES = 4 * 1024 * 1024
"""A list of every DCGM field is ~110 KiB; a larger file is a mistake (or `-f /dev/zero`)."""
MAX_ROW_WARNINGS = 20
"""More unavailable rows than this are summarised in one warning."""


class MetricRow(NamedTuple):
    """One active row: the catalog field, the type to print in `# TYPE`, the help text, and the
    name as the list spells it (`metric`), which is the name podgpu exports (dcgm-exporter keeps
    the list's spelling: an alias or a 1.x `dcgm_*` name stays as written)."""

    field: Field
    prom_type: str
    help: str
    line: int
    metric: str = ""

    @property
    def name(self) -> str:
        """The catalog name: the key of the field's value in a `Sample`."""
        return self.field.name

    @property
    def out(self) -> str:
        """The exported metric (or label) name: the list's spelling."""
        return self.metric or self.field.name


class UnavailableRow(NamedTuple):
    """A row naming a real DCGM field that podgpu cannot export: warned about at start and shown
    as podgpu_field_unavailable{field, reason}, never an exit."""

    name: str
    id: int
    line: int
    reason: str


class MetricList(NamedTuple):
    """The parsed list: metric rows in file order, label rows, rows podgpu cannot export, and
    warnings for the log."""

    path: str
    metrics: tuple[MetricRow, ...]
    labels: tuple[MetricRow, ...]
    warnings: tuple[str, ...] = ()
    unavailable: tuple[UnavailableRow, ...] = ()

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every field a backend must read (metrics, labels and what the exporter-computed
        fields are derived from) in file order, each once."""
        out: dict[str, Field] = {}
        for r in self.metrics + self.labels:
            out.setdefault(r.name, r.field)
        for f in list(out.values()):
            for dep in DERIVED_FROM.get(f.name, ()):
                if dep in BY_NAME:
                    out.setdefault(dep, BY_NAME[dep])
        return tuple(out.values())

    @property
    def spellings(self) -> dict[str, tuple[str, ...]]:
        """Catalog field -> the names this list exports it under (usually one)."""
        out: dict[str, tuple[str, ...]] = {}
        for r in self.metrics + self.labels:
            out[r.name] = (*out.get(r.name, ()), r.out)
        return out


# What the exporter-computed fields are derived from (read even when not listed).
DERIVED_FROM: dict[str, tuple[str, ...]] = {
    "DCGM_EXP_GPU_HEALTH_STATUS": (
        "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SLOWDOWN_TEMP"),
}


def parse_metric_list(text: str, path: str = "<string>") -> MetricList:
    """Parse CSV text; raises MetricListError on a malformed row or a name that is no DCGM
    field. A real DCGM field podgpu cannot read becomes an `UnavailableRow` with a warning."""
    metrics: list[MetricRow] = []
    labels: list[MetricRow] = []
    warnings: list[str] = []
    unavailable: list[UnavailableRow] = []
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
        fid = dcgm_id(name)
        if fid is None:
            hint = closest(name)
            suggestion = f"; closest known: {', '.join(hint)}" if hint else ""
            raise MetricListError(path, lineno, f"unknown DCGM field {name!r}{suggestion}")
        if ptype not in VALID_TYPES:
            if name.startswith("DCGM_EXP_"):  # dcgm-exporter does not type-check these rows
                warnings.append(f"{path}:{lineno}: {name}: unknown type {ptype!r}, using gauge")
                ptype = "gauge"
            else:
                raise MetricListError(
                    path, lineno, f"unknown Prometheus type {ptype!r} for {name}; use one of "
                    f"{', '.join(VALID_TYPES)}",
                )
        if ptype in RENDERED_AS:
            warnings.append(f"{path}:{lineno}: {name} is typed {ptype}: podgpu exports its one "
                            f"value per cycle as {RENDERED_AS[ptype]}")
            ptype = RENDERED_AS[ptype]
        if name in seen:
            warnings.append(f"{path}:{lineno}: {name} is already listed on line {seen[name]}; "
                            "this row is ignored")
            continue
        seen[name] = lineno
        fld = lookup(name)
        reason = ""
        if fld is None:
            reason = NOT_READABLE
        elif ptype != "label" and fld.value_type == "str":
            reason = STRING_AS_NUMBER
        if fld is None or reason:
            unavailable.append(UnavailableRow(name, fid, lineno, reason))
            warnings.append(f"{path}:{lineno}: {name} (DCGM field {fid}) will not be exported: "
                            f"{reason}")
            continue
        row = MetricRow(fld, ptype, help_, lineno, name)
        (labels if ptype == "label" else metrics).append(row)
    if len(unavailable) > MAX_ROW_WARNINGS:  # e.g. a list of every DCGM field: one line, not 900
        skipped = {f"{path}:{u.line}: {u.name}" for u in unavailable}
        warnings = [w for w in warnings if not any(w.startswith(s + " ") for s in skipped)]
        first = ", ".join(u.name for u in unavailable[:5])
        warnings.append(f"{path}: {len(unavailable)} listed DCGM fields will not be exported "
                        f"(see podgpu_field_unavailable), e.g. {first}")
    return MetricList(path, tuple(metrics), tuple(labels), tuple(warnings), tuple(unavailable))


def read_list_file(path: str, *, limit: int = MAX_LIST_BYTES) -> tuple[str, str | None]:
    """The text of a list file and a warning when it was not UTF-8.

    Only a regular file is read (a FIFO would block start-up, `/dev/zero` never ends), and at most
    `limit` bytes. dcgm-exporter's Go CSV reader passes bytes that are not UTF-8 through
    unchanged; podgpu reads them as U+FFFD (they can only sit in comments or help texts, since
    every DCGM name is ASCII) and says on which line the first one is."""
    try:
        data = read_bytes(path, limit)
    except FileReadError as exc:
        if str(exc).startswith("larger than"):
            raise MetricListError(path, 0, f"{exc}; a metric list of every DCGM field is "
                                           "~110 KiB") from None
        raise MetricListError(path, 0, f"{exc}; give the path of a CSV file") from None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return (data.decode("utf-8", errors="replace"),
                f"{path}:{line}: not UTF-8 text ({exc.reason}); read with U+FFFD in place of the "
                "bad bytes, as dcgm-exporter reads it byte for byte")


def load_metric_list(path: str) -> MetricList:
    """Read and parse a metric list file; an unreadable file is MetricListError at line 0."""
    text, warning = read_list_file(path)
    parsed = parse_metric_list(text, path)
    if warning is None:
        return parsed
    return MetricList(parsed.path, parsed.metrics, parsed.labels, (warning, *parsed.warnings),
                      parsed.unavailable)


def resolve_list_path(collectors: str | None, default_path: str = DEFAULT_PATH) -> str | None:
    """The list file to use: `-f` when given, else dcgm-exporter's default path when a file is
    there (a chart mounts its list there), else None for the embedded default."""
    if collectors is not None:
        return collectors
    return default_path if os.path.lexists(default_path) else None


def describe_source(path: str | None, collectors: str | None) -> str:
    """One log line saying which list is used and why."""
    if path is None:
        return (f"metric list: the embedded {DEFAULT_NAME} (no -f and no {DEFAULT_PATH})")
    if collectors is None:
        return f"metric list: {path} (dcgm-exporter's default path; -f not given)"
    return f"metric list: {path}"


def empty_list_warning(parsed: MetricList) -> str | None:
    """dcgm-exporter starts on a list of only comments or label rows (and exports no GPU metric);
    so does podgpu, saying so."""
    if parsed.metrics:
        return None
    return (f"{parsed.path}: the metric list has no metric rows (only comments, blank lines or "
            "label rows): no GPU metric will be exported until the list is fixed")


def default_text() -> str:
    """The embedded default list (same active rows as dcgm-exporter's default-counters.csv)."""
    return packaged(__file__, DEFAULT_NAME).decode()


def load_default() -> MetricList:
    return parse_metric_list(default_text(), f"<embedded {DEFAULT_NAME}>")
