"""`KubeletAttributor`: the kubelet, cgroups and pod watch joined into one `Attributor`, and the
`build_attributor` factory the CLI calls.

`attribute` reads only state the background threads keep (the last `List` answer, the pod index)
plus `/proc/<pid>/cgroup` for the few GPU processes, and never raises: any bug in the join is
caught, counted under source 'attribution' and answered with the processes unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from podgpu.attribution.base import Attribution, Attributor
from podgpu.attribution.cgroups import CgroupReader
from podgpu.attribution.deviceids import DeviceIndex, GpuIdType, index_for
from podgpu.attribution.enrich import (
    EnrichOptions,
    allocations,
    compile_allowlist,
    resolve_processes,
)
from podgpu.attribution.kubelet import (
    ContainerDevices,
    PodResourcesClient,
    list_deadline,
    stale_after,
)
from podgpu.attribution.podstore import PodIndex, PodInfo
from podgpu.attribution.podwatch import PodWatcher
from podgpu.model import Allocation, Device, GpuProcess
from podgpu.model.status import OK, StageStatus
from podgpu.settings import KubernetesSettings

log = logging.getLogger(__name__)

_MAX_LOGGED_UNMATCHED = 256


class KubeletAttributor:
    """Allocations from kubelet PodResources; processes resolved via cgroups and the pod watch.

    `pod_watcher=None` means no API access was wanted; processes then carry `pod_uid` only.
    """

    def __init__(
        self,
        kubelet: PodResourcesClient,
        *,
        id_type: GpuIdType = "uid",
        options: EnrichOptions | None = None,
        cgroups: CgroupReader | None = None,
        pod_watcher: PodWatcher | None = None,
        stale_after_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`stale_after_seconds`: a `List` answer older than this is not used (None: always)."""
        self._kubelet = kubelet
        self._stale_after = stale_after_seconds
        self._clock = clock
        self._id_type = id_type
        self._opts = options or EnrichOptions()
        self._cgroups = cgroups or CgroupReader()
        self._watcher = pod_watcher
        self._index_cache: dict[tuple[Device, ...], DeviceIndex] = {}
        self._reported: dict[str, int] = {"kubelet": 0, "cgroups": 0, "podwatch": 0}
        self._logged_unmatched: set[str] = set()
        self._no_pods = PodIndex()  # one instance, so the memoised join hits without a watcher
        self._memo: tuple[
            tuple[Device, ...], tuple[ContainerDevices, ...], PodIndex, tuple[Allocation, ...]
        ] | None = None

    def start(self) -> None:
        # Both start at once; together they wait at most ~1 s for first answers, so the first
        # snapshot is attributed when the kubelet and the API are there.
        deadline = time.monotonic() + 1.0
        if self._watcher is not None:
            self._watcher.start(wait_seconds=0)
        self._kubelet.start(wait_seconds=1.0)
        if self._watcher is not None:
            self._watcher.wait_synced(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._kubelet.close()
        if self._watcher is not None:
            self._watcher.close()

    def attribute(
        self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]
    ) -> Attribution:
        try:
            return self._attribute(devices, processes)
        except Exception as exc:  # a bug here must not cost the cycle its GPU series
            log.exception("attribution failed")
            return Attribution(
                processes=processes,
                status=StageStatus.failed(f"{type(exc).__name__}: {exc}"),
                errors=(("attribution", 1),),
            )

    def health_parts(self) -> dict[str, Callable[[], dict[str, object]]]:
        return {"pod_watch": self.pod_watch_health}

    def pod_watch_health(self) -> dict[str, object]:
        """The `pod_watch` entry of /health: how the pod list/watch goes (status, pods kept,
        failed calls)."""
        if self._watcher is None:
            return {"status": "disabled"}
        return self._watcher.health()

    def pods(self) -> Mapping[tuple[str, str], PodInfo]:
        """This node's pods by (namespace, name), as the pod watch knows them now (empty without
        API access): their owners and GPU resources, for Container Insights."""
        return self._watcher.index.by_name if self._watcher is not None else {}

    def _attribute(
        self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]
    ) -> Attribution:
        state = self._kubelet.state
        pods = self._watcher.index if self._watcher is not None else self._no_pods
        allocs: tuple[Allocation, ...] = ()
        status = OK if state.ok else StageStatus.failed(state.reason)
        if state.ok and self._stale_after is not None:
            age = self._clock() - state.fetched_at
            if age > self._stale_after:  # the poll is stuck: old pod labels are worse than none
                status = StageStatus.failed(f"stale: the last kubelet answer is {age:.1f} s "
                                            f"old (limit {self._stale_after:g} s)")
        if status.ok:
            allocs = self._allocations(devices, state.entries, pods)
        pids = [p.pid for p in processes if p.container is None]
        identities = self._cgroups.resolve(pids) if pids else {}
        resolved = resolve_processes(processes, identities, pods, self._opts)
        return Attribution(
            allocations=allocs,
            processes=resolved,
            status=status,
            errors=self._new_errors(state.errors),
        )

    def _allocations(
        self, devices: tuple[Device, ...], entries: tuple[ContainerDevices, ...], pods: PodIndex
    ) -> tuple[Allocation, ...]:
        """The join, redone only when its inputs changed (they rarely do between cycles)."""
        memo = self._memo
        if memo is not None and memo[2] is pods and memo[0] == devices and memo[1] == entries:
            return memo[3]
        index = index_for(devices, self._id_type, self._index_cache)
        allocs, unmatched = allocations(entries, index, pods, self._opts)
        self._memo = (devices, entries, pods, allocs)
        for u in unmatched:
            if u.device_id in self._logged_unmatched:
                continue
            if len(self._logged_unmatched) < _MAX_LOGGED_UNMATCHED:
                self._logged_unmatched.add(u.device_id)
                log.warning("device id %r (%s) of pod %s/%s matches no device: %s",
                            u.device_id, u.resource, u.namespace, u.pod, u.why)
        return allocs

    def _new_errors(self, kubelet_errors: int) -> tuple[tuple[str, int], ...]:
        totals = {
            "kubelet": kubelet_errors,
            "cgroups": self._cgroups.errors,
            "podwatch": self._watcher.errors if self._watcher is not None else 0,
        }
        out: list[tuple[str, int]] = []
        for source, total in totals.items():
            delta = total - self._reported[source]
            if delta > 0:
                out.append((source, delta))
                self._reported[source] = total
        return tuple(out)


