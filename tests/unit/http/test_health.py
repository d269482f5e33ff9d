from __future__ import annotations

from typing import Any

from podgpu.http.health import health, stale_after, watch_warnings
from podgpu.http.publish import Published
from podgpu.model import Snapshot, StageResult
from podgpu.model.status import StageStatus
from tests.unit.sinks.golden import simulated_snapshot


def pub(snap: Snapshot) -> Published[Snapshot]:
    return Published(snap, b"", b"")


def test_no_collection_yet_is_503() -> None:
    code, body = health(None, 0.0, 1.0, "simulated")
    assert code == 503 and body["reasons"] == ["no collection has completed yet"]


def test_fresh_and_healthy_is_200() -> None:
    snap = simulated_snapshot(2)
    code, body = health(pub(snap), snap.taken_at + 0.5, 1.0, "simulated")
    assert code == 200
    assert body["status"] == "ok" and body["devices"] == 2 and body["reasons"] == []


def test_stale_collection_is_503_with_age() -> None:
    snap = simulated_snapshot(2)
    code, body = health(pub(snap), snap.taken_at + stale_after(1.0) + 1, 1.0, "simulated")
    assert code == 503 and "last collection" in body["reasons"][0]


def test_lost_gpu_keeps_200_with_the_loss_in_the_body_and_strict_probe_fails() -> None:
    # dcgm-exporter's chart uses /health for liveness; a 503 for one lost GPU would
    # restart-loop the pod and take the healthy GPUs of the node out of the Service too
    snap = simulated_snapshot(2)
    lost = Snapshot(taken_at=snap.taken_at, samples=snap.samples[:1],
                    stages=(StageResult("backend", 0.01, False, "gpu 1: GpuIsLost"),),
                    lost_devices=(("gpu 1 (GPU-abc)", "GPU is lost"),))
    code, body = health(pub(lost), lost.taken_at, 1.0, "nvml")
    assert code == 200 and body["status"] == "degraded"
    assert body["lost_devices"] == ["gpu 1 (GPU-abc)"] and body["reasons"] == []
    assert body["warnings"] == ["gpu 1 (GPU-abc): GPU is lost"]
    code, body = health(pub(lost), lost.taken_at, 1.0, "nvml", strict=True)
    assert code == 503 and body["status"] == "unhealthy"


def test_every_gpu_lost_or_backend_down_is_200_degraded_only_stale_is_503() -> None:
    # a one-GPU node whose GPU fell off the bus must not be restarted by the chart's
    # liveness probe (dcgm-exporter answers 200); only the strict probe fails
    snap = simulated_snapshot(2)
    lost = tuple(s._replace(values={}, lost="GPU is lost") for s in snap.samples)
    all_lost = Snapshot(taken_at=snap.taken_at, samples=lost,
                        stages=(StageResult("backend", 0.01, False, "lost"),),
                        lost_devices=(("gpu 0 (GPU-a)", "GPU is lost"),
                                      ("gpu 1 (GPU-b)", "GPU is lost")))
    code, body = health(pub(all_lost), all_lost.taken_at, 1.0, "nvml")
    assert code == 200 and body["status"] == "degraded" and body["reasons"] == []
    assert body["devices"] == 0 and body["lost_devices"] == ["gpu 0 (GPU-a)", "gpu 1 (GPU-b)"]
    assert health(pub(all_lost), all_lost.taken_at, 1.0, "nvml", strict=True)[0] == 503
    code, body = health(pub(all_lost), all_lost.taken_at + stale_after(1.0) + 1, 1.0, "nvml")
    assert code == 503 and "last collection" in body["reasons"][0]
    broken = Snapshot(taken_at=snap.taken_at, samples=(),
                      stages=(StageResult("backend", 0.01, False, "RuntimeError: boom"),))
    code, body = health(pub(broken), broken.taken_at, 1.0, "nvml")
    assert code == 200 and body["warnings"] == ["backend: RuntimeError: boom"]
    assert health(pub(broken), broken.taken_at, 1.0, "nvml", strict=True)[0] == 503


def test_partial_backend_failure_is_a_warning_not_a_failure() -> None:
    snap = simulated_snapshot(2)
    partial = Snapshot(taken_at=snap.taken_at, samples=snap.samples,
                       stages=(StageResult("backend", 0.01, False, "2 calls failed"),))
    code, body = health(pub(partial), partial.taken_at, 1.0, "nvml")
    assert code == 200 and body["warnings"] == ["backend: 2 calls failed"]


def test_kubelet_unavailable_does_not_fail_health() -> None:
    snap = simulated_snapshot(1)
    snap = Snapshot(taken_at=snap.taken_at, samples=snap.samples, stages=snap.stages,
                    attribution_status=StageStatus.failed("socket missing"))
    code, body = health(pub(snap), snap.taken_at, 1.0, "simulated")
    assert code == 200 and body["kubelet"] == "unavailable: socket missing"
    assert body["status"] == "degraded" and body["warnings"] == [
        "kubelet unavailable: socket missing"]
    # the kubelet is not a GPU: even the strict probe stays up without it
    code, _ = health(pub(snap), snap.taken_at, 1.0, "simulated", strict=True)
    assert code == 200


def test_devices_counts_gpus_and_mig_instances_apart() -> None:
    """A MIG GPU seen as its parent and two instances (-d g+i), beside a whole GPU: 2 GPUs."""
    from podgpu.backends.select import SelectedBackend
    from podgpu.fields.catalog import BY_NAME
    from podgpu.model.selection import parse_device_selection
    from podgpu.sim.backend import MODELS, SimulatedBackend
    from podgpu.sim.scenario import parse_scenario

    s = parse_scenario({"mig": [{"gpu": 0, "instances": ["3g.40gb", "3g.40gb"]}], "pods": []})
    b = SelectedBackend(SimulatedBackend(2, MODELS["A100"], scenario=s, clock=lambda: 1e9),
                        parse_device_selection("g+i"))
    r = b.read([BY_NAME["DCGM_FI_DEV_FB_USED"]])
    assert len(r.samples) == 4
    snap = Snapshot(taken_at=1e9, samples=r.samples)
    code, body = health(pub(snap), snap.taken_at, 1.0, "simulated")
    assert code == 200 and (body["devices"], body["mig_instances"]) == (2, 2)


def test_each_blind_api_caller_is_a_warning_naming_it() -> None:
    body: dict[str, Any] = {
        "pod_watch": {"status": "unavailable: not in a cluster"},
        "emf": {"container_insights": {"services": {"status": "failing: 403 Forbidden"},
                                       "node": {"status": "ok", "errors": 2}}}}
    assert watch_warnings(body) == ["pod_watch: unavailable: not in a cluster",
                                    "emf.container_insights.services: failing: 403 Forbidden"]
    body["emf"]["container_insights"]["node"] = {"status": "failing: ConnectionRefusedError"}
    assert watch_warnings(body)[-1] == "emf.container_insights.node: failing: ConnectionRefusedError"


def test_callers_that_are_off_working_or_absent_are_no_warning() -> None:
    assert watch_warnings({}) == []
    assert watch_warnings({"pod_watch": {"status": "disabled"}, "emf": {"status": "ok"}}) == []
    quiet = {"container_insights": {"services": {"status": "off (no Kubernetes API)"},
                                    "node": {"status": "known in advance (simulated node)"}}}
    assert watch_warnings({"emf": quiet}) == []
