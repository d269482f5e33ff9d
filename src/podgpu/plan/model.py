"""Scale one synthetic node-minute to a cluster-month, three ways side by side.

- `agent`: the seed's path. One central CloudWatch agent scrapes every dcgm-exporter every
  `agent_scrape_interval` through its default `kubernetes-service-endpoints` job (the seed's own
  pod job keeps no GPU Operator exporter, and only this job gives the `Service` its declaration
  matches); one EMF v0 event per label set per scrape, declared or not (unmatched series are
  still ingested as logs); labels as that job and the agent give them (sinks/cloudwatch/series.py,
  checked against the restated pipeline in tests/unit/sinks/cloudwatch/agent_oracle.py):
  `Namespace` the exporter's namespace, `pod` the workload's; batches cut at
  256 KiB and flushed every 5 s into one log stream.
- `podgpu-60s`: `podgpu serve` per node, one event per label set per minute, one value each.
- `podgpu-1s`: the default: a minute's 1 s samples in value distributions.

Custom metrics are counted as CloudWatch bills them: every distinct namespace + metric name
+ dimension values. Which dimension values are per node is found by building two nodes; which are
per pod, by renaming node 0's pods. Everything is from podgpu's own label builders and encoder.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from podgpu.fields.metriclist import MetricList, load_default
from podgpu.sim.node import Shape, SimNode
from podgpu.sinks.cloudwatch.declarations import EmfConfig
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EVENT_OVERHEAD
from podgpu.sinks.cloudwatch.series import (
    DEFAULT_AGENT_JOB,
    Item,
    LabelKey,
    SeriesBuilder,
    SeriesOptions,
)
from podgpu.sinks.cloudwatch.window import ClosedWindow, WindowAccumulator
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions

BYTES_PER_GB = 1_000_000_000
PUT_LOG_EVENTS_MAX_BYTES = 1_048_576
PUT_LOG_EVENTS_MAX_EVENTS = 10_000
AGENT_BATCH_BYTES = 256 * 1024
AGENT_FLUSH_SECONDS = 5.0
PRICES_AS_OF = "2026-12"
PRICES_REGION = "us-east-1"
DEFAULT_METRIC_TIERS: tuple[tuple[float, float], ...] = (
    (10_000, 0.30), (240_000, 0.10), (750_000, 0.05), (math.inf, 0.02))
"""CloudWatch's custom-metric price tiers: metrics in each tier and $ per metric-month."""
DEFAULT_INGEST_PER_GB = 0.50
CHURN_BILLED_HOURS = 1.0
"""Metric-hours one replaced pod adds per metric. CloudWatch prorates custom metrics by the hour
they are sent in (aws.amazon.com/cloudwatch/pricing: "prorated by the hour and metered only when
you send metrics"): a replacement's old metrics stop and its new ones start within one hour,
which is billed for both; every other hour bills one set, like a pod never replaced."""
PATHS = ("agent", "podgpu-60s", "podgpu-1s")
MEASURED_WINDOWS = 2

Identity = tuple[str, str, tuple[tuple[str, str], ...]]
"""(namespace, metric name, dimension values): one billed custom metric."""


@dataclass(frozen=True, slots=True)
class Prices:
    metric_tiers: tuple[tuple[float, float], ...] = DEFAULT_METRIC_TIERS
    """(metrics in the tier, $ per metric-month), in order."""
    ingest_per_gb: float = DEFAULT_INGEST_PER_GB

    def metrics_dollars(self, count: float) -> float:
        total, left = 0.0, count
        for size, price in self.metric_tiers:
            take = min(left, size)
            total += take * price
            left -= take
            if left <= 0:
                break
        return total


@dataclass(frozen=True, slots=True)
class PlanOptions:
    cluster_name: str = "my-cluster"
    emf_labels: tuple[tuple[str, str], ...] = (("Service", "nvidia-dcgm-exporter"),)
    job: str = DEFAULT_AGENT_JOB
    namespace: str = "gpu-operator"
    """The namespace podgpu (and, on the agent path, dcgm-exporter) runs in: `Namespace`."""
    emf_interval: float = 60.0
    collect_interval: float = 1.0
    agent_scrape_interval: float = 60.0
    scrape_interval: float = 15.0
    """Prometheus' scrape interval, for the Prometheus side."""
    days: float = 30.0
    prices: Prices = field(default_factory=Prices)


@dataclass(frozen=True, slots=True)
class PathEstimate:
    metrics_steady: int
    metrics_per_new_pod: float
    metrics_in_period: float
    """Distinct metrics seen in the period (active ones and every replaced pod's)."""
    metric_months: float
    """What is billed: metric-hours over the period's hours (prorated by the hour)."""
    events_per_minute: float
    bytes_per_minute: float
    """PutLogEvents bytes: message bytes + 26 per event."""
    requests_per_minute: float
    metrics_dollars: float
    ingest_dollars: float


