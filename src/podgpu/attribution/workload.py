"""A pod's workload and GPU resources, as Container Insights names and counts them.

Container Insights' `PodName` is the pod's **workload**, not the pod (the CloudWatch agent's
pod store, restated): a Deployment's pod (owned by a ReplicaSet) -> the Deployment's name, the
ReplicaSet's name without its `-<pod-template-hash>`; a DaemonSet's, Job's or
ReplicationController's pod -> that owner's name; a StatefulSet's pod and a bare pod -> the pod's
own name. `FullPodName` is the pod. (The agent also names a CronJob for a Job a CronJob made; a
Job's own owner is not on the pod, so podgpu names the Job.)

The GPU capacity metrics read the pod spec: the sums of its containers' `nvidia.com/gpu`
requests and limits, and its phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podgpu.attribution.apijson import mapping, sequence, text

GPU_RESOURCE = "nvidia.com/gpu"
TERMINATED = frozenset(("Succeeded", "Failed"))


@dataclass(frozen=True, slots=True)
class PodGpus:
    """A pod's GPU resources and phase (from its spec and status)."""

    request: int = 0
    limit: int = 0
    phase: str = ""


def controller_owners(meta: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(kind, name) of the pod's owner references, the controller first."""
    refs = [r for r in sequence(meta.get("ownerReferences")) if isinstance(r, Mapping)]
    refs.sort(key=lambda r: r.get("controller") is not True)
    return tuple((text(r.get("kind")), text(r.get("name"))) for r in refs)


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpus(obj: Mapping[str, Any]) -> PodGpus:
    """Σ of the containers' `nvidia.com/gpu` requests and limits, and the phase."""
    request = limit = 0
    for c in map(mapping, sequence(mapping(obj.get("spec")).get("containers"))):
        res = mapping(c.get("resources"))
        req, lim = mapping(res.get("requests")), mapping(res.get("limits"))
        limit += _count(lim.get(GPU_RESOURCE, 0))
        request += _count(req.get(GPU_RESOURCE, lim.get(GPU_RESOURCE, 0)))
    return PodGpus(request, limit, text(mapping(obj.get("status")).get("phase")))


def workload_name(pod: str, owners: tuple[tuple[str, str], ...],
                  labels: tuple[tuple[str, str], ...] = ()) -> tuple[str, tuple[tuple[str, str],
                                                                          ...]]:
    """(PodName, pod_owners) for a pod: see the module docstring."""
    if not owners:
        return pod, ()
    kind, name = owners[0]
    if kind == "ReplicaSet":
        hash_ = dict(labels).get("pod-template-hash", "")
        if hash_ and name.endswith("-" + hash_):
            return name[:-len(hash_) - 1], (("Deployment", name[:-len(hash_) - 1]),)
        return name, ((kind, name),)
    if kind in ("DaemonSet", "Job", "ReplicationController"):
        return name, ((kind, name),)
    return pod, ((kind, name),)  # StatefulSet and any other owner: the pod's own name
