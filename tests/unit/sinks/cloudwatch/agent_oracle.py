"""The CloudWatch agent's Prometheus -> EMF path, restated as a test oracle.

Written from the agent's and Prometheus' documented behaviour and source (not from podgpu's
code), so podgpu's EMF can be checked against what the agent would have sent for the same node:

1. **Service discovery** gives each target meta labels (`__meta_kubernetes_*`), `__address__`,
   and `job` = the job's name.
2. **relabel_configs** (Prometheus' model/relabel): regexes anchored as `^(?s:RE)$` in Go RE2;
   `replace` joins `source_labels` with `separator` (default `;`), and when the regex (default
   `(.*)`) matches, sets `target_label` to the expanded `replacement` (default `$1`), or
   **deletes** it when the expansion is empty; `keep`/`drop` filter the target; `labelmap`
   copies labels whose names match to the expanded names; `labeldrop`/`labelkeep` remove labels.
   Afterwards `instance` defaults to `__address__` and every `__`-prefixed label is removed, as
   are empty ones.
3. **Scrape**: each series keeps its labels; a target label wins over a series label of the same
   name (`honor_labels: false`), which moves to `exported_<name>` (shortest names first, prefixed
   again while taken). Then `metric_relabel_configs`.
4. **The agent**: only families typed gauge, counter or summary pass; `prom_metric_type` is set;
   counters' values become deltas (first sample dropped, a fall sends the new value);
   `ClusterName` is added unless present.
5. **awsemf** with the agent's translation of `emf_processor`: a declaration without
   `metric_selectors` or `source_labels` is skipped; `label_matcher` defaults to `.*` only when
   absent; `label_separator` is not passed on (`;`); declarations with empty selectors, empty
   source labels, an empty or invalid matcher are dropped; dimension sets of more than 10 names
   are dropped, others de-duplicated and sorted; matching is unanchored Go RE2; a dimension set
   naming a label the series lacks is left out; metrics selected by the same declarations share
   a directive with the union of their sets; `metric_unit` (valid units only) gives the unit;
   namespace "" -> "default".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]
import yaml

UNITS = {"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
         "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
         "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
         "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
         "Gigabits/Second", "Terabits/Second", "Count/Second", "None"}

SERVICE_ENDPOINTS_JOB = """
job_name: kubernetes-service-endpoints
kubernetes_sd_configs: [{role: endpoints}]
relabel_configs:
  - {action: keep, regex: 'true', source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape]}
  - {action: replace, regex: '(https?)', source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scheme], target_label: __scheme__}
  - {action: replace, regex: '(.+)', source_labels: [__meta_kubernetes_service_annotation_prometheus_io_path], target_label: __metrics_path__}
  - {action: replace, regex: '([^:]+)(?::\\d+)?;(\\d+)', replacement: '$1:$2', source_labels: [__address__, __meta_kubernetes_service_annotation_prometheus_io_port], target_label: __address__}
  - {action: labelmap, regex: __meta_kubernetes_service_label_(.+)}
  - {action: replace, source_labels: [__meta_kubernetes_namespace], target_label: Namespace}
  - {action: replace, source_labels: [__meta_kubernetes_service_name], target_label: Service}
  - {action: replace, source_labels: [__meta_kubernetes_pod_node_name], target_label: kubernetes_node}
  - {action: replace, source_labels: [__meta_kubernetes_pod_name], target_label: pod_name}
  - {action: replace, source_labels: [__meta_kubernetes_pod_container_name], target_label: container_name}
metric_relabel_configs:
  - {source_labels: [__name__], regex: 'go_gc_duration_seconds.*', action: drop}
  - {regex: proxy, action: labeldrop}
"""
"""The agent's default Kubernetes job (Container Insights' prometheus-eks.yaml), the parts that
touch a GPU exporter (its haproxy-only metric relabels left out)."""


def _go(pattern: str) -> Any:
    opts = re2.Options()
    opts.log_errors = False
    return re2.compile(pattern, opts)


def _anchored(pattern: str) -> Any:
    return _go(f"^(?s:{pattern})$")


_TEMPLATE = re.compile(r"\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


def _expand(template: str, m: Any) -> str:
    """Go's ExpandString: `$$`, `${name}`, `$name` (longest name), unknown -> ""."""
    def one(t: re.Match[str]) -> str:
        if t.group(0) == "$$":
            return "$"
        name = t.group(1) or t.group(2)
        try:
            idx = int(name) if name.isdigit() else m.re.groupindex[name]
            return m.group(idx) or ""
        except (KeyError, IndexError):
            return ""
    return _TEMPLATE.sub(one, template)


