"""The shape of a catalog entry: `Field` (a DCGM field podgpu can export) and `Source` (how a
backend reads it, and the factor from NVML's unit to DCGM's), with the constructors the table in
catalog.py is written with."""

from __future__ import annotations

from typing import Literal, NamedTuple

PromType = Literal["gauge", "counter", "label"]
ValueType = Literal["int", "float", "str"]
SourceKind = Literal["fv", "call", "gpm", "rate", "event", "system", "exporter"]
Scope = Literal["gpu", "both"]

MIB = 1024 * 1024


class Source(NamedTuple):
    """How a backend reads a field.

    kind:
      fv      one entry of the per-GPU `nvmlDeviceGetFieldValues` batch; `ref` is the NVML_FI_*
              constant, `arg` an optional scope id.
      call    a plain NVML call `ref(handle[, arg])`; `pick` selects an attribute or tuple index.
      gpm     an NVML GPM metric (`ref` = NVML_GPM_METRIC_*) over the previous cycle's sample pair.
      rate    per-second rate of cumulative NVML field values `ref` (+ `arg`), summed over all
              links, or over the one link `pick` names.
      event   recorded from the NVML event thread (XID).
      system  a node-wide NVML call without a device handle.
      exporter computed by podgpu itself from other fields (DCGM_EXP_*).
    `scale` multiplies the NVML value into DCGM's unit.
    """

    kind: SourceKind
    ref: str
    arg: str = ""
    pick: str = ""
    scale: float = 1.0

    def describe(self) -> str:
        if self.kind == "fv":
            scope = f", scope={self.arg}" if self.arg else ""
            text = f"nvmlDeviceGetFieldValues({self.ref}{scope})"
        elif self.kind == "call":
            arg = f", {self.arg}" if self.arg else ""
            pick = f".{self.pick}" if self.pick and not self.pick.isdigit() else ""
            pick = f"[{self.pick}]" if self.pick.isdigit() else pick
            text = f"{self.ref}(h{arg}){pick}"
        elif self.kind == "gpm":
            text = f"GPM {self.ref}"
        elif self.kind == "rate":
            text = f"rate of field values {self.ref}+{self.arg}"
        elif self.kind == "system":
            text = f"{self.ref}()"
        else:
            text = f"{self.kind}: {self.ref}"
        if self.scale != 1.0:
            text += f" x {self.scale:g}"
        return text


class Field(NamedTuple):
    """One DCGM field: its identity, exposition type, value type, unit and help."""

    name: str
    id: int
    prom_type: PromType
    value_type: ValueType
    unit: str
    help: str
    source: Source
    group: Literal["DEV", "PROF", "LABEL", "EXP"]
    scope: Scope = "gpu"
    """'both' when the field is also read per MIG instance; 'gpu' when only the parent has it."""

    @property
    def is_label(self) -> bool:
        return self.prom_type == "label"


def _f(
    name: str,
    fid: int,
    ptype: PromType,
    vtype: ValueType,
    unit: str,
    help_: str,
    source: Source,
    scope: Scope = "gpu",
) -> Field:
    group: Literal["DEV", "PROF", "LABEL", "EXP"]
    if ptype == "label":
        group = "LABEL"
    elif name.startswith("DCGM_FI_PROF_"):
        group = "PROF"
    elif name.startswith("DCGM_EXP_"):
        group = "EXP"
    else:
        group = "DEV"
    return Field(name, fid, ptype, vtype, unit, help_, source, group, scope)


def _fv(ref: str, scale: float = 1.0, arg: str = "") -> Source:
    return Source("fv", ref, arg=arg, scale=scale)


def _call(ref: str, arg: str = "", pick: str = "", scale: float = 1.0) -> Source:
    return Source("call", ref, arg=arg, pick=pick, scale=scale)


def _gpm(ref: str, scale: float) -> Source:
    return Source("gpm", ref, scale=scale)


_PCT = 0.01  # GPM percent -> DCGM ratio 0..1
_ALL_LINKS = "0xFFFFFFFF"
# DCGM's per-link NVLink bandwidth ids: links 0-5, 12-14, 6-11, 15-17 sit in separate ranges
# (dcgm-field-names.csv: DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n>, 1.x spelling of THROUGHPUT_L<n>).
NVLINK_LINK_IDS: tuple[int, ...] = (440, 441, 442, 443, 444, 445, 475, 476, 477, 478, 479, 480,
                                    446, 447, 448, 494, 495, 496)
