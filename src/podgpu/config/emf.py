"""The options `serve` and `emf` share: the CloudWatch EMF sink's and logging's, one table each,
and the one place that turns them into `EmfSettings` / `LogSettings`."""

from __future__ import annotations

from podgpu.config import values as v
from podgpu.errors import ConfigError
from podgpu.options import Option, Resolved, parse_bool
from podgpu.settings import (
    DEFAULT_EMF_INTERVAL,
    DEFAULT_EMF_QUEUE_BYTES,
    EmfSettings,
    LogSettings,
)

LOG_OPTIONS: tuple[Option, ...] = (
    Option(("--debug",), "log.debug", "DCGM_EXPORTER_DEBUG", False, "debug logging", parse_bool,
           True),
    Option(("--log-format",), "log.format", "DCGM_EXPORTER_LOG_FORMAT", "text",
           "log format: text or json", v.choice("text", "json"), metavar="FMT"),
)

EMF_OPTIONS: tuple[Option, ...] = (
    Option(("--cloudwatch-config",), "emf.config", "PODGPU_CLOUDWATCH_CONFIG", None,
           "send EMF to CloudWatch using this CloudWatch agent config (its emf_processor "
           "metric_declaration), the whole agent JSON or just the emf_processor object",
           metavar="FILE"),
    Option(("--emf-destination",), "emf.destination", "PODGPU_EMF_DESTINATION", "cloudwatch",
           "cloudwatch (PutLogEvents), stdout, tcp://HOST:PORT or udp://HOST:PORT (the agent's "
           "EMF listener, port 25888)", metavar="DEST"),
    Option(("--cluster-name",), "emf.cluster_name", "PODGPU_CLUSTER_NAME", "",
           "the ClusterName label and log group name (default: the config's cluster_name)",
           metavar="NAME", shown="the config's"),
    Option(("--aws-region",), "emf.region", "AWS_REGION", None,
           "AWS region of CloudWatch Logs (default: the AWS SDK's own lookup)", metavar="REGION"),
    Option(("--emf-endpoint-url",), "emf.endpoint_url", "PODGPU_EMF_ENDPOINT_URL", None,
           "CloudWatch Logs endpoint URL (VPC endpoints, emulators)", metavar="URL"),
    Option(("--emf-log-group",), "emf.log_group", "PODGPU_EMF_LOG_GROUP", None,
           "log group (default: the config's log_group_name, else "
           "/aws/containerinsights/{ClusterName}/prometheus)", metavar="NAME"),
    Option(("--emf-log-stream",), "emf.log_stream", "PODGPU_EMF_LOG_STREAM", None,
           "log stream (default: the node name, one stream per node)", metavar="NAME"),
    Option(("--emf-create-log-group",), "emf.create_log_group", "PODGPU_EMF_CREATE_LOG_GROUP",
           True, "create the log group when it is missing", parse_bool, True),
    Option(("--emf-interval",), "emf.interval", "PODGPU_EMF_INTERVAL", DEFAULT_EMF_INTERVAL,
           "seconds per EMF event; every collected sample is kept in its value arrays",
           v.seconds_between(1.0, v.MAX_EMF_INTERVAL), metavar="SECONDS"),
    Option(("--emf-storage-resolution",), "emf.storage_resolution",
           "PODGPU_EMF_STORAGE_RESOLUTION", 60,
           "CloudWatch storage resolution: 60 (standard) or 1 (high resolution)", v.resolution,
           metavar="1|60"),
    Option(("--emf-queue-bytes",), "emf.queue_bytes", "PODGPU_EMF_QUEUE_BYTES",
           DEFAULT_EMF_QUEUE_BYTES, "bound of the unsent-event queue (e.g. 16M); past it the "
           "oldest events are dropped and counted", v.size, metavar="SIZE", shown="8M"),
    Option(("--emf-spool-dir",), "emf.spool_dir", "PODGPU_EMF_SPOOL_DIR", None,
           "keep unsent events in this directory too, so they survive a restart", metavar="DIR"),
    Option(("--emf-sample-interval",), "emf.sample_interval", "PODGPU_EMF_SAMPLE_INTERVAL", None,
           "N: one sample per N seconds into every EMF event, declarations and Container "
           "Insights alike, and counters as one delta per sample (a scrape every N s; N = "
           "--emf-interval: one value per event); 0: every collected sample (the add-on's "
           "high-frequency mode). Unset: Container Insights one sample per --emf-interval, as "
           "the add-on's default, declarations every sample (docs/cloudwatch.md)",
           v.seconds_between(0.0, v.MAX_EMF_INTERVAL), metavar="SECONDS", shown="unset"),
    Option(("--emf-identity",), "emf.identity", "PODGPU_EMF_IDENTITY", "agent",
           "agent: namespace, names, dimensions and units as the CloudWatch agent path has them "
           "(for serve: Namespace = podgpu's namespace); workload: Namespace = the workload's namespace, "
           "NodeName, catalog units", v.choice("agent", "workload"), metavar="agent|workload"),
    Option(("--emf-keep-unmatched",), "emf.keep_unmatched", "PODGPU_EMF_KEEP_UNMATCHED", False,
           "also send series no declaration extracts, as plain (billed) log events", parse_bool,
           True),
)
"""Shared by serve and emf. serve adds --emf-label and --emf-job (SERVE_EMF_OPTIONS); emf names
its series' labels with --target-label and --job, as a Prometheus scrape job would."""

