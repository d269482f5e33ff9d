"""An EMF validator and extractor written from the specification (the CloudWatch EMF
specification), not from podgpu's encoder: `validate()` raises EmfError naming the first violation,
`extract()` returns the metrics CloudWatch would create from a document.

Metric values may be a number, an array of at most 100 numbers, or the value-distribution object
the CloudWatch agent's awsemf exporter writes (`Values`, `Counts`, `Max`, `Min`, `Count`, `Sum`).
A JSON object without `_aws` is a plain log event: valid, and extracts nothing.

Beyond the letter of the specification, two checks catch encoder bugs the service would accept silently: a
Timestamp below 10^12 (before September 2001 in ms, so almost surely seconds) is refused, and a
distribution's Min..Max must hold every value (the brief's rule for the agent's value arrays).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

UNITS = frozenset((
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
    "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
    "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
    "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second",
    "Terabits/Second", "Count/Second", "None",
))
MAX_EVENT_BYTES = 1_048_576
MAX_DIMENSION_KEY = 250  # the schema's limit on a reference
MIN_TIMESTAMP_MS = 10**12


class EmfError(ValueError):
    pass


@dataclass(frozen=True)
class Extracted:
    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    unit: str
    timestamp_ms: int
    values: tuple[float, ...]
    """Every sample: a distribution expanded by its counts."""
    storage_resolution: int
    stats: tuple[float, float, float, float] | None = None
    """A distribution's declared (Min, Max, Sum, Count): what CloudWatch's statistics use."""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_value(name: str, v: Any) -> list[float]:
    if _number(v):
        return [float(v)]
    if isinstance(v, list):
        if not 1 <= len(v) <= 100 or not all(_number(x) for x in v):
            raise EmfError(f"{name}: a value array holds 1 to 100 finite numbers")
        return [float(x) for x in v]
    if isinstance(v, dict):
        keys = {"Values", "Counts", "Max", "Min", "Count", "Sum"}
        if set(v) != keys:
            raise EmfError(f"{name}: a distribution has exactly the keys {sorted(keys)}")
        values, counts = v["Values"], v["Counts"]
        if not isinstance(values, list) or not isinstance(counts, list) or \
                len(values) != len(counts) or not 1 <= len(values) <= 100:
            raise EmfError(f"{name}: Values and Counts are lists of the same length, 1 to 100")
        if not all(_number(x) for x in [*values, v["Max"], v["Min"], v["Sum"]]):
            raise EmfError(f"{name}: distribution numbers must be finite")
        if not all(_number(c) and c > 0 for c in counts) or not _number(v["Count"]) or \
                not math.isclose(v["Count"], sum(counts)):
            raise EmfError(f"{name}: Counts are positive numbers summing to Count")
        if not v["Min"] <= v["Max"] or not all(v["Min"] <= x <= v["Max"] for x in values):
            raise EmfError(f"{name}: every value lies within Min..Max")
        out: list[float] = []
        for x, c in zip(values, counts, strict=True):
            out.extend([float(x)] * round(c))  # whole counts in every document seen so far
        return out
    raise EmfError(f"{name}: a metric value is a number, a number array or a distribution")


def validate(text: str) -> dict[str, Any]:
    if len(text.encode()) > MAX_EVENT_BYTES:
        raise EmfError("an event is at most 1 MB")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EmfError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise EmfError("the root must be a JSON object")
    aws = doc.get("_aws")
    if aws is None:
        return doc  # a plain log event
    if not isinstance(aws, dict):
        raise EmfError("_aws must be an object")
    ts: Any = aws.get("Timestamp")
    if not _number(ts):
        raise EmfError("_aws.Timestamp must be a number of milliseconds since the epoch")
    if ts < MIN_TIMESTAMP_MS:
        raise EmfError(f"_aws.Timestamp {ts} is before 2001 in milliseconds: seconds sent?")
    directives = aws.get("CloudWatchMetrics")
    if not isinstance(directives, list):
        raise EmfError("_aws.CloudWatchMetrics must be a list")
    for i, d in enumerate(directives):
        where = f"CloudWatchMetrics[{i}]"
        if not isinstance(d, dict):
            raise EmfError(f"{where} must be an object")
        ns = d.get("Namespace")
        if not isinstance(ns, str) or not 1 <= len(ns) <= 1024:
            raise EmfError(f"{where}.Namespace must be a string of 1 to 1024 characters")
        dims = d.get("Dimensions")
        if not isinstance(dims, list) or not dims:
            raise EmfError(f"{where}.Dimensions must be a non-empty list of dimension sets")
        for j, dset in enumerate(dims):
            if not isinstance(dset, list) or len(dset) > 30:
                raise EmfError(f"{where}.Dimensions[{j}] must be a list of at most 30 keys")
            for key in dset:
                if not isinstance(key, str) or not 1 <= len(key) <= MAX_DIMENSION_KEY:
                    raise EmfError(f"{where}.Dimensions[{j}]: {key!r}: a dimension key is a "
                                   f"string of 1 to {MAX_DIMENSION_KEY} characters")
                val = doc.get(key)
                if not isinstance(val, str) or not 1 <= len(val) <= 1024:
                    raise EmfError(f"{where}.Dimensions[{j}]: {key!r} must name a root member "
                                   "holding a string of 1 to 1024 characters")
        metrics = d.get("Metrics")
        if not isinstance(metrics, list) or len(metrics) > 100:
            raise EmfError(f"{where}.Metrics must be a list of at most 100 definitions")
        for m in metrics:
            name = m.get("Name") if isinstance(m, dict) else None
            if not isinstance(name, str) or not name or name not in doc:
                raise EmfError(f"{where}: metric {name!r} must name a root member")
            unit = m.get("Unit", "None")
            if not isinstance(unit, str) or unit not in UNITS:
                raise EmfError(f"{where}: {name}: unit {unit!r} is not a CloudWatch unit")
            res = m.get("StorageResolution", 60)
            if isinstance(res, bool) or res not in (1, 60):
                raise EmfError(f"{where}: {name}: StorageResolution is 1 or 60")
            _check_value(name, doc[name])
    return doc


def extract(text: str) -> list[Extracted]:
    """The metrics CloudWatch creates from one event: one per metric per dimension set."""
    doc = validate(text)
    aws = doc.get("_aws")
    if aws is None:
        return []
    out = []
    for d in aws["CloudWatchMetrics"]:
        for m in d["Metrics"]:
            raw = doc[m["Name"]]
            values = tuple(_check_value(m["Name"], raw))
            stats = (float(raw["Min"]), float(raw["Max"]), float(raw["Sum"]),
                     float(raw["Count"])) if isinstance(raw, dict) else None
            for dset in d["Dimensions"]:
                out.append(Extracted(
                    namespace=d["Namespace"], name=m["Name"],
                    dimensions=tuple(sorted((k, doc[k]) for k in dset)),
                    unit=m.get("Unit", "None"), timestamp_ms=int(aws["Timestamp"]),
                    values=values, storage_resolution=m.get("StorageResolution", 60),
                    stats=stats))
    return out
