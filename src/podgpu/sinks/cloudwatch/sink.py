"""The EMF sink: a second consumer of each snapshot, beside the Prometheus exposition.

On the collect thread `offer()` only appends the cycle's values to the open window (a few
microseconds per series). Encoding, queueing and sending run on the sink's own thread, so neither
a scrape nor the next collection ever waits on CloudWatch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from podgpu.model import Snapshot
from podgpu.sinks.cloudwatch.destinations import Destination
from podgpu.sinks.cloudwatch.queue import EventQueue, Handoff
from podgpu.sinks.cloudwatch.sender import EmfStats, Sender
from podgpu.sinks.cloudwatch.series import COUNTER, Item, LabelKey
from podgpu.sinks.cloudwatch.window import ClosedWindow, WindowAccumulator
from podgpu.sinks.prometheus.source import Family, Sample, counter, gauge

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 5.0


class SeriesSource(Protocol):
    """A snapshot's series: serve's SeriesBuilder, or it with the Container Insights series
    (insights_encode.CombinedSeries)."""

    def series(self, snapshot: Snapshot) -> Iterable[tuple[LabelKey, str, list[Item]]]: ...

    def key(self, pairs: tuple[tuple[str, str], ...], kind: str) -> LabelKey: ...

    @property
    def own_series(self) -> bool:
        """podgpu's own series (per-pod, accounting) are offered (--emf-podgpu-series)."""


class EventEncoder(Protocol):
    """Closed windows -> events: encode.Encoder, or insights_encode.CombinedEncoder."""

    @property
    def too_large(self) -> int: ...

    def wanted(self, key: LabelKey, metric: str) -> bool: ...

    def encode(self, window: ClosedWindow) -> list[str]: ...


