"""The hand-off between the collect loop and the HTTP server: one immutable `Published` swapped in
per cycle. Rendering and gzip happen here, on the collect thread, never on a scrape."""

from __future__ import annotations

import gzip
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podgpu.logs import log_once
from podgpu.model import Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rendered:
    """A /metrics body and its gzip, rendered once (the bridge's per tick)."""

    body: bytes
    body_gzip: bytes

    @classmethod
    def of(cls, body: bytes) -> Rendered:
        return cls(body, gzip.compress(body, compresslevel=1, mtime=0))


@dataclass(frozen=True, slots=True)
class Published:
    snapshot: Snapshot
    body: bytes
    body_gzip: bytes
    extra: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    """Other bodies rendered from the same snapshot (the live page and its JSON), by name."""


class Publisher:
    """Renders each snapshot once and swaps it in; readers take `current` without a lock
    (attribute assignment is atomic in CPython)."""

    def __init__(self, render: Callable[[Snapshot, tuple[tuple[str, float], ...]], bytes], *,
                 extra: Callable[[Snapshot], Mapping[str, bytes]] | None = None) -> None:
        self._render = render
        self._extra = extra
        self._last_render_seconds = 0.0
        self.current: Published | None = None

    def publish(self, snapshot: Snapshot, _cycle_seconds: float) -> None:
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