def relabel(labels: Mapping[str, str], rules: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling of one label set; None when the set is dropped."""
    lb = {k: v for k, v in labels.items()}
    for rule in rules:
        action = rule.get("action", "replace").lower()
        rx = _anchored(str(rule.get("regex", "(.*)")))
        sep = rule.get("separator", ";")
        value = sep.join(lb.get(n, "") for n in rule.get("source_labels", []))
        if action == "keep" and not rx.search(value):
            return None
        if action == "drop" and rx.search(value):
            return None
        if action == "replace":
            m = rx.search(value)
            if m is None:
                continue
            target = _expand(rule.get("target_label", ""), m)
            res = _expand(str(rule.get("replacement", "$1")), m)
            if not target:
                continue
            if res == "":
                lb.pop(target, None)
            else:
                lb[target] = res
        elif action == "labelmap":
            for name in list(lb):
                m = rx.search(name)
                if m is not None:
                    lb[_expand(str(rule.get("replacement", "$1")), m)] = lb[name]
        elif action == "labeldrop":
            lb = {k: v for k, v in lb.items() if not rx.search(k)}
        elif action == "labelkeep":
            lb = {k: v for k, v in lb.items() if rx.search(k)}
    return lb


def target_labels(job: Mapping[str, Any], meta: Mapping[str, str]) -> dict[str, str] | None:
    """The target labels after relabel_configs; None when the job drops the target."""
    start = {"job": job["job_name"], "__scheme__": "http",
             "__metrics_path__": job.get("metrics_path", "/metrics"), **meta}
    out = relabel(start, job.get("relabel_configs", []))
    if out is None or "__address__" not in out:
        return None
    out.setdefault("instance", out["__address__"])
    return {k: v for k, v in out.items() if not k.startswith("__") and v != ""}


def merge(series: Mapping[str, str], target: Mapping[str, str], honor_labels: bool = False
          ) -> dict[str, str]:
    labels = {k: v for k, v in series.items() if v != ""}
    if honor_labels:
        for k, v in target.items():
            labels.setdefault(k, v)
        return labels
    exposed = [(k, labels[k]) for k in target if labels.get(k)]
    labels.update(target)
    for name, value in sorted(exposed, key=lambda kv: len(kv[0])):
        new = "exported_" + name
        while labels.get(new):
            new = "exported_" + new
        labels[new] = value
    return labels


@dataclass
class Scraped:
    """One scrape of one target: (metric name, type, labels, value) per sample kept."""

    samples: list[tuple[str, str, dict[str, str], float]] = field(default_factory=list)


_SUFFIXES = ("_total", "_sum", "_count", "_bucket")


def scrape(text: str, job: Mapping[str, Any], target: Mapping[str, str], cluster_name: str
           ) -> Scraped:
    """A scrape as the agent keeps it (steps 3-4 without the counter deltas). Each sample's type
    is looked up from the `# TYPE` lines by its name, else by its name without a `_total`,
    `_sum`, `_count` or `_bucket` suffix; names stay as the text wrote them."""
    from prometheus_client.parser import text_string_to_metric_families

    types = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "#" and parts[1] == "TYPE":
            types[parts[2]] = parts[3]
    written = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines()
               if ln and not ln.startswith("#")}
    out = Scraped()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            if name not in written and name.endswith("_total") and name[:-6] in written:
                name = name[:-6]  # the parser's OpenMetrics suffix; the text had none
            base = name
            ftype = types.get(name)
            if ftype is None:
                base = next((name[:-len(x)] for x in _SUFFIXES if name.endswith(x)), name)
                ftype = types.get(base)
            if ftype not in ("gauge", "counter", "summary"):
                continue  # the agent drops other and unknown types
            lbls = merge(dict(s.labels), target)
            lbls["__name__"] = name
            lbls2 = relabel(lbls, job.get("metric_relabel_configs", []))
            if lbls2 is None:
                continue
            lbls2.pop("__name__", None)
            lbls2["prom_metric_type"] = ftype
            if cluster_name:
                lbls2.setdefault("ClusterName", cluster_name)
            if s.value != s.value or s.value in (float("inf"), float("-inf")):
                continue
            kind = "counter" if ftype == "counter" or (ftype == "summary" and name != base) \
                else "gauge"
            out.samples.append((name, kind, lbls2, float(s.value)))
    return out


def deltas(scrapes: Iterable[Scraped]) -> list[tuple[str, dict[str, str], float]]:
    """Every scrape's samples with counters as deltas (first sample of a series dropped)."""
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    out = []
    for sc in scrapes:
        for name, kind, labels, value in sc.samples:
            if kind == "counter":
                key = (name, tuple(sorted(labels.items())))
                prev = last.get(key)
                last[key] = value
                if prev is None:
                    continue
                value = value - prev if value >= prev else value
            out.append((name, labels, value))
    return out


@dataclass
class Decl:
    names: list[str]
    matcher: Any
    selectors: list[Any]
    dims: list[tuple[str, ...]]


@dataclass
class AgentEmf:
    namespace: str
    units: dict[str, str]
    decls: list[Decl]
    log_group: str


def agent_config(text: str) -> AgentEmf:
    """The agent's translation + awsemf's init of an agent config (step 5)."""
    doc = json.loads(text)
    prom = doc.get("logs", {}).get("metrics_collected", {}).get("prometheus", doc)
    emf = prom.get("emf_processor", doc if "metric_declaration" in doc else {})
    ns = emf.get("metric_namespace", "ContainerInsights/Prometheus") or "default"
    units = {k: v for k, v in emf.get("metric_unit", {}).items() if k and v in UNITS}
    decls = []
    for d in emf.get("metric_declaration", []):
        if "metric_selectors" not in d or "source_labels" not in d:
            continue
        if not d["metric_selectors"] or not d["source_labels"]:
            continue
        matcher_text = d.get("label_matcher", ".*")
        if matcher_text == "":
            continue
        try:
            matcher = _go(matcher_text)
        except re2.error:
            continue
        dims: list[tuple[str, ...]] = []
        for ds in d.get("dimensions", []):
            if len(ds) > 10:
                continue
            t = tuple(sorted(set(ds)))
            if t not in dims:
                dims.append(t)
        decls.append(Decl(d["source_labels"], matcher,
                          [_go(s) for s in d["metric_selectors"]], dims))
    group = prom.get("log_group_name", "/aws/containerinsights/{ClusterName}/prometheus")
    return AgentEmf(ns, units, decls, group)


Identity = tuple[str, str, tuple[tuple[str, str], ...]]
"""(namespace, metric name, dimension name/value pairs): one CloudWatch metric."""


def extract(cfg: AgentEmf, samples: Iterable[tuple[str, dict[str, str], float]]
            ) -> dict[Identity, tuple[str | None, list[float]]]:
    """Every CloudWatch metric the agent's events make, with its unit and values."""
    out: dict[Identity, tuple[str | None, list[float]]] = {}
    for name, labels, value in samples:
        kept = [d for d in cfg.decls
                if d.matcher.search(";".join(labels.get(n, "") for n in d.names))]
        sets: list[tuple[str, ...]] = []
        for d in kept:
            if any(s.search(name) for s in d.selectors):
                for ds in d.dims:
                    if all(k in labels for k in ds) and ds not in sets:
                        sets.append(ds)
        for ds in sets:
            ident = (cfg.namespace, name, tuple((k, labels[k]) for k in ds))
            out.setdefault(ident, (cfg.units.get(name), []))[1].append(value)
    return out


PLACEHOLDERS = {"ClusterName": "aws.ecs.cluster.name", "TaskId": "aws.ecs.task.id",
                "NodeName": "k8s.node.name", "PodName": "pod", "ServiceName": "service.name",
                "ContainerInstanceId": "aws.ecs.container.instance.id",
                "TaskDefinitionFamily": "aws.ecs.task.family", "JobName": "job"}


def fill(template: str, labels: Mapping[str, str]) -> str:
    """awsemf's pattern replacement from one series' labels ("undefined" when missing/empty)."""
    for key, alt in PLACEHOLDERS.items():
        if "{" + key + "}" in template:
            template = template.replace("{" + key + "}", labels.get(key) or labels.get(alt)
                                        or "undefined")
    return template


def load_job(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    job = doc[0] if isinstance(doc, list) else doc
    assert isinstance(job, dict), job
    return job
