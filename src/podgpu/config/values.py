"""Value parsers of the option tables: text -> value, or ValueError saying what was expected
(the engine prefixes the flag or variable it came from)."""

from __future__ import annotations

import re
from collections.abc import Callable

from podgpu.options import csv_list, go_int, go_int_between

MAX_BURN_SECONDS = 86_400.0
MAX_EMF_INTERVAL = 3600.0

_ADDRESS = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})")


def address(text: str) -> tuple[str | None, int]:
    """HOST:PORT, :PORT or [IPv6]:PORT -> (host or None for every interface, port)."""
    m = _ADDRESS.fullmatch(text.strip())
    if not m or int(m["port"]) > 65535:
        raise ValueError("expected HOST:PORT, :PORT or [IPv6]:PORT, e.g. :9400")
    return (m["v6"] if m["v6"] is not None else (m["host"] or None)), int(m["port"])


def address_or_off(text: str) -> tuple[str | None, int | None]:
    """`address`, or 'off'/'none'/'' for no listener (port None)."""
    if text.strip().lower() in ("off", "none", ""):
        return None, None
    return address(text)


def burn(text: str) -> tuple[float, float]:
    on, sep, off = text.partition(",")
    try:
        pair = (float(on), float(off))
    except ValueError:
        pair = (-1.0, -1.0)
    if not sep or not (0 < pair[0] <= MAX_BURN_SECONDS and 0 <= pair[1] <= MAX_BURN_SECONDS):
        # also refuses nan and inf: comparisons with nan are false
        raise ValueError(f"expected ON,OFF seconds with 0 < ON <= {MAX_BURN_SECONDS:g} and "
                         f"0 <= OFF <= {MAX_BURN_SECONDS:g}, got {text!r}")
    return pair


connections = go_int_between(16, 1_000_000, "a number of connections")


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """A parser of seconds in [low, high] (refuses nan and inf)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number of seconds, got {text!r}") from None
        if not low <= value <= high:  # also refuses nan
            raise ValueError(f"must be between {low:g} and {high:g} seconds, got {text!r}")
        return value

    return parse


def configmap(text: str) -> tuple[str, str] | None:
    """`NAMESPACE:NAME` (dcgm-exporter's --configmap-data); 'none' or '' means not set."""
    t = text.strip()
    if t.lower() in ("", "none"):
        return None
    ns, sep, name = t.partition(":")
    if not sep or not ns or not name or ":" in name:
        raise ValueError(f"expected NAMESPACE:NAME or none, got {text!r}")
    return ns, name


def resolution(text: str) -> int:
    try:
        value = go_int(text)
    except ValueError:
        value = 0
    if value not in (1, 60):
        raise ValueError(f"use 1 (high resolution) or 60 (standard), got {text!r}")
    return value


def size(text: str) -> int:
    """Bytes as decimal digits with an optional K/M/G (binary) suffix: 16M = 16 MiB. Not Go's
    integer syntax: a size is a quantity with a unit, and `0x1B` would read two ways."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if scale != 1 else t
    if not digits.isdigit() or int(digits) * scale < 64 * 1024 or int(digits) * scale > 1 << 34:
        raise ValueError(f"expected a size between 64K and 16G such as 16M, got {text!r}")
    return int(digits) * scale


_LABEL_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:.\-]{0,249}")


def labels(text: str) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE,... (repeatable flags are joined with commas first)."""
    out: list[tuple[str, str]] = []
    for item in csv_list(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _LABEL_NAME.fullmatch(key) or not value.strip():
            raise ValueError(f"expected KEY=VALUE with a label name and a non-empty value, "
                             f"got {item!r}")
        if len(value.strip()) > 1024:
            raise ValueError(f"{key}: a CloudWatch dimension value is at most 1024 characters")
        out.append((key, value.strip()))
    return tuple(out)


_K8S_LABEL_KEY = re.compile(r"(?:[A-Za-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")


def service_labels(text: str) -> tuple[tuple[str, str], ...]:
    """The Service's labels KEY=VALUE,... as on the object (`app.kubernetes.io/name=podgpu`),
    named as the agent's service-endpoints job maps them: Prometheus' Kubernetes discovery gives
    `__meta_kubernetes_service_label_<key with every character outside [a-zA-Z0-9_] as _>` and
    the job's labelmap drops the prefix (`app_kubernetes_io_name`). Empty values set nothing."""
    out: list[tuple[str, str]] = []
    for item in csv_list(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _K8S_LABEL_KEY.fullmatch(key):
            raise ValueError(f"expected KEY=VALUE with a Kubernetes label key, got {item!r}")
        if len(value.strip()) > 1024:
            raise ValueError(f"{key}: a CloudWatch dimension value is at most 1024 characters")
        if value.strip():
            out.append((_NOT_IN_NAME.sub("_", key), value.strip()))
    return tuple(out)


def choice(*allowed: str) -> Callable[[str], str]:
    """A parser accepting exactly one of `allowed`."""

    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"use {' or '.join(allowed)}, got {text!r}")
        return text

    return parse
