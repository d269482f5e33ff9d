"""The one EMF sink builder, used by `podgpu serve` and `podgpu emf`.

From `EmfSettings` (podgpu.settings) to a running-ready `EmfSink`: the agent config read and
checked, the log group and stream named as the CloudWatch agent names them, the encoder, the
destination, the bounded queue. ConfigError on bad input, before anything starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from podgpu.errors import ConfigError
from podgpu.settings import EmfSettings

if TYPE_CHECKING:
    from podgpu.sinks.cloudwatch import EmfSink
    from podgpu.sinks.cloudwatch.insights import InsightsBuilder
    from podgpu.sinks.cloudwatch.insights_encode import CombinedEncoder, CombinedSeries
    from podgpu.sinks.cloudwatch.series import SeriesBuilder
    from podgpu.sinks.cloudwatch.sink import EventEncoder, SeriesSource

log = logging.getLogger("podgpu")


def log_group_for(template: str, cluster: str, node: str) -> str:
    """The agent's default group names the cluster; so must the user when it is a template."""
    if "{ClusterName}" in template and not cluster:
        raise ConfigError(
            f"the log group {template!r} needs a cluster name: pass --cluster-name NAME (or set "
            "cluster_name in the agent config, or --emf-log-group)")
    return template.replace("{ClusterName}", cluster).replace("{NodeName}", node)


INSIGHTS_LOG_GROUP = "/aws/containerinsights/{ClusterName}/performance"
"""Container Insights' log group (the add-on's); its stream is the node name."""


def build_emf_sink(settings: EmfSettings, *, node: str,
                   series: Callable[[str], SeriesBuilder | None], what: str,
                   route_labels: dict[str, str] | None = None,
                   insights: Callable[[str], InsightsBuilder] | None = None,
                   ) -> tuple[EmfSink, str]:
    """The sink and the cluster name it uses. `series(cluster)` builds serve's SeriesBuilder
    (None for the bridge, which offers series itself, and gives the labels all its series carry
    in `route_labels`, for the log group/stream placeholders); `insights(cluster)` the Container
    Insights series with --emf-container-insights (serve only); `what` opens the start-up log
    line."""
    if settings.container_insights:
        return _with_insights(settings, node=node, series=series, what=what, insights=insights)
    return _build(settings, node=node, series=series, what=what, route_labels=route_labels)


def _with_insights(settings: EmfSettings, *, node: str,
                   series: Callable[[str], SeriesBuilder | None], what: str,
                   insights: Callable[[str], InsightsBuilder] | None) -> tuple[EmfSink, str]:
    """One sink, one queue: the declarations' events (if any) to their log group, the
    Container Insights events to `/aws/containerinsights/<cluster>/performance`, stream = the
    node name; stdout prints both."""
    from podgpu.sinks.cloudwatch import EmfSink
    from podgpu.sinks.cloudwatch.destinations import make_destination, parse_target
    from podgpu.sinks.cloudwatch.queue import EventQueue

    if insights is None:
        raise ConfigError("--emf-container-insights is for podgpu serve (it reads the GPUs "
                          "and pods itself)")
    target = parse_target(settings.destination)
    if target.kind not in ("cloudwatch", "stdout"):
        raise ConfigError(f"--emf-container-insights sends to cloudwatch or stdout, not "
                          f"--emf-destination {target} (its EMF v0 events name no log group "
                          "the agent's listener could route)")
    if settings.config:
        return _build(settings, node=node, series=series, what=what,
                      insights=lambda cluster: _insights_parts(settings, cluster, node, insights))
    encoder, source, route = _insights_parts(settings, settings.cluster_name, node, insights)
    destination = make_destination(target, log_group=route[0], log_stream=route[1],
                                   region=settings.region, endpoint_url=settings.endpoint_url,
                                   create_log_group=settings.create_log_group, insights=route)
    queue = EventQueue(settings.queue_bytes, settings.spool_dir)
    return (EmfSink(source, encoder, queue, destination, interval=settings.interval),
            settings.cluster_name)  # sampled by the series source (_insights_parts)


def _insights_parts(settings: EmfSettings, cluster: str, node: str,
                    insights: Callable[[str], InsightsBuilder]
                    ) -> tuple[CombinedEncoder, CombinedSeries, tuple[str, str]]:
    """The Container Insights encoder and series (without declarations' yet) and its (log
    group, stream); ConfigError without a cluster or node name."""
    from podgpu.sinks.cloudwatch.insights_encode import (
        CombinedEncoder,
        CombinedSeries,
        InsightsEncoder,
    )

    if not cluster:
        raise ConfigError("--emf-container-insights needs --cluster-name NAME (the ClusterName "
                          "of every event and the log group's name)")
    if not node:
        raise ConfigError("--emf-container-insights needs the node name (NODE_NAME from the "
                          "downward API): it is the NodeName and the log stream")
    group = log_group_for(INSIGHTS_LOG_GROUP, cluster, node)
    log.info("EMF Container Insights: GPU events every %g s, %s (log group %s, stream %s)",
             settings.interval, "every sample" if settings.sample_interval == 0 else
             f"one sample per {settings.sample_interval or settings.interval:g} s", group, node)
    every = settings.interval if settings.sample_interval is None else settings.sample_interval
    return (CombinedEncoder(None, InsightsEncoder(storage_resolution=settings.storage_resolution)),
            CombinedSeries(None, insights(cluster), every), (group, node))


