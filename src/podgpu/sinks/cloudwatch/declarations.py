"""The CloudWatch agent's `emf_processor` config, read unchanged, and its matching rules.

Input is the agent's whole JSON file (`logs.metrics_collected.prometheus`), the `prometheus`
object alone, or the `emf_processor` object alone. Matching follows the agent's awsemf exporter
exactly (reference/cloudwatch.md §2.3-2.4): source labels joined with the separator, a missing
label as "", unanchored regexes, the union of the matching declarations' dimension sets, a set that
names a label missing on the series dropped, sets de-duplicated and sorted. Where the agent is
wrong podgpu does better; every difference is in docs/cloudwatch.md ("Differences from the agent").

Every problem is a ConfigError naming the file, the declaration index and the key.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podgpu.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "ContainerInsights/Prometheus"
DEFAULT_LOG_GROUP = "/aws/containerinsights/{ClusterName}/prometheus"
MAX_DIMENSIONS = 30  # EMF spec and PutMetricData (reference §4, §5.2); the agent drops > 10
CLOUDWATCH_UNITS = frozenset((
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
    "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
    "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
    "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second",
    "Terabits/Second", "Count/Second", "None",
))

# The agent's schema (translator/config/schema.json) has additionalProperties: false on these.
_PROMETHEUS_KEYS = frozenset((
    "prometheus_config_path", "cluster_name", "log_group_name", "emf_processor",
    "ecs_service_discovery", "disable_metric_extraction",
))
_EMF_KEYS = frozenset(("metric_namespace", "metric_unit", "metric_declaration_dedup",
                       "metric_declaration"))
_DECL_KEYS = frozenset(("source_labels", "label_matcher", "label_separator", "metric_selectors",
                        "dimensions"))

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Declaration:
    """One `metric_declaration` entry, compiled. Dimension sets are de-duplicated and sorted."""

    index: int
    source_labels: tuple[str, ...]
    label_matcher: re.Pattern[str]
    separator: str
    selectors: tuple[re.Pattern[str], ...]
    dimensions: tuple[tuple[str, ...], ...]

    def matches_labels(self, labels: Labels) -> bool:
        joined = self.separator.join(labels.get(n, "") for n in self.source_labels)
        return self.label_matcher.search(joined) is not None

    def selects(self, metric: str) -> bool:
        return any(s.search(metric) is not None for s in self.selectors)

    def dimension_sets(self, labels: Labels) -> tuple[tuple[str, ...], ...]:
        """The sets whose every label is present on the series (the others are dropped)."""
        return tuple(d for d in self.dimensions if all(k in labels for k in d))


@dataclass(frozen=True, slots=True)
class EmfConfig:
    """What podgpu takes from the agent's config."""

    path: str
    namespace: str = DEFAULT_NAMESPACE
    units: Mapping[str, str] = field(default_factory=dict)
    declarations: tuple[Declaration, ...] = ()
    cluster_name: str = ""
    log_group_name: str = ""
    disable_metric_extraction: bool = False
    warnings: tuple[str, ...] = ()

    def directives_for(self, labels: Labels, metrics: Sequence[str]
                       ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]]:
        """Group `metrics` of one label set into (metric names, dimension sets) directives.

        Metrics selected by the same list of declarations share a directive whose dimension sets
        are the union of those declarations' surviving sets; metrics with no surviving set (or no
        declaration) are left out — the caller decides whether unmatched values are still sent.
        """
        kept = [d for d in self.declarations if d.matches_labels(labels)]
        if not kept:
            return []
        by_decls: dict[tuple[int, ...], list[str]] = {}
        for m in metrics:
            idx = tuple(d.index for d in kept if d.selects(m))
            if idx:
                by_decls.setdefault(idx, []).append(m)
        out = []
        by_index = {d.index: d for d in kept}
        for idx, names in by_decls.items():
            sets: list[tuple[str, ...]] = []
            for i in idx:
                for s in by_index[i].dimension_sets(labels):
                    if s not in sets:
                        sets.append(s)
            if sets:
                out.append((tuple(names), tuple(sets)))
        return out


