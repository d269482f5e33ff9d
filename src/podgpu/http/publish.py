"""The hand-off between the collect loop and the HTTP server: one immutable `Published` swapped in
per cycle. Rendering and gzip happen here, on the collect thread, never on a scrape. serve
publishes a `Snapshot` per cycle; `podgpu emf` publishes its tick's time per tick."""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, NamedTuple, TypeVar

from podgpu.logs import log_once

log = logging.getLogger(__name__)
S = TypeVar("S")
"""What is rendered: serve's Snapshot, the bridge's tick time."""


class Published(NamedTuple, Generic[S]):
    snapshot: S
    body: bytes
    body_gzip: bytes
    extra: Mapping[str, bytes] = MappingProxyType({})
    """Other bodies rendered from the same snapshot (the live page and its JSON), by name."""


class Publisher(Generic[S]):
    """Renders each snapshot once and swaps it in; readers take `current` without a lock
    (attribute assignment is atomic in CPython)."""

    def __init__(self, render: Callable[[S, tuple[tuple[str, float], ...]], bytes], *,
                 extra: Callable[[S], Mapping[str, bytes]] | None = None) -> None:
        self._render = render
        self._extra = extra
        self._last_render_seconds = 0.0
        self.current: Published[S] | None = None

    def publish(self, snapshot: S, _cycle_seconds: float) -> None:
        t0 = time.perf_counter()
        body = self._render(snapshot, (("render", self._last_render_seconds),))
        gz = gzip.compress(body, compresslevel=1, mtime=0)
        extra: Mapping[str, bytes] = MappingProxyType({})
        if self._extra is not None:
            try:
                extra = MappingProxyType(dict(self._extra(snapshot)))
            except Exception as exc:  # the live page must never stop /metrics from updating
                log_once(log, logging.ERROR, f"live:{type(exc).__name__}",
                         "rendering the live view failed (/metrics is unaffected): %r", exc)
        self._last_render_seconds = time.perf_counter() - t0
        self.current = Published(snapshot, body, gz, extra)
