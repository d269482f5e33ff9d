"""build_view: who holds which GPU, per-container usage and its source, health, from hand-built
snapshots (model objects, no backend)."""

from __future__ import annotations

import json
import math

from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Sample, Snapshot, StageResult
from podgpu.model.status import OK, StageStatus
from podgpu.sinks.live import render_json
from podgpu.sinks.live.schema import PodView, SnapshotView
from podgpu.sinks.live.view import IDLE_BELOW, SCHEMA, ViewOptions, build_view

OPTS = ViewOptions(node="n1", backend="simulated", version="9.9", interval_seconds=1.0)
GIB = 1 << 30


def dev(i: int, gi: int | None = None) -> Device:
    return Device(index=i, uuid=f"GPU-{i}", pci_bus_id=f"0:{i}", device_name=f"nvidia{i}",
                  model="Model X", mig_profile="1g.10gb" if gi is not None else None,
                  mig_gi_id=gi, mig_uuid=f"MIG-{i}-{gi}" if gi is not None else None)


def sample(d: Device, util: float | None, used_mib: int = 1000, free_mib: int = 3000,
           **extra: object) -> Sample:
    values: dict[str, object] = {"DCGM_FI_DEV_FB_USED": used_mib, "DCGM_FI_DEV_FB_FREE": free_mib,
                                 "DCGM_FI_DEV_POWER_USAGE": 123.4, "DCGM_FI_DEV_GPU_TEMP": 55,
                                 **extra}
    if util is not None:
        values["DCGM_FI_DEV_GPU_UTIL"] = util
    return Sample(d, values, {} if util is not None else {"DCGM_FI_DEV_GPU_UTIL": "not supported"})  # type: ignore[arg-type]


def ref(pod: str, ns: str = "ml", container: str = "main", uid: str = "") -> ContainerRef:
    return ContainerRef(ns, pod, container, uid)


def alloc(d: Device, pod: str, replica: int | None = None, **kw: str) -> Allocation:
    return Allocation(d.key, ref(pod, **kw), "nvidia.com/gpu", d.key, replica)


def proc(d: Device, pod: str, mem: int | None, util: float | None, pid: int = 1) -> GpuProcess:
    # process refs carry a pod UID, the kubelet's do not: the view must still match them
    return GpuProcess(d.key, pid, mem, util, ref(pod, uid=f"uid-{pod}"))


def pods_by_name(view: SnapshotView) -> dict[str, PodView]:
    return {p["pod"]: p for p in view["pods"]}


def test_document_head_and_device_summary() -> None:
    d0 = dev(0)
    v = build_view(Snapshot(taken_at=1234.5, samples=(sample(d0, 37),), cycle=7), OPTS)
    assert (v["schema"], v["node"], v["backend"], v["version"]) == (SCHEMA, "n1", "simulated", "9.9")
    assert (v["taken_at"], v["cycle"], v["interval_seconds"]) == (1234.5, 7, 1.0)
    (d,) = v["devices"]
    assert d["gpu"] == "0" and d["uuid"] == "GPU-0" and d["mig"] is None
    assert d["utilization_ratio"] == 0.37
    assert d["memory_used_bytes"] == 1000 * 2**20
    assert d["memory_total_bytes"] == 4000 * 2**20  # used + free when FB_TOTAL is not listed
    assert d["power_watts"] == 123.4 and d["temperature_celsius"] == 55.0
    assert d["sharing"] == "free" and d["holders"] == [] and v["pods"] == []
    assert d["values"]["DCGM_FI_DEV_GPU_UTIL"] == 37


def test_fb_total_wins_and_missing_fields_stay_missing() -> None:
    s = sample(dev(0), None, DCGM_FI_DEV_FB_TOTAL=8000)
    (d,) = build_view(Snapshot(1.0, (s,)), OPTS)["devices"]
    assert d["memory_total_bytes"] == 8000 * 2**20
    assert d["utilization_ratio"] is None  # unsupported: None, never 0
    assert "DCGM_FI_DEV_GPU_UTIL" not in d["values"]
    assert d["missing"] == {"DCGM_FI_DEV_GPU_UTIL": "not supported"}


