"""How the page, its plain summary and `podgpu top` print numbers. live.js repeats these rules
with the same double arithmetic (floor(x + 0.5), never banker's rounding), so all three show the
same text for the same snapshot."""

from __future__ import annotations

import math

GIB = 1 << 30
DASH = "-"
"""Shown for a value the snapshot does not have (never 0)."""


def percent(ratio: float | None) -> str:
    """0.734 -> '73%'."""
    return DASH if ratio is None else f"{math.floor(ratio * 100 + 0.5)}%"


def gib(n_bytes: int | None) -> str:
    """Bytes -> GiB with one decimal: 76427558912 -> '71.2 GiB'."""
    if n_bytes is None:
        return DASH
    tenths = math.floor(n_bytes * 10 / GIB + 0.5)
    return f"{tenths // 10}.{tenths % 10} GiB"


def watts(w: float | None) -> str:
    return DASH if w is None else f"{math.floor(w + 0.5)} W"


def celsius(c: float | None) -> str:
    return DASH if c is None else f"{math.floor(c + 0.5)} °C"
