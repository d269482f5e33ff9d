"""The pure join: kubelet entries x devices x pods -> allocations; pids x cgroups -> containers."""

from __future__ import annotations

import random

import pytest

from podgpu.attribution.cgroups import CgroupIdentity
from podgpu.attribution.deviceids import DeviceIndex
from podgpu.attribution.enrich import (
    EnrichOptions,
    allocations,
    compile_allowlist,
    resolve_processes,
    sanitize_label_name,
)
from podgpu.attribution.kubelet import ContainerDevices
from podgpu.attribution.podstore import PodIndex, PodInfo
from podgpu.model import Allocation, ContainerRef, GpuProcess
from tests.unit.attribution.test_deviceids import DEVICES, G0, G1, MIG_A, MIG_B

INDEX = DeviceIndex(DEVICES, "uid")
TRAIN = PodInfo("uid-train", "ml", "train", (("app.kubernetes.io/name", "trainer"), ("team", "a")),
                (("c" * 64, "main"), ("d" * 64, "sidecar")))
PODS = PodIndex.of({TRAIN.uid: TRAIN})


def entry(pod: str, container: str, resource: str, *ids: str, ns: str = "ml") -> ContainerDevices:
    return ContainerDevices(ns, pod, container, resource, ids)


def keys(allocs: tuple[Allocation, ...]) -> list[tuple[str, str, str, int | None]]:
    return [(a.device_key, f"{a.container.pod}/{a.container.container}", a.device_id, a.replica)
            for a in allocs]


def test_exclusive_shared_and_multi_replica_allocations() -> None:
    entries = [
        entry("train", "main", "nvidia.com/gpu", G0),
        entry("infer-a", "srv", "nvidia.com/gpu", f"{G1}::0"),
        entry("infer-b", "srv", "nvidia.com/gpu", f"{G1}::1", f"{G1}::2"),  # 2 replicas, 1 GPU
        entry("mig", "w", "nvidia.com/mig-1g.10gb", MIG_A, f"{MIG_B}::3"),
        entry("cpu-only", "c", "cpu", "0"),  # not a GPU resource: skipped silently
    ]
    allocs, unmatched = allocations(entries, INDEX, PodIndex(), EnrichOptions())
    assert keys(allocs) == [
        (G0, "train/main", G0, None),
        (G1, "infer-a/srv", f"{G1}::0", 0),
        (G1, "infer-b/srv", f"{G1}::1", 1),
        (G1, "infer-b/srv", f"{G1}::2", 2),
        (MIG_A, "mig/w", MIG_A, None),
        (MIG_B, "mig/w", f"{MIG_B}::3", 3),
    ]
    assert unmatched == ()


def test_output_does_not_depend_on_kubelet_order() -> None:
    entries = [entry(f"p{i}", "c", "nvidia.com/gpu", f"{G1}::{i}") for i in range(8)]
    entries.append(entry("train", "main", "nvidia.com/gpu", G0))
    first, _ = allocations(entries, INDEX, PODS, EnrichOptions())
    for seed in range(5):
        random.Random(seed).shuffle(entries)
        assert allocations(entries, INDEX, PODS, EnrichOptions())[0] == first


def test_duplicate_entries_give_one_allocation() -> None:
    e = entry("train", "main", "nvidia.com/gpu", G0, G0)
    allocs, _ = allocations([e, e], INDEX, PODS, EnrichOptions())
    assert len(allocs) == 1


def test_renamed_sharing_resource_counts_only_when_listed() -> None:
    entries = [entry("a", "c", "nvidia.com/gpu.shared", f"{G1}::0")]
    assert allocations(entries, INDEX, PODS, EnrichOptions())[0] == ()
    opts = EnrichOptions(extra_resources=frozenset({"nvidia.com/gpu.shared"}))
    allocs, _ = allocations(entries, INDEX, PODS, opts)
    assert keys(allocs) == [(G1, "a/c", f"{G1}::0", 0)]
    assert allocs[0].resource == "nvidia.com/gpu.shared"


def test_unmatched_ids_are_reported_not_allocated() -> None:
    entries = [entry("x", "c", "nvidia.com/gpu", "nvidia0", "GPU-00000000-0000-0000-0000-000000000000",
                     "weird", G0)]
    allocs, unmatched = allocations(entries, INDEX, PODS, EnrichOptions())
    assert keys(allocs) == [(G0, "x/c", G0, None)]
    assert [(u.device_id, u.pod) for u in unmatched] == [
        ("nvidia0", "x"), ("GPU-00000000-0000-0000-0000-000000000000", "x"), ("weird", "x")]
    assert "device-name" in unmatched[0].why
    assert unmatched[2].why == "unknown device id form"