def test_exclusive_holder_uses_its_processes() -> None:
    d0 = dev(0)
    snap = Snapshot(1.0, (sample(d0, 90),), allocations=(alloc(d0, "train"),),
                    processes=(proc(d0, "train", 3 * GIB, 50.0, 1), proc(d0, "train", GIB, 30.0, 2)))
    v = build_view(snap, OPTS)
    (p,) = v["pods"]
    assert (p["namespace"], p["pod"], p["container"], p["gpus"]) == ("ml", "train", "main", ["0"])
    assert p["memory_used_bytes"] == 4 * GIB
    util = p["utilization_ratio"]
    assert util is not None and math.isclose(util, 0.8)
    assert p["sources"] == ["processes"] and p["idle"] is False
    assert v["devices"][0]["sharing"] == "exclusive"
    assert v["devices"][0]["holders"] == [
        {"namespace": "ml", "pod": "train", "container": "main", "replica": None}]


def test_shared_gpu_splits_by_process_and_a_holder_without_processes_is_idle() -> None:
    d1 = dev(1)
    snap = Snapshot(1.0, (sample(d1, 70),),
                    allocations=(alloc(d1, "a", 0), alloc(d1, "b", 1), alloc(d1, "c", 2)),
                    processes=(proc(d1, "a", 2 * GIB, 60.0), proc(d1, "b", GIB, 10.0),
                               proc(d1, "stranger", GIB, 5.0)))  # not a holder: ignored
    v = build_view(snap, OPTS)
    assert v["devices"][0]["sharing"] == "shared"
    pods = pods_by_name(v)
    assert (pods["a"]["memory_used_bytes"], pods["a"]["utilization_ratio"]) == (2 * GIB, 0.6)
    assert (pods["b"]["memory_used_bytes"], pods["b"]["utilization_ratio"]) == (GIB, 0.1)
    assert (pods["c"]["memory_used_bytes"], pods["c"]["utilization_ratio"]) == (0, 0.0)
    assert [p["idle"] for p in (pods["a"], pods["b"], pods["c"])] == [False, False, True]
    assert [p["pod"] for p in v["pods"]] == ["a", "b", "c"]


def test_without_process_data_exclusive_gets_the_device_and_shared_busy_is_unknown() -> None:
    d0, d1, d2 = dev(0), dev(1), dev(2)
    snap = Snapshot(1.0, (sample(d0, 40, used_mib=2048), sample(d1, 70), sample(d2, 0)),
                    allocations=(alloc(d0, "solo"), alloc(d1, "x", 0), alloc(d1, "y", 1),
                                 alloc(d2, "p", 0), alloc(d2, "q", 1)))
    pods = pods_by_name(build_view(snap, OPTS))
    assert (pods["solo"]["memory_used_bytes"], pods["solo"]["utilization_ratio"]) == (2 * GIB, 0.4)
    assert pods["solo"]["sources"] == ["device"]
    for name in ("x", "y"):  # a busy shared GPU gives no per-holder split: unknown, not a guess
        assert pods[name]["utilization_ratio"] is None and pods[name]["memory_used_bytes"] is None
        assert pods[name]["idle"] is False and pods[name]["sources"] == ["unknown"]
    for name in ("p", "q"):  # an idle shared GPU: nobody uses it
        assert pods[name]["utilization_ratio"] == 0.0 and pods[name]["idle"] is True


def test_single_holder_of_a_time_sliced_gpu_is_shared() -> None:
    d = dev(0)
    v = build_view(Snapshot(1.0, (sample(d, 5),), allocations=(alloc(d, "only", 3),)), OPTS)
    assert v["devices"][0]["sharing"] == "shared"
    assert v["devices"][0]["holders"][0]["replica"] == 3


