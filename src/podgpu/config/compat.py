"""dcgm-exporter flags podgpu does not implement: accepted with a warning when ignoring them is
harmless, refused (exit 2) when ignoring them would silently change what is exported or who may
read it. Hidden from --help; parsed by the same engine as every other flag."""

from __future__ import annotations

from podgpu.errors import ConfigError
from podgpu.options import Option, Resolved

# (flags, env, why, is_bool). Ignored: podgpu's output is the same or the flag was a no-op there.
IGNORED: tuple[tuple[tuple[str, ...], str, str, bool], ...] = (
    (("-n", "--no-hostname"), "DCGM_EXPORTER_NO_HOSTNAME", "a no-op in dcgm-exporter 4.x too",
     True),
    (("-r", "--remote-hostengine-info"), "DCGM_REMOTE_HOSTENGINE_INFO",
     "podgpu reads this node's GPUs through NVML, not a host engine; without -k the Hostname "
     "label is the address's host, as dcgm-exporter sets it", False),
    (("--enable-dcgm-log",), "DCGM_EXPORTER_ENABLE_DCGM_LOG", "there is no DCGM library", True),
    (("--dcgm-log-level",), "DCGM_EXPORTER_DCGM_LOG_LEVEL", "there is no DCGM library", False),
    (("--disable-startup-validate",), "DISABLE_STARTUP_VALIDATE",
     "podgpu does not need libdcgm", True),
    (("-s", "--switch-devices"), "DCGM_EXPORTER_OTHER_DEVICES_STR",
     "podgpu exports no NVSwitch series", False),
    (("-p", "--cpu-devices"), "DCGM_EXPORTER_CPU_DEVICES_STR", "podgpu exports no CPU series",
     False),
    (("--dump-enabled",), "DCGM_EXPORTER_DUMP_ENABLED", "debug dumps are not implemented", True),
    (("--dump-directory",), "DCGM_EXPORTER_DUMP_DIRECTORY", "debug dumps are not implemented",
     False),
    (("--dump-retention",), "DCGM_EXPORTER_DUMP_RETENTION", "debug dumps are not implemented",
     False),
    (("--dump-compression",), "DCGM_EXPORTER_DUMP_COMPRESSION",
     "debug dumps are not implemented", True),
    (("--enable-gpu-bind-unbind-watch",), "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
     "podgpu re-discovers lost GPUs by itself", True),
    (("--gpu-bind-unbind-poll-interval",), "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
     "podgpu re-discovers lost GPUs by itself", False),
    (("--enable-pprof",), "DCGM_EXPORTER_ENABLE_PPROF", "there is no Go profiler", True),
)
# Refused: ignoring these would change what is exported, or who may read it, without notice.
REFUSED: tuple[tuple[tuple[str, ...], str, str, bool], ...] = (
    (("--web-systemd-socket",), "DCGM_EXPORTER_SYSTEMD_SOCKET",
     "systemd socket activation is not supported", True),
    (("--fake-gpus",), "DCGM_EXPORTER_USE_FAKE_GPUS", "use --simulate N instead", True),
)
# Values of refused options that mean "off", so they are accepted silently.
_OFF_VALUES: dict[str, set[str]] = {}


def _dest(flags: tuple[str, ...]) -> str:
    return "compat." + flags[-1].lstrip("-").replace("-", "_")


OPTIONS: tuple[Option, ...] = tuple(
    Option(flags, _dest(flags), env, None, why, is_bool=is_bool, hidden=True)
    for flags, env, why, is_bool in IGNORED + REFUSED)


def remote_hostname(value: str) -> str:
    """dcgm-exporter's Hostname with `-r` and without `-k` (internal/pkg/hostname): the host
    of HOST:PORT as Go's net.SplitHostPort gives it (`[::1]:5555` -> `::1`), or the whole value
    when it is not HOST:PORT (no port, or more than one colon outside brackets)."""
    text = value.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        return host if sep and rest.startswith(":") and ":" not in rest[1:] else text
    host, sep, port = text.partition(":")
    return host if sep and ":" not in port else text


def check(resolved: Resolved) -> list[str]:
    """Raise ConfigError for a refused flag that is set; the warnings for ignored ones."""
    warnings: list[str] = []
    for table, refuse in ((IGNORED, False), (REFUSED, True)):
        for flags, _env, why, is_bool in table:
            dest = _dest(flags)
            value = resolved.values.get(dest)
            if value is None or (is_bool and not value):
                continue
            if not is_bool and value.strip().lower() in _OFF_VALUES.get(flags[-1], set()):
                continue
            where = resolved.origin[dest]
            if refuse:
                raise ConfigError(f"{where} is a dcgm-exporter option podgpu does not support: "
                                  f"{why}")
            warnings.append(f"ignoring dcgm-exporter option {where}: {why}")
    return warnings
