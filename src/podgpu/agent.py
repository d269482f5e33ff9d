"""The per-node agent of `podgpu serve`: `build_agent(settings) -> Agent`, then `run(agent)`.

`build_agent` reads and checks everything that can be wrong in the input (metric list, web
config, EMF config, scenario) and builds the parts without starting any; `run` opens the backend,
collects once, serves until SIGTERM/SIGINT and closes everything in reverse order.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from podgpu import __version__
from podgpu.http.lifecycle import Stopper
from podgpu.parts import (
    load_metrics,
    make_attributor,
    make_backend,
    make_emf_sink,
    make_scenario,
    make_web_security,
)
from podgpu.settings import CollectSettings, ServeSettings

if TYPE_CHECKING:
    from podgpu.accounting.source import Accountant
    from podgpu.attribution.base import Attributor
    from podgpu.attribution.hpcjobs import HpcJobMapper
    from podgpu.backends.base import Backend
    from podgpu.collect import CollectLoop
    from podgpu.fields.listfollow import ListFollower
    from podgpu.fields.metriclist import MetricList
    from podgpu.http.app import App
    from podgpu.http.guard import ConnectionGuard
    from podgpu.http.publish import Publisher
    from podgpu.http.stats import HttpStats
    from podgpu.http.websecurity import WebSecurity
    from podgpu.model import Snapshot
    from podgpu.reload import MetricListSwitch
    from podgpu.sinks.cloudwatch import EmfSink
    from podgpu.sinks.prometheus.labels import LabelOptions

log = logging.getLogger("podgpu")


class Agent:
    """The parts of one serve process, built but not started (a plain class, not a
    dataclass: made before the first answer, docs/design.md)."""

    __slots__ = ("addresses", "attributor", "backend", "emf", "label_opts", "metrics",
                 "security", "settings", "stopper")

    def __init__(self, settings: ServeSettings, metrics: MetricList, label_opts: LabelOptions,
                 backend: Backend, attributor: Attributor | None, security: WebSecurity | None,
                 emf: EmfSink | None) -> None:
        self.settings, self.metrics, self.label_opts = settings, metrics, label_opts
        self.backend, self.attributor, self.security, self.emf = backend, attributor, security, emf
        self.stopper = Stopper()
        self.addresses: list[tuple[str, int]] = []
        """Where it listens, once `run` has bound the port (port 0: the OS picks)."""

    def stop(self, reason: str = "stop requested") -> None:
        """Stop serving from any thread, as SIGTERM would; `run` then returns."""
        self.stopper.stop(reason)

    @property
    def url(self) -> str:
        """http(s)://HOST:PORT of the first bound address (for tests and logs)."""
        host, port = self.addresses[0]
        scheme = "https" if self.security is not None and self.security.ssl_context else "http"
        return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def build_agent(settings: ServeSettings, *, backend: Backend | None = None) -> Agent:
    """Every part from its settings; ConfigError (exit 2) for bad input, nothing started
    (`backend`: one made already, podgpu/serve.py's, which may be opening)."""
    from podgpu.fields.metriclist import empty_list_warning
    from podgpu.sinks.prometheus.labels import LabelOptions

    for w in settings.warnings:
        log.warning("%s", w)
    metrics = load_metrics(settings.collect)
    for note in (*metrics.warnings, empty_list_warning(metrics)):  # dcgm-exporter starts on an empty list
        if note is not None:
            log.warning("%s", note)
    k = settings.kubernetes
    label_opts = LabelOptions(
        hostname=settings.output.hostname,
        hostname_label=settings.output.hostname_label,
        replace_blanks_in_model_name=settings.output.replace_blanks_in_model_name,
        virtual_gpus=k.virtual_gpus,
        pod_uid=k.pod_uid,
        pod_labels=k.pod_labels,
        old_namespace=settings.output.old_namespace,
    )
    security = make_web_security(settings.http)
    scenario = make_scenario(settings)
    attributor = make_attributor(k, scenario)
    emf = (make_emf_sink(settings, metrics, label_opts, attributor)
           if settings.emf is not None else None)
    return Agent(settings, metrics, label_opts, backend or make_backend(settings, scenario),
                 attributor, security, emf)


