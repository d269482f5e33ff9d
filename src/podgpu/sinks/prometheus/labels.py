"""Label sets of device series, in dcgm-exporter 4.8.x order.

`gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname`, then the
label-typed fields and pod labels sorted by key, then the pod attributes sorted by key
(`container, namespace, pod, pod_uid, vgpu`) — dcgm-exporter's source
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

from podgpu.model import Allocation, ContainerRef, Device, Sample

_WS = re.compile(r"\s+")
Pairs = tuple[tuple[str, str], ...]


class LabelOptions(NamedTuple):
    hostname: str
    hostname_label: str = "Hostname"
    replace_blanks_in_model_name: bool = False
    virtual_gpus: bool = False
    pod_uid: bool = False
    pod_labels: bool = False
    old_namespace: bool = False
    """-o: dcgm-exporter 1.x names: `uuid`, `pod_name`, `pod_namespace`, `container_name`."""


# dcgm-exporter's --use-old-namespace renames (dcgm-exporter's source)
OLD_NAMES = {"UUID": "uuid", "pod": "pod_name", "namespace": "pod_namespace",
             "container": "container_name"}


def model_name(device: Device, opts: LabelOptions) -> str:
    if opts.replace_blanks_in_model_name:
        return _WS.sub("-", device.model.strip())
    return device.model


def identity_pairs(device: Device, opts: LabelOptions) -> Pairs:
    """The fixed leading labels of every series of `device`."""
    pairs: list[tuple[str, str]] = [
        ("gpu", str(device.index)),
        ("uuid" if opts.old_namespace else "UUID", device.uuid),
        ("pci_bus_id", device.pci_bus_id),
        ("device", device.device_name),
        ("modelName", model_name(device, opts)),
    ]
    if device.is_mig:
        pairs.append(("GPU_I_PROFILE", device.mig_profile or ""))
        pairs.append(("GPU_I_ID", str(device.mig_gi_id)))
    if opts.hostname:
        pairs.append((opts.hostname_label, opts.hostname))
    return tuple(pairs)


def short_identity_pairs(device: Device, opts: LabelOptions) -> Pairs:
    """`gpu, UUID, [GPU_I_ID], Hostname`: the identity of podgpu's own per-device series."""
    pairs: list[tuple[str, str]] = [("gpu", str(device.index)), ("UUID", device.uuid)]
    if device.is_mig:
        pairs.append(("GPU_I_ID", str(device.mig_gi_id)))
    if opts.hostname:
        pairs.append((opts.hostname_label, opts.hostname))
    return tuple(pairs)


def field_label_pairs(
    sample: Sample, label_fields: tuple[str, ...] | tuple[tuple[str, str], ...]
) -> Pairs:
    """Values of label-typed fields present on this sample (blank values are omitted).

    Each entry is a field name, or (field name, label name) when the metric list spells the
    field differently (an alias keeps the list's spelling as the label name). A numeric field
    typed `label` gets dcgm-exporter's value text (`%d`, or `%f` for doubles)."""
    out = []
    for entry in label_fields:
        key, name = (entry, entry) if isinstance(entry, str) else entry
        v = sample.values.get(key)
        if v is None:
            continue
        text = v if isinstance(v, str) else ("%d" % v if isinstance(v, int)  # noqa: UP031
                                             else "%f" % v)  # noqa: UP031
        if text != "":
            out.append((name, text))
    return tuple(out)


def container_pairs(ref: ContainerRef, opts: LabelOptions, *, always_uid: bool = False) -> Pairs:
    """pod/namespace/container (+ pod_uid) of a container, empty values omitted, sorted by key."""
    pairs = [("container", ref.container), ("namespace", ref.namespace), ("pod", ref.pod)]
    if (opts.pod_uid or always_uid or not ref.pod) and ref.pod_uid:
        pairs.append(("pod_uid", ref.pod_uid))
    if opts.old_namespace:
        return tuple(sorted((OLD_NAMES.get(k, k), v) for k, v in pairs if v))
    return tuple((k, v) for k, v in pairs if v)


def pod_label_pairs(ref: ContainerRef, opts: LabelOptions) -> Pairs:
    return ref.pod_labels if opts.pod_labels else ()


def _holder_key(ref: ContainerRef) -> tuple[str, str, str, str]:
    return (ref.namespace, ref.pod, ref.container, ref.pod_uid)


def holders_by_device(allocations: tuple[Allocation, ...]) -> dict[str, list[Allocation]]:
    """Allocations grouped by device key, one entry per distinct (container, replica)."""
    by_dev: dict[str, list[Allocation]] = defaultdict(list)
    seen: set[tuple[str, tuple[str, str, str, str], int | None]] = set()
    for a in allocations:
        k = (a.device_key, _holder_key(a.container), a.replica)
        if k not in seen:
            seen.add(k)
            by_dev[a.device_key].append(a)
    return by_dev


def series_variants(
    allocs: list[Allocation], opts: LabelOptions
) -> list[tuple[Pairs, Pairs]]:
    """(extra labels, attributes) for each series a device gets.

    One container holds the device: its pod labels/attributes (as dcgm-exporter). Several
    containers share it: one series without pod labels (no arbitrary winner). With
    --kubernetes-virtual-gpus, as dcgm-exporter 4.8.2: one series per holder entry (container,
    replica) with `vgpu` for a replica, no pod labels, and no device series beside them
    (sinks/prometheus/virtual.py has the per-process GPU_UTIL/FB_USED split).
    """
    if opts.virtual_gpus and allocs:
        out: list[tuple[Pairs, Pairs]] = []
        for a in sorted(allocs, key=lambda a: (a.replica if a.replica is not None else -1)):
            attrs = container_pairs(a.container, opts)
            if a.replica is not None:
                attrs = (*attrs, ("vgpu", str(a.replica)))
            out.append(((), tuple(sorted(attrs))))
        return out
    holders = {_holder_key(a.container) for a in allocs}
    if len(holders) == 1:
        ref = allocs[0].container
        return [(pod_label_pairs(ref, opts), container_pairs(ref, opts))]
    return [((), ())]


def with_jobs(variants: list[tuple[Pairs, Pairs]], jobs: tuple[str, ...]
              ) -> list[tuple[Pairs, Pairs]]:
    """Each series once per HPC job, with `hpc_job` among the attributes (which dcgm-exporter
    prints in key order); unchanged when the device has no job (--hpc-job-mapping-dir)."""
    if not jobs:
        return variants
    return [(extra, tuple(sorted((*attrs, ("hpc_job", job))))) for extra, attrs in variants
            for job in jobs]
