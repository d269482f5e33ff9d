"""NVLink error and traffic counters and a few device states that NVML gives as field values,
so that every field NVML can read is read (fields/catalog_more.py has the rest).

As in catalog_more.py, each is the NVML field id DCGM reads for the field (NVIDIA/DCGM
dcgmlib/src/dcgm_fields.cpp), DCGM's type and description (dcgmlib/dcgm_fields.h), the value
unconverted. The names are the pre-4.6 spellings dcgm-exporter emits (DCGM 4.6's
`..._L0_TOTAL` names are aliases). Per-link counters (links 0-11, the ids NVML has) take no scope;
the NVLink5 counters DCGM reads with the all-links scope on NVLink5
(DcgmCMUtils.cpp NvmlFieldRequiresNvLinkAggregate) are read with it here; a GPU without them
answers NotSupported and the field is absent.
"""

from __future__ import annotations

from podgpu.fields.field import _ALL_LINKS, Field, _f, _fv

# (NVML/DCGM name part, help words, DCGM id of lane 0, of lane 6): DCGM numbers lanes 0-5 from
# the first id and lanes 6-11 from the second (dcgm_fields.h).
_LANE_COUNTERS = (
    ("CRC_FLIT", "flow control CRC", 400, 451),
    ("CRC_DATA", "data CRC", 410, 457),
    ("REPLAY", "Replay", 420, 463),
    ("RECOVERY", "Recovery", 430, 469),
)


def _lane_counters(lanes: range) -> tuple[Field, ...]:
    """DCGM_FI_DEV_NVLINK_<kind>_ERROR_COUNT_L<n> for each kind, then each lane of `lanes`."""
    return tuple(
        _f(f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{n}", (lo + n) if n < 6 else (hi + n - 6),
           "counter", "int", "count", f"NV Link {what} Error Counter for Lane {n}",
           _fv(f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{n}"))
        for kind, what, lo, hi in _LANE_COUNTERS for n in lanes
    )


NVLINK_FIELD_VALUES: tuple[Field, ...] = (
    _f("DCGM_FI_DEV_ECC_CURRENT", 300, "gauge", "int", "",
       "Current ECC mode for the device",
       _fv("NVML_FI_DEV_ECC_CURRENT")),
    *_lane_counters(range(6)),
    *_lane_counters(range(6, 12)),
    _f("DCGM_FI_DEV_NVLINK_ERROR_DL_CRC", 497, "counter", "int", "count",
       "NVLink CRC Error Counter Total",
       _fv("NVML_FI_DEV_NVLINK_ERROR_DL_CRC")),
    _f("DCGM_FI_DEV_NVLINK_ERROR_DL_RECOVERY", 498, "counter", "int", "count",
       "NVLink Recovery Error Counter Total",
       _fv("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY")),
    _f("DCGM_FI_DEV_NVLINK_ERROR_DL_REPLAY", 499, "counter", "int", "count",
       "NVLink Replay Error Counter Total",
       _fv("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY")),
    _f("DCGM_FI_DEV_C2C_LINK_COUNT", 285, "gauge", "int", "",
       "C2C Link Quantity",
       _fv("NVML_FI_DEV_C2C_LINK_COUNT")),
    _f("DCGM_FI_DEV_NVLINK_COUNT_TX_PACKETS", 1200, "counter", "int", "count",
       "Total Tx packets on the link in NVLink5",
       _fv("NVML_FI_DEV_NVLINK_COUNT_XMIT_PACKETS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES", 1201, "counter", "int", "bytes",
       "Total Tx bytes on the link in NVLink5",
       _fv("NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_PACKETS", 1202, "counter", "int", "count",
       "Total Rx packets on the link in NVLink5",
       _fv("NVML_FI_DEV_NVLINK_COUNT_RCV_PACKETS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_BYTES", 1203, "counter", "int", "bytes",
       "Total Rx bytes on the link in NVLink5",
       _fv("NVML_FI_DEV_NVLINK_COUNT_RCV_BYTES", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_MALFORMED_PACKET_ERRORS", 1204, "counter", "int", "count",
       "Number of packets Rx on a link where packets are malformed",
       _fv("NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_BUFFER_OVERRUN_ERRORS", 1205, "counter", "int", "count",
       "Number of packets that were discarded on Rx due to buffer overrun",
       _fv("NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_ERRORS", 1206, "counter", "int", "count",
       "Total number of packets with errors Rx on a link",
       _fv("NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_REMOTE_ERRORS", 1207, "counter", "int", "count",
       "Total number of packets Rx - stomp/EBP marker",
       _fv("NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_GENERAL_ERRORS", 1208, "counter", "int", "count",
       "Total number of packets Rx with header mismatch",
       _fv("NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS", 1209, "counter", "int", "count",
       "Total number of times that the count of local errors exceeded a threshold",
       _fv("NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS", 1211, "counter", "int", "count",
       "Number of times link went from Up to recovery, succeeded and link came back up",
       _fv("NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", 1212, "counter", "int", "count",
       "Number of times link went from Up to recovery, failed and link was declared down",
       _fv("NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS", 1213, "counter", "int", "count",
       "Number of times link went from Up to recovery, irrespective of the result",
       _fv("NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_RX_SYMBOL_ERRORS", 1214, "counter", "int", "count",
       "Number of errors in rx symbols",
       _fv("NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_SYMBOL_BER", 1215, "gauge", "int", "",
       "BER for symbol errors - raw value",
       _fv("NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER", 1217, "gauge", "int", "",
       "Effective BER for effective errors - raw value",
       _fv("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS", 1219, "counter", "int", "count",
       "Sum of the number of errors in each Nvlink packet",
       _fv("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS", arg=_ALL_LINKS)),
    _f("DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL", 1220, "counter", "int", "count",
       "NVLink ECC Data Error Counter total for all Links",
       _fv("NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL")),
    _f("DCGM_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", 1501, "counter", "int", "count",
       "PCIe Correctable Errors Counter",
       _fv("NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS")),
    _f("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", 1523, "gauge", "int", "",
       "GPU Recovery Action (see nvmlDeviceGpuRecoveryAction_t for return values)",
       _fv("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")),
)
