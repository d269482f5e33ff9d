"""Devices (GPUs and MIG instances) and one cycle's readings of them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Never

Value = int | float | str
"""A field's value in DCGM's unit: int for DCGM_FT_INT64, float for DCGM_FT_DOUBLE, str for labels."""


EMPTY: Mapping[Any, Never] = MappingProxyType({})
"""One read-only empty mapping, the default of every record's mapping field (nothing can
change it, so every record shares it)."""


DEFAULT_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200, B200); the A30 has 4."""


def mig_slices(model: str) -> int:
    """Compute slices of a GPU model when it runs MIG, which is also the most MIG GPU instances
    it can hold (nvmlDeviceGetMaxMigDeviceCount): 4 on an A30, else 7."""
    return 4 if "A30" in model else DEFAULT_COMPUTE_SLICES


class Device(NamedTuple):
    """Identity of one entity that gets its own series set: a whole GPU or one MIG GPU instance.

    `uuid`, `index`, `device_name` and `model` are the parent GPU's, as dcgm-exporter labels MIG
    series with the parent's identity plus GPU_I_PROFILE/GPU_I_ID.
    """

    index: int  # type: ignore[assignment]  # the field hides tuple.index, which nothing calls
    """NVML index of the (parent) GPU: the `gpu` label."""
    uuid: str
    """GPU-<uuid> of the (parent) GPU: the `UUID` label."""
    pci_bus_id: str
    """Domain:bus:device.function as NVML prints it, e.g. 00000000:8D:00.0."""
    device_name: str
    """`nvidia<minor>`: the `device` label and the GKE device-plugin id."""
    model: str
    """Product name, e.g. 'NVIDIA H100 80GB HBM3': the `modelName` label."""
    mig_profile: str | None = None
    """MIG GPU-instance profile, e.g. '1g.10gb'; None for a whole GPU."""
    mig_gi_id: int | None = None
    """MIG GPU-instance id; None for a whole GPU."""
    mig_uuid: str | None = None
    """MIG-<uuid> of the instance, used to match kubelet device ids; None for a whole GPU."""

    @property
    def is_mig(self) -> bool:
        return self.mig_gi_id is not None

    @property
    def key(self) -> str:
        """Stable identity within a node: the MIG UUID for instances, the GPU UUID otherwise."""
        if self.mig_uuid is not None:
            return self.mig_uuid
        if self.mig_gi_id is not None:
            return f"{self.uuid}/gi{self.mig_gi_id}"
        return self.uuid


class Sample(NamedTuple):
    """One device's readings in one cycle, keyed by DCGM field name, in DCGM's units.

    A field the device cannot supply is absent from `values` (never a sentinel) and, when the
    backend knows why, present in `missing` with a short reason such as 'not supported'.
    """

    device: Device
    values: Mapping[str, Value] = EMPTY
    missing: Mapping[str, str] = EMPTY
    labeled: tuple[LabeledValue, ...] = ()
    """Series with extra labels, e.g. DCGM_EXP_XID_ERRORS_COUNT{window_size_in_ms,xid}."""
    lost: str | None = None
    """Why the device is lost (fell off the bus), or None. A lost GPU keeps a sample with its
    identity, label fields, XID and health FAIL only, so its alerts keep firing."""


class LabeledValue(NamedTuple):
    """One extra series of a field: its extra labels in output order, and its value."""

    field: str
    labels: tuple[tuple[str, str], ...]
    value: int | float