def test_container_on_two_gpus_sums_memory_and_averages_utilization() -> None:
    d0, d1 = dev(0), dev(1)
    snap = Snapshot(1.0, (sample(d0, 100), sample(d1, 0)),
                    allocations=(alloc(d0, "big"), alloc(d1, "big")),
                    processes=(proc(d0, "big", GIB, 100.0), proc(d1, "big", 3 * GIB, 0.0)))
    (p,) = build_view(snap, OPTS)["pods"]
    assert p["gpus"] == ["0", "1"] and p["memory_used_bytes"] == 4 * GIB
    assert p["utilization_ratio"] == 0.5 and p["idle"] is False


def test_idle_threshold_is_one_percent_and_unknown_usage_is_not_idle() -> None:
    d0, d1 = dev(0), dev(1)
    snap = Snapshot(1.0, (sample(d0, 0), sample(d1, 0)),
                    allocations=(alloc(d0, "almost"), alloc(d1, "unknown")),
                    processes=(proc(d0, "almost", GIB, IDLE_BELOW * 100 * 0.9),
                               proc(d1, "unknown", GIB, None)))
    pods = pods_by_name(build_view(snap, OPTS))
    assert pods["almost"]["idle"] is True
    assert pods["unknown"]["utilization_ratio"] is None and pods["unknown"]["idle"] is False


def test_mig_instances_are_named_gpu_slash_gi() -> None:
    d = dev(2, gi=5)
    v = build_view(Snapshot(1.0, (sample(d, 10),), allocations=(alloc(d, "m"),)), OPTS)
    assert v["devices"][0]["gpu"] == "2/gi5"
    assert v["devices"][0]["mig"] == {"profile": "1g.10gb", "gi_id": 5, "uuid": "MIG-2-5"}
    assert v["pods"][0]["gpus"] == ["2/gi5"] and v["pods"][0]["devices"] == ["MIG-2-5"]


def test_pod_labels_and_uid_from_the_allocation() -> None:
    d = dev(0)
    a = Allocation(d.key, ContainerRef("ns", "p", "c", "u-1", (("app", "x"),)), "nvidia.com/gpu", d.key)
    (p,) = build_view(Snapshot(1.0, (sample(d, 1),), allocations=(a,)), OPTS)["pods"]
    assert p["pod_uid"] == "u-1" and p["labels"] == {"app": "x"}


def test_health_reasons() -> None:
    d = dev(0)
    ok = build_view(Snapshot(1.0, (sample(d, 1),), attribution_status=OK,
                             stages=(StageResult("backend", 0.001, True),)), OPTS)["health"]
    assert ok["status"] == "ok" and ok["reasons"] == [] and ok["attribution"] == "ok"
    assert ok["stages"] == [{"name": "backend", "ok": True, "seconds": 0.001, "error": ""}]
    bad = build_view(Snapshot(
        1.0, (sample(d, 1),), attribution_status=StageStatus.failed("connection refused"),
        stages=(StageResult("backend", 0.1, False, "GPU 1: fell off the bus"),),
        lost_devices=(("GPU 1", "fell off the bus"),)), OPTS)["health"]
    assert bad["status"] == "degraded"
    assert bad["reasons"] == ["backend: GPU 1: fell off the bus",
                              "kubelet unavailable: connection refused"]
    assert bad["lost_devices"] == [{"device": "GPU 1", "reason": "fell off the bus"}]
    empty = build_view(Snapshot(1.0, ()), OPTS)["health"]
    assert empty["reasons"] == ["no GPU devices"]


def test_non_finite_floats_become_null_and_the_json_stays_valid() -> None:
    s = sample(dev(0), 5, DCGM_FI_PROF_DRAM_ACTIVE=float("nan"),
               DCGM_FI_DEV_POWER_USAGE=float("inf"))
    v = build_view(Snapshot(1.0, (s,)), OPTS)
    doc = json.loads(render_json(v))
    assert doc["devices"][0]["values"]["DCGM_FI_PROF_DRAM_ACTIVE"] is None
    assert doc["devices"][0]["power_watts"] is None
