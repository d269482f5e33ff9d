"""One synthetic node of a cluster shape: simulated GPUs, pods named like a Deployment's, a fake
clock. The plan measures what podgpu's real labelling and encoder make of it, so the plan and the
sink cannot drift apart on what a declaration extracts.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.nodeinfo import NodeObject
from podgpu.attribution.podstore import PodInfo
from podgpu.attribution.workload import GPU_RESOURCE, PodGpus
from podgpu.collect import Collector
from podgpu.errors import ConfigError
from podgpu.fields.catalog import lookup
from podgpu.fields.field import Field
from podgpu.fields.metriclist import MetricList
from podgpu.model import Allocation, ContainerRef, Sample, Snapshot
from podgpu.sim.backend import MODELS, ModelSpec, SimulatedBackend
from podgpu.sim.scenario import Scenario, SimulatedAttributor, parse_scenario

SHARING = ("none", "time-slicing", "mig")
NAMESPACE = "ml"
_MIG_NS = uuid.UUID("2b1e6a0c-5f7d-4d59-8f0a-6c3e1b9d4a77")


@dataclass(frozen=True, slots=True)
class Shape:
    """A cluster: `nodes` x `gpus_per_node` GPUs of one model; every GPU held by `pods_per_gpu`
    pods (time-slicing replicas or MIG instances when > 1); `churn_per_day` pods replaced by pods
    of new names per day, cluster-wide."""

    nodes: int = 100
    gpus_per_node: int = 8
    gpu_model: str = "H100"
    sharing: str = "none"
    pods_per_gpu: int = 1
    churn_per_day: float = 0.0

    def check(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1 or self.gpus_per_node > 64:
            raise ConfigError("--nodes must be >= 1 and --gpus-per-node 1..64")
        if self.gpu_model.upper() not in MODELS:
            raise ConfigError(f"--gpu-model {self.gpu_model!r}: use one of {', '.join(MODELS)}")
        if self.sharing not in SHARING:
            raise ConfigError(f"--sharing {self.sharing!r}: use none, time-slicing or mig")
        if self.pods_per_gpu < 1 or (self.sharing == "none" and self.pods_per_gpu != 1):
            raise ConfigError(f"--pods-per-gpu {self.pods_per_gpu}: 1 without sharing, >= 1 with "
                              "--sharing time-slicing or mig")
        if self.sharing == "mig" and self.pods_per_gpu > 7:
            raise ConfigError(f"--pods-per-gpu {self.pods_per_gpu}: a GPU has at most 7 MIG "
                              "instances")
        if self.churn_per_day < 0:
            raise ConfigError("--churn-per-day must be >= 0")

    @property
    def pods_per_node(self) -> int:
        return self.gpus_per_node * self.pods_per_gpu


def node_name(node: int) -> str:
    """EKS-style node names of a fixed width, so every node's labels weigh the same."""
    return f"ip-10-{node // 65536 % 256:03d}-{node // 256 % 256:03d}-{node % 256:03d}.ec2.internal"


def pod_name(node: int, gpu: int, slot: int, generation: int) -> str:
    """A Deployment pod's name (`<workload>-<10 hash>-<5 hash>`); a new generation is a new name."""
    h = hashlib.sha256(f"{node}/{gpu}/{slot}/{generation}".encode()).hexdigest()
    return f"gpu-job-{h[:10]}-{h[10:15]}"


def scenario_doc(shape: Shape, node: int, generation: int = 0) -> dict[str, Any]:
    pods = []
    k = shape.pods_per_gpu
    for gpu in range(shape.gpus_per_node):
        for slot in range(k):
            g: dict[str, Any] = {"gpu": gpu}
            if shape.sharing != "none":
                g.update(replica=slot, share=1.0 / k)
            pods.append({"namespace": NAMESPACE, "name": pod_name(node, gpu, slot, generation),
                         "containers": [{"name": "main", "gpus": [g]}]})
    return {"pods": pods}


EC2_INSTANCE_TYPES: dict[str, dict[int, str]] = {
    "H100": {1: "p5.4xlarge", 8: "p5.48xlarge"},
    "H200": {8: "p5e.48xlarge"},
    "A100": {8: "p4de.24xlarge"},
    "A10G": {1: "g5.xlarge", 4: "g5.12xlarge", 8: "g5.48xlarge"},
}
"""The EC2 instance types of each simulated model (GPU count -> type; other counts take the
largest): P5 (H100), P5e (H200), P4de (A100 80 GB), G5 (A10G), per AWS's accelerated-computing
instance pages."""


