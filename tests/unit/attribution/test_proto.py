"""The restated PodResources v1 proto keeps the kubelet's wire interface: every field number,
type and label of the kubelet's PodResources API, so the generated stubs talk to a real kubelet."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor as F  # type: ignore[import-untyped]  # no stubs installed

from podgpu.attribution import podresources_pb2 as pb

REP, OPT = "repeated", "optional"
S = ""
# message -> [(number, name, type, label)]; type is a scalar type or a message name.
EXPECTED: dict[str, list[tuple[int, str, str, str]]] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [(1, "pod_resources", "PodResources", REP)],
    "PodResources": [(1, "name", "string", S), (2, "namespace", "string", S),
                     (3, "containers", "ContainerResources", REP), (4, "cpu_ids", "int64", REP),
                     (5, "memory", "ContainerMemory", REP)],
    "ContainerResources": [(1, "name", "string", S), (2, "devices", "ContainerDevices", REP),
                           (3, "cpu_ids", "int64", REP), (4, "memory", "ContainerMemory", REP),
                           (5, "dynamic_resources", "DynamicResource", REP)],
    "ContainerDevices": [(1, "resource_name", "string", S), (2, "device_ids", "string", REP),
                         (3, "topology", "TopologyInfo", S)],
    "ContainerMemory": [(1, "memory_type", "string", S), (2, "size", "uint64", S),
                        (3, "topology", "TopologyInfo", S)],
    "TopologyInfo": [(1, "nodes", "NUMANode", REP)],
    "NUMANode": [(1, "ID", "int64", S)],
    "DynamicResource": [(2, "claim_name", "string", S), (3, "claim_namespace", "string", S),
                        (4, "claim_resources", "ClaimResource", REP)],
    "ClaimResource": [(1, "cdi_devices", "CDIDevice", REP), (2, "driver_name", "string", S),
                      (3, "pool_name", "string", S), (4, "device_name", "string", S),
                      (5, "share_id", "string", OPT)],
    "CDIDevice": [(1, "name", "string", S)],
    "GetPodResourcesRequest": [(1, "pod_name", "string", S), (2, "pod_namespace", "string", S)],
    "GetPodResourcesResponse": [(1, "pod_resources", "PodResources", S)],
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [(1, "devices", "ContainerDevices", REP),
                                     (2, "cpu_ids", "int64", REP),
                                     (3, "memory", "ContainerMemory", REP)],
}
_SCALARS = {F.TYPE_STRING: "string", F.TYPE_INT64: "int64", F.TYPE_UINT64: "uint64"}


def describe(field: F) -> tuple[int, str, str, str]:
    kind = field.message_type.name if field.type == F.TYPE_MESSAGE else _SCALARS[field.type]
    if field.is_repeated:
        label = REP
    elif field.containing_oneof is not None and field.containing_oneof.name.startswith("_"):
        label = OPT  # proto3 `optional` is a synthetic one-field oneof
    else:
        label = S
    return field.number, field.name, kind, label


def test_package_and_every_message_field() -> None:
    assert pb.DESCRIPTOR.package == "v1"
    assert set(pb.DESCRIPTOR.message_types_by_name) == set(EXPECTED)
    for name, fields in EXPECTED.items():
        msg = pb.DESCRIPTOR.message_types_by_name[name]
        assert sorted(describe(f) for f in msg.fields) == fields, name


def test_retired_class_name_number_is_never_reused() -> None:
    msg = pb.DESCRIPTOR.message_types_by_name["DynamicResource"]
    assert 1 not in msg.fields_by_number


def test_service_methods() -> None:
    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name: (m.input_type.name, m.output_type.name) for m in service.methods} == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest",
                                    "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }


def test_a_kubelet_answer_from_bytes() -> None:
    """Hand-encoded wire bytes (field 1 pod_resources -> 1 name, 2 namespace, 3 containers ->
    1 name, 2 devices -> 1 resource_name, 2 device_ids) decode as the kubelet meant them."""
    def ld(num: int, payload: bytes) -> bytes:  # length-delimited field
        return bytes([num << 3 | 2, len(payload)]) + payload

    device = ld(1, b"nvidia.com/gpu") + ld(2, b"GPU-x::1") + ld(2, b"GPU-x::2")
    container = ld(1, b"main") + ld(2, device) + bytes([3 << 3 | 0, 7])  # cpu_ids: 7 (varint)
    pod = ld(1, b"train") + ld(2, b"ml") + ld(3, container) + bytes([4 << 3 | 0, 9])
    # the generated module builds its message classes at import: mypy cannot see them
    resp = pb.ListPodResourcesResponse.FromString(ld(1, pod))  # type: ignore[attr-defined]
    (p,) = resp.pod_resources
    assert (p.name, p.namespace, list(p.cpu_ids)) == ("train", "ml", [9])
    (c,) = p.containers
    assert (c.name, list(c.cpu_ids)) == ("main", [7])
    assert [(d.resource_name, list(d.device_ids)) for d in c.devices] == [
        ("nvidia.com/gpu", ["GPU-x::1", "GPU-x::2"])]
