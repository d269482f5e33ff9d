"""Frozen settings from flags, environment and defaults (flag > env > default), validated at start.

Flags keep dcgm-exporter's spellings and environment variables where dcgm-exporter has them
(reference/dcgm-exporter.md §2.1), so an existing DaemonSet's args and env keep working. A
dcgm-exporter flag podgpu does not implement is accepted with a warning when ignoring it is
harmless, and refused with a ConfigError when ignoring it would silently change what is exported or
who may read it. No other module reads os.environ (STYLE rule 8).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podgpu.errors import ConfigError
from podgpu.model.selection import DeviceSelection, parse_device_selection
from podgpu.re2compat import check_go

DEFAULT_ADDRESS = ":9400"
DEFAULT_COLLECT_INTERVAL_MS = 1000  # measured: bench/RESULTS.md "Choosing the default interval"
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_WINDOW_MS = 300_000
MIN_COLLECT_INTERVAL_MS = 100
MAX_COLLECT_INTERVAL_MS = 3_600_000  # an hour; beyond it the loop's timers overflow (issue 13)
MAX_WINDOW_MS = 7 * 24 * 3_600_000  # a week of XID / clock-event history
MAX_BURN_SECONDS = 86_400.0
DEFAULT_HTTP_MAX_CONNECTIONS = 2048  # http/guard.py; bench/RESULTS.md "HTTP load"
DEFAULT_HTTP_REQUEST_TIMEOUT = 15.0
DEFAULT_EMF_INTERVAL = 60.0
DEFAULT_EMF_QUEUE_BYTES = 8 * 1024 * 1024  # >= 2 h of an 8-GPU node: bench/RESULTS.md "EMF"
MAX_EMF_INTERVAL = 3600.0


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "t", "yes", "y", "on"):
        return True
    if t in ("0", "false", "f", "no", "n", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `podgpu serve` needs, validated. Durations in seconds unless named _ms."""

    collectors: str | None = None
    address: str = DEFAULT_ADDRESS
    host: str | None = None
    port: int = 9400
    collect_interval_ms: int = DEFAULT_COLLECT_INTERVAL_MS
    simulate: str | None = None
    simulate_scenario: str | None = None
    simulate_burn: tuple[float, float] = (20.0, 20.0)
    hostname: str = ""
    hostname_label: str = "Hostname"
    replace_blanks_in_model_name: bool = False
    debug: bool = False
    log_format: str = "text"
    xid_count_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_count_window_ms: int = DEFAULT_WINDOW_MS
    kubernetes: bool = False
    pod_resources_kubelet_socket: str = DEFAULT_KUBELET_SOCKET
    kubernetes_gpu_id_type: str = "uid"
    nvidia_resource_names: tuple[str, ...] = ()
    kubernetes_virtual_gpus: bool = False
    kubernetes_enable_pod_uid: bool = False
    kubernetes_enable_pod_labels: bool = False
    kubernetes_pod_label_allowlist_regex: tuple[str, ...] = ()
    proc_root: str = "/proc"
    http_max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS
    http_request_timeout: float = DEFAULT_HTTP_REQUEST_TIMEOUT
    use_old_namespace: bool = False
    """-o: dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name)."""
    devices: DeviceSelection = field(default_factory=DeviceSelection)
    """-d: which GPUs / MIG GPU instances get series (model/selection.py)."""
    kubernetes_enable_dra: bool = False
    """Attribute GPUs allocated through DRA (driver gpu.nvidia.com) like device-plugin GPUs."""
    configmap_data: tuple[str, str] | None = None
    """-m: (namespace, name) of a ConfigMap whose `metrics` key holds the metric list."""
    web_config_file: str | None = None
    """exporter-toolkit web config (TLS, client certificates, basic auth): docs/security.md"""
    # CloudWatch EMF sink (docs/cloudwatch.md); off unless cloudwatch_config is set
    cloudwatch_config: str | None = None
    emf_destination: str = "cloudwatch"
    cluster_name: str = ""
    aws_region: str | None = None
    emf_endpoint_url: str | None = None
    emf_log_group: str | None = None
    emf_log_stream: str | None = None
    emf_create_log_group: bool = True
    emf_interval: float = DEFAULT_EMF_INTERVAL
    emf_storage_resolution: int = 60
    emf_queue_bytes: int = DEFAULT_EMF_QUEUE_BYTES
    emf_spool_dir: str | None = None
    emf_keep_unmatched: bool = False
    emf_labels: tuple[tuple[str, str], ...] = ()
    emf_job: str = "podgpu"
    node_name: str = ""
    """NODE_NAME from the environment ('' when unset): scopes the pod watch to this node."""
    warnings: tuple[str, ...] = field(default=())

    @property
    def collect_interval(self) -> float:
        return self.collect_interval_ms / 1000.0