def list_file(collect: CollectSettings) -> str | None:
    """The list file in use (to follow), or None for a ConfigMap or the embedded list."""
    from podgpu.fields.metriclist import resolve_list_path

    if collect.configmap is not None:
        return None
    return resolve_list_path(collect.collectors, collect.default_list)


def _open_now(backend: Backend) -> None:
    backend.open()


def run(agent: Agent, *, ready: Callable[[Agent], None] | None = None,
        open_backend: Callable[[Backend], None] = _open_now) -> int:
    """Open, collect once, serve until stopped; 1 when the collect loop died, else 0.
    `ready(agent)` runs once the port is bound (`agent.addresses`), on the serving thread;
    `open_backend` opens the backend: its `open` now, or ahead.OpenAhead.wait (serve.py)."""
    backend, attributor = agent.backend, agent.attributor
    open_backend(backend)
    if attributor is not None:
        attributor.start()
    try:
        return _serve(agent, ready)
    finally:
        if attributor is not None:
            attributor.close()
        backend.close()


def _serve(agent: Agent, ready: Callable[[Agent], None] | None) -> int:
    """Wire the parts, each step taking what the steps before it returned, then serve until
    stopped:

    1. `wire_lists` -> Lists: the metric list switch and its file follower (not started), and
       the fields this node lacks reported (now, or once a late driver comes up).
    2. `wire_publish` -> Publishing: the accountant, the listener's counters and the publisher
       that renders each snapshot; nothing runs yet.
    3. `wire_collect` -> CollectLoop: the collector and its loop, not started.
    4. `start_collecting` -> Started: the EMF sink starts before the loop so the first cycle's
       snapshot is offered to it; then the loop's thread, its first cycle at once.
    5. `wire_http` -> App: /health's parts and the routes, imported while the first cycle waits
       in the driver (serve.py).
    6. `listen_until_stopped`: bind, then accept once the first cycle is published (a client
       that came sooner waits in the backlog), so the first /metrics is always valid; the
       follower started after it, so a list edit is only ever applied between two cycles; listen
       until SIGTERM/SIGINT or `agent.stop`; then stop the follower, the loop, and the EMF sink
       last (its final send holds the last cycle). A start that fails (the port, the first
       cycle) aborts the sink instead: it sends nothing."""
    _log_devices(agent)
    lists = wire_lists(agent)
    publishing = wire_publish(agent, lists)
    loop = wire_collect(agent, lists, publishing)
    started = start_collecting(agent, lists, loop)
    app = wire_http(agent, lists, publishing)
    return listen_until_stopped(agent, started, app, publishing.stats, ready)


class Lists(NamedTuple):
    """The metric list in use, its file's follower and the HPC job mapper (None: off)."""

    switch: MetricListSwitch
    follower: ListFollower | None
    hpc: HpcJobMapper | None


class Publishing(NamedTuple):
    """The accountant (None: off), the listener's counters, the publisher of each snapshot."""

    acct: Accountant | None
    stats: HttpStats
    publisher: Publisher[Snapshot]


class Started(NamedTuple):
    """What runs until the listener returns, and the list reload that must not wait on it."""

    loop: CollectLoop
    follower: ListFollower | None
    reload: Callable[[], object]


def _log_devices(agent: Agent) -> None:
    from podgpu.backends.driverwait import DriverWait

    backend = agent.backend
    devices = backend.devices()
    gpus, mig = len({d.uuid for d in devices}), sum(1 for d in devices if d.is_mig)
    more = f" ({mig} MIG GPU instance(s))" if mig else ""  # a MIG GPU counts once
    if agent.settings.simulation is not None:
        log.warning("SIMULATED GPU node: %d x %s%s; these values are not from real GPUs",
                    gpus, devices[0].model if devices else "?", more)
    elif devices or not isinstance(backend, DriverWait):  # waiting: DriverWait logs it
        log.info("NVML: %d GPU(s)%s, driver %s", gpus, more,
                 backend.info().get("driver_version"))