def test_pod_uid_and_labels_only_when_enabled_and_allowed() -> None:
    entries = [entry("train", "main", "nvidia.com/gpu", G0)]
    plain, _ = allocations(entries, INDEX, PODS, EnrichOptions())
    assert plain[0].container == ContainerRef("ml", "train", "main")
    opts = EnrichOptions(enable_pod_uid=True, enable_pod_labels=True)
    full, _ = allocations(entries, INDEX, PODS, opts)
    assert full[0].container.pod_uid == "uid-train"
    assert full[0].container.pod_labels == (("app_kubernetes_io_name", "trainer"), ("team", "a"))
    opts = EnrichOptions(enable_pod_labels=True, label_allowlist=compile_allowlist("^app\\."))
    some, _ = allocations(entries, INDEX, PODS, opts)
    assert some[0].container.pod_labels == (("app_kubernetes_io_name", "trainer"),)
    # a pod the API does not know (yet): names from the kubelet, nothing else
    other, _ = allocations([entry("new", "c", "nvidia.com/gpu", G0)], INDEX, PODS, opts)
    assert other[0].container == ContainerRef("ml", "new", "c")


def test_pod_labels_that_would_clash_with_series_labels_are_dropped() -> None:
    pod = PodInfo("u", "ml", "p", (("pod", "x"), ("device", "y"), ("UUID", "z"), ("__x", "1"),
                                   ("a.b", "first"), ("a_b", "second"), ("ok", "1")))
    opts = EnrichOptions(enable_pod_labels=True)
    (a,), _ = allocations([entry("p", "c", "nvidia.com/gpu", G0)], INDEX,
                          PodIndex.of({"u": pod}), opts)
    assert a.container.pod_labels == (("a_b", "first"), ("ok", "1"))


def test_allowlist_parsing() -> None:
    assert compile_allowlist(None) == ()
    assert compile_allowlist("") == ()
    assert [p.pattern for p in compile_allowlist("^app, team ,")] == ["^app", "team"]
    assert [p.pattern for p in compile_allowlist(["a", "b"])] == ["a", "b"]
    warnings: list[str] = []  # dcgm-exporter: a pattern Go refuses is skipped with a warning
    assert [p.pattern for p in compile_allowlist("ok,(unclosed", warnings)] == ["ok"]
    assert len(warnings) == 1 and "bad regex '(unclosed'" in warnings[0]
    warnings.clear()  # none compiles: no filtering (every label), as dcgm-exporter
    assert compile_allowlist("(?<=a)b,(x", warnings) == ()
    assert len(warnings) == 3 and "every pod label is copied" in warnings[2]


@pytest.mark.parametrize(
    ("key", "name"),
    [("app", "app"), ("app.kubernetes.io/name", "app_kubernetes_io_name"),
     ("helm.sh/chart", "helm_sh_chart"), ("9lives", "_9lives"), ("a-b", "a_b")],
)
def test_sanitize_label_name(key: str, name: str) -> None:
    assert sanitize_label_name(key) == name


def proc(pid: int, container: ContainerRef | None = None) -> GpuProcess:
    return GpuProcess(G0, pid, 1 << 30, 50.0, container)


def test_processes_get_pod_and_container_names_from_the_index() -> None:
    ids = {
        1: CgroupIdentity("uid-train", "c" * 64),
        2: CgroupIdentity("uid-train", "d" * 64),
        3: CgroupIdentity("uid-train", "e" * 64),  # container not (yet) in the pod's status
        4: CgroupIdentity("uid-unknown", "f" * 64),  # pod not in the index / no API access
    }
    preset = ContainerRef("sim", "pod", "c", "uid-sim", (("team", "b"),))
    out = resolve_processes([proc(1), proc(2), proc(3), proc(4), proc(5), proc(6, preset)], ids,
                            PODS, EnrichOptions())
    refs = [p.container for p in out]
    assert refs[0] == ContainerRef("ml", "train", "main", "uid-train")
    assert refs[1] == ContainerRef("ml", "train", "sidecar", "uid-train")
    assert refs[2] == ContainerRef("ml", "train", "", "uid-train")
    assert refs[3] == ContainerRef("", "", "", "uid-unknown")  # pod_uid only
    assert refs[4] is None  # outside any pod
    assert refs[5] == ContainerRef("sim", "pod", "c", "uid-sim")  # labels off: dropped
    assert [p.container_id for p in out[:4]] == ["c" * 64, "d" * 64, "e" * 64, "f" * 64]
    assert [(p.pid, p.used_memory_bytes, p.sm_util_percent) for p in out] == [
        (i, 1 << 30, 50.0) for i in range(1, 7)]