@dataclass(frozen=True, slots=True)
class Option:
    """One serve flag: its spellings, environment variable, default, parser and help."""

    flags: tuple[str, ...]
    dest: str
    env: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    is_bool: bool = False
    metavar: str | None = None
    append: bool = False
    """Repeatable flag; the values are joined with commas before `parse`."""


def _ms(text: str) -> int:
    if not text.strip().lstrip("-").isdigit():
        raise ValueError(f"expected milliseconds as an integer, got {text!r}")
    return int(text)


def _burn(text: str) -> tuple[float, float]:
    on, sep, off = text.partition(",")
    try:
        pair = (float(on), float(off))
    except ValueError:
        pair = (-1.0, -1.0)
    if not sep or not (0 < pair[0] <= MAX_BURN_SECONDS and 0 <= pair[1] <= MAX_BURN_SECONDS):
        # also refuses nan and inf: comparisons with nan are false
        raise ValueError(f"expected ON,OFF seconds with 0 < ON <= {MAX_BURN_SECONDS:g} and "
                         f"0 <= OFF <= {MAX_BURN_SECONDS:g}, got {text!r}")
    return pair


def _connections(text: str) -> int:
    if not text.strip().isdigit() or not 16 <= int(text) <= 1_000_000:
        raise ValueError(f"expected a whole number of connections in 16..1000000, got {text!r}")
    return int(text)


def _request_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not 1.0 <= value <= 600.0:  # also refuses nan
        raise ValueError(f"must be between 1 and 600 seconds, got {text!r}")
    return value


def _configmap(text: str) -> tuple[str, str] | None:
    """`NAMESPACE:NAME` (dcgm-exporter's --configmap-data); 'none' or '' means not set."""
    t = text.strip()
    if t.lower() in ("", "none"):
        return None
    ns, sep, name = t.partition(":")
    if not sep or not ns or not name or ":" in name:
        raise ValueError(f"expected NAMESPACE:NAME or none, got {text!r}")
    return ns, name


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not (value == value and 1.0 <= value <= MAX_EMF_INTERVAL):  # value == value: not NaN
        raise ValueError(f"must be between 1 and {MAX_EMF_INTERVAL:g} seconds, got {text!r}")
    return value


def _resolution(text: str) -> int:
    if text.strip() not in ("1", "60"):
        raise ValueError(f"use 1 (high resolution) or 60 (standard), got {text!r}")
    return int(text)


