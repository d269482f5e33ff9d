"""Frozen per-component settings, validated once at start and passed whole.

Each component gets its own object (collect, Kubernetes, HTTP, EMF, simulation, output labels,
logging) instead of one flat bag of ~50 fields, so `build_attributor(settings.kubernetes)` needs
nothing else and a component cannot read a setting it does not own. Built from flags, the
environment and defaults by the option tables (config/serve.py for `serve`, bridge/options.py for
`emf`); nothing here reads the environment.

Units: dcgm-exporter's flags keep its milliseconds (`-c`, `-x`, the count windows: fields named
`_ms`); podgpu's own flags are in seconds (every other duration). `plan --collect-interval` is
`serve -c`'s flag and so in milliseconds too.
"""

from __future__ import annotations

from typing import NamedTuple

from podgpu.errors import ConfigError
from podgpu.model.selection import DeviceSelection

DEFAULT_COLLECT_INTERVAL_MS = 1000  # measured: bench/RESULTS.md "Choosing the default interval"
DEFAULT_WINDOW_MS = 300_000
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_HTTP_MAX_CONNECTIONS = 2048  # http/guard.py; bench/RESULTS.md "HTTP load"
DEFAULT_HTTP_REQUEST_TIMEOUT = 15.0
DEFAULT_EMF_INTERVAL = 60.0
DEFAULT_EMF_QUEUE_BYTES = 8 * 1024 * 1024  # >= 2 h of an 8-GPU node: bench/RESULTS.md "EMF"


class CollectSettings(NamedTuple):
    """What is read from the GPUs and how often (milliseconds, as dcgm-exporter's flags)."""

    interval_ms: int = DEFAULT_COLLECT_INTERVAL_MS
    collectors: str | None = None
    """-f: a metric list file; None: `default_list` when that file exists, else the embedded
    default (as dcgm-exporter, whose -f defaults to that path)."""
    default_list: str = "/etc/dcgm-exporter/default-counters.csv"
    """Where dcgm-exporter's charts mount the list when no -f is given (a parameter for tests)."""
    hpc_job_mapping_dir: str = ""
    """--hpc-job-mapping-dir: HPC job files per GPU ('' off; attribution/hpcjobs.py)."""
    list_poll_seconds: float = 1.0
    """How often the list file is checked for edits (fields/listfollow.py)."""
    configmap: tuple[str, str] | None = None
    """-m: (namespace, name) of a ConfigMap whose `metrics` key holds the list; wins over -f."""
    devices: DeviceSelection = DeviceSelection()
    """-d: which GPUs / MIG GPU instances get series (model/selection.py)."""
    xid_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_sample_ms: int = 30000
    """One clock-event bitmask sample counts per this many ms: the -c the user gave (the
    interval dcgm-exporter would sample at), else dcgm-exporter's default 30000."""
    wait_for_driver: bool = False
    """NVML not there yet: retry in the background (backends/driverwait.py) instead of exit 1;
    --wait-for-driver auto resolves it to "in Kubernetes"."""

    @property
    def interval(self) -> float:
        """The collect interval in seconds."""
        return self.interval_ms / 1000.0


class KubernetesSettings(NamedTuple):
    """Pod attribution (-k and its companions); `poll_interval` (s) follows the collect interval."""

    enabled: bool = False
    kubelet_socket: str = DEFAULT_KUBELET_SOCKET
    gpu_id_type: str = "uid"
    """uid (NVIDIA device plugin) or device-name (GKE); validated by the option table."""
    resource_names: tuple[str, ...] = ()
    """Extra extended-resource names that are NVIDIA GPUs."""
    virtual_gpus: bool = False
    pod_uid: bool = False
    pod_labels: bool = False
    label_allowlist: tuple[str, ...] = ()
    """RE2 patterns of pod label keys to copy; empty copies every label."""
    proc_root: str = "/proc"
    dra: bool = False
    node_name: str = ""
    """NODE_NAME ('' when unset): scopes the pod watch to this node."""
    in_cluster: bool = False
    """KUBERNETES_SERVICE_HOST is set: podgpu runs in a pod, where the API server is."""
    poll_interval: float = 1.0

    def checked(self) -> KubernetesSettings:
        """These settings, or a ConfigError naming the bad value. A NamedTuple runs no code when
        built, so whoever builds one from input calls this (config/serve.py, after the option
        table's own messages)."""
        if self.gpu_id_type not in ("uid", "device-name"):
            raise ConfigError(f"--kubernetes-gpu-id-type {self.gpu_id_type!r}: expected uid or "
                              "device-name")
        if self.enabled and not self.kubelet_socket:
            raise ConfigError("--pod-resources-kubelet-socket must not be empty")
        if not self.poll_interval > 0:
            raise ConfigError(f"kubelet poll interval must be > 0 s, got {self.poll_interval}")
        return self


