"""A snapshot as the CloudWatch agent would have seen it: every series with its labels.

The agent scrapes the exporter through Prometheus, so each series it turns into EMF carries the
exporter's own labels plus the *target labels* of the agent's scrape job, merged as Prometheus
merges them, plus what the agent adds itself:

- the series' labels, as `/metrics` exposes them: `pod`, `namespace`, `container` name the
  workload (dcgm-exporter's and podgpu's), never the exporter;
- the target labels of the agent's default `kubernetes-service-endpoints` job (the one the seed
  post's declaration, `Service` matching `.*dcgm.*`, can only have matched): `job` (the job's
  name), `instance`, the Service's labels and `Service` (here: `--emf-label`), `Namespace` (the
  namespace of the scraped pod: podgpu's own, `POD_NAMESPACE`), `kubernetes_node`, `pod_name`
  and `container_name` (the exporter's pod and container). A target label whose value is empty is
  not set (a relabel `replace` that yields "" deletes the label);
- with `honor_labels: false` (Prometheus' default, and the agent's jobs), a target label wins
  over a series label of the same name, whose value moves to `exported_<name>`;
- then the agent: `ClusterName` unless the series has one, `prom_metric_type` (the family's type).

`AgentTarget` is that model, used by `podgpu serve` (`SeriesBuilder`) and `podgpu emf`
(bridge/series.py) alike. tests/unit/sinks/cloudwatch/agent_oracle.py restates the agent's
relabel pipeline independently and checks this model against it.

podgpu's older, richer identity (`Namespace` = the workload's namespace, `NodeName`, job
`podgpu`) stays available as `identity="workload"`.

Series come from the same label helpers as the Prometheus exposition, so `/metrics` and the EMF
documents never disagree about who holds a GPU. With `--kubernetes-virtual-gpus` that includes
dcgm-exporter 4.8.2's per-process split (sinks/prometheus/virtual.py): `GPU_UTIL`/`FB_USED` as
the device series plus one per holder with its pod's processes' sum (as `/metrics` prints it:
integer fields truncated), every other field once per holder.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from podgpu.fields.metriclist import MetricList
from podgpu.fields.xid import error_labels
from podgpu.model import Allocation, Device, Snapshot
from podgpu.sinks.prometheus import virtual
from podgpu.sinks.prometheus.labels import (
    LabelOptions,
    container_pairs,
    field_label_pairs,
    holders_by_device,
    identity_pairs,
    series_variants,
    short_identity_pairs,
    with_jobs,
)
from podgpu.sinks.prometheus.pods import ALLOCATION, MEMORY, UTIL, allocation_series, pod_usage

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"

LabelKey = tuple[tuple[str, str], ...]
"""A label set, sorted by name: hashable, and the identity of one EMF event per flush."""

Item = tuple[str, float]
"""(metric name, value) of one series."""

GAUGE = "gauge"
COUNTER = "counter"
POD_UNITS = {MEMORY: "Bytes", UTIL: "None", ALLOCATION: "Count"}
"""Units of podgpu's per-pod series in the workload identity (the agent sends none)."""


AGENT = "agent"
WORKLOAD = "workload"
IDENTITIES = (AGENT, WORKLOAD)
DEFAULT_AGENT_JOB = "kubernetes-service-endpoints"
"""The job of the agent's default Prometheus config (prometheus-eks.yaml) that scrapes every
Service annotated `prometheus.io/scrape: "true"`, as the GPU Operator's dcgm-exporter Service is."""


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """The target labels the agent's scrape job gives every series of one scraped endpoint."""

    job: str = DEFAULT_AGENT_JOB
    instance: str = ""
    namespace: str = ""
    """`Namespace`: the scraped pod's namespace (`POD_NAMESPACE` of podgpu's pod)."""
    pod_name: str = ""
    container_name: str = ""
    node_name: str = ""
    """`kubernetes_node`."""
    extra: tuple[tuple[str, str], ...] = ()
    """Any target label (`--emf-label`, `--target-label`); set last, so it wins."""
    honor_labels: bool = False
    cluster_name: str = ""
    service: str = ""
    """`Service`: the scraped Service's name."""
    service_labels: tuple[tuple[str, str], ...] = ()
    """The Service's labels as the job's labelmap names them (config/values.service_labels)."""

    def target_labels(self) -> dict[str, str]:
        """In the job's rule order: `job`, `instance`, the labelmap of the Service's labels,
        then the replace rules (which win over a mapped label of the same name; one whose
        source is empty deletes the label), then the explicit target labels."""
        out = {"job": self.job, "instance": self.instance, **dict(self.service_labels),
               "Namespace": self.namespace, "Service": self.service,
               "kubernetes_node": self.node_name, "pod_name": self.pod_name,
               "container_name": self.container_name}
        out.update(self.extra)
        return {k: v for k, v in out.items() if v != ""}