def _size(text: str) -> int:
    """Bytes, with an optional K/M/G (binary) suffix: 16M = 16 MiB."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if scale != 1 else t
    if not digits.isdigit() or int(digits) * scale < 64 * 1024 or int(digits) * scale > 1 << 34:
        raise ValueError(f"expected a size between 64K and 16G such as 16M, got {text!r}")
    return int(digits) * scale


_LABEL_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:.\-]{0,249}")


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in _csv(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _LABEL_NAME.fullmatch(key) or not value.strip():
            raise ValueError(f"expected KEY=VALUE with a label name and a non-empty value, "
                             f"got {item!r}")
        if len(value.strip()) > 1024:
            raise ValueError(f"{key}: a CloudWatch dimension value is at most 1024 characters")
        out.append((key, value.strip()))
    return tuple(out)


OPTIONS: tuple[Option, ...] = (
    Option(("-f", "--collectors"), "collectors", "DCGM_EXPORTER_COLLECTORS", None,
           "metric list in dcgm-exporter's CSV format (default: the embedded default list, "
           "same active rows as dcgm-exporter's default-counters.csv)", metavar="FILE"),
    Option(("-a", "--address"), "address", "DCGM_EXPORTER_LISTEN", DEFAULT_ADDRESS,
           "listen address HOST:PORT; ':9400' listens on every interface, '[::1]:9400' for IPv6",
           metavar="ADDR"),
    Option(("-c", "--collect-interval"), "collect_interval_ms", "DCGM_EXPORTER_INTERVAL",
           DEFAULT_COLLECT_INTERVAL_MS, "collection interval in milliseconds", _ms, metavar="MS"),
    Option(("--simulate",), "simulate", "PODGPU_SIMULATE", None,
           "simulate a GPU node instead of reading NVML: N or NxMODEL (H100, H200, A100, A10G)",
           metavar="SPEC"),
    Option(("--simulate-scenario",), "simulate_scenario", "PODGPU_SIMULATE_SCENARIO", None,
           "JSON/YAML scenario of simulated pods and GPU processes, or 'none' (with --simulate; "
           "default: the built-in scenario)",
           metavar="FILE"),
    Option(("--simulate-burn",), "simulate_burn", "PODGPU_SIMULATE_BURN", (20.0, 20.0),
           "busy,idle seconds of the simulated gpu-burn pattern", _burn, metavar="ON,OFF"),
    Option(("--hostname-label",), "hostname_label", "PODGPU_HOSTNAME_LABEL", "Hostname",
           "name of the host label: 'Hostname' (dcgm-exporter <= 4.8.2) or 'hostname' (newer)",
           metavar="NAME"),
    Option(("-rbmn", "--replace-blanks-in-model-name"), "replace_blanks_in_model_name",
           "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", False,
           "replace spaces in modelName with dashes", parse_bool, True),
    Option(("--debug",), "debug", "DCGM_EXPORTER_DEBUG", False, "debug logging", parse_bool, True),
    Option(("--log-format",), "log_format", "DCGM_EXPORTER_LOG_FORMAT", "text",
           "log format: text or json", metavar="FMT"),
    Option(("-x", "--xid-count-window-size"), "xid_count_window_ms",
           "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", DEFAULT_WINDOW_MS,
           "window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds", _ms, metavar="MS"),
    Option(("--clock-events-count-window-size",), "clock_events_count_window_ms",
           "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", DEFAULT_WINDOW_MS,
           "window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds", _ms, metavar="MS"),
    Option(("-k", "--kubernetes"), "kubernetes", "DCGM_EXPORTER_KUBERNETES", False,
           "attribute GPUs to pods through the kubelet PodResources API", parse_bool, True),
    Option(("--pod-resources-kubelet-socket",), "pod_resources_kubelet_socket",
           "DCGM_POD_RESOURCES_KUBELET_SOCKET", DEFAULT_KUBELET_SOCKET,
           "kubelet PodResources socket", metavar="PATH"),
    Option(("--kubernetes-gpu-id-type",), "kubernetes_gpu_id_type",
           "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "uid",
           "how kubelet device ids name GPUs: uid (NVIDIA plugin) or device-name (GKE)",
           metavar="TYPE"),
    Option(("--nvidia-resource-names",), "nvidia_resource_names", "NVIDIA_RESOURCE_NAMES", (),
           "extra extended-resource names that are NVIDIA GPUs, comma-separated", _csv,
           metavar="NAMES"),
    Option(("--kubernetes-virtual-gpus",), "kubernetes_virtual_gpus", "KUBERNETES_VIRTUAL_GPUS",
           False, "shared GPUs: one device series per pod with a vgpu label (dcgm-exporter mode)",
           parse_bool, True),
    Option(("--kubernetes-enable-pod-uid",), "kubernetes_enable_pod_uid",
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", False, "add a pod_uid label", parse_bool,
           True),
    Option(("--kubernetes-enable-pod-labels",), "kubernetes_enable_pod_labels",
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", False,
           "copy pod labels onto series (needs API access; mind cardinality)", parse_bool, True),
    Option(("--kubernetes-pod-label-allowlist-regex",), "kubernetes_pod_label_allowlist_regex",
           "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", (),
           "comma-separated regexes of pod label keys to copy", _csv, metavar="REGEXES"),
    Option(("--proc-root",), "proc_root", "PODGPU_PROC_ROOT", "/proc",
           "where the host's /proc is mounted (GPU process -> cgroup -> pod)", metavar="PATH"),
    Option(("--http-max-connections",), "http_max_connections", "PODGPU_HTTP_MAX_CONNECTIONS",
           DEFAULT_HTTP_MAX_CONNECTIONS, "open HTTP connections at most (kept below the file "
           "descriptor limit); at the cap the oldest one without a completed request is closed",
           _connections, metavar="N"),
    Option(("--http-request-timeout",), "http_request_timeout", "PODGPU_HTTP_REQUEST_TIMEOUT",
           DEFAULT_HTTP_REQUEST_TIMEOUT, "seconds a connection has to send a request and read the "
           "answer before it is closed", _request_timeout, metavar="SECONDS"),
    Option(("-o", "--use-old-namespace"), "use_old_namespace", "DCGM_EXPORTER_USE_OLD_NAMESPACE",
           False, "dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name); "
           "pair with a 1.x metric list (dcgm_* names)", parse_bool, True),
    Option(("-d", "--devices"), "devices", "DCGM_EXPORTER_DEVICES_STR", DeviceSelection(),
           "devices to export: f (every GPU, MIG instances of MIG GPUs), g[:0,1], i[:0-3] (MIG "
           "GPU-instance ids) or g+i", parse_device_selection, metavar="SPEC"),
    Option(("--kubernetes-enable-dra",), "kubernetes_enable_dra", "KUBERNETES_ENABLE_DRA", False,
           "attribute GPUs allocated through Kubernetes DRA (driver gpu.nvidia.com)", parse_bool,
           True),
    Option(("-m", "--configmap-data"), "configmap_data", "DCGM_EXPORTER_CONFIGMAP_DATA", None,
           "read the metric list from the 'metrics' key of ConfigMap NAMESPACE:NAME through the "
           "Kubernetes API (needs get on it); 'none' uses --collectors", _configmap,
           metavar="NS:NAME"),
    Option(("--web-config-file",), "web_config_file", "DCGM_EXPORTER_WEB_CONFIG_FILE", None,
           "exporter-toolkit web config: TLS, client certificates, bcrypt basic auth, response "
           "headers; followed while running (docs/security.md)", metavar="FILE"),
    # --- CloudWatch EMF sink (docs/cloudwatch.md)
    Option(("--cloudwatch-config",), "cloudwatch_config", "PODGPU_CLOUDWATCH_CONFIG", None,
           "send EMF to CloudWatch using this CloudWatch agent config (its emf_processor "
           "metric_declaration), the whole agent JSON or just the emf_processor object",
           metavar="FILE"),
    Option(("--emf-destination",), "emf_destination", "PODGPU_EMF_DESTINATION", "cloudwatch",
           "cloudwatch (PutLogEvents), stdout, tcp://HOST:PORT or udp://HOST:PORT (the agent's "
           "EMF listener, port 25888)", metavar="DEST"),
    Option(("--cluster-name",), "cluster_name", "PODGPU_CLUSTER_NAME", "",
           "the ClusterName label and log group name (default: the config's cluster_name)",
           metavar="NAME"),
    Option(("--aws-region",), "aws_region", "AWS_REGION", None,
           "AWS region of CloudWatch Logs (default: the AWS SDK's own lookup)", metavar="REGION"),
    Option(("--emf-endpoint-url",), "emf_endpoint_url", "PODGPU_EMF_ENDPOINT_URL", None,
           "CloudWatch Logs endpoint URL (VPC endpoints, emulators)", metavar="URL"),
    Option(("--emf-log-group",), "emf_log_group", "PODGPU_EMF_LOG_GROUP", None,
           "log group (default: the config's log_group_name, else "
           "/aws/containerinsights/{ClusterName}/prometheus)", metavar="NAME"),
    Option(("--emf-log-stream",), "emf_log_stream", "PODGPU_EMF_LOG_STREAM", None,
           "log stream (default: the node name, one stream per node)", metavar="NAME"),
    Option(("--emf-create-log-group",), "emf_create_log_group", "PODGPU_EMF_CREATE_LOG_GROUP",
           True, "create the log group when it is missing", parse_bool, True),
    Option(("--emf-interval",), "emf_interval", "PODGPU_EMF_INTERVAL", DEFAULT_EMF_INTERVAL,
           "seconds per EMF event; every collected sample is kept in its value arrays",
           _seconds, metavar="SECONDS"),
    Option(("--emf-storage-resolution",), "emf_storage_resolution",
           "PODGPU_EMF_STORAGE_RESOLUTION", 60,
           "CloudWatch storage resolution: 60 (standard) or 1 (high resolution)", _resolution,
           metavar="1|60"),
    Option(("--emf-queue-bytes",), "emf_queue_bytes", "PODGPU_EMF_QUEUE_BYTES",
           DEFAULT_EMF_QUEUE_BYTES, "bound of the unsent-event queue (e.g. 16M); past it the "
           "oldest events are dropped and counted", _size, metavar="SIZE"),
    Option(("--emf-spool-dir",), "emf_spool_dir", "PODGPU_EMF_SPOOL_DIR", None,
           "keep unsent events in this directory too, so they survive a restart", metavar="DIR"),
    Option(("--emf-keep-unmatched",), "emf_keep_unmatched", "PODGPU_EMF_KEEP_UNMATCHED", False,
           "also send series no declaration extracts, as plain (billed) log events", parse_bool,
           True),
    Option(("--emf-label",), "emf_labels", "PODGPU_EMF_LABELS", (),
           "extra label KEY=VALUE on every EMF series (repeatable, or comma-separated), e.g. "
           "Service=nvidia-dcgm-exporter for the seed post's declarations", _labels,
           metavar="KEY=VALUE", append=True),
    Option(("--emf-job",), "emf_job", "PODGPU_EMF_JOB", "podgpu",
           "the job label EMF series carry (the agent adds its scrape job's name)",
           metavar="NAME"),
)

# dcgm-exporter flags podgpu does not implement. Ignored with a warning: podgpu's output is the
# same or the flag was a no-op there too.
IGNORED: Mapping[tuple[str, ...], tuple[str, str, bool]] = {
    ("-n", "--no-hostname"): ("DCGM_EXPORTER_NO_HOSTNAME", "a no-op in dcgm-exporter 4.x too", True),
    ("-r", "--remote-hostengine-info"): (
        "DCGM_REMOTE_HOSTENGINE_INFO", "podgpu reads NVML directly; there is no host engine", False),
    ("--enable-dcgm-log",): ("DCGM_EXPORTER_ENABLE_DCGM_LOG", "there is no DCGM library", True),
    ("--dcgm-log-level",): ("DCGM_EXPORTER_DCGM_LOG_LEVEL", "there is no DCGM library", False),
    ("--disable-startup-validate",): (
        "DISABLE_STARTUP_VALIDATE", "podgpu does not need libdcgm", True),
    ("-s", "--switch-devices"): (
        "DCGM_EXPORTER_OTHER_DEVICES_STR", "podgpu exports no NVSwitch series", False),
    ("-p", "--cpu-devices"): ("DCGM_EXPORTER_CPU_DEVICES_STR", "podgpu exports no CPU series", False),
    ("--dump-enabled",): ("DCGM_EXPORTER_DUMP_ENABLED", "debug dumps are not implemented", True),
    ("--dump-directory",): ("DCGM_EXPORTER_DUMP_DIRECTORY", "debug dumps are not implemented", False),
    ("--dump-retention",): ("DCGM_EXPORTER_DUMP_RETENTION", "debug dumps are not implemented", False),
    ("--dump-compression",): (
        "DCGM_EXPORTER_DUMP_COMPRESSION", "debug dumps are not implemented", True),
    ("--enable-gpu-bind-unbind-watch",): (
        "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", "podgpu re-discovers lost GPUs by itself",
        True),
    ("--gpu-bind-unbind-poll-interval",): (
        "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "podgpu re-discovers lost GPUs by itself",
        False),
    ("--enable-pprof",): ("DCGM_EXPORTER_ENABLE_PPROF", "there is no Go profiler", True),
}

# Refused: ignoring these would change what is exported, or who may read it, without notice.
REFUSED: Mapping[tuple[str, ...], tuple[str, str, bool]] = {
    ("--web-systemd-socket",): (
        "DCGM_EXPORTER_SYSTEMD_SOCKET", "systemd socket activation is not supported", True),
    ("--hpc-job-mapping-dir",): (
        "DCGM_HPC_JOB_MAPPING_DIR", "the hpc_job label is not produced", False),
    ("--fake-gpus",): ("DCGM_EXPORTER_USE_FAKE_GPUS", "use --simulate N instead", True),
}
# Values of refused options that mean "off", so they are accepted silently.
_OFF_VALUES = {"--configmap-data": {"none", ""}, "--devices": {"f", ""},
               "--hpc-job-mapping-dir": {""}}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every serve flag. Defaults are None so env and defaults can be applied later."""
    for opt in OPTIONS:
        shown = opt.default if opt.default not in (None, ()) else "none"
        if isinstance(opt.default, tuple) and opt.default:
            shown = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in opt.default)
        env_help = f" [env {opt.env}; default {shown}]"
        if opt.is_bool:
            parser.add_argument(*opt.flags, dest=opt.dest, nargs="?", const="true", default=None,
                                metavar="BOOL", help=opt.help + env_help)
        elif opt.append:
            parser.add_argument(*opt.flags, dest=opt.dest, action="append", default=None,
                                metavar=opt.metavar, help=opt.help + env_help)
        else:
            parser.add_argument(*opt.flags, dest=opt.dest, default=None, metavar=opt.metavar,
                                help=opt.help + env_help)
    for table in (IGNORED, REFUSED):
        for flags, (_env, _why, is_bool) in table.items():
            dest = "compat_" + flags[-1].lstrip("-").replace("-", "_")
            if is_bool:
                parser.add_argument(*flags, dest=dest, nargs="?", const="true", default=None,
                                    help=argparse.SUPPRESS)
            else:
                parser.add_argument(*flags, dest=dest, default=None, help=argparse.SUPPRESS)


