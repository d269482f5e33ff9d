"""`podgpu emf`: scrape on a fixed grid, feed the EMF sink, serve /metrics and /health.

Every tick scrapes all targets at once (one worker thread each, with the scrape timeout); the
answers that came back are offered to the sink as one cycle at the tick's time, so a minute's
scrapes land in that minute's value distributions. A target that fails or hangs is counted on
that target and the others go on. Stop with SIGTERM/SIGINT: the open interval is sent (5 s
grace), unsent events stay in the spool when there is one.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from podgpu import logs
from podgpu.bridge.options import BridgeSettings, add_arguments, settings_from
from podgpu.bridge.scrape import ScrapeError, Target, parse_url
from podgpu.bridge.series import Dropped, Group, TargetLabels, to_series
from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
from podgpu.sinks.cloudwatch.declarations import DEFAULT_LOG_GROUP
from podgpu.sinks.cloudwatch.destinations import make_destination, parse_target
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.prometheus.text import escape_label_value, family_header, format_seconds

log = logging.getLogger("podgpu.emf")


def log_group_for(template: str, cluster: str, node: str) -> str:
    """The agent's default group names the cluster; so must the user when it is a template."""
    if "{ClusterName}" in template and not cluster:
        raise ConfigError(
            f"the log group {template!r} needs a cluster name: pass --cluster-name NAME (or set "
            "cluster_name in the agent config, or --emf-log-group)")
    return template.replace("{ClusterName}", cluster).replace("{NodeName}", node)


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
                                  node_name=settings.node_name)
            self.targets.append((Target(url, instance, settings.scrape_timeout), labels))
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

    def run(self) -> None:
        interval = self.settings.scrape_interval
        while not self._stop.is_set():
            now = time.time()
            at = math.floor(now / interval) * interval
            self.sink.offer_series(at, self.tick(at))
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

    def render_metrics(self) -> str:
        stats = [t.stats() for t, _ in self.targets]
        out = [family_header("podgpu_emf_scrapes_total",
                             "Scrapes of each target by result.", "counter")]
        for s in stats:
            t = escape_label_value(s.url)
            out.append(f'podgpu_emf_scrapes_total{{target="{t}",result="ok"}} {s.ok}\n')
            out.append(f'podgpu_emf_scrapes_total{{target="{t}",result="error"}} {s.failed}\n')
        out.append(family_header("podgpu_emf_target_up",
                                 "1 if the target's last scrape succeeded, like Prometheus' up.",
                                 "gauge"))
        out.extend(f'podgpu_emf_target_up{{target="{escape_label_value(s.url)}"}} '
                   f"{int(s.up)}\n" for s in stats)
        out.append(family_header("podgpu_emf_scrape_duration_seconds",
                                 "How long the target's last scrape took.", "gauge"))
        out.extend(f'podgpu_emf_scrape_duration_seconds{{target="{escape_label_value(s.url)}"}} '
                   f"{format_seconds(s.last_duration)}\n" for s in stats)
        out.append(family_header("podgpu_emf_scrape_samples",
                                 "Samples in the target's last successful scrape.", "gauge"))
        out.extend(f'podgpu_emf_scrape_samples{{target="{escape_label_value(s.url)}"}} '
                   f"{s.last_samples}\n" for s in stats)
        out.append(family_header(
            "podgpu_emf_dropped_samples_total",
            "Scraped samples not sent: unsupported_type (untyped, info, stateset) or not_finite "
            "(NaN, Inf).", "counter"))
        for s in stats:
            t = escape_label_value(s.url)
            out.append(f'podgpu_emf_dropped_samples_total{{target="{t}",reason="unsupported_type"}}'
                       f" {s.dropped_type}\n")
            out.append(f'podgpu_emf_dropped_samples_total{{target="{t}",reason="not_finite"}}'
                       f" {s.dropped_value}\n")
        return "".join(out) + self.sink.render_metrics()


def build_sink(settings: BridgeSettings) -> tuple[EmfSink, str]:
    """The EMF sink of `podgpu serve`, without a SeriesBuilder (the bridge offers series)."""
    config = load_emf_config(settings.cloudwatch_config)
    for w in config.warnings:
        log.warning("%s", w)
    target = parse_target(settings.emf_destination)
    cluster = settings.cluster_name or config.cluster_name
    group = log_group_for(settings.emf_log_group or config.log_group_name or DEFAULT_LOG_GROUP,
                          cluster, settings.node_name)
    if not cluster and any("ClusterName" in s for d in config.declarations for s in d.dimensions):
        log.warning("EMF: no cluster name (--cluster-name): dimension sets naming ClusterName "
                    "are dropped unless the targets' series carry ClusterName")
    stream = settings.emf_log_stream or settings.node_name
    route = (group, stream) if target.kind in ("tcp", "udp") else None
    encoder = Encoder(config, storage_resolution=settings.emf_storage_resolution,
                      keep_unmatched=settings.emf_keep_unmatched, route=route)
    destination = make_destination(target, log_group=group, log_stream=stream,
                                   region=settings.aws_region,
                                   endpoint_url=settings.emf_endpoint_url,
                                   create_log_group=settings.emf_create_log_group)
    queue = EventQueue(settings.emf_queue_bytes, settings.emf_spool_dir)
    log.info("EMF bridge: %d target(s) every %g s, %s every %g s to %s (log group %s, stream %s)",
             len(settings.targets), settings.scrape_interval, config.path, settings.emf_interval,
             target, group, stream)
    return EmfSink(None, encoder, queue, destination, interval=settings.emf_interval), cluster


def serve_http(bridge: Bridge, host: str | None, port: int) -> ThreadingHTTPServer:
    """/metrics (the bridge's own counters) and /health, on a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, "text/plain; version=0.0.4; charset=utf-8",
                           bridge.render_metrics().encode())
            elif path == "/health":
                status, body = bridge.health()
                self._send(status, "application/json", json.dumps(body).encode())
            else:
                self._send(404, "text/plain", b"podgpu emf: /metrics, /health\n")

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host or "", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="podgpu-emf-http", daemon=True).start()
    return server


def run(settings: BridgeSettings, *, install_signals: bool = True,
        ready: Callable[[Bridge], None] | None = None) -> int:
    sink, cluster = build_sink(settings)
    bridge = Bridge(settings, sink, cluster)
    server = None
    if settings.port is not None:
        try:
            server = serve_http(bridge, settings.host, settings.port)
        except OSError as exc:
            print(f"podgpu emf: cannot listen on {settings.host or ''}:{settings.port}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return 1
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: bridge.stop())
    sink.start()
    if ready is not None:
        ready(bridge)
    try:
        bridge.run()
    finally:
        bridge.close()
        sink.stop()
        if server is not None:
            server.shutdown()
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="podgpu emf",
        description="Scrape Prometheus text endpoints (e.g. dcgm-exporter on this node) and send "
        "CloudWatch EMF with the CloudWatch agent's declarations, from every node.")
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    try:
        settings = settings_from(args)
        logs.configure(debug=settings.debug, fmt=settings.log_format)
        return run(settings)
    except ConfigError as exc:
        print(f"podgpu emf: {exc}", file=sys.stderr)
        return 2
