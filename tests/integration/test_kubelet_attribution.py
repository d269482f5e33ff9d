"""`build_attributor(KubernetesSettings(enabled=True))` end to end below the CLI: a real gRPC kubelet on a unix
socket, the crafted /proc tree, and the pod API stand-in with the `kubernetes` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from podgpu.attribution.attributor import KubeletAttributor, build_attributor
from podgpu.attribution.base import Attribution
from podgpu.attribution.kubeapi import KubeConfig
from podgpu.errors import ConfigError
from podgpu.model import ContainerRef, GpuProcess
from podgpu.settings import KubernetesSettings
from tests.integration.kube_api_fake import FakeKubeApi, pod
from tests.integration.kubelet_fake import DEVICES, GPUS, MIG, FakeKubelet, gpu_pod, wait_for

PROC = Path(__file__).resolve().parents[1] / "fixtures" / "proc"
# pod UIDs and container ids of the fixture tree (tests/fixtures/proc/README.md)
UID_4101 = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
CID_4101 = "3f1e0a3b1c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7"
UID_4103 = "7d0e4c1a-22b3-4c5d-8e9f-0a1b2c3d4e5f"
CID_4103 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    a = FakeKubeApi().start()
    a.put(pod(UID_4101, "ml", "train", labels={"app.kubernetes.io/name": "trainer", "team": "a"},
              containers={"main": CID_4101}))
    a.put(pod(UID_4103, "inference", "infer-a", containers={"server": CID_4103}))
    yield a
    a.stop()


def make(sock: str, api: FakeKubeApi | None, poll_interval: float = 0.05,
         **kw: object) -> KubeletAttributor:
    a = build_attributor(
        KubernetesSettings(enabled=True, kubelet_socket=sock, proc_root=str(PROC),
                           node_name="n1", poll_interval=poll_interval, **kw),  # type: ignore[arg-type]
        kube_api_configuration=KubeConfig(host=api.url if api else "http://127.0.0.1:9"))
    assert isinstance(a, KubeletAttributor)
    a.start()
    return a


def processes() -> tuple[GpuProcess, ...]:
    return (
        GpuProcess(GPUS[0], 4101, 8 << 30, 70.0),   # ml/train main
        GpuProcess(GPUS[1], 4103, 2 << 30, 20.0),   # inference/infer-a server
        GpuProcess(GPUS[1], 4105, 1 << 30, 10.0),   # a pod the API does not know
        GpuProcess(GPUS[1], 4104, 1 << 20, None),   # host daemon
        GpuProcess(GPUS[1], 4199, 1 << 20, 1.0),    # exited before /proc was read
    )


def settle(a: KubeletAttributor, cond: object, timeout: float = 3.0) -> Attribution:
    result: list[Attribution] = []

    def check() -> bool:
        result[:] = [a.attribute(DEVICES, processes())]
        return bool(cond(result[0]))  # type: ignore[operator]

    wait_for(check, timeout)
    return result[0]


def test_allocations_and_processes_joined(kubelet: FakeKubelet, api: FakeKubeApi,
                                          sock: str) -> None:
    kubelet.set_pods([
        gpu_pod("ml", "train", "main", "nvidia.com/gpu", GPUS[0]),
        gpu_pod("inference", "infer-a", "server", "nvidia.com/gpu", f"{GPUS[1]}::0"),
        gpu_pod("inference", "infer-b", "server", "nvidia.com/gpu", f"{GPUS[1]}::1"),
        gpu_pod("ml", "mig", "w", "nvidia.com/mig-1g.10gb", f"{MIG}::2"),
    ])
    a = make(sock, api, pod_uid=True, pod_labels=True,
             label_allowlist=("^app",))
    try:
        r = settle(a, lambda r: r.processes[1].container is not None
                   and r.processes[1].container.pod == "infer-a")
        assert r.status.ok and r.errors == ()
        assert [(x.device_key, x.container.pod, x.replica) for x in r.allocations] == [
            (GPUS[0], "train", None), (GPUS[1], "infer-a", 0), (GPUS[1], "infer-b", 1), (MIG, "mig", 2)]
        train = r.allocations[0].container
        assert train == ContainerRef("ml", "train", "main", UID_4101,
                                     (("app_kubernetes_io_name", "trainer"),))
        assert r.allocations[2].container.pod_uid == ""  # infer-b: not in the API (yet)
        refs = [p.container for p in r.processes]
        assert refs[0] == train
        assert refs[1] == ContainerRef("inference", "infer-a", "server", UID_4103)
        assert refs[2] == ContainerRef("", "", "", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9")
        assert refs[3] is None and refs[4] is None
        assert [p.container_id for p in r.processes[:2]] == [CID_4101, CID_4103]
    finally:
        a.close()


def test_allocations_follow_the_kubelet_and_drop_when_it_goes(
        kubelet: FakeKubelet, sock: str) -> None:
    # polls 0.25 s apart: the List calls counted below are polls, not how long this thread
    # waited for the CPU on a loaded machine
    a = make(sock, None, poll_interval=0.25)
    try:
        r = settle(a, lambda r: r.status.ok)
        assert r.allocations == ()
        calls = kubelet.calls
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", GPUS[0])])
        settle(a, lambda r: len(r.allocations) == 1)
        # polled in the background: the first List after the change is what attribute() serves
        # (one may have been in flight during the change, one more may end while this checks)
        assert kubelet.calls - calls <= 3, kubelet.calls - calls

        kubelet.stop()
        r = settle(a, lambda r: r.status.unavailable)
        assert r.allocations == ()
        assert sock in r.status.reason
        errors: dict[str, int] = {}

        def two_failures_counted() -> bool:  # each failure is reported once, as a delta
            for source, n in a.attribute(DEVICES, processes()).errors:
                errors[source] = errors.get(source, 0) + n
            return errors.get("kubelet", 0) >= 2

        wait_for(two_failures_counted, timeout=10, what="two failed polls counted", interval=0.05)
        assert a.attribute(DEVICES, ()).processes == ()  # still answers instantly

        kubelet.start()
        r = settle(a, lambda r: r.status.ok and len(r.allocations) == 1)
        # no API: processes in pods carry their pod UID only
        assert r.processes[0].container == ContainerRef("", "", "", UID_4101)
    finally:
        a.close()


def test_renamed_resource_needs_the_flag(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.set_pods([gpu_pod("ml", "s", "c", "nvidia.com/gpu.shared", f"{GPUS[1]}::0")])
    plain = make(sock, None)
    listed = make(sock, None, resource_names=("nvidia.com/gpu.shared", "nvidia.com/a100"))
    try:
        assert settle(plain, lambda r: r.status.ok).allocations == ()
        r = settle(listed, lambda r: len(r.allocations) == 1)
        assert r.allocations[0].resource == "nvidia.com/gpu.shared"
    finally:
        plain.close()
        listed.close()


def test_device_name_ids(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.set_pods([gpu_pod("ml", "g", "c", "nvidia.com/gpu", "nvidia0/vgpu3", "nvidia2/gi5")])
    a = make(sock, None, gpu_id_type="device-name")
    try:
        r = settle(a, lambda r: len(r.allocations) == 2)
        assert [(x.device_key, x.replica) for x in r.allocations] == [(GPUS[0], 3), (MIG, None)]
    finally:
        a.close()


def test_attribute_never_raises(kubelet: FakeKubelet, sock: str) -> None:
    a = make(sock, None)
    try:
        settle(a, lambda r: r.status.ok)
        procs = processes()
        r = a.attribute((None,), procs)  # type: ignore[arg-type]  # a bug upstream, say
        assert r.status.unavailable and r.status.reason.startswith("AttributeError")
        assert ("attribution", 1) in r.errors
        assert r.processes == procs  # series keep flowing
        assert a.attribute(DEVICES, procs).status.ok
    finally:
        a.close()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"gpu_id_type": "index"}, "expected uid or device-name"),
        ({"kubelet_socket": ""}, "must not be empty"),
        ({"poll_interval": 0}, "must be > 0"),
    ],
)
def test_settings_check_refuses_bad_values(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_attributor(KubernetesSettings(enabled=True, **kw).checked())  # type: ignore[arg-type]


def test_factory_without_kubernetes_or_scenario_gives_none() -> None:
    assert build_attributor(KubernetesSettings()) is None
