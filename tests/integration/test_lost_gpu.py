"""End to end: a simulated GPU that falls off the bus (the scenario's
`lost_gpus`) keeps `DCGM_FI_DEV_XID_ERRORS` 79 with its UUID and `DCGM_EXP_GPU_HEALTH_STATUS` FAIL
for as long as it is lost, with its pod's labels while the kubelet lists the allocation (the
simulated pods, or with `-k` a real gRPC PodResources server on a unix socket); `/health` stays 200
"degraded", so the dcgm-exporter chart's liveness probe on `/health` never restarts podgpu; the
other GPUs keep reporting; the GPU's series come back when it does."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.conftest import wait_for
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod

pytestmark = pytest.mark.integration

U = [d.uuid for d in SimulatedBackend(4, MODELS["H100"]).devices()]  # `--simulate N` UUIDs
PROBES = 6
"""/health probes, one per collect cycle: the chart's liveness probe restarts after 3 failures in a
row, so 6 cycles in a row of 200 show the probe never fails while the GPU is lost."""


def scenario(tmp_path: Path, gpu: int, *, back_at: float | None = None, pods: bool = True) -> str:
    lost: dict[str, Any] = {"gpu": gpu, "at": 0}
    if back_at is not None:
        lost["back_at"] = back_at
    doc = {"pods": [{"namespace": "ml", "name": "train-0", "containers": [
               {"name": "trainer", "gpus": [{"gpu": gpu}]}]}] if pods else [],
           "lost_gpus": [lost]}
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(doc))
    return str(path)


def metric_list(tmp_path: Path) -> str:
    """The alerting fields (the default list lacks the health status and the XID count)."""
    path = tmp_path / "alerts.csv"
    path.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
                    "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\n"
                    "DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window\n"
                    "DCGM_EXP_GPU_HEALTH_STATUS, gauge, GPU health status\n")
    return str(path)


def scrape(p: Any) -> dict[str, list[Any]]:
    status, _, body = p.get("/metrics")
    assert status == 200
    out: dict[str, list[Any]] = defaultdict(list)
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[s.name].append(s)
    return out


def scrape_until(p: Any, cond: Callable[[dict[str, list[Any]]], object], what: str
                 ) -> dict[str, list[Any]]:
    """The first scrape for which `cond` holds."""
    def scraped() -> dict[str, list[Any]] | None:
        m = scrape(p)
        return m if cond(m) else None
    return wait_for(scraped, what=what)


def of(m: dict[str, list[Any]], name: str, uuid: str) -> list[Any]:
    return [s for s in m[name] if s.labels.get("UUID") == uuid]


def collect_stamps(p: Any) -> list[float]:
    return [s.value for s in scrape(p)["podgpu_last_collect_timestamp_seconds"]]


def next_cycle(p: Any) -> None:
    """Returns once podgpu has published a collect cycle after the one it shows now."""
    before = collect_stamps(p)
    wait_for(lambda: collect_stamps(p) > before, what="the next collect cycle")


def probes_all_200(p: Any) -> list[dict[str, Any]]:
    bodies = []
    for _ in range(PROBES):
        status, _, body = p.get("/health")
        assert status == 200, body
        bodies.append(json.loads(body))
        next_cycle(p)
    return bodies


def assert_lost(m: dict[str, list[Any]], uuid: str, pod: str | None) -> None:
    (xid,) = of(m, "DCGM_FI_DEV_XID_ERRORS", uuid)
    assert xid.value == 79 and xid.labels["gpu"] and xid.labels["modelName"]
    assert xid.labels.get("pod") == pod
    health = {s.labels["health_watch"]: s for s in of(m, "DCGM_EXP_GPU_HEALTH_STATUS", uuid)}
    assert health["ALL"].value == 20 and health["ALL"].labels["health_error_code"] == \
        "DCGM_FR_FALLEN_OFF_BUS"
    # DCGM 4.5.3 puts XID 79 on ALL only (DcgmHealthWatch.cpp, BuildXidMappings)
    assert health["PCIE"].value == 0
    counts = of(m, "DCGM_EXP_XID_ERRORS_COUNT_total", uuid)  # the parser appends _total
    assert [(s.labels.get("xid"), s.value) for s in counts] == [("79", 1)]
    assert of(m, "DCGM_FI_DEV_GPU_UTIL", uuid) == []  # nothing to read on a lost GPU


def test_one_gpu_node_whose_gpu_is_lost_keeps_alerting_and_is_never_restarted(
        agent: Any, tmp_path: Path) -> None:
    p = agent("--simulate", "1", "--simulate-scenario", scenario(tmp_path, 0), "-c", "250",
              "-f", metric_list(tmp_path))
    p.wait_ready()
    for body in probes_all_200(p):
        assert body["status"] == "degraded" and body["lost_devices"] == ["nvidia0"]
        assert body["devices"] == 0
        assert_lost(scrape(p), U[0], "train-0")  # for as long as it is lost
    m = scrape(p)
    assert [s.value for s in m["podgpu_devices"] if s.labels["state"] == "lost"] == [1]
    assert p.running  # in this process (tests/conftest.py InProcessAgent): never stopped


def test_four_gpus_one_lost_the_other_three_fresh_then_it_comes_back(
        agent: Any, tmp_path: Path) -> None:
    p = agent("--simulate", "4", "-c", "250", "-f", metric_list(tmp_path),
              "--simulate-scenario", scenario(tmp_path, 2, back_at=3.0, pods=False))
    p.wait_ready()
    m = scrape(p)
    assert_lost(m, U[2], None)
    assert sorted(s.labels["UUID"] for s in m["DCGM_FI_DEV_GPU_UTIL"]) == sorted(
        [U[0], U[1], U[3]])
    next_cycle(p)  # the lost GPU does not hold the collect loop up
    wait_for(lambda: of(scrape(p), "DCGM_FI_DEV_GPU_UTIL", U[2]), what="the GPU's series back")
    status, _, body = p.get("/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    m = scrape(p)
    assert [s.value for s in of(m, "DCGM_FI_DEV_XID_ERRORS", U[2])] == [79]  # the last XID


def test_with_the_kubelet_the_lost_gpu_keeps_its_pod_labels(
        agent: Any, kubelet: FakeKubelet, tmp_path: Path) -> None:
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0])])
    p = agent("--simulate", "1", "-k", "--pod-resources-kubelet-socket", kubelet.socket_path,
              "--simulate-scenario", scenario(tmp_path, 0, pods=False), "-c", "250",
              "-f", metric_list(tmp_path))
    p.wait_ready()
    m = scrape_until(p, lambda m: of(m, "podgpu_gpu_allocation", U[0]), "the kubelet's allocation")
    assert_lost(m, U[0], "train")
    (xid,) = of(m, "DCGM_FI_DEV_XID_ERRORS", U[0])
    assert (xid.labels["namespace"], xid.labels["container"]) == ("ml", "main")
    probes_all_200(p)
    kubelet.set_pods([])  # the allocation is gone: so are the pod labels, not the GPU
    m = scrape_until(p, lambda m: not of(m, "podgpu_gpu_allocation", U[0]), "the allocation gone")
    assert_lost(m, U[0], None)


def test_a_lost_mig_gpu_keeps_its_instances_with_their_pods_labels(
        serve: Any, tmp_path: Path) -> None:
    """The real process (`podgpu serve --simulate-scenario`): GPU 0 runs MIG with two 3g.40gb
    instances, instance 1 held by ml/mig-pod, and is lost from the start. With the default
    `-d f` the instances' series stay, with GPU_I_PROFILE/GPU_I_ID and the holder's labels,
    XID 79 and health FAIL; there is no parent series for a MIG GPU under `-d f`."""
    path = tmp_path / "mig.json"
    path.write_text(json.dumps({
        "mig": [{"gpu": 0, "instances": ["3g.40gb", "3g.40gb"]}],
        "pods": [{"namespace": "ml", "name": "mig-pod", "labels": {"team": "vision"},
                  "containers": [{"name": "trainer", "gpus": [{"gpu": 0, "instance": 1}]}]}],
        "lost_gpus": [{"gpu": 0, "at": 0}]}))
    p = serve("--simulate", "2", "--simulate-scenario", str(path), "-c", "250",
              "-f", metric_list(tmp_path), "--kubernetes-enable-pod-labels")
    p.wait_ready()
    for _ in range(3):  # every scrape while it is lost
        m = scrape(p)
        xids = of(m, "DCGM_FI_DEV_XID_ERRORS", U[0])
        assert sorted(s.labels.get("GPU_I_ID", "") for s in xids) == ["1", "2"]
        (held,) = [s for s in xids if s.labels["GPU_I_ID"] == "1"]
        assert held.value == 79 and held.labels["GPU_I_PROFILE"] == "3g.40gb"
        assert (held.labels["namespace"], held.labels["pod"], held.labels["container"],
                held.labels["team"]) == ("ml", "mig-pod", "trainer", "vision")
        (free,) = [s for s in xids if s.labels["GPU_I_ID"] == "2"]
        assert "pod" not in free.labels
        health = [s for s in of(m, "DCGM_EXP_GPU_HEALTH_STATUS", U[0])
                  if s.labels.get("GPU_I_ID") == "1" and s.labels["health_watch"] == "ALL"]
        assert [(s.value, s.labels["pod"]) for s in health] == [(20, "mig-pod")]
        counts = [s for s in of(m, "DCGM_EXP_XID_ERRORS_COUNT_total", U[0])
                  if s.labels.get("GPU_I_ID") == "1"]
        assert [(s.labels.get("xid"), s.value) for s in counts] == [("79", 1)]
        allocation = [s for s in m["podgpu_gpu_allocation"] if s.labels.get("pod") == "mig-pod"]
        assert [s.labels.get("GPU_I_ID") for s in allocation] == ["1"]
    status, _, body = p.get("/health")
    assert status == 200 and json.loads(body)["lost_devices"] == ["nvidia0"]