@dataclass(frozen=True, slots=True)
class Estimate:
    shape: Shape
    options: PlanOptions
    paths: Mapping[str, PathEstimate]
    prometheus_series: int
    prometheus_samples_per_second: float

    @property
    def minutes(self) -> float:
        return self.options.days * 24 * 60


@dataclass(slots=True)
class _NodeRun:
    events: list[str]
    """Every event of the measured windows."""
    windows: int
    identities: set[Identity]


def _identities(encoder: Encoder, namespace: str, groups: Iterable[tuple[LabelKey, Iterable[str]]]
                ) -> set[Identity]:
    out: set[Identity] = set()
    for key, names in groups:
        labels = dict(key)
        for name in names:
            idx, sets = encoder.plan(key, name)
            if not idx:
                continue
            for dset in sets:
                out.add((namespace, name, tuple((d, labels[d]) for d in dset)))
    return out


EXPORTER = "nvidia-dcgm-exporter"


def agent_options(node: str, opts: PlanOptions) -> SeriesOptions:
    """The target labels the agent's service-endpoints job gives the GPU Operator's
    dcgm-exporter pod on `node` (its Service, labelled app=nvidia-dcgm-exporter)."""
    h = hashlib.sha256(node.encode()).digest()
    return SeriesOptions(
        labels=LabelOptions(hostname=node), job=DEFAULT_AGENT_JOB,
        instance=f"10.0.{h[0]}.{h[1]}:9400", cluster_name=opts.cluster_name, node_name=node,
        namespace=opts.namespace, pod_name=f"{EXPORTER}-{h.hex()[:5]}", container_name=EXPORTER,
        extra=(("app", EXPORTER), *opts.emf_labels))


def agent_only(series: Iterable[tuple[LabelKey, str, list[Item]]]
               ) -> Iterable[tuple[LabelKey, str, list[Item]]]:
    """dcgm-exporter's series: podgpu's own per-pod series do not exist on that path."""
    for key, kind, items in series:
        items = [(n, v) for n, v in items if not n.startswith("podgpu_")]
        if items:
            yield key, kind, items


def agent_scrapes(config: EmfConfig, scrapes: Iterable[Iterable[tuple[LabelKey, str, list[Item]]]],
                  interval: float, measured: int = MEASURED_WINDOWS) -> _NodeRun:
    """What the agent sends for consecutive scrapes of one exporter, labelled as the agent
    labels them (`agent_options`, or `podgpu emf`'s agent-identity target labels): one event per
    label set per scrape, declared or not (the undeclared ones billed as logs), counters as
    deltas after a seeding scrape; the last `measured` scrapes are returned."""
    encoder = Encoder(config, keep_unmatched=True)
    acc = WindowAccumulator(interval, encoder.wanted)
    closed: list[ClosedWindow] = []
    for i, groups in enumerate(scrapes):
        w = acc.add(1_800_000_000.0 + i * interval, groups)
        if w is not None:
            closed.append(w)
    last = acc.close()
    if last is not None:
        closed.append(last)
    kept = closed[-measured:]
    ids = _identities(encoder, config.namespace,
                      ((k, m.keys()) for w in kept for k, m in w.groups.items()))
    return _NodeRun([e for w in kept for e in encoder.encode(w)], len(kept), ids)


def _v0_size(event: str) -> int:
    """The same event as the agent writes it (EMF v0: directive at the root, string Timestamp,
    Version "0", no units), in bytes, as Go's json.Marshal would print it."""
    doc = json.loads(event)
    aws = doc.pop("_aws", None)
    if aws is not None:
        doc["CloudWatchMetrics"] = [
            {"Namespace": d["Namespace"], "Dimensions": d["Dimensions"],
             "Metrics": [{"Name": m["Name"]} for m in d["Metrics"]]}
            for d in aws["CloudWatchMetrics"]]
        ts = aws["Timestamp"]
    else:
        ts = doc.pop("Timestamp")
    doc["Timestamp"] = str(ts)
    doc["Version"] = "0"
    return len(json.dumps(doc, separators=(",", ":"), sort_keys=True).encode())


