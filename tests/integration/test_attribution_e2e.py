"""End to end: `podgpu serve --simulate 4 -k --pod-resources-kubelet-socket
SOCK` as a real process, against a real gRPC PodResources server on a unix socket."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.sim.backend import MODELS, SimulatedBackend
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, wait_for

pytestmark = pytest.mark.integration

INTERVAL_MS = 500
GPUS = SimulatedBackend(4, MODELS["H100"]).devices()  # the UUIDs `--simulate 4` will have
U = [d.uuid for d in GPUS]
POD_LABELS = ("pod", "namespace", "container")


Samples = dict[str, list[Any]]


def scrape(p: Any) -> Samples:
    status, _, body = p.get("/metrics")
    assert status == 200
    out: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[s.name].append(s)
    return out


def gpu_series(m: Samples, field: str, uuid: str) -> list[dict[str, str]]:
    return [s.labels for s in m[field] if s.labels["UUID"] == uuid]


def holders(m: Samples, uuid: str) -> list[tuple[str, str, str]]:
    return sorted((s.labels["namespace"], s.labels["pod"], s.labels["container"])
                  for s in m["podgpu_gpu_allocation"] if s.labels["UUID"] == uuid)


def cycle(m: Samples) -> int:
    """The collect cycle whose snapshot this scrape saw (podgpu_collect_cycles_total)."""
    (s,) = m["podgpu_collect_cycles_total"]
    return int(s.value)


def until(p: Any, cond: Callable[[Samples], bool], timeout: float) -> Samples:
    """Scrape until `cond` holds (`timeout` only ends a test that would otherwise hang)."""
    def holds() -> Samples | None:
        m = scrape(p)
        return m if cond(m) else None
    return wait_for(holds, timeout, "the scrape's condition")


def start(agent: Any, kubelet: FakeKubelet, *extra: str) -> Any:
    p = agent("--simulate", "4", "-k", "--pod-resources-kubelet-socket", kubelet.socket_path,
              "-c", str(INTERVAL_MS), *extra)  # in this process (tests/conftest.py InProcessAgent)
    p.wait_ready()
    return p


def labelled(m: Samples, uuid: str) -> dict[str, str]:
    (labels,) = gpu_series(m, "DCGM_FI_DEV_GPU_UTIL", uuid)
    return {k: labels[k] for k in POD_LABELS if k in labels}


def test_exclusive_gpu_gains_and_loses_pod_labels_within_two_intervals(
        agent: Any, kubelet: FakeKubelet) -> None:
    p = start(agent, kubelet)
    m = scrape(p)
    assert labelled(m, U[0]) == {}
    # Counted in collect cycles, not seconds: the kubelet is polled every half interval, so a
    # change is in the snapshot of the second cycle after it at the latest; one more cycle may
    # have started between the scrape that counted and the change.
    before = cycle(m)
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0])])
    m = until(p, lambda m: labelled(m, U[0]) != {}, 30)
    assert labelled(m, U[0]) == {"pod": "train", "namespace": "ml", "container": "main"}
    assert cycle(m) - before <= 3, (before, cycle(m))
    assert holders(m, U[0]) == [("ml", "train", "main")]
    before = cycle(m)
    kubelet.set_pods([])
    m = until(p, lambda m: labelled(m, U[0]) == {}, 30)
    assert cycle(m) - before <= 3, (before, cycle(m))
    assert holders(m, U[0]) == []


def test_shared_gpu_has_no_pod_labels_and_one_allocation_per_container(
        agent: Any, kubelet: FakeKubelet) -> None:
    kubelet.set_pods([
        gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0]),
        gpu_pod("inf", "a", "server", "nvidia.com/gpu", f"{U[1]}::0"),
        gpu_pod("inf", "b", "server", "nvidia.com/gpu", f"{U[1]}::1"),
    ])
    p = start(agent, kubelet)
    m = until(p, lambda m: len(holders(m, U[1])) == 2, 5)
    assert labelled(m, U[1]) == {}  # no arbitrary winner on the shared GPU
    for field in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"):
        assert len(gpu_series(m, field, U[1])) == 1  # and no duplicated device series
    assert holders(m, U[1]) == [("inf", "a", "server"), ("inf", "b", "server")]
    assert sorted(s.labels["vgpu"] for s in m["podgpu_gpu_allocation"]
                  if s.labels["UUID"] == U[1]) == ["0", "1"]
    assert labelled(m, U[0]) == {"pod": "train", "namespace": "ml", "container": "main"}
    assert holders(m, U[2]) == [] and labelled(m, U[2]) == {}  # unallocated: nothing


def test_renamed_sharing_resource_only_when_listed(agent: Any, kubelet: FakeKubelet) -> None:
    kubelet.set_pods([
        gpu_pod("inf", "a", "server", "nvidia.com/gpu.shared", f"{U[2]}::0"),
        gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0]),
    ])
    plain = start(agent, kubelet)
    listed = start(agent, kubelet, "--nvidia-resource-names", "nvidia.com/gpu.shared")
    m = until(plain, lambda m: holders(m, U[0]) != [], 5)
    assert holders(m, U[2]) == [] and labelled(m, U[2]) == {}
    m = until(listed, lambda m: holders(m, U[2]) != [], 5)
    assert holders(m, U[2]) == [("inf", "a", "server")]
    assert labelled(m, U[2]) == {"pod": "a", "namespace": "inf", "container": "server"}


def health(p: Any) -> tuple[int, dict[str, Any]]:
    status, _, body = p.get("/health")
    return status, json.loads(body)


def kubelet_errors(m: Samples) -> float:
    total: float = sum(s.value for s in m["podgpu_collect_errors_total"]
                       if s.labels.get("source") == "kubelet")
    return total


def test_keeps_serving_while_the_socket_is_gone_and_attribution_returns(
        agent: Any, kubelet: FakeKubelet) -> None:
    kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", U[0])])
    p = start(agent, kubelet)
    m = until(p, lambda m: labelled(m, U[0]) != {}, 5)
    status, body = health(p)
    assert status == 200 and body["kubelet"] == "ok"
    before = kubelet_errors(m)

    kubelet.stop()  # the socket file is removed, as on a kubelet restart
    m = until(p, lambda m: labelled(m, U[0]) == {}, 5)
    assert len(m["DCGM_FI_DEV_GPU_UTIL"]) == 4  # every GPU series keeps flowing
    assert holders(m, U[0]) == []
    m = until(p, lambda m: kubelet_errors(m) > before + 1, 5)
    status, body = health(p)
    # GPU metrics are fine: still 200; the body says the kubelet is missing
    assert status == 200 and body["status"] == "degraded"
    assert any(w.startswith("kubelet unavailable: ") for w in body["warnings"])
    assert body["kubelet"].startswith("unavailable: ")

    kubelet.start()
    until(p, lambda m: labelled(m, U[0]) != {}, 15)  # backoff is capped at 10 s
    assert health(p)[1]["kubelet"] == "ok"


def test_per_pod_usage_matches_the_gpu(agent: Any, kubelet: FakeKubelet) -> None:
    p = start(agent, kubelet)
    m = until(p, lambda m: bool(m["podgpu_pod_gpu_memory_used_bytes"]), 5)
    mem: dict[str, float] = defaultdict(float)
    util: dict[str, float] = defaultdict(float)
    for s in m["podgpu_pod_gpu_memory_used_bytes"]:
        mem[s.labels["UUID"]] += s.value
    for s in m["podgpu_pod_gpu_utilization_ratio"]:
        util[s.labels["UUID"]] += s.value
    # the built-in scenario: one pod on GPU 0, two time-slicing GPU 1, GPUs 2 and 3 idle
    pods = sorted((s.labels["UUID"], s.labels["pod"])
                  for s in m["podgpu_pod_gpu_memory_used_bytes"])
    assert pods == sorted([(U[0], "train-0"), (U[1], "infer-a"), (U[1], "infer-b")])
    for uuid in (U[0], U[1]):
        (fb,) = [s.value for s in m["DCGM_FI_DEV_FB_USED"] if s.labels["UUID"] == uuid]
        (gu,) = [s.value for s in m["DCGM_FI_DEV_GPU_UTIL"] if s.labels["UUID"] == uuid]
        assert mem[uuid] == fb * 1024 * 1024
        assert util[uuid] == pytest.approx(gu / 100)
    assert {s.labels["UUID"] for s in m["podgpu_pod_gpu_utilization_ratio"]} == {U[0], U[1]}
