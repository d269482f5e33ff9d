"""Which dimension sets a declarations config gives a metric, read statically from the config.

A metric gets the dimension sets of every declaration whose selectors match its name (the union,
as the agent does). The assets follow what is configured: the labels every
series of podgpu carries (`constant`: job, the agent identity's Namespace, `--emf-label`s,
ClusterName) decide a declaration whose source labels are all among them (a declaration this
node's series never match gives no graph), and become filters of the queries where a dimension
set names them. Other declarations are assumed to match; the tests check every name and set
against what the sink really produced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from podgpu.sinks.cloudwatch.declarations import EmfConfig

_PLAIN = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True, slots=True)
class MetricTarget:
    namespace: str
    metric: str
    dimensions: tuple[str, ...]
    """One dimension set (sorted, as the sink writes it)."""


def targets(config: EmfConfig, metric: str, must_have: str | None = "pod",
            constant: Mapping[str, str] | None = None) -> list[MetricTarget]:
    """The metric's dimension sets in this config; only sets naming `must_have` when given."""
    sets: list[tuple[str, ...]] = []
    for d in config.declarations:
        decided = constant is not None and all(n in constant for n in d.source_labels)
        if decided and constant is not None and not d.matches_labels(constant):
            continue
        if d.selects(metric):
            for s in d.dimensions:
                if s not in sets and (must_have is None or must_have in s):
                    sets.append(s)
    return [MetricTarget(config.namespace, metric, s) for s in sets]


def filters(t: MetricTarget, constant: Mapping[str, str], cluster: str = "") -> dict[str, str]:
    """Dimension values every series of this configuration has: the query filters on them."""
    out = {d: constant[d] for d in t.dimensions if constant.get(d)}
    if cluster and "ClusterName" in t.dimensions:
        out["ClusterName"] = cluster
    return dict(sorted(out.items()))


def per_pod(t: MetricTarget, constant: Mapping[str, str]) -> tuple[str, ...]:
    """The dimensions that tell pods apart (for legends and GROUP BY): not the constant ones."""
    return tuple(d for d in ("Namespace", "namespace", "pod")
                 if d in t.dimensions and d not in constant)


def quote(name: str) -> str:
    """A name as SEARCH and Metrics Insights want it: bare when plain, else double-quoted."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '\\"') + '"'