def load_emf_config(path: str) -> EmfConfig:
    """Read and validate the agent config at `path`; ConfigError names file, index and key."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"--cloudwatch-config {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    return parse_emf_config(text, path)


def parse_emf_config(text: str, path: str = "<config>") -> EmfConfig:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top")
    prom, where = _find_prometheus(doc, path)
    warnings: list[str] = []
    emf = prom.get("emf_processor")
    if emf is None:
        raise ConfigError(f"{path}: {where} has no emf_processor: the agent extracts no metrics "
                          "without one, and neither would podgpu")
    emf_where = f"{where}.emf_processor" if where else "emf_processor"
    _expect(emf, dict, path, emf_where)
    _unknown(emf, _EMF_KEYS, path, emf_where)
    namespace = emf.get("metric_namespace", DEFAULT_NAMESPACE)
    _expect(namespace, str, path, f"{emf_where}.metric_namespace")
    if not 1 <= len(namespace) <= 1024:
        raise ConfigError(f"{path}: {emf_where}.metric_namespace: must be 1 to 1024 characters")
    units_raw = emf.get("metric_unit", {})
    _expect(units_raw, dict, path, f"{emf_where}.metric_unit")
    units: dict[str, str] = {}
    for name, unit in units_raw.items():
        _expect(unit, str, path, f"{emf_where}.metric_unit.{name}")
        if unit not in CLOUDWATCH_UNITS:
            raise ConfigError(f"{path}: {emf_where}.metric_unit.{name}: {unit!r} is not a "
                              "CloudWatch unit (e.g. Percent, Bytes, Count, Seconds, None)")
        units[name] = unit
    if "metric_declaration_dedup" in emf:
        _expect(emf["metric_declaration_dedup"], bool, path, f"{emf_where}.metric_declaration_dedup")
    decls_raw = emf.get("metric_declaration", [])
    _expect(decls_raw, list, path, f"{emf_where}.metric_declaration")
    decls = []
    for i, raw in enumerate(decls_raw):
        d = _declaration(raw, i, path, f"{emf_where}.metric_declaration[{i}]", warnings)
        if d is not None:
            decls.append(d)
    if not decls:
        warnings.append(f"{path}: no usable metric_declaration: nothing will be extracted as "
                        "CloudWatch metrics")
    cluster = prom.get("cluster_name", "")
    _expect(cluster, str, path, f"{where}.cluster_name" if where else "cluster_name")
    group = prom.get("log_group_name", "")
    _expect(group, str, path, f"{where}.log_group_name" if where else "log_group_name")
    disable = prom.get("disable_metric_extraction", False)
    _expect(disable, bool, path, f"{where}.disable_metric_extraction")
    return EmfConfig(path=path, namespace=namespace, units=units, declarations=tuple(decls),
                     cluster_name=cluster, log_group_name=group,
                     disable_metric_extraction=disable, warnings=tuple(warnings))


def _find_prometheus(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The object holding emf_processor: the whole agent file, `prometheus`, or `emf_processor`."""
    if "logs" in doc:
        where = "logs.metrics_collected.prometheus"
        node: Any = doc
        for key in ("logs", "metrics_collected", "prometheus"):
            if not isinstance(node, dict) or key not in node:
                raise ConfigError(f"{path}: the agent config has no {where} section")
            node = node[key]
        _expect(node, dict, path, where)
        _unknown(node, _PROMETHEUS_KEYS, path, where)
        return node, where
    if "metric_declaration" in doc or "metric_namespace" in doc:
        return {"emf_processor": doc}, ""
    _unknown(doc, _PROMETHEUS_KEYS, path, "prometheus")
    return doc, ""


def _declaration(raw: Any, i: int, path: str, where: str, warnings: list[str]
                 ) -> Declaration | None:
    _expect(raw, dict, path, where)
    _unknown(raw, _DECL_KEYS, path, where)
    for key in ("source_labels", "metric_selectors"):
        if key not in raw:
            # The agent skips such a declaration without a word (§2.3); podgpu says so.
            warnings.append(f"{path}: {where} has no {key}: skipped (the CloudWatch agent skips "
                            "it silently)")
            return None
    labels = _strings(raw["source_labels"], path, f"{where}.source_labels")
    sep = raw.get("label_separator", ";")
    _expect(sep, str, path, f"{where}.label_separator")
    matcher = _regex(raw.get("label_matcher", ".*"), path, f"{where}.label_matcher")
    selectors = tuple(
        _regex(s, path, f"{where}.metric_selectors[{j}]")
        for j, s in enumerate(_strings(raw["metric_selectors"], path, f"{where}.metric_selectors"))
    )
    dims_raw = raw.get("dimensions")
    if dims_raw is None:
        warnings.append(f"{path}: {where} has no dimensions: its metrics are not extracted")
        dims_raw = []
    _expect(dims_raw, list, path, f"{where}.dimensions")
    sets: list[tuple[str, ...]] = []
    for j, dset in enumerate(dims_raw):
        names = _strings(dset, path, f"{where}.dimensions[{j}]")
        unique = tuple(sorted(set(names)))
        if len(unique) > MAX_DIMENSIONS:
            raise ConfigError(
                f"{path}: {where}.dimensions[{j}]: {len(unique)} dimensions; CloudWatch allows at "
                f"most {MAX_DIMENSIONS} per set (the agent silently drops sets over 10)")
        if any(not n for n in unique):
            raise ConfigError(f"{path}: {where}.dimensions[{j}]: empty dimension name")
        if unique not in sets:
            sets.append(unique)
    return Declaration(index=i, source_labels=labels, label_matcher=matcher, separator=sep,
                       selectors=selectors, dimensions=tuple(sets))


def _expect(value: Any, kind: type, path: str, where: str) -> None:
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, kind) and not isinstance(value, bool))
    if not ok:
        names = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}
        raise ConfigError(f"{path}: {where}: expected {names.get(kind, kind.__name__)}, got "
                          f"{_json_type(value)}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _unknown(obj: Mapping[str, Any], allowed: frozenset[str], path: str, where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ConfigError(f"{path}: {where}: unknown key {key!r} (known: "
                              f"{', '.join(sorted(allowed))})")


def _strings(value: Any, path: str, where: str) -> tuple[str, ...]:
    _expect(value, list, path, where)
    for j, v in enumerate(value):
        _expect(v, str, path, f"{where}[{j}]")
    return tuple(value)


def _regex(value: Any, path: str, where: str) -> re.Pattern[str]:
    _expect(value, str, path, where)
    try:
        return re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ConfigError(f"{path}: {where}: invalid regular expression {value!r}: {exc}") from None