def _build(settings: EmfSettings, *, node: str,
           series: Callable[[str], SeriesBuilder | None], what: str,
           route_labels: dict[str, str] | None = None,
           insights: Callable[[str], tuple[CombinedEncoder, CombinedSeries, tuple[str, str]]]
           | None = None) -> tuple[EmfSink, str]:
    from podgpu.sinks.cloudwatch import EmfSink, load_emf_config
    from podgpu.sinks.cloudwatch.declarations import (
        DEFAULT_LOG_GROUP,
        DEFAULT_LOG_STREAM,
        resolve_log_names,
    )
    from podgpu.sinks.cloudwatch.destinations import make_destination, parse_target
    from podgpu.sinks.cloudwatch.encode import Encoder
    from podgpu.sinks.cloudwatch.queue import EventQueue

    config = load_emf_config(settings.config)
    for w in config.warnings:
        log.warning("%s", w)
    target = parse_target(settings.destination)
    cluster = settings.cluster_name or config.cluster_name
    if target.kind == "cloudwatch" and not cluster:
        # The CloudWatch agent refuses the same ("ClusterName is not defined"): without it the
        # ClusterName dimension is missing and every dashboard and alarm finds nothing.
        raise ConfigError("--emf-destination cloudwatch needs the cluster's name: pass "
                          "--cluster-name NAME (or set cluster_name in the agent config)")
    template = settings.log_group or config.log_group_name or DEFAULT_LOG_GROUP
    if target.kind == "stdout" and not cluster:  # stdout names no group
        template = template.replace("{ClusterName}", "")
    if "{ClusterName}" in template and not cluster:
        log_group_for(template, cluster, node)  # ConfigError: the group needs a cluster name
    if not cluster and any("ClusterName" in s for d in config.declarations for s in d.dimensions):
        log.warning("EMF: no cluster name (--cluster-name): dimension sets naming ClusterName "
                    "are dropped unless the series carry ClusterName")
    builder = series(cluster)
    if builder is not None and builder.options.own_series is None:  # --emf-podgpu-series auto
        builder.own_series = config.names_podgpu_series
    if (builder is not None and builder.options.identity == "agent"
            and not builder.options.namespace
            and any("Namespace" in d for x in config.declarations for d in x.dimensions)):
        log.warning("EMF: no POD_NAMESPACE (--emf-namespace): the agent path's Namespace label is "
                    "missing, so dimension sets naming Namespace are dropped")
    labels = (builder.options.constant_labels() if builder is not None
              else {**(route_labels or {}), "ClusterName": cluster})
    per_event = target.kind in ("tcp", "udp")  # the agent's listener routes each event
    # placeholders as the agent fills them; its default stream is {JobName}
    group, stream, warnings = resolve_log_names(
        template, settings.log_stream or DEFAULT_LOG_STREAM, labels, per_event=per_event)
    if target.kind != "stdout":
        for w in warnings:
            log.warning("%s", w)
    route = (group, stream) if per_event else None
    encoder = Encoder(config, storage_resolution=settings.storage_resolution,
                      keep_unmatched=settings.keep_unmatched, route=route,
                      catalog_units=settings.identity == "workload")
    sink_encoder: EventEncoder = encoder
    source: SeriesSource | None = builder
    ci_route = None
    if insights is not None:  # --emf-container-insights beside the declarations
        ci_encoder, ci_series, ci_route = insights(cluster)
        sink_encoder = ci_encoder.with_declarations(encoder)
        source = ci_series.with_declarations(builder)
    destination = make_destination(target, log_group=group, log_stream=stream,
                                   region=settings.region, endpoint_url=settings.endpoint_url,
                                   create_log_group=settings.create_log_group, insights=ci_route)
    queue = EventQueue(settings.queue_bytes, settings.spool_dir)
    log.info("%s: %s every %g s to %s (log group %s, stream %s), namespace %s", what,
             config.path, settings.interval, target, group, stream, config.namespace)
    return EmfSink(source, sink_encoder, queue, destination, interval=settings.interval,
                   sample_every=settings.sample_interval or 0.0), cluster
