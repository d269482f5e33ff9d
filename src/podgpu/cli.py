"""The one composition root: parses flags, wires the parts, runs a command.

`podgpu [serve] [flags]` (serve is the default, so a dcgm-exporter DaemonSet's args work as they
are), `podgpu fields`, `podgpu burn`. Exit status: 0 ok, 1 runtime failure (e.g. no GPU driver),
2 bad input (flags, environment, metric list).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from podgpu import __version__, cwcommands, logs
from podgpu.attribution.attributor import build_attributor
from podgpu.attribution.base import Attributor
from podgpu.backends.base import Backend
from podgpu.config import IGNORED, OPTIONS, REFUSED, Settings, add_serve_arguments, settings_from
from podgpu.errors import AttributionError, BackendError, ConfigError, ListenError
from podgpu.fields.catalog import CATALOG
from podgpu.fields.metriclist import MetricList, load_default, load_metric_list, parse_metric_list

if TYPE_CHECKING:
    from podgpu.http.websecurity import WebSecurity
    from podgpu.model import Snapshot
    from podgpu.sim.scenario import Scenario
    from podgpu.sinks.cloudwatch import EmfSink
    from podgpu.sinks.prometheus.labels import LabelOptions

log = logging.getLogger("podgpu")
COMMANDS = ("serve", "fields", "burn", "top")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podgpu",
        description="Per-pod NVIDIA GPU metrics for Prometheus and CloudWatch, dcgm-exporter "
        "compatible, read from NVML without the DCGM daemon.",
    )
    parser.add_argument("-v", "--version", action="version", version=f"podgpu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="collect GPU metrics and serve /metrics (default)")
    add_serve_arguments(serve)
    serve.add_argument("-v", "--version", action="version", version=f"podgpu {__version__}")
    fields = sub.add_parser("fields", help="list every DCGM field podgpu can export")
    fields.add_argument("--format", choices=("table", "csv"), default="table",
                        help="table: human-readable; csv: a metric list enabling every field")
    # `burn` parses its own flags (see main) so serving never imports it.
    sub.add_parser("burn", help="GPU load generator (gpu-burn pattern): podgpu burn --help",
                   add_help=False)
    for name, (_module, text) in cwcommands.COMMANDS.items():
        sub.add_parser(name, help=f"{text}: podgpu {name} --help", add_help=False)
    sub.add_parser("top", help="GPUs and pods of one or many nodes in the terminal: "
                   "podgpu top --help", add_help=False)
    return parser


def go_style_flags(args: Sequence[str]) -> list[str]:
    """`-collectors FILE` -> `--collectors FILE`: dcgm-exporter's Go flag parser takes long flags
    with one dash, and DaemonSets written for it do (issue 9). Short flags (`-f`, `-rbmn`) stay."""
    known = {f for opt in OPTIONS for f in opt.flags}
    known |= {f for table in (IGNORED, REFUSED) for flags in table for f in flags}
    known |= {"-h", "--help", "-v", "--version"}
    out = []
    for a in args:
        name, eq, value = a.partition("=")
        if (len(name) > 2 and name[0] == "-" and name[1] != "-" and name not in known
                and "-" + name in known):
            a = "-" + name + eq + value
        out.append(a)
    return out


def burn_module() -> Any:
    """podgpu.burn, imported lazily: it is only needed by `podgpu burn`."""
    return importlib.import_module("podgpu.burn")


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0].startswith("-")
                         and args_list[0] not in ("-h", "--help", "-v", "--version")):
        args_list.insert(0, "serve")  # dcgm-exporter style: flags only
    if args_list[0] == "serve":
        args_list[1:] = go_style_flags(args_list[1:])
    if args_list[0] in cwcommands.COMMANDS:
        return cwcommands.run(args_list[0], args_list[1:])
    if args_list[0] == "burn":
        burn = burn_module()
        burn_parser = argparse.ArgumentParser(prog="podgpu burn", description=burn.__doc__)
        burn.add_arguments(burn_parser)
        return int(burn.run(burn_parser.parse_args(args_list[1:])))
    if args_list[0] == "top":  # imported lazily: rich is needed only here
        try:
            top: Any = importlib.import_module("podgpu.top")
        except ImportError as exc:
            print(f"podgpu: top needs the 'top' extra (pip install 'podgpu[top]'): {exc}",
                  file=sys.stderr)
            return 1
        top_parser = argparse.ArgumentParser(prog="podgpu top", description=top.__doc__,
                                             formatter_class=argparse.RawDescriptionHelpFormatter)
        top.add_arguments(top_parser)
        return int(top.run(top_parser.parse_args(args_list[1:])))
    parser = build_parser()
    args = parser.parse_args(args_list)
    try:
        if args.command == "fields":
            return cmd_fields(args.format)
        return cmd_serve(settings_from(args))
    except ConfigError as exc:
        print(f"podgpu: {exc}", file=sys.stderr)
        return 2
    except (BackendError, ListenError, AttributionError) as exc:
        print(f"podgpu: {exc}", file=sys.stderr)
        return 1


def cmd_fields(fmt: str) -> int:
    default = {r.name for r in load_default().metrics + load_default().labels}
    if fmt == "csv":
        print("# Every field podgpu knows (generated by `podgpu fields --format csv`).")
        print("# DCGM field, Prometheus type, help")
        for f in CATALOG:
            help_text = f'"{f.help}"' if "," in f.help else f.help
            print(f"{f.name}, {f.prom_type}, {help_text}")
        return 0
    rows = [("FIELD", "ID", "TYPE", "VALUE", "UNIT", "MIG", "DEFAULT", "READ FROM")]
    for f in CATALOG:
        rows.append((f.name, str(f.id), f.prom_type, f.value_type, f.unit or "-",
                     "yes" if f.scope == "both" else "-", "yes" if f.name in default else "-",
                     f.source.describe()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    return 0


def load_metrics(settings: Settings, kube_configuration: Any = None) -> MetricList:
    """-m (a ConfigMap through the Kubernetes API) wins over -f, as in dcgm-exporter; else -f;
    else the embedded default. `kube_configuration` is for tests (None: in-cluster)."""
    if settings.configmap_data is not None:
        from podgpu.attribution.podwatch import read_configmap

        ns, name = settings.configmap_data
        text = read_configmap(ns, name, configuration=kube_configuration)
        return parse_metric_list(text, f"configmap {ns}/{name} (key metrics)")
    if settings.collectors is None:
        return load_default()
    return load_metric_list(settings.collectors)


def make_scenario(settings: Settings) -> Scenario | None:
    """The simulated pods: the built-in scenario unless a file (or 'none') is given."""
    if not settings.simulate or settings.simulate_scenario == "none":
        return None
    from podgpu.sim.backend import parse_simulate
    from podgpu.sim.scenario import default_scenario, load_scenario

    if settings.simulate_scenario:
        return load_scenario(settings.simulate_scenario)
    return default_scenario(parse_simulate(settings.simulate)[0])


def make_backend(settings: Settings, scenario: Scenario | None = None) -> Backend:
    """The GPU backend, wrapped in the `-d` selection when one is given (issue 9)."""
    backend = _make_backend(settings, scenario)
    if settings.devices.flex:
        return backend
    from podgpu.backends.select import SelectedBackend

    return SelectedBackend(backend, settings.devices)


def _make_backend(settings: Settings, scenario: Scenario | None = None) -> Backend:
    if settings.simulate:
        from podgpu.sim.backend import SimulatedBackend, parse_simulate

        count, model = parse_simulate(settings.simulate)
        on, off = settings.simulate_burn
        return SimulatedBackend(
            count, model, on_seconds=on, off_seconds=off, scenario=scenario,
            xid_window_seconds=settings.xid_count_window_ms / 1000.0,
            clock_events_window_seconds=settings.clock_events_count_window_ms / 1000.0)
    try:
        from podgpu.backends.nvml import NvmlBackend
    except ImportError as exc:
        raise BackendError(f"the NVML backend cannot load: {exc}") from None
    return NvmlBackend(
        xid_window_seconds=settings.xid_count_window_ms / 1000.0,
        clock_events_window_seconds=settings.clock_events_count_window_ms / 1000.0,
        # a hung GPU costs at most this much of a cycle (issue 13): 0.8 interval, 1..10 s
        read_timeout_seconds=min(10.0, max(1.0, 0.8 * settings.collect_interval)),
    )


def make_attributor(settings: Settings, scenario: Scenario | None) -> Attributor | None:
    """The kubelet attributor with -k, the simulated one for a scenario, else None."""
    return build_attributor(
        kubernetes=settings.kubernetes,
        pod_resources_kubelet_socket=settings.pod_resources_kubelet_socket,
        kubernetes_gpu_id_type=settings.kubernetes_gpu_id_type,
        nvidia_resource_names=settings.nvidia_resource_names,
        kubernetes_enable_pod_uid=settings.kubernetes_enable_pod_uid,
        kubernetes_enable_pod_labels=settings.kubernetes_enable_pod_labels,
        kubernetes_pod_label_allowlist_regex=settings.kubernetes_pod_label_allowlist_regex,
        proc_root=settings.proc_root,
        node_name=settings.node_name or None,
        poll_interval_seconds=settings.collect_interval,
        scenario=scenario,
        kubernetes_enable_dra=settings.kubernetes_enable_dra,
    )


def make_web_security(settings: Settings) -> WebSecurity | None:
    """The --web-config-file, read and checked now with every certificate it names, so a bad
    file is exit 2 before anything starts; None without one."""
    if not settings.web_config_file:
        return None
    from podgpu.http.websecurity import WebSecurity

    return WebSecurity(settings.web_config_file)


def make_emf_sink(settings: Settings, metrics: MetricList, label_opts: LabelOptions) -> EmfSink:
    """The CloudWatch EMF sink from --cloudwatch-config and the --emf-* flags (ConfigError on bad
    input, before anything starts)."""
    from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
    from podgpu.sinks.cloudwatch.declarations import DEFAULT_LOG_GROUP
    from podgpu.sinks.cloudwatch.destinations import make_destination, parse_target
    from podgpu.sinks.cloudwatch.encode import Encoder
    from podgpu.sinks.cloudwatch.queue import EventQueue
    from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions

    assert settings.cloudwatch_config is not None
    config = load_emf_config(settings.cloudwatch_config)
    for w in config.warnings:
        log.warning("%s", w)
    target = parse_target(settings.emf_destination)
    cluster = settings.cluster_name or config.cluster_name
    group = settings.emf_log_group or config.log_group_name or DEFAULT_LOG_GROUP
    if "{ClusterName}" in group and not cluster and target.kind != "stdout":  # stdout: no group
        raise ConfigError(
            f"the log group {group!r} needs a cluster name: pass --cluster-name NAME (or set "
            "cluster_name in the agent config, or --emf-log-group)")
    group = group.replace("{ClusterName}", cluster).replace("{NodeName}", settings.hostname)
    if not cluster and any("ClusterName" in s for d in config.declarations for s in d.dimensions):
        log.warning("EMF: no cluster name (--cluster-name): dimension sets naming ClusterName "
                    "will be dropped")
    stream = settings.emf_log_stream or settings.hostname
    opts = SeriesOptions(labels=label_opts, job=settings.emf_job,
                         instance=f"{settings.hostname}:{settings.port}", cluster_name=cluster,
                         node_name=settings.hostname, extra=settings.emf_labels)
    route = (group, stream) if target.kind in ("tcp", "udp") else None
    encoder = Encoder(config, storage_resolution=settings.emf_storage_resolution,
                      keep_unmatched=settings.emf_keep_unmatched, route=route)
    destination = make_destination(target, log_group=group, log_stream=stream,
                                   region=settings.aws_region,
                                   endpoint_url=settings.emf_endpoint_url,
                                   create_log_group=settings.emf_create_log_group)
    queue = EventQueue(settings.emf_queue_bytes, settings.emf_spool_dir)
    log.info("EMF: %s every %g s to %s (log group %s, stream %s), namespace %s", config.path,
             settings.emf_interval, target, group, stream, config.namespace)
    return EmfSink(SeriesBuilder(metrics, opts), encoder, queue, destination,
                   interval=settings.emf_interval)


def cmd_serve(settings: Settings) -> int:
    from podgpu.collect import CollectLoop, Collector
    from podgpu.http.guard import Limits
    from podgpu.http.publish import Publisher
    from podgpu.http.server import make_app, serve_until_stopped
    from podgpu.reload import MetricListSwitch, hold_sighup, install_sighup
    from podgpu.sinks.live import LiveRenderer, ViewOptions
    from podgpu.sinks.prometheus import RenderOptions, render
    from podgpu.sinks.prometheus.labels import LabelOptions

    logs.configure(debug=settings.debug, fmt=settings.log_format)
    hold_sighup()  # from here on SIGHUP reloads or is ignored; it never kills podgpu
    for w in settings.warnings:
        log.warning("%s", w)
    metrics = load_metrics(settings)
    for w in metrics.warnings:
        log.warning("%s", w)
    if not metrics.metrics:  # issue 13: a ConfigMap under the wrong key must not look healthy
        raise ConfigError(f"{metrics.path}: the metric list has no metric rows (only comments, "
                          "blank lines or label rows), so no GPU metric would be exported")
    label_opts = LabelOptions(
        hostname=settings.hostname,
        hostname_label=settings.hostname_label,
        replace_blanks_in_model_name=settings.replace_blanks_in_model_name,
        virtual_gpus=settings.kubernetes_virtual_gpus,
        pod_uid=settings.kubernetes_enable_pod_uid,
        pod_labels=settings.kubernetes_enable_pod_labels,
        old_namespace=settings.use_old_namespace,
    )
    security = make_web_security(settings)
    emf = make_emf_sink(settings, metrics, label_opts) if settings.cloudwatch_config else None
    scenario = make_scenario(settings)
    backend = make_backend(settings, scenario)
    attributor = make_attributor(settings, scenario)
    backend.open()
    if attributor is not None:
        attributor.start()
    try:
        devices = backend.devices()
        info = backend.info()
        if settings.simulate:
            log.warning("SIMULATED GPU node: %d x %s; these values are not from real GPUs",
                        len(devices), devices[0].model if devices else "?")
        else:
            log.info("NVML: %d device(s), driver %s", len(devices), info.get("driver_version"))
        unavailable = backend.unavailable_fields()
        listed = {r.name for r in metrics.metrics}
        gone = sorted(n for n in unavailable if n in listed)
        if gone:
            log.warning("these listed fields are unavailable on this node and will be absent: %s "
                        "(%s)", ", ".join(gone), unavailable[gone[0]])
        build = (("version", __version__), ("backend", backend.name),
                 ("driver_version", info.get("driver_version", "")),
                 ("python_version", sys.version.split()[0]))

        lists = MetricListSwitch(metrics, (lambda: load_metrics(settings))
                                 if settings.collectors is not None else None)

        def render_snapshot(snapshot, timings):  # type: ignore[no-untyped-def]
            body = render(snapshot, lists.current, RenderOptions(label_opts, build, timings))
            return body + emf.render_metrics().encode() if emf is not None else body

        publisher = Publisher(render_snapshot, extra=LiveRenderer(ViewOptions(
            node=settings.hostname, backend=backend.name, version=__version__,
            interval_seconds=settings.collect_interval)))  # the page and /api/v1/snapshot

        def on_snapshot(snapshot: Snapshot, seconds: float) -> None:
            if emf is not None:
                emf.offer(snapshot)  # appends to the open window; sending is on its own thread
            publisher.publish(snapshot, seconds)
            lists.apply(collector)  # a list reloaded on SIGHUP takes over between cycles

        collector = Collector(backend, metrics.fields, attributor=attributor,
                              want_processes=attributor is not None)
        loop = CollectLoop(collector, settings.collect_interval, on_snapshot,
                           on_death=_stop_serving)
        if emf is not None:
            emf.start()
        loop.run_once()  # the first /metrics is valid as soon as the port accepts
        loop.start()
        sinks: dict[str, Callable[[], dict[str, Any]]] = {}
        if emf is not None:
            sinks["emf"] = emf.health
        if security is not None:
            sinks["web_config"] = security.health
        app = make_app(publisher, interval=settings.collect_interval, backend=backend.name,
                       sinks=sinks or None)
        if security is not None:
            security.install(app)  # every route: basic auth, headers, SANs, rate limit
        install_sighup(app, lists.request,
                       *([security.request_reload] if security is not None else []))
        try:
            limits = Limits(max_connections=settings.http_max_connections,
                            request_timeout=settings.http_request_timeout)
            asyncio.run(serve_until_stopped(
                app, settings.host, settings.port, limits=limits,
                ssl_context=security.ssl_context if security is not None else None))
        finally:
            loop.stop()
            if emf is not None:
                emf.stop()
    finally:
        if attributor is not None:
            attributor.close()
        backend.close()
    return 1 if loop.died is not None else 0


def _stop_serving(_exc: BaseException) -> None:
    """The collect loop died: stop the server as SIGTERM would, and exit 1 (issue 13)."""
    signal.raise_signal(signal.SIGTERM)


__all__ = ["main", "parse_metric_list"]