def merge_target(series: Mapping[str, str], target: AgentTarget, prom_type: str) -> LabelKey:
    """One series' labels as the agent holds them (see the module docstring)."""
    labels = {k: v for k, v in series.items() if v != ""}
    tl = target.target_labels()
    if target.honor_labels:
        for k, v in tl.items():
            labels.setdefault(k, v)
    else:
        clashes = sorted(((k, labels[k]) for k in tl if k in labels), key=lambda kv: len(kv[0]))
        labels.update(tl)
        for name, value in clashes:  # Prometheus: shortest names first, prefix until free
            new = f"exported_{name}"
            while new in labels:
                new = f"exported_{new}"
            labels[new] = value
    if target.cluster_name:
        labels.setdefault("ClusterName", target.cluster_name)
    labels["prom_metric_type"] = prom_type
    return tuple(sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class SeriesOptions:
    """Labels the agent's scrape path would add, and the exporter's own label options.

    `identity` "agent" (the default) gives the agent path's labels (`AgentTarget`);
    "workload" gives podgpu's richer identity: `Namespace` is the workload's namespace,
    `NodeName` the node, and the job label `job` (then say `job="podgpu"`)."""

    labels: LabelOptions
    job: str = DEFAULT_AGENT_JOB
    instance: str = ""
    cluster_name: str = ""
    node_name: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    """--emf-label pairs: the Service's labels in the agent model; they win over other labels."""
    identity: str = AGENT
    namespace: str = ""
    """POD_NAMESPACE: podgpu's own namespace (agent identity's `Namespace`)."""
    pod_name: str = ""
    """POD_NAME: podgpu's own pod (agent identity's `pod_name`)."""
    container_name: str = ""
    """podgpu's container name (agent identity's `container_name`)."""
    service: str = ""
    """The Service in front of podgpu (agent identity's `Service`)."""
    service_labels: tuple[tuple[str, str], ...] = ()
    """That Service's labels, mapped as the agent's job maps them."""
    own_series: bool | None = True
    """Offer podgpu's own per-pod series and the accounting counters; None: decided from the
    declarations (emfbuild: when a selector names `podgpu_`)."""

    def constant_labels(self) -> dict[str, str]:
        """The labels every series of this node carries (for log group/stream placeholders)."""
        if self.identity == AGENT:
            out = self.target().target_labels()
        else:
            out = {"job": self.job, "instance": self.instance, "NodeName": self.node_name,
                   **dict(self.extra)}
        if self.cluster_name:
            out.setdefault("ClusterName", self.cluster_name)
        return {k: v for k, v in out.items() if v}

    def target(self) -> AgentTarget:
        return AgentTarget(job=self.job, instance=self.instance, namespace=self.namespace,
                           pod_name=self.pod_name, container_name=self.container_name,
                           node_name=self.node_name, extra=self.extra,
                           cluster_name=self.cluster_name, service=self.service,
                           service_labels=self.service_labels)


class SeriesBuilder:
    """Turns snapshots into label sets with their values, cheaply per cycle.

    Label keys are memoised per (device, holders) so a steady node builds no new tuples.
    """

    def __init__(self, metrics: MetricList, opts: SeriesOptions) -> None:
        self._rows = tuple((r.name, COUNTER if r.prom_type == "counter" else GAUGE)
                           for r in metrics.metrics)
        self._kinds = dict(self._rows)
        self._int_fields = frozenset(r.name for r in metrics.metrics
                                     if r.field.value_type == "int")
        self._label_fields = tuple(sorted(r.name for r in metrics.labels))
        if opts.identity not in IDENTITIES:
            raise ValueError(f"identity {opts.identity!r}: use agent or workload")
        self._opts = opts
        self.options = opts
        self._target = opts.target()
        self._memo: dict[tuple[object, ...], LabelKey] = {}
        self.own_series = opts.own_series is not False
        """podgpu's own series (per-pod, accounting) are offered; set by emfbuild for auto."""

    def _key(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        memo_key = (pairs, kind)
        key = self._memo.get(memo_key)
        if key is None:
            if len(self._memo) > 100_000:  # label churn (pods coming and going): start over
                self._memo.clear()
            key = self._memo[memo_key] = self._finish(pairs, kind)
        return key

    def key(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        """The label key of a series from another source of this node (the accounting's
        counters), finished as the snapshot's own series are."""
        return self._key(pairs, kind)

    def _finish(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey:
        o = self._opts
        if o.identity == AGENT:
            return merge_target(dict(pairs), self._target, kind)
        labels = dict(pairs)
        if o.cluster_name and "ClusterName" not in labels:
            labels["ClusterName"] = o.cluster_name
        labels.setdefault("job", o.job)
        if o.instance:
            labels.setdefault("instance", o.instance)
        if o.node_name:
            labels.setdefault("NodeName", o.node_name)
        if labels.get("namespace"):
            labels.setdefault("Namespace", labels["namespace"])
        labels["prom_metric_type"] = kind
        labels.update(o.extra)
        return tuple(sorted(labels.items()))

    def series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        """(label key, type, [(metric, value), ...]) per label set: the per-key work is done once
        per cycle, not once per value."""
        lopts = self._opts.labels
        holders = holders_by_device(snapshot.allocations)
        kinds = self._kinds
        usage = virtual.PodUsage(snapshot) if lopts.virtual_gpus and snapshot.allocations else None
        for sample in snapshot.samples:
            ident = identity_pairs(sample.device, lopts)
            fields = field_label_pairs(sample, self._label_fields)
            values = sample.values
            held = holders.get(sample.device.key, [])
            split = usage is not None and bool(held)
            gauges: list[Item] = []
            counters: list[Item] = []
            per_process: list[tuple[str, str, float]] = []
            xid: Item | None = None
            for name, kind in self._rows:
                v = values.get(name)
                if v is not None and not isinstance(v, str) and math.isfinite(v):
                    if name == XID_FIELD:  # its err_code/err_msg labels follow the value
                        xid = (name, v)
                    elif split and name in virtual.PER_PROCESS:
                        per_process.append((name, kind, v))
                    else:
                        (counters if kind == COUNTER else gauges).append((name, v))
            if per_process and usage is not None:
                yield from self._per_process(ident + fields, sample.device.key, held, usage,
                                             per_process)
            jobs = snapshot.jobs_of(sample.device)  # --hpc-job-mapping-dir, as on /metrics
            for extra, attrs in with_jobs(series_variants(held, lopts), jobs):
                base = ident + fields + extra + attrs
                if gauges:
                    yield self._key(base, GAUGE), GAUGE, gauges
                if counters:
                    yield self._key(base, COUNTER), COUNTER, counters
                if xid is not None:  # as /metrics labels it (sinks/prometheus/exposition.py)
                    xkind = kinds[XID_FIELD]
                    yield self._key(base + error_labels(xid[1]), xkind), xkind, [xid]
                for lv in sample.labeled:
                    lkind = kinds.get(lv.field)
                    if lkind is not None and math.isfinite(lv.value):
                        yield self._key(base + lv.labels, lkind), lkind, [(lv.field, lv.value)]
        if self.own_series:
            yield from self._pod_series(snapshot)

    def _per_process(self, base: tuple[tuple[str, str], ...], device_key: str,
                     held: list[Allocation], usage: virtual.PodUsage,
                     device_values: list[tuple[str, str, float]]
                     ) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        """--kubernetes-virtual-gpus, GPU_UTIL/FB_USED (dcgm-exporter 4.8.2): the device series
        without pod labels, then one per holder with its pod's processes' sum (0 without any)."""
        for kind in (GAUGE, COUNTER):
            items = [(n, v) for n, k, v in device_values if k == kind]
            if items:
                yield self._key(base, kind), kind, items
        for a in virtual.holder_allocations(held):
            attrs = usage.attributes(a, self._opts.labels)
            for kind in (GAUGE, COUNTER):
                items = [(n, self._as_exposed(n, usage.value(n, device_key, a.container)))
                         for n, k, _ in device_values if k == kind]
                if items:
                    yield self._key(base + attrs, kind), kind, items

    def _as_exposed(self, name: str, value: float) -> float:
        """A value as `/metrics` prints it (`%d` truncates an integer field's float sum), so the
        agent path and the EMF sink see the same number."""
        return int(value) if name in self._int_fields else value

    def _pod_series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        lopts = self._opts.labels
        devices: dict[str, Device] = {s.device.key: s.device for s in snapshot.samples}
        per_key: dict[LabelKey, list[Item]] = {}
        for ident, attrs in allocation_series(snapshot, devices, lopts):
            per_key.setdefault(self._key(ident + attrs, GAUGE), []).append((ALLOCATION, 1))
        mem, util = pod_usage(snapshot, devices)
        for name, table in ((MEMORY, mem), (UTIL, util)):
            for (dkey, ref), value in table.items():
                pairs = short_identity_pairs(devices[dkey], lopts) + container_pairs(ref, lopts)
                v = min(value, 1.0) if name == UTIL else value
                per_key.setdefault(self._key(pairs, GAUGE), []).append((name, v))
        for label_key, items in per_key.items():
            yield label_key, GAUGE, items
