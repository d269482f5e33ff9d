"""The CloudWatch agent's `emf_processor` config, read unchanged, and its matching rules.

Input is the agent's whole JSON file (`logs.metrics_collected.prometheus`), the `prometheus`
object alone, or the `emf_processor` object alone. Matching follows the agent's awsemf exporter
exactly (docs/cloudwatch.md, "What the agent does with the config"): source labels joined with
`;` (the agent never passes `label_separator` on), a missing label as "", unanchored Go RE2
regexes (podgpu.re2compat), the union of the matching declarations' dimension sets, a set that
names a label missing on the series dropped, sets de-duplicated and sorted.

What the agent accepts podgpu accepts, with one warning where the agent logs one or where the
agent's behaviour surprises: an empty or invalid `label_matcher`, empty `source_labels` or
`metric_selectors` drop the declaration; a dimension set of more than 10 names is dropped; an
unknown `metric_unit` is dropped; `metric_namespace: ""` becomes `default`. What stops the agent
stops podgpu (exit 2, naming file, declaration index and key): JSON or schema errors, an invalid
`metric_selectors` regex (the agent panics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podgpu.errors import ConfigError
from podgpu.files import FileReadError, read_text
from podgpu.re2compat import GoPattern, compile_go

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "ContainerInsights/Prometheus"
DEFAULT_LOG_GROUP = "/aws/containerinsights/{ClusterName}/prometheus"
DEFAULT_LOG_STREAM = "{JobName}"
"""The agent's translated awsemf config always names the stream `{JobName}`: the `job` label."""
EMPTY_NAMESPACE = "default"
MAX_CONFIG_BYTES = 1 << 20
"""The CloudWatch agent config read by --cloudwatch-config (a real one is a few KiB)."""
"""awsemf's namespace when the configured one is empty (and no OTel service name exists)."""
MAX_DIMENSIONS = 10  # awsemf drops a set naming more (EMF itself allows 30)
SEPARATOR = ";"
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
    label_matcher: GoPattern
    separator: str
    selectors: tuple[GoPattern, ...]
    dimensions: tuple[tuple[str, ...], ...]

    def matches_labels(self, labels: Labels) -> bool:
        joined = self.separator.join(labels.get(n, "") for n in self.source_labels)
        return self.label_matcher.search(joined)

    def selects(self, metric: str) -> bool:
        return any(s.search(metric) for s in self.selectors)

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

    @property
    def names_podgpu_series(self) -> bool:
        """A `metric_selectors` pattern names `podgpu_`: the config asks for podgpu's own
        series (`--emf-podgpu-series auto`); a wildcard alone does not."""
        return any("podgpu_" in s.pattern for d in self.declarations for s in d.selectors)


