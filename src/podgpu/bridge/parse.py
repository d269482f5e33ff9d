"""Prometheus text exposition -> metric families, with prometheus_client's maintained parser.

The parser renames counter samples to the OpenMetrics form (`foo` becomes `foo_total` unless the
`# TYPE` line already said `foo_total`). The CloudWatch agent keeps every sample's name as the
text wrote it, and declarations select that name, so the names are put back as written:
dcgm-exporter's `# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter` with a sample of that name
stays without `_total`, while `# TYPE foo counter` with a sample written `foo_total` stays
`foo_total`. This module is the only importer of prometheus_client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from podgpu.errors import PodgpuError

_TYPE_LINE = re.compile(r"^[ \t]*#[ \t]+TYPE[ \t]+(\S+)[ \t]+counter[ \t]*$", re.MULTILINE)


_SAMPLE_NAME = re.compile(r"^[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)[{ \t]", re.MULTILINE)
"""The name a sample line is written with (one pass over the text, not one per counter: a
target declaring thousands of counters must not cost a scan each)."""


class ParseError(PodgpuError):
    """The target's answer is not valid Prometheus text format."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    """gauge, counter, summary, histogram, or what the parser says for anything else
    (unknown, info, stateset, gaugehistogram)."""
    samples: tuple[Sample, ...]


def parse_exposition(text: str, *, max_labels: int | None = None) -> list[Family]:
    """Every family of one scrape; ParseError names the problem (and a sample with more than
    `max_labels` labels)."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:  # pragma: no cover - the bridge extra is missing
        raise ParseError(f"podgpu emf needs prometheus_client ({exc}): install podgpu[bridge]"
                         ) from None
    counters = set(_TYPE_LINE.findall(text))
    written = set(_SAMPLE_NAME.findall(text)) if counters else set()
    plain_counters = {n for n in counters if not n.endswith("_total")
                      and n + "_total" not in written}
    out: list[Family] = []
    try:
        for fam in text_string_to_metric_families(text):
            restore = fam.type == "counter" and fam.name in plain_counters
            samples = []
            for s in fam.samples:
                if max_labels is not None and len(s.labels) > max_labels:
                    raise ParseError(f"a sample of {s.name[:100]} with {len(s.labels)} labels, "
                                     f"over the limit of {max_labels}")
                name = s.name
                if restore and name == fam.name + "_total":
                    name = fam.name
                samples.append(Sample(name, dict(s.labels), float(s.value)))
            ftype = fam.type
            if ftype == "unknown" and fam.name.endswith("_total") and fam.name[:-6] in counters:
                # `# TYPE foo counter` with samples written `foo_total`: the parser leaves them
                # untyped; the agent looks the type up without `_total` and keeps the name
                ftype = "counter"
            if samples or ftype != "counter":
                out.append(Family(fam.name, ftype, tuple(samples)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ParseError(f"not Prometheus text format: {exc or type(exc).__name__}") from None
    return out
