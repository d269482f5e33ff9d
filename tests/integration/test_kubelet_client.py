"""The PodResources client against a real gRPC server on a unix socket."""

from __future__ import annotations

import threading

import grpc

from podgpu.attribution.kubelet import ContainerDevices, PodResourcesClient, PodResourcesState
from tests.integration.kubelet_fake import (
    FakeContainer,
    FakeKubelet,
    FakePod,
    gpu_pod,
    wait_for,
)

U = "GPU-0a1b2c3d-1111-2222-3333-444455556666"
M = "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55"
EVERY_FORM = [U, f"{U}::0", f"{U}::1", M, f"{M}::7", f"MIG-{U}/3/0", "nvidia0",
              "nvidia1/vgpu2", "nvidia2/gi3", "nvidia2/gi3/vgpu4"]


def test_every_device_id_form_arrives_intact(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.set_pods([
        FakePod("ml", "train", [
            FakeContainer("init-sidecar", [("nvidia.com/gpu", [U])]),
            FakeContainer("main", [("nvidia.com/gpu", EVERY_FORM),
                                   ("nvidia.com/mig-1g.10gb", [M]),
                                   ("example.com/fpga", ["f0"])]),
            FakeContainer("no-devices"),
        ]),
    ])
    client = PodResourcesClient(sock)
    try:
        state = client.poll_once()
    finally:
        client.close()
    assert state.ok and state.reason == "" and state.errors == 0
    assert state.entries == (
        ContainerDevices("ml", "train", "init-sidecar", "nvidia.com/gpu", (U,)),
        ContainerDevices("ml", "train", "main", "nvidia.com/gpu", tuple(EVERY_FORM)),
        ContainerDevices("ml", "train", "main", "nvidia.com/mig-1g.10gb", (M,)),
    )  # example.com/fpga is no GPU: the join never reads it, so it is not kept


def test_entries_keep_gpu_resources_once_per_container_and_resource(kubelet: FakeKubelet,
                                                                   sock: str) -> None:
    """The kubelet lists a container's devices in one `ContainerDevices` per resource (a
    resource may repeat); the client keeps one entry per container and resource, each id once,
    and drops the resources that are no GPU unless they are `--nvidia-resource-names`."""
    kubelet.set_pods([
        FakePod("ml", "train", [FakeContainer("main", [
            ("nvidia.com/gpu", [f"{U}::0", f"{U}::1"]),
            ("example.com/nic", [f"nic{k}" for k in range(1000)]),
            ("nvidia.com/gpu", [f"{U}::1", f"{U}::2"]),
            ("nvidia.com/gpu.shared", [f"{U}::9"]),
        ])]),
        FakePod("ml", "nic-only", [FakeContainer("main", [("example.com/nic", ["nic0"])])]),
    ])
    plain, listed = PodResourcesClient(sock), PodResourcesClient(
        sock, resource_names=("nvidia.com/gpu.shared",))
    try:
        assert plain.poll_once().entries == (
            ContainerDevices("ml", "train", "main", "nvidia.com/gpu",
                             (f"{U}::0", f"{U}::1", f"{U}::2")),)
        assert listed.poll_once().entries == (
            ContainerDevices("ml", "train", "main", "nvidia.com/gpu",
                             (f"{U}::0", f"{U}::1", f"{U}::2")),
            ContainerDevices("ml", "train", "main", "nvidia.com/gpu.shared", (f"{U}::9",)))
    finally:
        plain.close()
        listed.close()


def test_polls_one_after_another_each_on_its_own_connection(kubelet: FakeKubelet,
                                                            sock: str) -> None:
    client = PodResourcesClient(sock)
    try:
        for _ in range(6):
            assert client.poll_once().ok
        assert kubelet.calls == 6 and client.state.errors == 0
    finally:
        client.close()


def test_background_polling_follows_changes_disappearance_and_return(
        kubelet: FakeKubelet, sock: str) -> None:
    kubelet.set_pods([gpu_pod("ml", "a", "c", "nvidia.com/gpu", U)])
    client = PodResourcesClient(sock, poll_interval_seconds=0.05, max_backoff_seconds=0.4)
    client.start()
    try:
        assert client.state.ok and [e.pod for e in client.state.entries] == ["a"]  # start waited
        kubelet.set_pods([gpu_pod("ml", "b", "c", "nvidia.com/gpu", f"{U}::0"),
                          gpu_pod("ml", "c", "c", "nvidia.com/gpu", f"{U}::1")])
        wait_for(lambda: [e.pod for e in client.state.entries] == ["b", "c"], 1.0)
        kubelet.set_pods([])
        wait_for(lambda: client.state.ok and client.state.entries == (), 1.0)

        kubelet.stop()  # socket removed
        wait_for(lambda: not client.state.ok, 2.0)
        down: PodResourcesState = client.state
        assert down.entries == ()  # no stale allocations while the kubelet is gone
        assert down.reason == f"kubelet socket {sock}: no such file (is the kubelet running, is the path mounted?)"
        wait_for(lambda: client.state.errors >= 3, 3.0)  # keeps retrying, counting each failure
        calls_while_down = client.state.errors

        kubelet.set_pods([gpu_pod("ml", "d", "c", "nvidia.com/gpu", U)])
        kubelet.start()
        wait_for(lambda: client.state.ok, 2.0)  # back within the 0.4 s backoff cap (+ slack)
        assert [e.pod for e in client.state.entries] == ["d"]
        assert client.state.errors >= calls_while_down  # cumulative, never reset
    finally:
        client.close()


def test_start_does_not_block_when_the_kubelet_is_absent(sock: str) -> None:
    client = PodResourcesClient(sock, poll_interval_seconds=0.05)
    starting = threading.Thread(target=client.start, kwargs={"wait_seconds": 1.0}, daemon=True)
    starting.start()
    starting.join(30)  # a deadline for a hang, not a measure of speed
    try:
        assert not starting.is_alive()
        assert not client.state.ok
        assert client.state.errors >= 1
        assert "kubelet socket" in client.state.reason
    finally:
        client.close()


def test_server_errors_are_reported_with_their_code(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED  # the kubelet's rate limit
    client = PodResourcesClient(sock)
    try:
        state = client.poll_once()
        assert not state.ok and state.errors == 1
        assert state.reason == "List failed: RESOURCE_EXHAUSTED: injected failure"
        kubelet.fail_with = None
        assert client.poll_once().ok
    finally:
        client.close()


def big_pods(n_ids: int) -> list[FakePod]:
    """Pods whose List answer is about n_ids * 50 bytes."""
    per_pod = 1000
    return [gpu_pod("ns", f"p{i}", "c", "nvidia.com/gpu",
                    *(f"{U}::{i * per_pod + k}" for k in range(per_pod)))
            for i in range(n_ids // per_pod)]


def test_answers_above_grpcs_4mib_default_are_received(kubelet: FakeKubelet, sock: str) -> None:
    kubelet.set_pods(big_pods(120_000))  # ~6 MiB
    client = PodResourcesClient(sock)
    try:
        state = client.poll_once()
        assert state.ok, state.reason
        assert sum(len(e.device_ids) for e in state.entries) == 120_000
        kubelet.set_pods(big_pods(400_000))  # ~20 MiB: over the kubelet's own 16 MiB limit
        state = client.poll_once()
        assert not state.ok and "RESOURCE_EXHAUSTED" in state.reason
    finally:
        client.close()


def test_method_name_is_the_generated_services() -> None:
    from podgpu.attribution import podresources_pb2 as pb
    from podgpu.attribution.kubelet import LIST_METHOD

    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert f"/{service.full_name}/{service.methods_by_name['List'].name}" == LIST_METHOD