class HttpSettings(NamedTuple):
    """The listener of /metrics, /health and the live view (seconds)."""

    host: str | None = None
    """None: every interface."""
    port: int | None = 9400
    """None: no listener (`podgpu emf --address off`)."""
    max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_HTTP_REQUEST_TIMEOUT
    web_config_file: str | None = None
    """exporter-toolkit web config (TLS, client certificates, basic auth): docs/web-config.md."""


class EmfSettings(NamedTuple):
    """The CloudWatch EMF sink, the same for `serve` and `emf` (docs/cloudwatch.md; seconds)."""

    config: str
    """--cloudwatch-config: the CloudWatch agent config holding the metric declarations ('':
    none, with `container_insights`)."""
    destination: str = "cloudwatch"
    cluster_name: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    log_group: str | None = None
    log_stream: str | None = None
    create_log_group: bool = True
    interval: float = DEFAULT_EMF_INTERVAL
    storage_resolution: int = 60
    queue_bytes: int = DEFAULT_EMF_QUEUE_BYTES
    spool_dir: str | None = None
    keep_unmatched: bool = False
    labels: tuple[tuple[str, str], ...] = ()
    """--emf-label: extra KEY=VALUE on every series."""
    job: str = "kubernetes-service-endpoints"
    """--emf-job: the agent scrape job's name (its default job's)."""
    identity: str = "agent"
    """--emf-identity: agent (the agent path's labels) or workload (podgpu's richer ones)."""
    namespace: str = ""
    """--emf-namespace / POD_NAMESPACE: podgpu's own namespace (the agent's `Namespace`)."""
    pod_name: str = ""
    """--emf-pod-name / POD_NAME: podgpu's own pod (the agent's `pod_name`)."""
    container_name: str = "podgpu"
    """--emf-container-name: podgpu's own container (the agent's `container_name`)."""
    service: str = ""
    """--emf-service: the Service in front of podgpu (the agent's `Service`)."""
    service_labels: tuple[tuple[str, str], ...] = ()
    """--emf-service-labels: that Service's labels, named as the agent's labelmap names them."""
    sample_interval: float | None = None
    """--emf-sample-interval: 0 keeps every collected sample; N keeps one per N s (the agent
    path's statistics at a scrape interval of N), for every event; None (unset): Container
    Insights one per `interval` (the add-on's default), the declarations every sample."""
    podgpu_series: str = "auto"
    """--emf-podgpu-series: offer podgpu's own per-pod and accounting series to the
    declarations: auto (when a metric_selectors pattern names `podgpu_`), true or false."""
    container_insights: bool = False
    """--emf-container-insights: also (or only, with `config` '') the Container Insights GPU
    events, to their own log group."""


class SimulationSettings(NamedTuple):
    """--simulate: a GPU node without a GPU (podgpu.sim)."""

    spec: str
    """N or NxMODEL."""
    scenario: str | None = None
    """A scenario file, 'none', or None for the built-in scenario."""
    burn: tuple[float, float] = (20.0, 20.0)
    """Busy and idle seconds of the gpu-burn pattern."""


class OutputSettings(NamedTuple):
    """How series are labelled (dcgm-exporter's label flags)."""

    hostname: str = ""
    hostname_label: str = "Hostname"
    replace_blanks_in_model_name: bool = False
    old_namespace: bool = False
    """-o: dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name)."""


class AccountingSettings(NamedTuple):
    """Per-pod GPU accounting counters (docs/accounting.md)."""

    enabled: bool = True
    grace_seconds: float = 600.0
    """How long a finished pod's counters stay exported."""
    max_gap_seconds: float = 300.0
    """Longest gap between two snapshots that is integrated (podgpu stalled beyond it)."""


class LogSettings(NamedTuple):
    debug: bool = False
    format: str = "text"


class ServeSettings(NamedTuple):
    """Everything `podgpu serve` needs, one object per component; `emf` and `simulation` are None
    when off. `warnings` (ignored dcgm-exporter flags, clamped values) are logged at start."""

    collect: CollectSettings = CollectSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    http: HttpSettings = HttpSettings()
    output: OutputSettings = OutputSettings()
    log: LogSettings = LogSettings()
    emf: EmfSettings | None = None
    simulation: SimulationSettings | None = None
    accounting: AccountingSettings = AccountingSettings()
    warnings: tuple[str, ...] = ()
