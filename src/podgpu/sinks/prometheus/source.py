"""podgpu's own metric families as data, and the one function that renders them.

A component that has something to report is a `MetricSource`: `families()` returns what it knows
now (client_python's collector idea, node_exporter's per-collector update), and `render` turns
any number of them into text-format lines. No component formats exposition text by hand, so HELP
and TYPE, label escaping and number formatting are the same everywhere. The DCGM-compatible
families keep their own renderer (exposition.py): their names and formatting are a contract.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from podgpu.sinks.prometheus.text import family_header, format_seconds, label_pairs

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """One line: `suffix` is appended to the family name (`_sum`, `_count` of a summary)."""

    labels: Labels
    value: float
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class Family:
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


def render(families: Iterable[Family]) -> str:
    """The text-format lines of `families`, in order."""
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        out.append(family_header(fam.name, fam.help, fam.type))
        for s in fam.samples:
            head = fam.name + s.suffix
            body = _number(s.value)
            out.append(f"{head}{{{label_pairs(s.labels)}}} {body}\n" if s.labels
                       else f"{head} {body}\n")
    return "".join(out)


def render_sources(sources: Iterable[MetricSource]) -> str:
    """Every source's families, one source after the other."""
    return render(f for src in sources for f in src.families())
