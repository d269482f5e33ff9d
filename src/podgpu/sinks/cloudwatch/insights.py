"""CloudWatch Container Insights GPU events from a snapshot (`--emf-container-insights`).

The Amazon CloudWatch Observability add-on fills the Container Insights GPU views with events of
three levels per GPU and scrape: `NodeGPU` always, `ContainerGPU` and `PodGPU` when a pod holds
the GPU, each with the same seven readings renamed `<level>_gpu_<x>` (docs/cloudwatch.md,
"Container Insights"). This module makes those series from podgpu's snapshot; insights_encode.py
writes them as the add-on's EMF v0 events into their own log group.

Where the add-on is wrong podgpu is right (docs/cloudwatch.md has the table): every holder of
a time-sliced or MPS GPU and every MIG instance's holder gets its own container and pod events
with its share of the GPU, by the rule podgpu's accounting uses, so the holders of a GPU add up
to the GPU (insights_shares.py); a MIG GPU is one `GpuDevice`, named as the add-on names it
(`nvidia2`), so per-GPU views and alarms carry over and node statistics count it once; a pod
with several GPUs gets one event per GPU; a GPU without a pod the node event only. The
`kubernetes` blob has the keys the agent's filter lets through and its decorator writes (no
`namespace`: the decorator writes `namespace_name`, which the filter drops).

`Service` (container, pod and `Type: Pod` events; the pod level's `[ClusterName, Namespace,
Service]` set follows from it in the encoder) is the first Service by name selecting the pod,
from the pod watch's full labels and attribution/services.py's Service list.

Label sets are LabelKeys whose first pair is ("", level): no Prometheus label has an empty
name, so they never meet the declarations' series in the shared window. `Sources` and
`kubernetes` hold JSON text, written unquoted by the encoder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from podgpu.attribution.nodeinfo import NodeObject
from podgpu.attribution.podstore import PodInfo
from podgpu.attribution.workload import TERMINATED, workload_name
from podgpu.model import ContainerRef, Device, Snapshot
from podgpu.sinks.cloudwatch.insights_contract import (
    CAPACITY_SOURCES,
    CONTAINER,
    LEVELS,
    MARK,
    NODE,
    NODE_CAPACITY,
    POD,
    POD_CAPACITY,
    SOURCES,
    VERSION,
    KeepsInsightsFields,
    device_readings,
    gpu_device,
    is_insights,
    with_insights_fields,
)
from podgpu.sinks.cloudwatch.insights_shares import (
    ShareRule,
    add,
    by_gpu,
    gpu_readings,
    holders,
)
from podgpu.sinks.cloudwatch.series import GAUGE, Item, LabelKey

__all__ = ["FixedNode", "InsightsBuilder", "InsightsOptions", "KeepsInsightsFields",
           "NoServices", "NodeSource", "ServiceSource", "ShareRule", "device_readings",
           "is_insights", "no_pods", "with_insights_fields"]
"""The contract's helpers serve's agent and the tests use are re-exported from here."""

MEMO_ENTRIES = 50_000
"""Label sets kept built between cycles; past it (pod churn) the memo starts over."""


class NodeSource(Protocol):
    """The Node object's facts: attribution/nodeinfo.NodeLookup, or a simulated node's."""

    def current(self) -> NodeObject: ...

    def start(self, wait_seconds: float = ...) -> None: ...

    def health(self) -> dict[str, object]: ...


class FixedNode:
    """A Node known in advance (the simulated node's, tests)."""

    def __init__(self, node: NodeObject) -> None:
        self._node = node

    def current(self) -> NodeObject:
        return self._node

    def start(self, wait_seconds: float = 0.0) -> None:
        return None

    def health(self) -> dict[str, object]:
        return {"status": "known in advance (simulated node)"}


Pods = Callable[[], Mapping[tuple[str, str], PodInfo]]
"""This node's pods by (namespace, name): owners (-> `PodName`) and GPU resources."""


class ServiceSource(Protocol):
    """Which Service names a pod: attribution/services.ServiceWatcher, or none."""

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        """The first Service selecting a pod of `namespace` with these (full) labels; ''."""
        ...

    def start(self, wait_seconds: float = ...) -> None: ...

    def health(self) -> dict[str, object]: ...


class NoServices:
    """No Service names any pod (no API, or a simulated node without one)."""

    def first(self, namespace: str, labels: tuple[tuple[str, str], ...]) -> str:
        return ""

    def start(self, wait_seconds: float = 0.0) -> None:
        return None

    def health(self) -> dict[str, object]:
        return {"status": "off (no Kubernetes API)"}


def no_pods() -> Mapping[tuple[str, str], PodInfo]:
    return {}


@dataclass(frozen=True, slots=True)
class InsightsOptions:
    cluster_name: str
    node_name: str


class InsightsBuilder:
    """Snapshot -> Container Insights series (one label set per level, device and holder)."""

    def __init__(self, opts: InsightsOptions, node: NodeSource, pods: Pods = no_pods,
                 services: ServiceSource | None = None, *, shares: ShareRule) -> None:
        """`shares`: what each holder has of each GPU, by accounting's rule
        (accounting/holders.AccountingShares)."""
        self._opts = opts
        self._shares = shares
        self._node = node
        self._started = False
        self._pods = pods
        self._services: ServiceSource = services or NoServices()
        self._memo: dict[tuple[object, ...], LabelKey] = {}

    def health(self) -> dict[str, object]:
        """The `container_insights` part of /health's `emf` entry: how the Service list and the
        Node's GET go (`ok`, `failing: <why>`, `unavailable: <why>`, failed calls) and how many
        Services are kept."""
        return {"services": self._services.health(), "node": self._node.health()}

    def series(self, snapshot: Snapshot) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        if not self._started:  # the Node's GET starts with the first cycle, before the port opens
            self._started = True
            self._node.start(2.0)
            self._services.start(2.0)
        node = self._node.current()
        pods_now = self._pods()
        cids = _container_ids(snapshot)
        shares = self._shares.holders(snapshot)
        for uuid, samples in by_gpu(snapshot).items():
            gpu_dev, gpu = gpu_readings(samples, self._shares)
            if not gpu:
                continue
            yield self._key(NODE, gpu_dev, None, node), GAUGE, _items(NODE, gpu)
            containers: dict[ContainerRef, dict[str, float]] = {}
            pods: dict[tuple[str, str], tuple[ContainerRef, dict[str, float]]] = {}
            for _, ref, own in holders(shares.get(uuid, ()), samples, gpu, self._shares):
                if ref in containers:  # two instances of the GPU: one container, summed
                    add(containers[ref], own)
                else:
                    containers[ref] = dict(own)
                pk = (ref.namespace, ref.pod)
                if pk in pods:  # a second container (or instance) of the pod on this GPU
                    add(pods[pk][1], own)
                else:
                    pods[pk] = (ref, dict(own))
            for ref, values in containers.items():
                cid = cids.get((ref.namespace, ref.pod, ref.container), "")
                yield (self._key(CONTAINER, gpu_dev, ref, node, cid, pods_now), GAUGE,
                       _items(CONTAINER, values))
            for ref, values in pods.values():
                yield self._key(POD, gpu_dev, ref, node, "", pods_now), GAUGE, _items(POD, values)
        yield from self._capacity(node, pods_now)

    def _capacity(self, node: NodeObject, pods: Mapping[tuple[str, str], PodInfo]
                  ) -> Iterator[tuple[LabelKey, str, list[Item]]]:
        """`Type: Pod` events of pods with a GPU limit and the `Type: Node` event: the add-on's
        formulas, restated: pod request and limit are sums over the containers' nvidia.com/gpu;
        usage_total = the limit while Running, else 0; pod reserved = limit / node capacity x
        100; node limit = capacity (only when not 0); node usage_total = the Running pods'
        limits; node reserved = the requests of pods not terminated / capacity x 100."""
        cap = node.gpu_capacity or 0
        running = reserved = 0
        for info in pods.values():
            g = info.gpus
            if g.phase not in TERMINATED:
                reserved += g.request
            if g.phase == "Running":
                running += g.limit
            if g.limit <= 0:
                continue
            items: list[Item] = [("pod_gpu_request", g.request), ("pod_gpu_limit", g.limit),
                                 ("pod_gpu_usage_total", g.limit if g.phase == "Running" else 0)]
            if cap:
                items.append(("pod_gpu_reserved_capacity", round(g.limit / cap * 100.0, 3)))
            yield self._capacity_key(POD_CAPACITY, node, info), GAUGE, items
        if cap:
            yield self._capacity_key(NODE_CAPACITY, node, None), GAUGE, [
                ("node_gpu_limit", cap), ("node_gpu_usage_total", running),
                ("node_gpu_reserved_capacity", round(reserved / cap * 100.0, 3))]

    def _service(self, info: PodInfo | None) -> str:
        """`Service`: the first Service selecting the pod, by the pod watch's full labels (never
        the allow-listed, sanitised labels on series); '' without the pod's object."""
        return self._services.first(info.namespace, info.labels) if info is not None else ""

    def _capacity_key(self, level: str, node: NodeObject, info: PodInfo | None) -> LabelKey:
        service = self._service(info)
        return self._memoised((level, node, info, service),
                              lambda: self._build_capacity(level, node, info, service))

    def _build_capacity(self, level: str, node: NodeObject, info: PodInfo | None,
                        service: str) -> LabelKey:
        labels = self._head(level, node)
        labels["Sources"] = CAPACITY_SOURCES[level]
        k8s: dict[str, object] = {"host": self._opts.node_name}
        if info is not None:
            pod_labels, pod_blob = _pod_part(info.namespace, info.name, info, service)
            labels.update(pod_labels)
            k8s.update(pod_blob, namespace_name=info.namespace)
            if service:
                k8s["service_name"] = service
            if info.uid:
                k8s["pod_id"] = info.uid
        return _label_set(labels, k8s)

    def _memoised(self, memo: tuple[object, ...], build: Callable[[], LabelKey]) -> LabelKey:
        """The label set `build` makes for `memo`, built once; at MEMO_ENTRIES label sets (pod
        churn) the memo starts over, so it never holds more."""
        key = self._memo.get(memo)
        if key is None:
            if len(self._memo) >= MEMO_ENTRIES:
                self._memo.clear()
            key = self._memo[memo] = build()
        return key

    def _key(self, level: str, dev: Device, ref: ContainerRef | None, node: NodeObject,
             container_id: str = "", pods: Mapping[tuple[str, str], PodInfo] | None = None
             ) -> LabelKey:
        info = pods.get((ref.namespace, ref.pod)) if pods and ref is not None else None
        service = self._service(info) if level != NODE else ""
        return self._memoised((level, dev, ref, node, container_id, info, service),
                              lambda: self._build(level, dev, ref, node, container_id, info,
                                                  service))

    def _build(self, level: str, dev: Device, ref: ContainerRef | None, node: NodeObject,
               container_id: str, info: PodInfo | None, service: str = "") -> LabelKey:
        labels = self._head(level, node)
        labels.update(GpuDevice=gpu_device(dev), Sources=SOURCES)
        k8s: dict[str, object] = {"host": self._opts.node_name}
        if ref is not None:
            pod_labels, pod_blob = _pod_part(ref.namespace, ref.pod, info, service,
                                             ref.pod_labels)
            labels.update(pod_labels, UUID=dev.uuid)
            k8s.update(pod_blob)
            if level == CONTAINER:
                labels["ContainerName"] = ref.container
                k8s["container_name"] = ref.container
                if container_id:
                    k8s["containerd"] = {"container_id": container_id}
        return _label_set(labels, k8s)

    def _head(self, level: str, node: NodeObject) -> dict[str, str]:
        """The labels every event of `level` on this node starts with."""
        o = self._opts
        return {MARK: level, "ClusterName": o.cluster_name, "NodeName": o.node_name,
                "InstanceId": node.instance_id, "InstanceType": node.instance_type,
                "Type": level, "Version": VERSION}


def _pod_part(namespace: str, pod: str, info: PodInfo | None, service: str,
              seen_labels: tuple[tuple[str, str], ...] = ()
              ) -> tuple[dict[str, str], dict[str, object]]:
    """A pod's labels (`PodName` is its workload's name) and its part of the `kubernetes` blob
    (`pod_name`, `labels`, `pod_owners`), from the pod's object (`info`); without it the pod
    names no workload and `seen_labels` (its labels as the series saw them) stand in."""
    workload, owners = (workload_name(pod, info.owners, info.labels) if info is not None
                        else (pod, ()))
    labels = {"Namespace": namespace, "PodName": workload, "FullPodName": pod, "Service": service}
    blob: dict[str, object] = {"pod_name": pod}
    pod_labels = info.labels if info is not None and info.labels else seen_labels
    if pod_labels:
        blob["labels"] = dict(pod_labels)
    if owners:
        blob["pod_owners"] = [{"owner_kind": kind, "owner_name": name} for kind, name in owners]
    return labels, blob


def _label_set(labels: dict[str, str], k8s: dict[str, object]) -> LabelKey:
    """The event's labels with the `kubernetes` blob as JSON text; empty values are left out."""
    labels["kubernetes"] = json.dumps(k8s, separators=(",", ":"), sort_keys=True)
    return tuple(sorted((k, v) for k, v in labels.items() if v != ""))


def _items(level: str, readings: dict[str, float]) -> list[Item]:
    prefix = LEVELS[level] + "_gpu_"
    return [(prefix + k, v) for k, v in readings.items()]


def _container_ids(snapshot: Snapshot) -> dict[tuple[str, str, str], str]:
    """(namespace, pod, container) -> its container id, from its GPU processes (the
    `kubernetes.containerd.container_id` of its container events)."""
    out: dict[tuple[str, str, str], str] = {}
    for p in snapshot.processes:
        c = p.container
        if c is not None and p.container_id:
            out.setdefault((c.namespace, c.pod, c.container), p.container_id)
    return out
