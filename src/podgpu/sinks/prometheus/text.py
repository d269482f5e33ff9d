"""Text-format primitives: escaping and value formatting (Prometheus text format 0.0.4)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from podgpu.model.device import Value


def escape_label_value(value: str) -> str:
    """Escape `\\`, `"` and newline, the three characters the text format requires."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str) -> str:
    """HELP lines escape only `\\` and newline (double quotes stay as they are)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_pairs(pairs: Iterable[tuple[str, str]]) -> str:
    """`k1="v1",k2="v2"` in the given order, values escaped."""
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)


def format_value(value: Value, value_type: str) -> str | None:
    """dcgm-exporter's formatting: integers as `%d`, doubles as `%f` (six decimals).

    None for a value that must not reach the wire (a string, NaN or infinity: a backend bug);
    the caller drops that one sample instead of failing the whole exposition.
    """
    if isinstance(value, str) or not math.isfinite(value):
        return None
    if value_type == "int":
        return "%d" % value  # noqa: UP031 - printf semantics are the contract here
    return "%f" % value  # noqa: UP031


def family_header(name: str, help_text: str, prom_type: str) -> str:
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {prom_type}\n"


def format_seconds(value: float) -> str:
    """podgpu's own float metrics: shortest round-trip repr, as client libraries print them; the
    non-finite as the text format spells them (`NaN`, `+Inf`, `-Inf`; repr says `nan`, `inf`)."""
    if math.isfinite(value):
        return repr(float(value))
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"
