"""`podgpu serve`'s option table and the `ServeSettings` it resolves to.

Flags keep dcgm-exporter's spellings and environment variables where dcgm-exporter has them, so an
existing DaemonSet's args and env keep working; dcgm-exporter's milliseconds stay milliseconds.
A dest `component.field` lands in that field of that component's settings (podgpu.settings).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

from podgpu.config import compat
from podgpu.config import values as v
from podgpu.config.emf import (
    EMF_OPTIONS,
    LOG_OPTIONS,
    SERVE_EMF_OPTIONS,
    emf_settings,
    log_settings,
    section,
)
from podgpu.errors import ConfigError
from podgpu.model.selection import DeviceSelection, parse_device_selection
from podgpu.options import Option, Resolved, csv_list, go_ms, new_parser, parse_bool, resolve
from podgpu.settings import (
    DEFAULT_COLLECT_INTERVAL_MS,
    DEFAULT_HTTP_MAX_CONNECTIONS,
    DEFAULT_HTTP_REQUEST_TIMEOUT,
    DEFAULT_KUBELET_SOCKET,
    DEFAULT_WINDOW_MS,
    AccountingSettings,
    CollectSettings,
    HttpSettings,
    KubernetesSettings,
    OutputSettings,
    ServeSettings,
    SimulationSettings,
)

DEFAULT_ADDRESS = ":9400"
MIN_COLLECT_INTERVAL_MS = 100  # NVML profiling needs samples >= 100 ms apart
MAX_COLLECT_INTERVAL_MS = 3_600_000  # an hour; beyond it the loop's timers overflow
MAX_WINDOW_MS = 7 * 24 * 3_600_000  # a week of XID / clock-event history

HTTP_LIMIT_OPTIONS: tuple[Option, ...] = (
    Option(("--http-max-connections",), "http.max_connections", "PODGPU_HTTP_MAX_CONNECTIONS",
           DEFAULT_HTTP_MAX_CONNECTIONS, "open HTTP connections at most (kept below the file "
           "descriptor limit); at the cap the oldest one without a completed request is closed",
           v.connections, metavar="N"),
    Option(("--http-request-timeout",), "http.request_timeout", "PODGPU_HTTP_REQUEST_TIMEOUT",
           DEFAULT_HTTP_REQUEST_TIMEOUT, "seconds a connection has to send a request and read "
           "the answer before it is closed", v.seconds_between(1.0, 600.0), metavar="SECONDS"),
)
"""The listener's limits (http.guard), the same for serve and emf."""

