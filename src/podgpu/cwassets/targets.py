"""Which dimension sets a declarations config gives a metric, read statically from the config.

A metric gets the dimension sets of every declaration whose selectors match its name (the union,
as the agent does, reference/cloudwatch.md §2.4). Whether a declaration's label_matcher matches
depends on the series' labels at run time; these assets assume it does (podgpu's series carry
what `--emf-label` gives, e.g. Service for the seed), and the tests check every name and set
against what the sink really produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from podgpu.sinks.cloudwatch.declarations import EmfConfig

_PLAIN = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True, slots=True)
class MetricTarget:
    namespace: str
    metric: str
    dimensions: tuple[str, ...]
    """One dimension set (sorted, as the sink writes it)."""


def targets(config: EmfConfig, metric: str, must_have: str | None = "pod") -> list[MetricTarget]:
    """The metric's dimension sets in this config; only sets naming `must_have` when given."""
    sets: list[tuple[str, ...]] = []
    for d in config.declarations:
        if d.selects(metric):
            for s in d.dimensions:
                if s not in sets and (must_have is None or must_have in s):
                    sets.append(s)
    return [MetricTarget(config.namespace, metric, s) for s in sets]


def quote(name: str) -> str:
    """A name as SEARCH and Metrics Insights want it: bare when plain, else double-quoted."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '\\"') + '"'
