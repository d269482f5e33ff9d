"""Every device-id form the kubelet can list, and how each matches this node's devices."""

from __future__ import annotations

import pytest

from podgpu.attribution.deviceids import DeviceIndex, is_gpu_resource, parse_device_id
from podgpu.model import Device

G0 = "GPU-11111111-2222-3333-4444-555555555550"
G1 = "GPU-11111111-2222-3333-4444-555555555551"
G2 = "GPU-11111111-2222-3333-4444-555555555552"
MIG_A = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeee1"
MIG_B = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeee2"


def gpu(i: int, uuid: str, minor: int | None = None) -> Device:
    return Device(index=i, uuid=uuid, pci_bus_id=f"00000000:{i:02X}:00.0",
                  device_name=f"nvidia{i if minor is None else minor}", model="NVIDIA H100")


def mig(i: int, uuid: str, gi: int, mig_uuid: str) -> Device:
    return Device(index=i, uuid=uuid, pci_bus_id=f"00000000:{i:02X}:00.0",
                  device_name=f"nvidia{i}", model="NVIDIA H100", mig_profile="1g.10gb",
                  mig_gi_id=gi, mig_uuid=mig_uuid)


# Node: GPU 0 whole, GPU 1 whole with minor 5 (index != minor), GPU 2 split into MIG GI 3 and 9.
DEVICES = (gpu(0, G0), gpu(1, G1, minor=5), mig(2, G2, 3, MIG_A), mig(2, G2, 9, MIG_B))


@pytest.mark.parametrize(
    ("raw", "kind", "replica"),
    [
        (G0, "gpu-uuid", None),
        (f"{G0}::0", "gpu-uuid", 0),
        (f"{G0}::17", "gpu-uuid", 17),
        (MIG_A, "mig-uuid", None),
        (f"{MIG_A}::7", "mig-uuid", 7),
        (f"MIG-{G2}/3/0", "mig-legacy", None),
        ("nvidia0", "gpu-name", None),
        ("nvidia5/vgpu3", "gpu-name", 3),
        ("nvidia2/gi9", "mig-name", None),
        ("nvidia2/gi9/vgpu1", "mig-name", 1),
    ],
)
def test_parses_every_form_with_its_replica(raw: str, kind: str, replica: int | None) -> None:
    parsed = parse_device_id(raw)
    assert parsed is not None
    assert (parsed.kind, parsed.replica, parsed.raw) == (kind, replica, raw)


@pytest.mark.parametrize(
    "raw",
    ["", "GPU-", "GPU-1234", f"{G0}::", f"{G0}::x", f"{G0}:0", "nvidia", "nvidiaX",
     "nvidia0/gi", "nvidia0/vgpu", "gpu-x", "k8s.gpu.nvidia.com/claim=x-gpu-0", f"MIG-{G2}/3"],
)
def test_rejects_unknown_forms(raw: str) -> None:
    assert parse_device_id(raw) is None


def test_nvidia_dra_device_names() -> None:
    # the kubelet's PodResources API: gpu-<minor>, gpu-<minor>-mig-<profile>-<id>-<start>
    gpu = parse_device_id("gpu-3")
    assert gpu is not None and (gpu.kind, gpu.device_name) == ("dra-gpu", "nvidia3")
    mig = parse_device_id("gpu-2-mig-1g24gb-19-0")
    assert mig is not None and (mig.kind, mig.device_name, mig.profile) == (
        "dra-mig", "nvidia2", "1g24gb")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (G0, G0),
        (f"{G0}::1", G0),
        (MIG_A.upper(), MIG_A),  # upper-case hex still names the same instance
        (G1, G1),
        (MIG_A, MIG_A),
        (f"{MIG_B}::7", MIG_B),
        (f"MIG-{G2}/9/0", MIG_B),
        (f"MIG-{G2}/3/1", MIG_A),
        ("nvidia2/gi3", MIG_A),  # GKE MIG ids match under either id type
        ("nvidia2/gi9/vgpu2", MIG_B),
    ],
)
def test_uid_id_type_matches_uuid_and_mig_forms(raw: str, expected: str) -> None:
    parsed = parse_device_id(raw)
    assert parsed is not None
    dev = DeviceIndex(DEVICES, "uid").match(parsed)
    assert dev is not None and dev.key == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("nvidia0", G0),
        ("nvidia5", G1),  # the device-plugin name is the minor number, not the NVML index
        ("nvidia5/vgpu0", G1),
        ("nvidia2/gi9", MIG_B),
        (MIG_A, MIG_A),
        (f"MIG-{G2}/3/0", MIG_A),
    ],
)
def test_device_name_id_type_matches_gke_and_mig_forms(raw: str, expected: str) -> None:
    parsed = parse_device_id(raw)
    assert parsed is not None
    dev = DeviceIndex(DEVICES, "device-name").match(parsed)
    assert dev is not None and dev.key == expected


@pytest.mark.parametrize(
    ("raw", "id_type", "why"),
    [
        ("nvidia0", "uid", "--kubernetes-gpu-id-type=uid; use device-name"),
        (G0, "device-name", "--kubernetes-gpu-id-type=device-name; use uid"),
        ("nvidia1", "device-name", "no such GPU"),  # index 1 has minor 5: no nvidia1 here
        ("GPU-99999999-2222-3333-4444-555555555550", "uid", "no such GPU"),
        (G2, "uid", "no such GPU"),  # GPU 2 is in MIG mode: only its instances are devices
        ("nvidia2/gi4", "uid", "no such GPU"),
    ],
)
def test_unmatched_ids_say_why(raw: str, id_type: str, why: str) -> None:
    parsed = parse_device_id(raw)
    assert parsed is not None
    index = DeviceIndex(DEVICES, id_type)  # type: ignore[arg-type]
    assert index.match(parsed) is None
    assert why in index.why_unmatched(parsed)


def test_bad_id_type_is_refused() -> None:
    with pytest.raises(ValueError):
        DeviceIndex(DEVICES, "index")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "extra", "counted"),
    [
        ("nvidia.com/gpu", (), True),
        ("nvidia.com/mig-1g.10gb", (), True),
        ("nvidia.com/mig-3g.40gb", (), True),
        ("nvidia.com/gpu.shared", (), False),
        ("nvidia.com/gpu.shared", ("nvidia.com/gpu.shared",), True),
        ("nvidia.com/a100", ("nvidia.com/gpu.shared",), False),
        ("nvidia.com/a100", ("nvidia.com/a100",), True),
        ("amd.com/gpu", (), False),
        ("nvidia.com/gpux", (), False),
    ],
)
def test_resource_names(name: str, extra: tuple[str, ...], counted: bool) -> None:
    assert is_gpu_resource(name, extra) is counted