SERVE_OPTIONS: tuple[Option, ...] = (
    Option(("-f", "--collectors"), "collect.collectors", "DCGM_EXPORTER_COLLECTORS", None,
           "metric list in dcgm-exporter's CSV format; followed while running (a bad edit is "
           "refused and the last good list kept)", metavar="FILE",
           shown="/etc/dcgm-exporter/default-counters.csv when that file exists, else the "
           "embedded list (same active rows as dcgm-exporter's)"),
    Option(("-a", "--address"), "http.address", "DCGM_EXPORTER_LISTEN", DEFAULT_ADDRESS,
           "listen address HOST:PORT; ':9400' listens on every interface, '[::1]:9400' for IPv6",
           str, metavar="ADDR"),
    Option(("-c", "--collect-interval"), "collect.interval_ms", "DCGM_EXPORTER_INTERVAL",
           DEFAULT_COLLECT_INTERVAL_MS, "collection interval in milliseconds (outside "
           f"{MIN_COLLECT_INTERVAL_MS}..{MAX_COLLECT_INTERVAL_MS}: clamped with a warning)", go_ms,
           metavar="MS", bounds=(MIN_COLLECT_INTERVAL_MS, MAX_COLLECT_INTERVAL_MS), unit="ms"),
    Option(("--simulate",), "sim.spec", "PODGPU_SIMULATE", None,
           "simulate a GPU node instead of reading NVML: N or NxMODEL (H100, H200, A100, A10G)",
           metavar="SPEC"),
    Option(("--simulate-scenario",), "sim.scenario", "PODGPU_SIMULATE_SCENARIO", None,
           "JSON/YAML scenario of simulated pods and GPU processes, or 'none' (with --simulate)",
           metavar="FILE", shown="the built-in scenario"),
    Option(("--simulate-burn",), "sim.burn", "PODGPU_SIMULATE_BURN", (20.0, 20.0),
           "busy,idle seconds of the simulated gpu-burn pattern", v.burn, metavar="ON,OFF"),
    Option(("--hostname-label",), "output.hostname_label", "PODGPU_HOSTNAME_LABEL", "Hostname",
           "name of the host label: 'Hostname' (dcgm-exporter <= 4.8.2) or 'hostname' (newer)",
           v.choice("Hostname", "hostname"), metavar="NAME"),
    Option(("-rbmn", "--replace-blanks-in-model-name"), "output.replace_blanks_in_model_name",
           "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", False,
           "replace spaces in modelName with dashes", parse_bool, True),
    *LOG_OPTIONS,
    Option(("-x", "--xid-count-window-size"), "collect.xid_window_ms",
           "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", DEFAULT_WINDOW_MS,
           "window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds", go_ms, metavar="MS",
           bounds=(1, MAX_WINDOW_MS), unit="ms"),
    Option(("--clock-events-count-window-size",), "collect.clock_events_window_ms",
           "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", DEFAULT_WINDOW_MS,
           "window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds", go_ms, metavar="MS",
           bounds=(1, MAX_WINDOW_MS), unit="ms"),
    Option(("-k", "--kubernetes"), "kubernetes.enabled", "DCGM_EXPORTER_KUBERNETES", False,
           "attribute GPUs to pods through the kubelet PodResources API", parse_bool, True),
    Option(("--pod-resources-kubelet-socket",), "kubernetes.kubelet_socket",
           "DCGM_POD_RESOURCES_KUBELET_SOCKET", DEFAULT_KUBELET_SOCKET,
           "kubelet PodResources socket", metavar="PATH"),
    Option(("--kubernetes-gpu-id-type",), "kubernetes.gpu_id_type",
           "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "uid",
           "how kubelet device ids name GPUs: uid (NVIDIA plugin) or device-name (GKE)",
           v.choice("uid", "device-name"), metavar="TYPE"),
    Option(("--nvidia-resource-names",), "kubernetes.resource_names", "NVIDIA_RESOURCE_NAMES",
           (), "extra extended-resource names that are NVIDIA GPUs, comma-separated", csv_list,
           metavar="NAMES"),
    Option(("--kubernetes-virtual-gpus",), "kubernetes.virtual_gpus", "KUBERNETES_VIRTUAL_GPUS",
           False, "shared GPUs: one device series per pod with a vgpu label (dcgm-exporter mode)",
           parse_bool, True),
    Option(("--kubernetes-enable-pod-uid",), "kubernetes.pod_uid",
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", False, "add a pod_uid label", parse_bool,
           True),
    Option(("--kubernetes-enable-pod-labels",), "kubernetes.pod_labels",
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", False,
           "copy pod labels onto series (needs API access; mind cardinality)", parse_bool, True),
    Option(("--kubernetes-pod-label-allowlist-regex",), "kubernetes.label_allowlist",
           "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", (),
           "comma-separated RE2 regexes of pod label keys to copy", csv_list, metavar="REGEXES",
           shown="unset: every label"),
    Option(("--hpc-job-mapping-dir",), "collect.hpc_job_mapping_dir", "DCGM_HPC_JOB_MAPPING_DIR",
           "", "directory of HPC job files named by GPU index (or GPU.instance) with one job id "
           "a line: series of those GPUs get an hpc_job label, once per job", metavar="DIR",
           shown="unset"),
    Option(("--proc-root",), "kubernetes.proc_root", "PODGPU_PROC_ROOT", "/proc",
           "where the host's /proc is mounted (GPU process -> cgroup -> pod)", metavar="PATH"),
    *HTTP_LIMIT_OPTIONS,
    Option(("-o", "--use-old-namespace"), "output.old_namespace",
           "DCGM_EXPORTER_USE_OLD_NAMESPACE", False, "dcgm-exporter 1.x label names (uuid, "
           "pod_name, pod_namespace, container_name); pair with a 1.x metric list (dcgm_* names)",
           parse_bool, True),
    Option(("-d", "--devices"), "collect.devices", "DCGM_EXPORTER_DEVICES_STR", DeviceSelection(),
           "devices to export: f (every GPU, MIG instances of MIG GPUs), g[:0,1], i[:0-3] (MIG "
           "GPU instances by DCGM entity id, as dcgm-exporter) or g+i", parse_device_selection,
           metavar="SPEC", shown="f"),
    Option(("--kubernetes-enable-dra",), "kubernetes.dra", "KUBERNETES_ENABLE_DRA", False,
           "attribute GPUs allocated through Kubernetes DRA (driver gpu.nvidia.com)", parse_bool,
           True),
    Option(("-m", "--configmap-data"), "collect.configmap", "DCGM_EXPORTER_CONFIGMAP_DATA", None,
           "read the metric list from the 'metrics' key of ConfigMap NAMESPACE:NAME through the "
           "Kubernetes API (needs get on it); 'none' uses --collectors", v.configmap,
           metavar="NS:NAME"),
    Option(("--web-config-file",), "http.web_config_file", "DCGM_EXPORTER_WEB_CONFIG_FILE", None,
           "exporter-toolkit web config: TLS, client certificates, bcrypt basic auth, response "
           "headers; followed while running (docs/web-config.md)", metavar="FILE"),
    Option(("--accounting",), "accounting.enabled", "PODGPU_ACCOUNTING", True,
           "per-pod GPU accounting counters: allocated, used and energy GPU-seconds "
           "(docs/accounting.md); --accounting=false turns them off", parse_bool, True),
    Option(("--accounting-grace-period",), "accounting.grace_seconds",
           "PODGPU_ACCOUNTING_GRACE_PERIOD", 600.0, "seconds a finished pod's accounting "
           "counters stay exported (so Prometheus scrapes their last value)",
           v.seconds_between(0.0, 86_400.0), metavar="SECONDS"),
    Option(("--accounting-max-gap",), "accounting.max_gap_seconds", "PODGPU_ACCOUNTING_MAX_GAP",
           300.0, "longest gap between two collections that accounting integrates (seconds)",
           v.seconds_between(1.0, 3600.0), metavar="SECONDS"),
    Option(("--wait-for-driver",), "collect.wait_for_driver", "PODGPU_WAIT_FOR_DRIVER", "auto",
           "NVML not there yet (driver or its library not installed yet): 'always' waits, "
           "retrying in the background while serving (not ready, one log line a minute); "
           "'never' exits 1; 'auto' waits in Kubernetes (KUBERNETES_SERVICE_HOST set) only",
           v.choice("auto", "always", "never"), metavar="WHEN"),
    *EMF_OPTIONS,
    *SERVE_EMF_OPTIONS,
)
"""Every serve flag; add one with an entry here and a field in its podgpu.settings class."""

