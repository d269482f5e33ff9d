"""The hand-off between the collect loop and the HTTP server: one immutable `Published` swapped in
per cycle. Rendering and gzip happen here, on the collect thread, never on a scrape."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass

from podgpu.model import Snapshot


@dataclass(frozen=True, slots=True)
class Published:
    snapshot: Snapshot
    body: bytes
    body_gzip: bytes


class Publisher:
    """Renders each snapshot once and swaps it in; readers take `current` without a lock
    (attribute assignment is atomic in CPython)."""

    def __init__(self, render: Callable[[Snapshot, tuple[tuple[str, float], ...]], bytes]) -> None:
        self._render = render
        self._last_render_seconds = 0.0
        self.current: Published | None = None

    def publish(self, snapshot: Snapshot, _cycle_seconds: float) -> None:
        t0 = time.perf_counter()
        body = self._render(snapshot, (("render", self._last_render_seconds),))
        gz = gzip.compress(body, compresslevel=1, mtime=0)
        self._last_render_seconds = time.perf_counter() - t0
        self.current = Published(snapshot, body, gz)