class EmfSink:
    def __init__(
        self,
        builder: SeriesSource | None,
        encoder: EventEncoder,
        queue: EventQueue,
        destination: Destination,
        *,
        interval: float,
        sample_every: float = 0.0,
        sender: Sender | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._builder = builder
        self._encoder = encoder
        self._queue = queue
        self._dest = destination
        self._acc = WindowAccumulator(interval, encoder.wanted, sample_every)
        self._sender = sender or Sender(destination, queue, clock=clock, interval=interval)
        self._handoff = Handoff(queue)  # bounded: a stuck send cannot pile windows up
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="podgpu-emf", daemon=True)
        self._encode_seconds = 0.0
        self._aborted = False
        self._too_large_seen = 0
        self._too_large_last = 0
        """Events the last encoded interval dropped as over 256 KiB (/health warns while > 0)."""

    # --- collect thread ----------------------------------------------------------------------

    def offer(self, snapshot: Snapshot) -> None:
        """Add one snapshot; hand a closed window to the sink's thread. Never blocks."""
        assert self._builder is not None, "a sink without a SeriesBuilder takes offer_series()"
        self.offer_series(snapshot.taken_at, self._builder.series(snapshot))

    def offer_counters(self, taken_at: float,
                       counters: Iterable[tuple[tuple[tuple[str, str], ...], list[Item]]]) -> None:
        """Add counters of this node from outside the snapshot (the accounting's totals),
        labelled like the snapshot's series; they become per-interval deltas like any counter."""
        assert self._builder is not None, "a sink without a SeriesBuilder takes offer_series()"
        if not self._builder.own_series:  # --emf-podgpu-series
            return
        key = self._builder.key
        self.offer_series(taken_at, ((key(pairs, COUNTER), COUNTER, items)
                                     for pairs, items in counters))

    def offer_series(self, taken_at: float, series: Iterable[tuple[LabelKey, str, list[Item]]]
                     ) -> None:
        """Add one cycle's series from any source (a snapshot, or `podgpu emf`'s scrapes)."""
        closed = self._acc.add(taken_at, series)
        if closed is not None:
            self._handoff.append(closed)
            self._wake.set()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Close the open window and try for `grace` seconds to send what is queued; events still
        queued stay in the spool directory when there is one."""
        closed = self._acc.close()
        if closed is not None:
            self._handoff.append(closed)
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(grace + 1.0)
            if self._thread.is_alive():  # held by a send until its deadline: queue the rest here
                self._drain()
        else:
            self._drain()
            self._final_pump(grace)
        self._sender.finish(spooled=self._queue.spool_dir is not None)  # spooled or counted
        self._dest.close()

    def abort(self) -> None:
        """A start that failed (e.g. the port is taken): send nothing, keep nothing. The
        open window and anything handed off are discarded; the spool, if any, is
        left as it was."""
        self._acc.close()
        self._handoff.clear()
        self._aborted = True
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(1.0)
        self._dest.close()

    def _run(self) -> None:
        wait: float | None = None
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            try:
                if self._aborted:
                    return
                self._drain()
                if self._stopping.is_set():
                    self._final_pump(STOP_GRACE_SECONDS)
                    return
                wait = self._sender.pump()
            except Exception:  # a bug here must not end EMF delivery for the process
                log.exception("EMF sink failed; retrying")
                wait = 5.0

    def _final_pump(self, grace: float) -> None:
        """At shutdown: one attempt at once, even in the middle of a backoff, then keep sending,
        backoff waits included, until empty or `grace` is over (each send bounded by what is left
        of it)."""
        deadline = time.time() + grace
        self._sender.retry_now()
        while True:
            wait = self._sender.pump(deadline=deadline)
            left = deadline - time.time()
            if wait is None or left <= 0:
                return
            time.sleep(min(max(wait, 0.01), left))

    def _drain(self) -> None:
        with self._drain_lock:
            while self._handoff:
                window = self._handoff.popleft()
                t0 = time.perf_counter()
                events = self._encoder.encode(window)
                self._encode_seconds = time.perf_counter() - t0
                total = self._encoder.too_large
                self._too_large_last, self._too_large_seen = total - self._too_large_seen, total
                dropped = self._queue.put(window.timestamp_ms, events)
                if dropped:
                    log.warning("EMF: queue over --emf-queue-bytes; dropped the %d oldest "
                                "event(s)", dropped)

    # --- observability -----------------------------------------------------------------------

    def stats(self) -> EmfStats:
        return self._sender.stats()

    def health(self) -> dict[str, Any]:
        """The `emf` entry of /health (`ok`, `failing: …`, `stalled: …`; Sender.health): it never
        makes /health fail (GPU metrics are fine). While the last encoded interval dropped events
        as over 256 KiB, a status that would say `ok` says `dropping: …` with the count (beside
        another status, the `too_large` entry says it)."""
        body = self._sender.health()
        insights = getattr(self._builder, "insights_health", None)  # insights_encode
        if insights is not None:  # --emf-container-insights: its Service list's state
            body["container_insights"] = insights()
        last, total = self._too_large_last, self._too_large_seen
        if total:
            body["too_large_events"] = total
        if last:
            why = (f"dropping: {last} event(s) of the last interval over 256 KiB even with one "
                   f"metric, never sent ({total} since start)")
            if body["status"] == "ok":
                body["status"] = why
            else:
                body["too_large"] = why
        return body

    def families(self) -> list[Family]:
        """The sink's counters as a MetricSource (sinks/prometheus/source.py)."""
        return emf_families(self.stats(), self._encode_seconds, self._encoder.too_large)


def emf_families(s: EmfStats, encode_seconds: float = 0.0, too_large: int = 0) -> list[Family]:
    out = [
        counter("podgpu_emf_events_total",
                "EMF events by outcome: sent, retried (attempts that failed and will be "
                "repeated), rejected (refused for good), dropped (oldest, past "
                "--emf-queue-bytes), too_large (over 256 KiB even with one metric; never "
                "queued).", "result",
                (("sent", s.sent), ("retried", s.retried), ("rejected", s.rejected),
                 ("dropped", s.dropped), ("too_large", too_large))),
        gauge("podgpu_emf_queue_bytes",
              "Bytes of EMF events waiting to be sent (26 bytes per event included).",
              s.queue_bytes),
        Family("podgpu_emf_send_duration_seconds", "Time spent in sends to the EMF destination.",
               "summary", (Sample((), float(s.send_seconds_sum), "_sum"),
                           Sample((), s.send_count, "_count"))),
        gauge("podgpu_emf_encode_duration_seconds",
              "Time the last interval's EMF documents took to build.", float(encode_seconds)),
    ]
    if s.last_success is not None:
        out.append(gauge("podgpu_emf_last_success_timestamp_seconds",
                         "When the EMF destination last accepted a batch (Unix time).",
                         float(s.last_success)))
    return out