SERVE_EMF_OPTIONS: tuple[Option, ...] = (
    Option(("--emf-label",), "emf.labels", "PODGPU_EMF_LABELS", (),
           "extra label KEY=VALUE on every EMF series (repeatable, or comma-separated), e.g. "
           "Service=nvidia-dcgm-exporter for the seed post's declarations", v.labels,
           metavar="KEY=VALUE", append=True),
    Option(("--emf-job",), "emf.job", "PODGPU_EMF_JOB", "kubernetes-service-endpoints",
           "the job label EMF series carry: the name of the CloudWatch agent's scrape job they "
           "replace (the agent's default Kubernetes job by default)", metavar="NAME"),
    Option(("--emf-namespace",), "emf.namespace", "POD_NAMESPACE", "",
           "the namespace podgpu runs in (the agent path's Namespace label; set POD_NAMESPACE "
           "from the downward API)", metavar="NAME"),
    Option(("--emf-pod-name",), "emf.pod_name", "POD_NAME", "",
           "podgpu's own pod name (the agent path's pod_name label; POD_NAME from the downward "
           "API)", metavar="NAME"),
    Option(("--emf-container-name",), "emf.container_name", "PODGPU_EMF_CONTAINER_NAME",
           "podgpu", "podgpu's own container name (the agent path's container_name label; the "
           "shipped manifests' container is podgpu)", metavar="NAME"),
    Option(("--emf-service",), "emf.service", "PODGPU_EMF_SERVICE", "",
           "the Service in front of podgpu that the agent's service-endpoints job would have "
           "scraped (the agent path's Service label)", metavar="NAME", shown="unset"),
    Option(("--emf-service-labels",), "emf.service_labels", "PODGPU_EMF_SERVICE_LABELS", (),
           "that Service's labels, KEY=VALUE as on the object (comma-separated, repeatable); "
           "mapped as the agent's job maps them (app.kubernetes.io/name -> "
           "app_kubernetes_io_name)", v.service_labels, metavar="KEY=VALUE", append=True,
           shown="unset"),
    Option(("--emf-podgpu-series",), "emf.podgpu_series", "PODGPU_EMF_PODGPU_SERIES", "auto",
           "offer podgpu's own series (podgpu_gpu_allocation, podgpu_pod_*, the accounting "
           "counters) to the declarations: true, false, or auto (only when a metric_selectors "
           "pattern names podgpu_, so wildcard selectors select what the agent path had)",
           v.choice("auto", "true", "false"), metavar="auto|true|false"),
    Option(("--emf-container-insights",), "emf.container_insights",
           "PODGPU_EMF_CONTAINER_INSIGHTS", False,
           "send the CloudWatch Container Insights GPU events (container_gpu_*, pod_gpu_*, "
           "node_gpu_*) to /aws/containerinsights/<cluster>/performance, stream = the node name; "
           "alone or beside --cloudwatch-config", parse_bool, True),
)
_FROM_DOWNWARD_API = frozenset(("emf.namespace", "emf.pod_name", "emf.container_name",
                                "emf.service", "emf.service_labels"))
"""Set by the manifests whether or not EMF is on: not an EMF flag given by mistake."""


def section(resolved: Resolved, prefix: str) -> dict[str, object]:
    """The values whose dest is `prefix.<field>`, keyed by field."""
    start = prefix + "."
    return {k[len(start):]: val for k, val in resolved.values.items() if k.startswith(start)}


def log_settings(resolved: Resolved) -> LogSettings:
    return LogSettings(**section(resolved, "log"))  # type: ignore[arg-type]


def emf_settings(resolved: Resolved, options: tuple[Option, ...], *, required: bool
                 ) -> EmfSettings | None:
    """The EMF settings, or None when --cloudwatch-config is unset and not `required`; any other
    EMF flag without it is a ConfigError (it would be silently ignored)."""
    values = section(resolved, "emf")
    if not values["config"] and values.get("container_insights"):
        values["config"] = ""
        return EmfSettings(**values)  # type: ignore[arg-type]
    if not values["config"]:
        if required:
            raise ConfigError("--cloudwatch-config FILE is required (the CloudWatch agent config "
                              "whose metric_declaration says what to extract)")
        changed = [o.name for o in options if o.dest.startswith("emf.")
                   and o.dest not in _FROM_DOWNWARD_API and resolved.values[o.dest] != o.default]
        if changed:
            raise ConfigError(f"{changed[0]} needs --cloudwatch-config FILE or "
                              "--emf-container-insights (the EMF sink is off)")
        return None
    return EmfSettings(**values)  # type: ignore[arg-type]
