"""The parts of `podgpu serve`'s agent, each made from its own settings object (podgpu.settings)
and validated before anything starts (exit 2 on bad input): the metric list, the scenario, the
backend, the attributor, the web security and the EMF sink. podgpu.agent assembles them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from podgpu.errors import BackendError
from podgpu.settings import CollectSettings, HttpSettings, KubernetesSettings, ServeSettings

if TYPE_CHECKING:
    from podgpu.attribution.base import Attributor
    from podgpu.backends.base import Backend
    from podgpu.backends.nvml_ahead import Warmup
    from podgpu.fields.metriclist import MetricList
    from podgpu.http.websecurity import WebSecurity
    from podgpu.sim.scenario import Scenario
    from podgpu.sinks.cloudwatch import EmfSink
    from podgpu.sinks.cloudwatch.insights import InsightsBuilder
    from podgpu.sinks.prometheus.labels import LabelOptions

log = logging.getLogger("podgpu")


def load_metrics(collect: CollectSettings, kube_configuration: Any = None) -> MetricList:
    """-m (a ConfigMap through the Kubernetes API) wins over -f, as in dcgm-exporter; else -f;
    else dcgm-exporter's default path when a file is there; else the embedded default.
    `kube_configuration` is for tests (None: in-cluster)."""
    from podgpu.errors import ConfigError, MetricListError
    from podgpu.fields.metriclist import (
        load_default,
        load_metric_list,
        parse_metric_list,
        resolve_list_path,
    )

    if collect.configmap is not None:
        from podgpu.attribution.configmap import read_configmap

        ns, name = collect.configmap
        text = read_configmap(ns, name, configuration=kube_configuration)
        return parse_metric_list(text, f"configmap {ns}/{name} (key metrics)")
    path = resolve_list_path(collect.collectors, collect.default_list)
    if path is None:
        return load_default()
    try:
        return load_metric_list(path)
    except MetricListError as exc:
        if exc.line or not collect.collectors:
            raise
        # the file itself cannot be read (a FIFO, /dev/zero, /proc/self/mem): name the flag
        raise ConfigError(f"-f {path}: {exc.problem}") from None


def make_scenario(settings: ServeSettings) -> Scenario | None:
    """The simulated pods: the built-in scenario unless a file (or 'none') is given."""
    sim = settings.simulation
    if sim is None or sim.scenario == "none":
        return None
    from podgpu.sim.backend import parse_simulate
    from podgpu.sim.scenario import default_scenario, load_scenario

    if sim.scenario:
        return load_scenario(sim.scenario)
    return default_scenario(parse_simulate(sim.spec)[0])


def make_backend(settings: ServeSettings, scenario: Scenario | None = None,
                 warmup: Warmup | None = None) -> Backend:
    """The GPU backend, wrapped in the `-d` selection; the default `f` too, which
    drops a MIG GPU's parent series beside its instances. `warmup`: what NVML started before
    the flags were parsed (podgpu/ahead.py), for the NVML backend to adopt."""
    backend = _make_backend(settings, scenario, warmup)
    if settings.collect.devices.flex and settings.simulation is not None and (
            scenario is None or not scenario.mig):
        return backend  # a simulated node without MIG: flex keeps everything
    from podgpu.backends.select import SelectedBackend

    selected = SelectedBackend(backend, settings.collect.devices)
    if settings.collect.wait_for_driver and settings.simulation is None:
        from podgpu.backends.driverwait import DriverWait

        return DriverWait(selected)
    return selected


def _make_backend(settings: ServeSettings, scenario: Scenario | None, warmup: Warmup | None
                  ) -> Backend:
    c = settings.collect
    if settings.simulation is not None:
        from podgpu.sim.backend import SimulatedBackend, parse_simulate

        count, model = parse_simulate(settings.simulation.spec)
        on, off = settings.simulation.burn
        return SimulatedBackend(
            count, model, on_seconds=on, off_seconds=off, scenario=scenario,
            xid_window_seconds=c.xid_window_ms / 1000.0,
            clock_events_window_seconds=c.clock_events_window_ms / 1000.0,
            clock_events_sample_seconds=c.clock_events_sample_ms / 1000.0)
    try:
        from podgpu.backends.nvml import NvmlBackend
    except ImportError as exc:
        raise BackendError(f"the NVML backend cannot load: {exc}") from None
    return NvmlBackend(
        xid_window_seconds=c.xid_window_ms / 1000.0,
        clock_events_window_seconds=c.clock_events_window_ms / 1000.0,
        clock_events_sample_seconds=c.clock_events_sample_ms / 1000.0,
        # a hung GPU costs at most this much of a cycle: 0.8 interval, 1..10 s
        read_timeout_seconds=min(10.0, max(1.0, 0.8 * c.interval)),
        warmup=warmup,
    )


def make_attributor(kubernetes: KubernetesSettings, scenario: Scenario | None
                    ) -> Attributor | None:
    """The kubelet attributor with -k (it wins over a scenario: simulated GPUs, real kubelet),
    else the simulated one for a scenario, else None (and the Kubernetes clients stay
    unimported)."""
    if kubernetes.enabled:
        from podgpu.attribution.attributor import build_attributor

        return build_attributor(kubernetes)
    if scenario is None:
        return None
    from podgpu.attribution.attributor import enrich_options
    from podgpu.sim.scenario import SimulatedAttributor

    return SimulatedAttributor(scenario, enrich_options(kubernetes))


def make_web_security(http: HttpSettings) -> WebSecurity | None:
    """The --web-config-file (serve's and emf's), read and checked now with every certificate
    it names, so a bad file is exit 2 before anything starts; None without one."""
    if not http.web_config_file:
        return None
    from podgpu.http.websecurity import WebSecurity

    return WebSecurity(http.web_config_file)


def make_emf_sink(settings: ServeSettings, metrics: MetricList, label_opts: LabelOptions,
                  attributor: Attributor | None = None) -> EmfSink:
    """serve's EMF sink: the one builder (podgpu.emfbuild) with podgpu's own series, and the
    Container Insights series with --emf-container-insights (`attributor` names the pods'
    workloads)."""
    from podgpu.emfbuild import build_emf_sink
    from podgpu.sinks.cloudwatch.series import SeriesBuilder, SeriesOptions

    emf = settings.emf
    assert emf is not None
    host = settings.output.hostname

    def series(cluster: str) -> SeriesBuilder:
        opts = SeriesOptions(labels=label_opts, job=emf.job,
                             instance=f"{host}:{settings.http.port}", cluster_name=cluster,
                             node_name=host, extra=emf.labels, identity=emf.identity,
                             namespace=emf.namespace, pod_name=emf.pod_name,
                             container_name=emf.container_name, service=emf.service,
                             service_labels=emf.service_labels,
                             own_series={"true": True, "false": False}.get(emf.podgpu_series))
        return SeriesBuilder(metrics, opts)

    return build_emf_sink(emf, node=host, series=series, what="EMF",
                          insights=lambda cluster: make_insights(settings, cluster, attributor)
                          )[0]


def make_insights(settings: ServeSettings, cluster: str, attributor: Attributor | None
                  ) -> InsightsBuilder:
    """The Container Insights series: the Node object read through the API (the simulated
    node's own with --simulate), the pods' workloads from the pod watch when there is one, the
    Services selecting them from a Service list/watch (a simulated node's too when it runs
    in a pod, where the API is)."""
    from podgpu.attribution.services import ServiceWatcher
    from podgpu.sinks.cloudwatch.insights import (
        FixedNode,
        InsightsBuilder,
        InsightsOptions,
        NodeSource,
        ServiceSource,
        no_pods,
    )

    host = settings.output.hostname
    node: NodeSource
    services: ServiceSource | None = ServiceWatcher()
    pods = getattr(attributor, "pods", None)  # the pod watch's (KubeletAttributor.pods)
    if settings.simulation is not None and not settings.kubernetes.enabled:
        from podgpu.sim.backend import parse_simulate
        from podgpu.sim.node import scenario_pods, simulated_node

        count, model = parse_simulate(settings.simulation.spec)
        node = FixedNode(simulated_node(model, count, host))
        scenario = make_scenario(settings)
        sim_pods = scenario_pods(scenario) if scenario is not None else {}
        pods = lambda: sim_pods  # noqa: E731
        if not settings.kubernetes.in_cluster:
            services = None
    else:
        from podgpu.attribution.nodeinfo import NodeLookup

        node = NodeLookup(settings.kubernetes.node_name)
    from podgpu.accounting.holders import AccountingShares

    return InsightsBuilder(InsightsOptions(cluster_name=cluster, node_name=host), node,
                           pods if callable(pods) else no_pods, services,
                           shares=AccountingShares())