def wire_lists(agent: Agent) -> Lists:
    """The metric list in use, the follower of its file, the HPC job mapper; the listed fields
    this node lacks are logged."""
    from podgpu.backends.driverwait import DriverWait
    from podgpu.fields.metriclist import describe_source
    from podgpu.reload import MetricListSwitch

    backend, c = agent.backend, agent.settings.collect
    followed = list_file(c)
    if c.configmap is None:  # logged once everything is validated: a bad input stays one line
        log.info("%s", describe_source(followed, c.collectors))
    lists = MetricListSwitch(agent.metrics, (lambda: load_metrics(c))
                             if followed is not None or c.configmap is not None else None)
    follower: ListFollower | None = None
    if followed is not None:  # loaded only then: the embedded list has no file to follow
        from podgpu.fields.listfollow import ListFollower
        follower = ListFollower(followed, lists.request, poll_seconds=c.list_poll_seconds)
    hpc: HpcJobMapper | None = None
    if c.hpc_job_mapping_dir:  # loaded only then: off by default
        from podgpu.attribution.hpcjobs import HpcJobMapper
        hpc = HpcJobMapper(c.hpc_job_mapping_dir)

    def report_unavailable() -> None:
        unavailable = backend.unavailable_fields()
        gone = sorted(n for n in unavailable if n in {r.name for r in lists.current.metrics})
        if gone:
            log.warning("these listed fields are unavailable on this node and will be absent: "
                        "%s (%s)", ", ".join(gone), unavailable[gone[0]])

    if isinstance(backend, DriverWait):  # a driver that comes later is reported when it does
        backend.when_ready(report_unavailable)
    else:
        report_unavailable()
    return Lists(lists, follower, hpc)


def wire_publish(agent: Agent, lists: Lists) -> Publishing:
    """The accountant, the listener's counters and the publisher: each snapshot rendered with
    the list in use, then the accountant's, the EMF sink's and the listener's families."""
    from podgpu.accounting import build_accountant
    from podgpu.http.publish import Publisher
    from podgpu.http.stats import HttpStats
    from podgpu.sinks.live import LiveRenderer, ViewOptions
    from podgpu.sinks.prometheus import RenderOptions, render
    from podgpu.sinks.prometheus.source import MetricSource, render_sources

    settings, backend, emf, security = agent.settings, agent.backend, agent.emf, agent.security
    switch = lists.switch

    def build_labels() -> tuple[tuple[str, str], ...]:
        """podgpu_build_info's labels, read each cycle: a driver that came up after podgpu
        started has its version known from then on."""
        return (("version", __version__), ("backend", backend.name),
                ("driver_version", backend.info().get("driver_version", "")),
                ("python_version", sys.version.split()[0]))

    acct = build_accountant(settings.accounting, agent.label_opts)  # None when off
    stats = HttpStats(security.access if security is not None else None)
    sources: list[MetricSource] = [*([acct] if acct is not None else []),
                                   *([emf] if emf is not None else []), stats]

    def render_snapshot(snapshot: Snapshot, timings: tuple[tuple[str, float], ...]) -> bytes:
        body = render(snapshot, switch.current,
                      RenderOptions(agent.label_opts, build_labels(), timings))
        return body + render_sources(sources).encode()

    publisher = Publisher(render_snapshot, extra=LiveRenderer(ViewOptions(
        node=settings.output.hostname, backend=backend.name, version=__version__,
        interval_seconds=settings.collect.interval)))  # the page and /api/v1/snapshot
    return Publishing(acct, stats, publisher)


def wire_collect(agent: Agent, lists: Lists, publishing: Publishing) -> CollectLoop:
    """The collector (the list's fields, plus what accounting and Container Insights read) and
    its loop; each snapshot goes to the accountant, the EMF sink, then the publisher, and a
    reloaded list is applied after it."""
    from podgpu.accounting import with_accounting_fields
    from podgpu.collect import CollectLoop, Collector

    settings, emf, acct = agent.settings, agent.emf, publishing.acct
    switch, publisher, hpc = lists.switch, publishing.publisher, lists.hpc
    insights = settings.emf is not None and settings.emf.container_insights
    fields = agent.metrics.fields
    if insights:  # --emf-container-insights reads a few fields the list may leave out
        from podgpu.sinks.cloudwatch.insights import KeepsInsightsFields, with_insights_fields

        fields = with_insights_fields(fields)
    collector = Collector(agent.backend,
                          fields if acct is None else with_accounting_fields(fields),
                          attributor=agent.attributor,
                          want_processes=agent.attributor is not None,
                          hpc_jobs=hpc.read if hpc is not None else None)
    target = collector if acct is None else acct.fields_target(collector)
    if insights:
        target = KeepsInsightsFields(target)

    def on_snapshot(snapshot: Snapshot, seconds: float) -> None:
        if acct is not None:
            acct.observe(snapshot)  # before rendering: the counters include this cycle
        if emf is not None:
            emf.offer(snapshot)  # appends to the open window; sending is on its own thread
            if acct is not None:
                emf.offer_counters(snapshot.taken_at, acct.emf_items())
        publisher.publish(snapshot, seconds)
        # a list reloaded on SIGHUP takes over between cycles
        switch.apply(target)

    return CollectLoop(collector, settings.collect.interval, on_snapshot,
                       on_death=lambda exc: agent.stop(
                           f"the collect loop stopped: {type(exc).__name__}: {exc}"))