def simulated_node(model: ModelSpec, gpus: int, name: str) -> NodeObject:
    """The Node object of a simulated node: an instance type of its model's EC2 family, a stable
    made-up instance id, `nvidia.com/gpu` capacity = its GPUs."""
    key = next((k for k, m in MODELS.items() if m == model), "")
    types = EC2_INSTANCE_TYPES.get(key, {})
    itype = types.get(gpus) or (types[max(types)] if types else "")
    iid = "i-0" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return NodeObject(name=name, instance_id=iid, instance_type=itype, gpu_capacity=gpus)


def scenario_pods(scenario: Scenario) -> dict[tuple[str, str], PodInfo]:
    """A scenario's pods as a pod watch would list them: bare pods (no owner), Running, each
    held GPU (a time-slicing replica too) one `nvidia.com/gpu` request and limit; a MIG
    instance is another resource."""
    gpus: dict[tuple[str, str], int] = {}
    refs: dict[tuple[str, str], ContainerRef] = {}
    for c in scenario.containers:
        k = (c.ref.namespace, c.ref.pod)
        refs.setdefault(k, c.ref)
        gpus[k] = gpus.get(k, 0) + sum(1 for g in c.gpus if g.resource == GPU_RESOURCE)
    return {k: PodInfo(r.pod_uid, r.namespace, r.pod, r.pod_labels,
                       gpus=PodGpus(gpus[k], gpus[k], "Running")) for k, r in refs.items()}


class SimNode:
    """A node of the shape driven by a fake clock (seconds since the epoch, moved by `advance`)."""

    def __init__(self, shape: Shape, metrics: MetricList, node: int, generation: int = 0,
                 start: float = 1_800_000_000.0, fields: tuple[Field, ...] | None = None
                 ) -> None:
        """`fields`: what to collect, when not the list's (the Container Insights profile's)."""
        self.shape = shape
        self.name = node_name(node)
        self.now = start
        scenario = parse_scenario(scenario_doc(shape, node, generation), "podgpu plan")
        self._backend = SimulatedBackend(shape.gpus_per_node, MODELS[shape.gpu_model.upper()],
                                         clock=lambda: self.now, scenario=scenario)
        self._backend.open()
        self.scenario = scenario
        self._collector = Collector(self._backend, fields or metrics.fields,
                                    attributor=SimulatedAttributor(scenario),
                                    want_processes=True, clock=lambda: self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def snapshot(self) -> Snapshot:
        snap = self._collector.cycle()
        return mig_view(snap, self.shape.pods_per_gpu) if self.shape.sharing == "mig" else snap

    def snapshots(self, count: int, step: float) -> Iterator[Snapshot]:
        for _ in range(count):
            yield self.snapshot()
            self.advance(step)


def mig_view(snap: Snapshot, instances: int) -> Snapshot:
    """Each GPU as `instances` MIG instances with the MIG-scope fields, each held by the pod of the
    same slot. Per-process usage on MIG is not modelled (processes are dropped)."""
    profile = f"{max(1, 7 // instances)}g.{max(1, 80 // instances)}gb"
    samples: list[Sample] = []
    by_slot: dict[tuple[str, int], str] = {}
    for s in snap.samples:
        values = {n: v for n, v in s.values.items()
                  if (f := lookup(n)) is not None and f.scope == "both"}
        for i in range(instances):
            dev = s.device._replace(mig_profile=profile, mig_gi_id=i + 1,
                                    mig_uuid=f"MIG-{uuid.uuid5(_MIG_NS, f'{s.device.uuid}/{i}')}")
            samples.append(Sample(dev, values))
            by_slot[(s.device.key, i)] = dev.key
    allocs = tuple(Allocation(by_slot[(a.device_key, a.replica or 0)], a.container,
                              f"nvidia.com/mig-{profile}", by_slot[(a.device_key, a.replica or 0)])
                   for a in snap.allocations)
    return snap._replace(samples=tuple(samples), allocations=allocs, processes=())
