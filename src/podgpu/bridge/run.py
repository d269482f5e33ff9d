"""`podgpu emf`: scrape on a fixed grid, feed the EMF sink, serve /metrics and /health.

Every tick scrapes all targets at once (one worker thread each, with the scrape timeout); the
answers that came back are offered to the sink as one cycle at the tick's time, so a minute's
scrapes land in that minute's value distributions. A target that fails or hangs is counted on
that target and the others go on. Stop with SIGTERM/SIGINT: the open interval is sent (5 s
grace), unsent events stay in the spool when there is one.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from podgpu import logs
from podgpu.bridge.options import BridgeSettings, parse_args
from podgpu.bridge.scrape import ScrapeError, Target, parse_url
from podgpu.bridge.series import Dropped, Group, TargetLabels, to_series
from podgpu.emfbuild import build_emf_sink
from podgpu.parts import make_web_security
from podgpu.signals import stop_on_termination
from podgpu.sinks.cloudwatch import EmfSink
from podgpu.sinks.prometheus.source import Family, Labels, Sample, render_sources

if TYPE_CHECKING:
    from podgpu.http.app import App
    from podgpu.http.publish import Publisher
    from podgpu.http.websecurity import WebSecurity

log = logging.getLogger("podgpu.emf")


class Bridge:
    """The targets, the sink, and the tick loop."""

    def __init__(self, settings: BridgeSettings, sink: EmfSink, cluster: str) -> None:
        self.settings = settings
        self.sink = sink
        self.targets: list[tuple[Target, TargetLabels]] = []
        for text in settings.targets:
            url, instance = parse_url(text)
            labels = TargetLabels(job=settings.job, instance=instance,
                                  extra=settings.target_labels,
                                  honor_labels=settings.honor_labels, cluster_name=cluster,
                                  node_name=settings.node_name,
                                  identity=settings.emf.identity)
            self.targets.append((Target(url, instance, settings.scrape_timeout,
                                        max_bytes=settings.scrape_body_limit,
                                        max_samples=settings.scrape_sample_limit), labels))
        self._pool = cf.ThreadPoolExecutor(max_workers=2 * len(self.targets),
                                           thread_name_prefix="podgpu-scrape")
        self._stop = threading.Event()
        self._warned_types: set[str] = set()
        self.started = time.time()

    def tick(self, at: float) -> list[Group]:
        """Scrape every target once; return their series (failed targets contribute none)."""
        futures = {self._pool.submit(t.scrape): (t, labels) for t, labels in self.targets}
        done, _ = cf.wait(futures, timeout=self.settings.scrape_timeout + 1.0)
        out: list[Group] = []
        for fut, (target, labels) in futures.items():
            if fut not in done:
                target.failed_by_timeout(self.settings.scrape_timeout + 1.0)
                continue
            try:
                families = fut.result()
            except ScrapeError as exc:
                log.debug("scrape %s failed: %s", target.url, exc)
                continue
            dropped = Dropped()
            out.extend(to_series(families, labels, dropped))
            target.count_dropped(dropped.unsupported_type, dropped.not_finite)
            new = dropped.names - self._warned_types
            if new and len(self._warned_types) < 1000:
                self._warned_types |= new
                log.info("%s: not sent, untyped or of a type CloudWatch has no number for: %s",
                         target.url, ", ".join(sorted(new)[:20]))
        return out

    def run(self, after_tick: Callable[[float, float], None] | None = None) -> None:
        """Tick until stopped; `after_tick(at, seconds)` runs after each (the listener's
        publish: the tick's time and how long it took)."""
        interval = self.settings.scrape_interval
        while not self._stop.is_set():
            now = time.time()
            at = math.floor(now / interval) * interval
            self.sink.offer_series(at, self.tick(at))
            if after_tick is not None:
                after_tick(at, time.time() - now)
            next_at = at + interval
            self._stop.wait(max(0.0, next_at - time.time()))

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- observability -----------------------------------------------------------------------

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 while at least one target answers (or during the first three intervals)."""
        stats = [t.stats() for t, _ in self.targets]
        targets = {s.url: ("ok" if s.up else f"failing: {s.last_error}") for s in stats}
        grace = time.time() - self.started < 3 * self.settings.scrape_interval + 5
        ok = any(s.up for s in stats) or (grace and not any(s.failed for s in stats))
        body = {"status": "ok" if ok else "failing: no target answers",
                "targets": targets, "emf": self.sink.health()}
        return (200 if ok else 503), body

    def families(self) -> list[Family]:
        """The targets' scrape counts as a MetricSource (sinks/prometheus/source.py)."""
        stats = [t.stats() for t, _ in self.targets]

        def per_target(values: list[tuple[Labels, float]]) -> tuple[Sample, ...]:
            return tuple(Sample(labels, value) for labels, value in values)

        return [
            Family("podgpu_emf_scrapes_total", "Scrapes of each target by result.", "counter",
                   per_target([((("target", s.url), ("result", r)), n) for s in stats
                               for r, n in (("ok", s.ok), ("error", s.failed))])),
            Family("podgpu_emf_target_up",
                   "1 if the target's last scrape succeeded, like Prometheus' up.", "gauge",
                   per_target([((("target", s.url),), int(s.up)) for s in stats])),
            Family("podgpu_emf_scrape_duration_seconds",
                   "How long the target's last scrape took.", "gauge",
                   per_target([((("target", s.url),), float(s.last_duration)) for s in stats])),
            Family("podgpu_emf_scrape_samples",
                   "Samples in the target's last successful scrape.", "gauge",
                   per_target([((("target", s.url),), s.last_samples) for s in stats])),
            Family("podgpu_emf_dropped_samples_total",
                   "Scraped samples not sent: unsupported_type (untyped, info, stateset) or "
                   "not_finite (NaN, Inf).", "counter",
                   per_target([((("target", s.url), ("reason", r)), n) for s in stats
                               for r, n in (("unsupported_type", s.dropped_type),
                                            ("not_finite", s.dropped_value))])),
        ]


def build_sink(settings: BridgeSettings) -> tuple[EmfSink, str]:
    """The EMF sink of `podgpu serve` (the one builder), without a SeriesBuilder: the bridge
    offers series itself."""
    return build_emf_sink(settings.emf, node=settings.node_name, series=lambda _cluster: None,
                          what=f"EMF bridge: {len(settings.targets)} target(s) every "
                          f"{settings.scrape_interval:g} s",
                          route_labels={"job": settings.job, **dict(settings.target_labels)})


def make_app(bridge: Bridge, publisher: Publisher[float]) -> App:
    """/metrics (the bridge's, the sink's and the listener's counters, rendered per tick) and
    /health, through the listener `serve` uses (web config, connection guard, request deadline)."""
    from podgpu.http.app import Response
    from podgpu.http.server import make_app as listener_app

    return listener_app(lambda: publisher.current, lambda _strict: bridge.health(),
                        index=lambda: Response.text(200, "podgpu emf: /metrics, /health\n"))


def run(settings: BridgeSettings, *, ready: Callable[[Bridge], None] | None = None) -> int:
    """Scrape and send until SIGTERM/SIGINT (or the tick loop dies: exit 1). With a listener,
    the tick loop runs on its own thread and the event loop serves /metrics and /health."""
    security = make_web_security(settings.http)  # exit 2 before anything starts
    sink, cluster = build_sink(settings)
    bridge = Bridge(settings, sink, cluster)
    sink.start()
    try:
        if settings.http.port is None:
            stop_on_termination(bridge.stop)
            if ready is not None:
                ready(bridge)
            bridge.run()
            return 0
        return _run_serving(bridge, settings, security, ready)
    finally:
        bridge.close()
        sink.stop()


def _run_serving(bridge: Bridge, settings: BridgeSettings, security: WebSecurity | None,
                 ready: Callable[[Bridge], None] | None) -> int:
    from podgpu.http.lifecycle import Stopper
    from podgpu.http.publish import Publisher
    from podgpu.http.server import run_listener
    from podgpu.http.stats import HttpStats

    stopper = Stopper()
    died: list[BaseException] = []
    stats = HttpStats(security.access if security is not None else None)
    sources = (bridge, bridge.sink, stats)
    # rendered after each tick, on the tick thread: /metrics is served from these bytes
    publisher = Publisher[float](lambda _at, _timings: render_sources(sources).encode())
    publisher.publish(bridge.started, 0.0)  # the counters at 0 until the first tick

    def ticks() -> None:
        try:
            bridge.run(after_tick=publisher.publish)
        except BaseException as exc:  # the process must not serve a dead bridge's health
            log.error("the tick loop stopped: %s: %s", type(exc).__name__, exc)
            died.append(exc)
            stopper.stop("the tick loop stopped")

    app = make_app(bridge, publisher)
    thread = threading.Thread(target=ticks, name="podgpu-emf-ticks", daemon=True)
    thread.start()
    if ready is not None:
        ready(bridge)
    try:
        run_listener(app, settings.http, security=security, stopper=stopper,
                     ready=lambda _addresses, guard: setattr(stats, "guard", guard))
    finally:
        bridge.stop()
        thread.join(settings.scrape_timeout + 5.0)
    return 1 if died else 0


def main(argv: Sequence[str]) -> int:
    """`podgpu emf [flags]`; errors reach cli.main's one exit-status mapping."""
    settings = parse_args(argv)
    logs.configure(debug=settings.log.debug, fmt=settings.log.format)
    return run(settings)