class _Runner:
    def __init__(self, shape: Shape, config: EmfConfig, opts: PlanOptions,
                 metrics: MetricList) -> None:
        self.shape, self.config, self.opts, self.metrics = shape, config, opts, metrics

    def builder(self, node: SimNode, agent: bool = False) -> SeriesBuilder:
        if agent:
            return SeriesBuilder(self.metrics, agent_options(node.name, self.opts))
        return SeriesBuilder(self.metrics, SeriesOptions(
            labels=LabelOptions(hostname=node.name), job=self.opts.job,
            instance=f"{node.name}:9400", cluster_name=self.opts.cluster_name,
            node_name=node.name, extra=self.opts.emf_labels, namespace=self.opts.namespace,
            own_series=self.config.names_podgpu_series))  # serve's --emf-podgpu-series auto

    def run(self, node_index: int, generation: int, samples_per_window: int, agent: bool
            ) -> _NodeRun:
        """Three windows of one node; the last two are measured: counters are past their seeding
        sample, and two minutes hold a whole 20 s on / 20 s off burn cycle in every phase."""
        interval = self.opts.emf_interval
        node = SimNode(self.shape, self.metrics, node_index, generation)
        builder = self.builder(node, agent)
        if agent:  # one scrape per window
            return agent_scrapes(self.config, (
                list(agent_only(builder.series(snap)))
                for snap in node.snapshots(MEASURED_WINDOWS + 1, interval)), interval)
        encoder = Encoder(self.config, keep_unmatched=agent)
        acc = WindowAccumulator(interval, encoder.wanted)
        closed: list[ClosedWindow] = []
        step = interval / samples_per_window
        for snap in node.snapshots(MEASURED_WINDOWS * samples_per_window + samples_per_window,
                                   step):
            w = acc.add(snap.taken_at, builder.series(snap))
            if w is not None:
                closed.append(w)
        last = acc.close()
        if last is not None:
            closed.append(last)
        measured = closed[-MEASURED_WINDOWS:]
        ids = _identities(encoder, self.config.namespace,
                          ((k, m.keys()) for w in measured for k, m in w.groups.items()))
        return _NodeRun([e for w in measured for e in encoder.encode(w)], len(measured), ids)

    def prometheus_series(self) -> int:
        node = SimNode(self.shape, self.metrics, 0)
        snap = next(node.snapshots(1, 1.0))
        body = render(snap, self.metrics, RenderOptions(LabelOptions(hostname=node.name)))
        return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def estimate(shape: Shape, config: EmfConfig, opts: PlanOptions | None = None,
             metrics: MetricList | None = None) -> Estimate:
    shape.check()
    opts = opts or PlanOptions()
    runner = _Runner(shape, config, opts, metrics or load_default())
    minutes = opts.days * 24 * 60
    per_minute = 60.0 / opts.emf_interval
    paths: dict[str, PathEstimate] = {}
    for path in PATHS:
        agent = path == "agent"
        samples = 1 if path != "podgpu-1s" else max(1, round(opts.emf_interval
                                                              / opts.collect_interval))
        n0 = runner.run(0, 0, samples, agent)
        n1 = runner.run(1, 0, 1, agent)
        renamed = runner.run(0, 1, 1, agent)
        per_node = n0.identities - n1.identities
        steady = len(n0.identities & n1.identities) + shape.nodes * len(per_node)
        per_pod = len(renamed.identities - n0.identities) / shape.pods_per_node
        in_period = steady + shape.churn_per_day * opts.days * per_pod
        replaced = shape.churn_per_day * opts.days * per_pod * CHURN_BILLED_HOURS
        billed = steady + replaced / (opts.days * 24.0)  # metric-hours / hours in the period
        if agent:
            sizes = [_v0_size(e) + EVENT_OVERHEAD for e in n0.events]
            scrapes = 60.0 / opts.agent_scrape_interval / n0.windows
            events = len(sizes) * scrapes * shape.nodes
            nbytes = sum(sizes) * scrapes * shape.nodes
            per_flush = nbytes / 60.0 * AGENT_FLUSH_SECONDS
            requests = 60.0 / AGENT_FLUSH_SECONDS * max(1, math.ceil(per_flush
                                                                     / AGENT_BATCH_BYTES))
        else:
            sizes = [len(e.encode()) + EVENT_OVERHEAD for e in n0.events]
            events = len(sizes) / n0.windows * per_minute * shape.nodes
            nbytes = sum(sizes) / n0.windows * per_minute * shape.nodes
            per_node_flush = max(math.ceil(sum(sizes) / n0.windows / PUT_LOG_EVENTS_MAX_BYTES),
                                 math.ceil(len(sizes) / n0.windows / PUT_LOG_EVENTS_MAX_EVENTS))
            requests = per_node_flush * per_minute * shape.nodes
        paths[path] = PathEstimate(
            metrics_steady=steady, metrics_per_new_pod=per_pod, metrics_in_period=in_period,
            metric_months=billed,
            events_per_minute=events, bytes_per_minute=nbytes, requests_per_minute=requests,
            metrics_dollars=opts.prices.metrics_dollars(billed) * opts.days / 30.0,
            ingest_dollars=nbytes * minutes / BYTES_PER_GB * opts.prices.ingest_per_gb)
    series = runner.prometheus_series() * shape.nodes
    return Estimate(shape, opts, paths, series, series / opts.scrape_interval)