def start_collecting(agent: Agent, lists: Lists, loop: CollectLoop) -> Started:
    """The EMF sink, then the loop's thread with its first cycle at once (see `_serve`)."""
    if agent.emf is not None:
        agent.emf.start()
    loop.start(first_now=True)
    return Started(loop, lists.follower, lists.switch.request)


def wire_http(agent: Agent, lists: Lists, publishing: Publishing) -> App:
    """/metrics, /health (with each part's entry), readiness, the page."""
    from podgpu.backends.driverwait import DriverWait
    from podgpu.http.health import health, watch_warnings
    from podgpu.http.ready import driver_waiting, readiness
    from podgpu.http.server import landing, make_app

    backend, emf, security, hpc = agent.backend, agent.emf, agent.security, lists.hpc
    publisher, interval = publishing.publisher, agent.settings.collect.interval
    sinks: dict[str, Callable[[], dict[str, Any]]] = {"metric_list": lists.switch.health}
    if emf is not None:
        sinks["emf"] = emf.health
    if security is not None:
        sinks["web_config"] = security.health
    if hpc is not None:
        sinks["hpc_job_mapping"] = hpc.health
    if agent.attributor is not None:
        sinks.update(agent.attributor.health_parts())

    def health_of(strict: bool) -> tuple[int, dict[str, Any]]:
        status, body = health(publisher.current, time.time(), interval, backend.name,
                              strict=strict)
        for name, status_of in sinks.items():  # reported, never a 503
            body[name] = status_of()
        # series were cut, or an API caller is blind: a warning and "degraded", never a 503
        cut = hpc is not None and hpc.cut
        warn = [f"hpc_job_mapping: {body['hpc_job_mapping']['status']}"] if cut else []
        warn += watch_warnings(body)
        body["warnings"] += warn
        body["status"] = "degraded" if warn and body["status"] == "ok" else body["status"]
        return status, body

    # readiness: /health, or 503 while the NVIDIA driver is awaited (http/ready.py)
    waiting = (driver_waiting(backend.waiting, backend.devices, publisher)
               if isinstance(backend, DriverWait) else lambda: None)
    return make_app(lambda: publisher.current, health_of, index=landing(backend.name, publisher),
                    ready=lambda: readiness(*health(publisher.current, time.time(), interval,
                                                    backend.name), waiting()),
                    live=publisher)


def listen_until_stopped(agent: Agent, started: Started, app: App, stats: HttpStats,
                         ready: Callable[[Agent], None] | None) -> int:
    """Bind, accept once the first cycle is published (see `_serve`), listen until stopped;
    then stop the follower, the loop and the EMF sink, in that order; 1 if the loop died."""
    from podgpu.http.server import run_listener

    emf = agent.emf

    def first_published() -> None:
        started.loop.wait_first()  # raises what the first cycle raised: the start fails
        if started.follower is not None:
            started.follower.start()  # a list edit is loaded on its thread, applied between cycles

    def listening(addresses: list[tuple[str, int]], guard: ConnectionGuard) -> None:
        stats.guard = guard
        agent.addresses = list(addresses)
        if ready is not None:
            ready(agent)

    try:
        run_listener(app, agent.settings.http, security=agent.security, stopper=agent.stopper,
                     reload_blocking=[started.reload], ready=listening,
                     before_accept=first_published)
    except BaseException:
        if emf is not None and not agent.addresses:  # a start that fails sends nothing
            emf.abort()
            emf = None
        raise
    finally:
        if started.follower is not None:
            started.follower.stop()
        started.loop.stop()
        if emf is not None:
            emf.stop()
    return 1 if started.loop.died is not None else 0