def enrich_options(settings: KubernetesSettings) -> EnrichOptions:
    """What to copy onto pods' refs; ConfigError for a bad allowlist pattern."""
    return EnrichOptions(
        extra_resources=frozenset(n.strip() for n in settings.resource_names if n.strip()),
        enable_pod_uid=settings.pod_uid,
        enable_pod_labels=settings.pod_labels,
        label_allowlist=compile_allowlist(settings.label_allowlist),
    )


def build_attributor(settings: KubernetesSettings, *, kube_api_configuration: Any = None
                     ) -> Attributor | None:
    """The kubelet attributor `-k` asks for, or None without it.

    `settings` was validated when it was built (podgpu.config); the simulated node's attributor
    is podgpu.sim.scenario's. `kube_api_configuration` (an attribution.kubeapi.KubeConfig) is
    for tests; None means in-cluster config.
    """
    if not settings.enabled:
        return None
    id_type: GpuIdType = "uid" if settings.gpu_id_type == "uid" else "device-name"
    poll = settings.poll_interval  # settings were validated when built (podgpu.settings)
    options = enrich_options(settings)
    return KubeletAttributor(
        # Half the collect interval: a kubelet change reaches a snapshot within 1.5 intervals
        # (the design asks for two); at the 30 s default that is one List per 15 s.
        # The List deadline and the staleness bound follow the interval: a hung List
        # costs the pod labels after stale_after(interval), ~3 s at 1 s, not ~11 s.
        PodResourcesClient(
            settings.kubelet_socket, poll_interval_seconds=poll / 2,
            dra=settings.dra, timeout_seconds=list_deadline(poll),
            resource_names=options.extra_resources,
            # retry a missing kubelet at least once per collect interval, so labels return
            # within two intervals and one cycle after it does (measured in bench/RESULTS.md)
            max_backoff_seconds=poll,
        ),
        stale_after_seconds=stale_after(poll),
        id_type=id_type,
        options=options,
        cgroups=CgroupReader(settings.proc_root),
        pod_watcher=PodWatcher(settings.node_name or None, configuration=kube_api_configuration),
    )