def load_emf_config(path: str) -> EmfConfig:
    """Read and validate the agent config at `path`; ConfigError names file, index and key."""
    try:
        text = read_text(path, MAX_CONFIG_BYTES)
    except FileReadError as exc:
        raise ConfigError(f"--cloudwatch-config {path}: {exc}") from None
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
    if namespace == "":
        warnings.append(f"{path}: {emf_where}.metric_namespace is empty: the agent (awsemf) "
                        f"sends such metrics under the namespace {EMPTY_NAMESPACE!r}, so does "
                        "podgpu")
        namespace = EMPTY_NAMESPACE
    if len(namespace) > 1024:
        raise ConfigError(f"{path}: {emf_where}.metric_namespace: longer than 1024 characters")
    units_raw = emf.get("metric_unit", {})
    _expect(units_raw, dict, path, f"{emf_where}.metric_unit")
    units: dict[str, str] = {}
    for name, unit in units_raw.items():
        unit_where = _member(f"{emf_where}.metric_unit", name)
        _expect(unit, str, path, unit_where)
        if not name:
            continue  # awsemf skips a descriptor without a metric name, silently
        if unit not in CLOUDWATCH_UNITS:
            warnings.append(f"{path}: {unit_where}: {unit!r} is not a "
                            "CloudWatch unit: dropped, as the agent drops it (its metric is "
                            "sent without a unit)")
            continue
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
            # The agent's translator skips such a declaration without a word; podgpu says so.
            warnings.append(f"{path}: {where} has no {key}: skipped (the CloudWatch agent skips "
                            "it silently)")
            return None
    labels = _strings(raw["source_labels"], path, f"{where}.source_labels")
    selector_texts = _strings(raw["metric_selectors"], path, f"{where}.metric_selectors")
    sep = raw.get("label_separator", SEPARATOR)
    _expect(sep, str, path, f"{where}.label_separator")
    if sep != SEPARATOR:
        warnings.append(f"{path}: {where}.label_separator {sep!r} is ignored: the agent never "
                        f"passes it on and always joins source_labels with {SEPARATOR!r}; so "
                        "does podgpu")
    dims_raw = raw.get("dimensions")
    if dims_raw is None:
        warnings.append(f"{path}: {where} has no dimensions: its metrics are not extracted")
        dims_raw = []
    _expect(dims_raw, list, path, f"{where}.dimensions")
    sets: list[tuple[str, ...]] = []
    for j, dset in enumerate(dims_raw):
        names = _strings(dset, path, f"{where}.dimensions[{j}]")
        if len(names) > MAX_DIMENSIONS:  # counted before de-duplication, as awsemf counts
            warnings.append(f"{path}: {where}.dimensions[{j}]: {len(names)} names; the agent "
                            f"drops a dimension set of more than {MAX_DIMENSIONS}, so does podgpu")
            continue
        unique = tuple(sorted(set(names)))
        if unique not in sets:
            sets.append(unique)
    # The agent compiles the selectors with MustCompile: a bad one stops it. So it stops podgpu.
    selectors = tuple(_regex(s, path, f"{where}.metric_selectors[{j}]")
                      for j, s in enumerate(selector_texts))
    drop = None
    matcher_text = raw.get("label_matcher", ".*")
    _expect(matcher_text, str, path, f"{where}.label_matcher")
    if not selector_texts:
        drop = "metric_selectors is empty"
    elif not labels:
        drop = "source_labels is empty"
    elif matcher_text == "":
        drop = "label_matcher is empty (the agent's default \".*\" applies only when the key is " \
               "absent)"
    else:
        try:
            matcher = compile_go(matcher_text, where=f"{path}: {where}.label_matcher")
        except ConfigError as exc:
            drop = str(exc).split(": ", 2)[-1]
    if drop is not None:
        warnings.append(f"{path}: {where}: {drop}: the declaration is dropped, as the agent "
                        "drops it (\"Dropped metric declaration.\")")
        return None
    return Declaration(index=i, source_labels=labels, label_matcher=matcher, separator=SEPARATOR,
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


def _member(where: str, name: str) -> str:
    """`where.name` for a key the user wrote, or `where["..."]` (JSON-escaped, one line) when
    the key is empty or holds characters an error message cannot show as they are."""
    if name and name.isprintable() and name.strip() == name:
        return f"{where}.{name}"
    return f"{where}[{json.dumps(name)}]"


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


def _regex(value: Any, path: str, where: str) -> GoPattern:
    _expect(value, str, path, where)
    return compile_go(value, where=f"{path}: {where}")


PLACEHOLDERS: Mapping[str, str] = {
    "ClusterName": "aws.ecs.cluster.name", "TaskId": "aws.ecs.task.id",
    "NodeName": "k8s.node.name", "PodName": "pod", "ServiceName": "service.name",
    "ContainerInstanceId": "aws.ecs.container.instance.id",
    "TaskDefinitionFamily": "aws.ecs.task.family", "JobName": "job",
}
"""awsemf's placeholders in log_group_name/log_stream_name, and the label each falls back to
when no label has the placeholder's own name (exporter/awsemfexporter/util.go)."""

UNDEFINED = "undefined"


def fill_placeholders(template: str, labels: Labels) -> str:
    """`{JobName}`, `{PodName}`, ... filled from one series' labels as awsemf fills them: the
    label named like the placeholder, else the mapped one (`{JobName}` -> `job`, `{PodName}` ->
    `pod`); missing or empty -> "undefined". Any other `{...}` text stays as written."""
    for key, fallback in PLACEHOLDERS.items():
        token = "{" + key + "}"
        if token in template:
            value = labels.get(key) or labels.get(fallback) or UNDEFINED
            template = template.replace(token, value)
    return template


def resolve_log_names(group: str, stream: str, constant: Labels, *, per_event: bool
                      ) -> tuple[str, str, list[str]]:
    """The log group and stream for a sink whose every series carries `constant` labels.

    Placeholders are filled from those labels as awsemf fills them from each series'.
    `{PodName}` reads each series' `pod`: with `per_event` (the agent's EMF listener, which
    routes every event by its `_aws`) it stays for the encoder to fill per event; otherwise
    (one stream per process) it is a ConfigError. A placeholder no label answers becomes
    "undefined", as in the agent, with a warning; other `{...}` text stays, with a warning when
    it is in the group name (CloudWatch refuses braces there)."""
    warnings: list[str] = []
    out = []
    for what, template in (("log group", group), ("log stream", stream)):
        if "{PodName}" in template and "pod" not in constant and "PodName" not in constant:
            if not per_event:
                raise ConfigError(
                    f"the {what} {template!r} names each series' pod ({{PodName}}): the agent "
                    "writes one stream per pod; podgpu's cloudwatch and stdout destinations send "
                    "to one group and stream, so use a fixed name, {JobName} or {ClusterName}")
            out.append(template)  # filled per event by the encoder
            continue
        filled = fill_placeholders(template, constant)
        for key, fallback in PLACEHOLDERS.items():
            if "{" + key + "}" in template and not (constant.get(key) or constant.get(fallback)):
                warnings.append(f"EMF: {{{key}}} in the {what} {template!r} has no value on these "
                                f"series (no {key} or {fallback} label): it becomes "
                                f"{UNDEFINED!r}, as in the agent")
        if what == "log group" and ("{" in filled or "}" in filled):
            warnings.append(f"EMF: the log group {filled!r} keeps braces (not a placeholder the "
                            "agent knows): CloudWatch refuses such a name")
        out.append(filled)
    return out[0], out[1], warnings
