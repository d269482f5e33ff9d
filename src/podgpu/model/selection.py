"""dcgm-exporter's `-d/--devices` selection: which GPUs and MIG GPU instances get series.

Grammar (dcgm-exporter's source, plus the `g+i` form its Helm chart documents):
`f` (flex: every GPU, and the GPU instances of MIG-enabled GPUs; the default), `g[:RANGE]`
(whole GPUs), `i[:RANGE]` (MIG GPU instances), `g[:RANGE]+i[:RANGE]` (both). RANGE is a
comma-separated list of numbers and `a-b` spans: GPU indexes for `g`, DCGM GPU-instance entity
ids for `i` (backends/select.py says how DCGM numbers them).
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_INDEX = 1023
"""The largest GPU index or GPU-instance id accepted: far above any node, and it keeps a range
such as `g:0-99999999999` from building a list of that many numbers (MemoryError)."""
_PART = re.compile(r"^(?P<kind>[gi])(?::(?P<range>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*))?$")


class DeviceSelection(NamedTuple):
    """`gpus`/`instances`: None = that kind is not selected; () = all of that kind."""

    flex: bool = True
    gpus: tuple[int, ...] | None = None
    instances: tuple[int, ...] | None = None


def _range(text: str | None) -> tuple[int, ...]:
    out: list[int] = []
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if len(lo) > 4 or len(hi) > 4 or max(int(lo), int(hi or lo)) > MAX_INDEX:
            raise ValueError(f"{part[:24]!r}: indexes go up to {MAX_INDEX}")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"range {part!r} runs backwards")
        out.extend(range(a, b + 1))
    return tuple(sorted(set(out)))


def parse_device_selection(text: str) -> DeviceSelection:
    """Parse a `-d` value; ValueError naming what is wrong."""
    t = text.strip()
    if t in ("", "f"):
        return DeviceSelection()
    gpus: tuple[int, ...] | None = None
    instances: tuple[int, ...] | None = None
    for part in t.split("+"):
        m = _PART.match(part)
        if m is None:
            raise ValueError(f"expected f, g[:RANGE], i[:RANGE] or g[:RANGE]+i[:RANGE] (RANGE like "
                             f"0,2-3), got {text!r}")
        if m["kind"] == "g":
            if gpus is not None:
                raise ValueError(f"g given twice in {text!r}")
            gpus = _range(m["range"])
        else:
            if instances is not None:
                raise ValueError(f"i given twice in {text!r}")
            instances = _range(m["range"])
    return DeviceSelection(False, gpus, instances)
