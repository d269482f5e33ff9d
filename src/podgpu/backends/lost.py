"""What a lost GPU still exports, on every backend the same way.

dcgm-exporter keeps a GPU that fell off the bus in its output: its identity labels, the XID
field (79) and `DCGM_EXP_GPU_HEALTH_STATUS` FAIL, because those are what the two alerts every GPU
fleet has (XID 79, health) look at. A lost GPU therefore gets a `Sample` with `lost` set and
only these values:

- the label-typed fields cached from before it was lost (serial, VBIOS, driver version, ...);
- `DCGM_FI_DEV_XID_ERRORS`: 79 when NVML said the GPU is lost (NVML_ERROR_GPU_IS_LOST is NVML's
  "fallen off the bus"), else the last XID seen on it (0 before any);
- `DCGM_EXP_XID_ERRORS_COUNT`: the windowed XID counts (the backend records the 79 in the window
  when NVML reported the loss without an XID event);
- `DCGM_EXP_GPU_HEALTH_STATUS`: derived as for a live GPU, with `ALL` forced to FAIL
  (DCGM_FR_FALLEN_OFF_BUS for XID 79 or no XID, DCGM_FR_XID_ERROR otherwise).

Every other field is absent: there is nothing to read.

A MIG GPU's last known GPU instances each get a copy of that sample under their own identity
(`GPU_I_PROFILE`, `GPU_I_ID`, MIG UUID), so with `-d f` or `-d i` the instances' series, and the
pods the kubelet still lists on them, stay (`with_instances`).

A GPU whose NVML call has not returned within the read deadline (hung, not lost) gets the same
sample with `ALL` FAIL and `DCGM_FR_NVML_API` while the hang lasts: nothing on it can be read, and
the workloads on it are as stuck as podgpu's call; the code says it is NVML not answering, not
XID 79, and the XID field keeps the last XID seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from podgpu.backends import derived
from podgpu.model import Device, LabeledValue, Sample
from podgpu.model.device import EMPTY, Value

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
FALLEN_OFF_BUS = 79


def xid_count_series(window_seconds: float, counts: Mapping[int, int]) -> list[LabeledValue]:
    """DCGM_EXP_XID_ERRORS_COUNT series as dcgm-exporter prints them: one per XID code in the
    window, or one `0` series without `xid` when there is none."""
    window = ("window_size_in_ms", str(round(window_seconds * 1000)))
    if not counts:
        return [LabeledValue(XID_COUNT, (window,), 0)]
    return [LabeledValue(XID_COUNT, (window, ("xid", str(x))), n) for x, n in sorted(counts.items())]


def lost_health(values: Mapping[str, Value], labeled: Iterable[LabeledValue],
                fail_code: str | None = None) -> tuple[LabeledValue, ...]:
    """Health of a lost GPU: what its XIDs say, and `ALL` FAIL whatever they say (with
    `fail_code` when given, else the code the XID gives)."""
    table = derived.health(values, labeled)
    if table["ALL"][0] < derived.FAIL:
        xid = values.get(XID_FIELD, 0)
        code = fail_code or ("DCGM_FR_FALLEN_OFF_BUS" if xid in (0, FALLEN_OFF_BUS)
                             else "DCGM_FR_XID_ERROR")
        table["ALL"] = (derived.FAIL, code)
    return tuple(LabeledValue(derived.HEALTH, (("health_error_code", code),
                                               ("health_watch", watch)), level)
                 for watch, (level, code) in table.items())


def lost_sample(
    device: Device,
    wanted: Iterable[str],
    *,
    reason: str,
    xid: int,
    xid_counts: Mapping[int, int] | None,
    xid_window_seconds: float,
    labels: Mapping[str, Value],
    fail_code: str | None = None,
) -> Sample:
    """The sample of a lost GPU for the field names `wanted`.

    `labels` are the label-typed field values known from before the loss; `xid_counts` is None
    when the backend cannot count XIDs for this GPU (the count series is then left out).
    """
    names = set(wanted)
    values: dict[str, Value] = {k: v for k, v in labels.items() if k in names}
    if XID_FIELD in names:
        values[XID_FIELD] = xid
    labeled: list[LabeledValue] = []
    if XID_COUNT in names and xid_counts is not None:
        labeled.extend(xid_count_series(xid_window_seconds, xid_counts))
    if derived.HEALTH in names:
        health_in = dict(values)
        health_in[XID_FIELD] = xid
        labeled.extend(lost_health(health_in, labeled, fail_code))
    return Sample(device, MappingProxyType(values), EMPTY, tuple(labeled),
                  lost=reason)


HUNG_CODE = "DCGM_FR_NVML_API"
"""`ALL`'s health_error_code for a GPU whose NVML call has not returned (see above)."""


def with_instances(sample: Sample, instances: Iterable[Device]) -> tuple[Sample, ...]:
    """A lost GPU's sample and a copy under each of its last known MIG GPU instances."""
    return (sample, *(sample._replace(device=d) for d in instances))