def _proc_root_problem(path: str) -> str | None:
    """Why `path` cannot be the host's /proc, or None when it holds <pid>/ directories."""
    try:
        with os.scandir(path) as entries:
            if any(e.name.isdigit() for e in entries):
                return None
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "is not a directory"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return ("holds no <pid>/ directories; mount the host's /proc there (hostPID: true, or a "
            "hostPath volume)")


def _parse_address(address: str, source: str = "--address") -> tuple[str | None, int]:
    m = re.fullmatch(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d{1,5})",
                     address.strip())
    if not m or int(m["port"]) > 65535:
        raise ConfigError(
            f"{source} {address!r}: expected HOST:PORT, :PORT or [IPv6]:PORT, e.g. :9400")
    host = m["v6"] if m["v6"] is not None else (m["host"] or None)
    return host, int(m["port"])


def settings_from(
    ns: argparse.Namespace, env: Mapping[str, str] | None = None
) -> Settings:
    """Merge parsed flags with the environment and defaults; validate everything."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    """dest -> the flag or 'environment variable X' the value came from, for error messages."""
    warnings: list[str] = []
    for opt in OPTIONS:
        raw = getattr(ns, opt.dest, None)
        if isinstance(raw, list):
            raw = ",".join(raw)
        source = f"{opt.flags[-1]}"
        if raw is None and env.get(opt.env) not in (None, ""):
            raw, source = env[opt.env], f"environment variable {opt.env}"
        if raw is None:
            values[opt.dest] = opt.default
            origin[opt.dest] = f"{opt.flags[-1]} (default)"
            continue
        origin[opt.dest] = source
        try:
            values[opt.dest] = parse_bool(raw) if opt.is_bool else opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    for table, refuse in ((IGNORED, False), (REFUSED, True)):
        for flags, (env_name, why, is_bool) in table.items():
            dest = "compat_" + flags[-1].lstrip("-").replace("-", "_")
            raw = getattr(ns, dest, None)
            where = flags[-1]
            if raw is None and env.get(env_name) not in (None, ""):
                raw, where = env[env_name], f"environment variable {env_name}"
            if raw is None:
                continue
            if is_bool:
                try:
                    if not parse_bool(raw):
                        continue
                except ValueError as exc:
                    raise ConfigError(f"{where}: {exc}") from None
            elif raw.strip().lower() in _OFF_VALUES.get(flags[-1], set()):
                continue
            if refuse:
                raise ConfigError(f"{where} is a dcgm-exporter option podgpu does not support: "
                                  f"{why}")
            warnings.append(f"ignoring dcgm-exporter option {where}: {why}")

    interval = values["collect_interval_ms"]
    if interval < MIN_COLLECT_INTERVAL_MS:
        raise ConfigError(
            f"{origin['collect_interval_ms']} {interval}: must be at least "
            f"{MIN_COLLECT_INTERVAL_MS} ms (the unit is milliseconds; NVML profiling needs samples "
            ">= 100 ms apart)")
    if interval > MAX_COLLECT_INTERVAL_MS:
        raise ConfigError(f"{origin['collect_interval_ms']} {interval}: must be at most "
                          f"{MAX_COLLECT_INTERVAL_MS} ms (an hour)")
    for dest in ("xid_count_window_ms", "clock_events_count_window_ms"):
        if not 1 <= values[dest] <= MAX_WINDOW_MS:
            raise ConfigError(f"{origin[dest]} {values[dest]}: must be between 1 and "
                              f"{MAX_WINDOW_MS} milliseconds (a week)")
    if values["hostname_label"] not in ("Hostname", "hostname"):
        raise ConfigError(
            f"{origin['hostname_label']} {values['hostname_label']!r}: use Hostname or hostname")
    if values["log_format"] not in ("text", "json"):
        raise ConfigError(f"{origin['log_format']} {values['log_format']!r}: use text or json")
    if values["kubernetes_gpu_id_type"] not in ("uid", "device-name"):
        raise ConfigError(
            f"{origin['kubernetes_gpu_id_type']} {values['kubernetes_gpu_id_type']!r}: use uid or "
            "device-name")
    if values["kubernetes"]:  # issue 13: an empty root made every GPU process look exited
        problem = _proc_root_problem(values["proc_root"])
        if problem:
            raise ConfigError(f"{origin['proc_root']} {values['proc_root']!r}: {problem}")
    for rx in values["kubernetes_pod_label_allowlist_regex"]:  # Go RE2 syntax (issue 17 item 6)
        check_go(rx, where=origin["kubernetes_pod_label_allowlist_regex"])
    if not values["cloudwatch_config"]:
        emf_set = [o.flags[-1] for o in OPTIONS if o.dest.startswith("emf_")
                   and values[o.dest] != o.default]
        if emf_set:
            raise ConfigError(f"{emf_set[0]} needs --cloudwatch-config FILE (the EMF sink is off)")
    if values["cloudwatch_config"] and values["emf_interval"] * 1000 < values["collect_interval_ms"]:
        raise ConfigError(f"--emf-interval {values['emf_interval']:g}: shorter than the collect "
                          f"interval ({values['collect_interval_ms']} ms)")
    if values["simulate_scenario"] and not values["simulate"]:
        raise ConfigError("--simulate-scenario needs --simulate N")
    host, port = _parse_address(values["address"], origin["address"])
    node_name = env.get("NODE_NAME", "")
    return Settings(host=host, port=port, node_name=node_name,
                    hostname=node_name or socket.gethostname(),
                    warnings=tuple(warnings), **values)


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    """Convenience for tests: parse `podgpu serve` arguments into Settings."""
    parser = argparse.ArgumentParser(prog="podgpu serve")
    add_serve_arguments(parser)
    return settings_from(parser.parse_args(list(argv)), env)
