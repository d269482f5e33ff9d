"""The kubelet answer decoded one pod at a time, into the compact entries the attributor joins.

The splitter is checked against protobuf's own encoding (the library serializes, the splitter
must find the same pods) and against the wire format's rules for fields it does not know
(https://protobuf.dev/programming-guides/encoding/: varint 0, fixed64 1, length-delimited 2,
fixed32 5)."""

from __future__ import annotations

from typing import Any

import pytest

from podgpu.attribution import podresources_pb2
from podgpu.attribution.kubelet import ContainerDevices, flatten, pod_messages

pb: Any = podresources_pb2
U = "GPU-0a1b2c3d-1111-2222-3333-444455556666"


def answer(*pods: tuple[str, str, list[tuple[str, list[tuple[str, list[str]]]]]]) -> bytes:
    resp = pb.ListPodResourcesResponse()
    for ns, name, containers in pods:
        pr = resp.pod_resources.add(name=name, namespace=ns)
        pr.cpu_ids.extend([1, 2])
        for cname, devices in containers:
            cr = pr.containers.add(name=cname)
            for resource, ids in devices:
                cr.devices.add(resource_name=resource, device_ids=ids).topology.nodes.add(ID=1)
    return bytes(resp.SerializeToString())


def decoded(data: bytes) -> list[Any]:
    return [pb.PodResources.FromString(m) for m in pod_messages(data)]


def test_the_pods_found_are_the_ones_protobuf_wrote() -> None:
    data = answer(("ml", "a", [("main", [("nvidia.com/gpu", [U])])]),
                  ("ml", "b", []),
                  ("kube-system", "c" * 300, [("x", [("example.com/nic", ["n"] * 100)])]))
    pods = decoded(data)
    assert [(p.namespace, p.name) for p in pods] == [("ml", "a"), ("ml", "b"),
                                                     ("kube-system", "c" * 300)]
    assert pods == list(pb.ListPodResourcesResponse.FromString(data).pod_resources)
    assert decoded(b"") == []  # no pods: the empty message


def test_fields_it_does_not_know_are_skipped_whatever_their_wire_type() -> None:
    pod = answer(("ml", "a", [("main", [("nvidia.com/gpu", [U])])]))
    unknown = (bytes([(7 << 3) | 0, 0x96, 0x01])  # field 7, varint 150
               + bytes([(8 << 3) | 1]) + bytes(8)  # field 8, fixed64
               + bytes([(9 << 3) | 2, 3]) + b"abc"  # field 9, 3 bytes
               + bytes([(10 << 3) | 5]) + bytes(4))  # field 10, fixed32
    pods = decoded(unknown + pod + unknown + pod)
    assert [p.name for p in pods] == ["a", "a"]


@pytest.mark.parametrize(("data", "why"), [
    (answer(("ml", "a", []))[:-1], "a field runs past the end of the answer"),
    (bytes([(1 << 3) | 2]), "the answer ends inside a varint"),
    (bytes([(1 << 3) | 2]) + b"\xff" * 11, "varint too long"),
    (bytes([(1 << 3) | 0, 1]), "field 1 has wire type 0"),
    (bytes([(3 << 3) | 3]), "field 3 has wire type 3"),  # groups: not in proto3
    (bytes([(8 << 3) | 1]) + bytes(3), "the answer ends inside a field"),
])
def test_an_answer_that_is_not_the_message_is_an_error(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=f"^{why}$"):
        decoded(data)


def test_entries_are_one_per_container_and_gpu_resource_with_shared_strings() -> None:
    data = answer(("ml", "train", [
        ("main", [("nvidia.com/gpu", [U, f"{U}::1"]), ("example.com/nic", ["n0", "n1"]),
                  ("nvidia.com/mig-1g.10gb", ["MIG-1"]), ("nvidia.com/gpu", [U])]),
        ("side", [("example.com/nic", ["n2"])]),
    ]), ("ml", "cpu-only", [("main", [])]))
    entries = flatten(map(pb.PodResources.FromString, pod_messages(data)))
    assert entries == (
        ContainerDevices("ml", "train", "main", "nvidia.com/gpu", (U, f"{U}::1")),
        ContainerDevices("ml", "train", "main", "nvidia.com/mig-1g.10gb", ("MIG-1",)),
    )
    first, second = entries
    assert first.namespace is second.namespace and first.pod is second.pod
    assert first.container is second.container
