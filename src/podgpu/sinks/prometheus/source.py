"""podgpu's own metric families as data, and the one function that renders them.

A component that has something to report is a `MetricSource`: `families()` returns what it knows
now (client_python's collector idea, node_exporter's per-collector update), and `render` turns
any number of them into text-format lines, so HELP and TYPE, label escaping and number
formatting are the same for all of them: the collect loop's self-metrics, accounting's counters,
the per-pod gauges (pods.py), the EMF sink's, the bridge's and the listener's. One renderer
remains beside this one, the DCGM-compatible families' (exposition.py: their names and `%f`
formatting are a contract), with text.py's primitives.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from math import isfinite
from typing import NamedTuple, Protocol

from podgpu.sinks.prometheus.text import family_header, format_seconds, label_pairs

Labels = tuple[tuple[str, str], ...]

LABEL_TEXT_CACHE = 4096
"""Label sets whose escaped text is kept between renders (least recently used go first). A
source that hands over the same label tuples every cycle (the accountant keeps one per holder)
pays for the escaping once; a render with more distinct label sets than this is only slower."""


class Sample(NamedTuple):
    """One line: `suffix` is appended to the family name (`_sum`, `_count` of a summary). A
    tuple, not a dataclass: a busy node's accounting makes hundreds per render."""

    labels: Labels
    value: float
    suffix: str = ""


class Family(NamedTuple):
    """A metric family: name, help, type (gauge, counter, summary) and its samples. A family
    without samples is not rendered (nothing to say is said by saying nothing)."""

    name: str
    help: str
    type: str
    samples: tuple[Sample, ...]


class MetricSource(Protocol):
    """Anything with families to export; called on the thread that renders."""

    def families(self) -> Iterable[Family]: ...


def gauge(name: str, help_text: str, value: float, labels: Labels = ()) -> Family:
    """A family of one sample."""
    return Family(name, help_text, "gauge", (Sample(labels, value),))


def counter(name: str, help_text: str, by: str, values: Iterable[tuple[str, float]]) -> Family:
    """A counter family with one label `by`: one sample per (label value, count)."""
    return Family(name, help_text, "counter",
                  tuple(Sample(((by, key),), value) for key, value in values))


def _number(value: float) -> str:
    """An int as an integer (counts), a float as its shortest round-trip repr, as the client
    libraries print them."""
    return str(int(value)) if isinstance(value, int) else format_seconds(value)


@functools.lru_cache(maxsize=LABEL_TEXT_CACHE)
def _label_text(labels: Labels) -> str:
    return label_pairs(labels)


def render(families: Iterable[Family]) -> str:
    """The text-format lines of `families`, in order."""
    out: list[str] = []
    add = out.append
    for fam in families:
        if not fam.samples:
            continue
        add(family_header(fam.name, fam.help, fam.type))
        name = fam.name
        for labels, value, suffix in fam.samples:
            # the common case (a finite float) inline: a busy node renders hundreds per cycle
            body = repr(value) if value.__class__ is float and isfinite(value) else _number(value)
            if labels:
                add(f"{name}{suffix}{{{_label_text(labels)}}} {body}\n")
            else:
                add(f"{name}{suffix} {body}\n")
    return "".join(out)


def render_sources(sources: Iterable[MetricSource]) -> str:
    """Every source's families, one source after the other."""
    return render(f for src in sources for f in src.families())