OPTIONS: tuple[Option, ...] = SERVE_OPTIONS + compat.OPTIONS
"""What the serve parser registers: SERVE_OPTIONS plus the hidden dcgm-exporter compat flags."""


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


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Register every serve flag (defaults None, so env and defaults are applied by resolve)."""
    from podgpu.options import add_options

    add_options(parser, OPTIONS)


def settings_from(ns: argparse.Namespace, env: Mapping[str, str] | None = None
                  ) -> ServeSettings:
    """Resolve flags, environment and defaults; validate everything once."""
    env = os.environ if env is None else env
    r = resolve(ns, OPTIONS, env)
    warnings = compat.check(r) + r.warnings
    return _build(r, env, warnings)


def _build(r: Resolved, env: Mapping[str, str], warnings: list[str]) -> ServeSettings:
    c = section(r, "collect")
    in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST"))  # every pod has it
    when = c.pop("wait_for_driver")
    c["wait_for_driver"] = when == "always" or (when == "auto" and in_cluster)
    if not r.origin["collect.interval_ms"].endswith("(default)"):  # clock-event sampling interval
        c["clock_events_sample_ms"] = c["interval_ms"]
    collect = CollectSettings(**c)  # type: ignore[arg-type]
    k = section(r, "kubernetes")
    if k["enabled"]:  # an empty root made every GPU process look exited
        problem = _proc_root_problem(str(k["proc_root"]))
        if problem:
            raise r.fail("kubernetes.proc_root", problem)
    if k["label_allowlist"] and (k["enabled"] or r.values.get("sim.spec")):
        from podgpu.attribution.enrich import compile_allowlist

        # dcgm-exporter compiles the patterns only with -k, skipping those Go refuses
        compile_allowlist(k["label_allowlist"], warnings)  # type: ignore[arg-type]
    node_name = env.get("NODE_NAME", "")
    kubernetes = KubernetesSettings(node_name=node_name, in_cluster=in_cluster,
                                    poll_interval=collect.interval, **k  # type: ignore[arg-type]
                                    ).checked()
    h = section(r, "http")
    try:
        host, port = v.address(str(h.pop("address")))
    except ValueError as exc:
        raise r.fail("http.address", str(exc)) from None
    http = HttpSettings(host=host, port=port, **h)  # type: ignore[arg-type]
    emf = emf_settings(r, OPTIONS, required=False)
    if emf is not None and emf.interval * 1000 < collect.interval_ms:
        raise ConfigError(f"--emf-interval {emf.interval:g}: shorter than the collect interval "
                          f"({collect.interval_ms} ms)")
    sim = section(r, "sim")
    if sim["scenario"] and not sim["spec"]:
        raise ConfigError("--simulate-scenario needs --simulate N")
    simulation = SimulationSettings(**sim) if sim["spec"] else None  # type: ignore[arg-type]
    hostname = node_name or os.uname().nodename  # gethostname(2); socket loads later
    remote = r.values.get("compat.remote_hostengine_info")
    if remote and not kubernetes.enabled:  # dcgm-exporter: the remote host names the series
        hostname = compat.remote_hostname(str(remote))
    output = OutputSettings(hostname=hostname, **section(r, "output"))  # type: ignore[arg-type]
    accounting = AccountingSettings(**section(r, "accounting"))  # type: ignore[arg-type]
    return ServeSettings(collect=collect, kubernetes=kubernetes, http=http, output=output,
                         log=log_settings(r), emf=emf, simulation=simulation,
                         accounting=accounting, warnings=tuple(warnings))


def serve_parser(prog: str = "podgpu serve") -> argparse.ArgumentParser:
    from podgpu import __version__

    parser = new_parser(prog, "collect GPU metrics and serve /metrics (dcgm-exporter's flags)",
                        OPTIONS)
    parser.add_argument("-v", "--version", action="version", version=f"podgpu {__version__}")
    return parser


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None
                     ) -> ServeSettings:
    """`podgpu serve` arguments (Go flag forms included) -> ServeSettings; for tests and cli."""
    from podgpu.options import go_flags

    return settings_from(serve_parser().parse_args(go_flags(list(argv), OPTIONS)), env)
