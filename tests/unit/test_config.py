from __future__ import annotations

import pytest

from podgpu.config import DEFAULT_COLLECT_INTERVAL_MS, parse_serve_args
from podgpu.errors import ConfigError


def test_defaults() -> None:
    s = parse_serve_args([], {"NODE_NAME": "n1"})
    assert (s.http.host, s.http.port) == (None, 9400)
    assert s.collect.interval_ms == DEFAULT_COLLECT_INTERVAL_MS
    assert s.output.hostname == "n1" and s.output.hostname_label == "Hostname"
    assert s.collect.collectors is None and not s.kubernetes.enabled


def test_flag_beats_env_beats_default() -> None:
    env = {"DCGM_EXPORTER_INTERVAL": "2000", "DCGM_EXPORTER_LISTEN": "127.0.0.1:9500"}
    s = parse_serve_args(["-c", "3000"], env)
    assert s.collect.interval_ms == 3000
    assert (s.http.host, s.http.port) == ("127.0.0.1", 9500)
    assert parse_serve_args([], env).collect.interval_ms == 2000


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["-k"], {}, True),
        (["--kubernetes=false"], {}, False),
        (["--kubernetes", "true"], {}, True),
        ([], {"DCGM_EXPORTER_KUBERNETES": "true"}, True),
        ([], {"DCGM_EXPORTER_KUBERNETES": "0"}, False),
        (["--kubernetes=false"], {"DCGM_EXPORTER_KUBERNETES": "true"}, False),
    ],
)
def test_boolean_forms(argv: list[str], env: dict[str, str], expected: bool) -> None:
    assert parse_serve_args(argv, env).kubernetes.enabled is expected


def test_unprefixed_dcgm_exporter_env_names() -> None:
    env = {"NVIDIA_RESOURCE_NAMES": "nvidia.com/a100, nvidia.com/gpu.shared",
           "KUBERNETES_VIRTUAL_GPUS": "true",
           "DCGM_POD_RESOURCES_KUBELET_SOCKET": "/tmp/k.sock"}
    s = parse_serve_args([], env)
    assert s.kubernetes.resource_names == ("nvidia.com/a100", "nvidia.com/gpu.shared")
    assert s.kubernetes.virtual_gpus
    assert s.kubernetes.kubelet_socket == "/tmp/k.sock"


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [(":9400", None, 9400), ("127.0.0.1:0", "127.0.0.1", 0), ("[::1]:9401", "::1", 9401),
     ("localhost:80", "localhost", 80)],
)
def test_addresses(address: str, host: str | None, port: int) -> None:
    s = parse_serve_args(["-a", address], {})
    assert (s.http.host, s.http.port) == (host, port)


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["-a", "9400"], {}, "--address '9400'"),
        (["-a", ":99999"], {}, "--address"),
        (["-c", "1s"], {}, "--collect-interval: expected milliseconds"),
        ([], {"DCGM_EXPORTER_INTERVAL": "fast"}, "environment variable DCGM_EXPORTER_INTERVAL"),
        ([], {"DCGM_EXPORTER_KUBERNETES": "maybe"}, "DCGM_EXPORTER_KUBERNETES: expected true"),
        (["--hostname-label", "host"], {}, "use Hostname or hostname"),
        (["--log-format", "xml"], {}, "use text or json"),
        (["--kubernetes-gpu-id-type", "index"], {}, "use uid or device-name"),
        (["-k", "--pod-resources-kubelet-socket="], {}, "must not be empty"),
        (["--simulate-scenario", "s.json"], {}, "needs --simulate"),
        (["--simulate-burn", "5"], {}, "ON,OFF"),
    ],
)
def test_bad_values_name_the_flag_or_variable(argv: list[str], env: dict[str, str],
                                              needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_serve_args(argv, env)
    assert needle in str(exc.value)


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--fake-gpus"], {}, "use --simulate"),
    ],
)
def test_unsupported_dcgm_exporter_options_that_matter_are_refused(
        argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_serve_args(argv, env)
    assert needle in str(exc.value)


def test_web_config_file_flag_and_environment_variable() -> None:
    assert parse_serve_args([], {}).http.web_config_file is None
    assert parse_serve_args(["--web-config-file", "a.yml"], {}).http.web_config_file == "a.yml"
    env = {"DCGM_EXPORTER_WEB_CONFIG_FILE": "b.yml"}
    assert parse_serve_args([], env).http.web_config_file == "b.yml"
    assert parse_serve_args(["--web-config-file", "a.yml"], env).http.web_config_file == "a.yml"
    assert parse_serve_args([], {"DCGM_EXPORTER_WEB_CONFIG_FILE": ""}).http.web_config_file is None


def test_issue9_options_old_namespace_devices_dra() -> None:
    from podgpu.model.selection import DeviceSelection

    s = parse_serve_args(["-o", "-d", "g:0,2-3+i:1", "--kubernetes-enable-dra"], {})
    assert s.output.old_namespace and s.kubernetes.dra
    assert s.collect.devices == DeviceSelection(False, (0, 2, 3), (1,))
    env = {"DCGM_EXPORTER_DEVICES_STR": "i", "DCGM_EXPORTER_USE_OLD_NAMESPACE": "true",
           "KUBERNETES_ENABLE_DRA": "1"}
    s = parse_serve_args([], env)
    assert s.collect.devices == DeviceSelection(False, None, ()) and s.output.old_namespace
    assert s.kubernetes.dra
    assert parse_serve_args(["-d", "f"], {}).collect.devices == DeviceSelection()


@pytest.mark.parametrize("spec", ["x", "g:", "g:1-0", "g+g", "g:a", "i:1,,2", "f+g"])
def test_bad_device_selection_is_one_line_naming_the_flag(spec: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_serve_args(["-d", spec], {})
    assert str(exc.value).startswith("--devices: ") and "\n" not in str(exc.value)


def test_harmless_dcgm_exporter_options_are_accepted_with_a_warning() -> None:
    s = parse_serve_args(["-n", "-r", "localhost:5555", "--enable-pprof", "-m", "none", "-d", "f",
                          "--dcgm-log-level", "NONE"], {"DCGM_EXPORTER_DUMP_ENABLED": "true"})
    joined = "\n".join(s.warnings)
    for name in ("--no-hostname", "--remote-hostengine-info", "--enable-pprof",
                 "--dcgm-log-level", "DCGM_EXPORTER_DUMP_ENABLED"):
        assert name in joined
    assert "configmap" not in joined and "--devices" not in joined  # 'none'/'f' are defaults
    assert parse_serve_args(["--enable-pprof=false"], {}).warnings == ()


PROC = "tests/fixtures/proc"  # a /proc with <pid>/ directories, which -k needs


def test_allowlist_patterns_go_refuses_are_skipped_with_a_warning_as_dcgm_exporter() -> None:
    """dcgm-exporter (internal/pkg/transformation/kubernetes.go, newLabelFilterCache) compiles
    the patterns only with -k; one Go's regexp refuses is logged and skipped, the rest used;
    none compiling turns filtering off (every label)."""
    flag = "--kubernetes-pod-label-allowlist-regex"
    assert parse_serve_args([flag, "(?<=a)b,^team$"], {}).warnings == ()  # without -k: unused
    s = parse_serve_args(["-k", "--proc-root", PROC, flag, "(?<=a)b,^team$"], {})
    (warning,) = s.warnings
    assert warning.startswith(f"{flag}: bad regex '(?<=a)b'") and "skipping" in warning
    assert s.kubernetes.label_allowlist == ("(?<=a)b", "^team$")
    s = parse_serve_args(["-k", "--proc-root", PROC], {
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "(?<=a)b,(x"})
    assert len(s.warnings) == 3 and "every pod label is copied" in s.warnings[-1]


@pytest.mark.parametrize(("value", "kubernetes", "hostname"), [
    ("gpu-host-7:5555", False, "gpu-host-7"),
    ("10.0.0.7:5555", False, "10.0.0.7"),
    ("[fd00::7]:5555", False, "fd00::7"),
    ("gpu-host-7", False, "gpu-host-7"),  # no port: Go's SplitHostPort fails, the value is used
    ("[fd00::7]", False, "[fd00::7]"),
    ("gpu-host-7:5555", True, "n1"),  # with -k dcgm-exporter keeps NODE_NAME
])
def test_remote_hostengine_sets_hostname_as_dcgm_exporter(
        value: str, kubernetes: bool, hostname: str) -> None:
    """dcgm-exporter (internal/pkg/hostname/hostname.go): with -r and without -k the Hostname
    label is the host of the remote address, even over NODE_NAME; with -k the node's name."""
    k = ["-k", "--proc-root", PROC] if kubernetes else []
    for argv, env in ((["-r", value], {}), ([], {"DCGM_REMOTE_HOSTENGINE_INFO": value})):
        s = parse_serve_args([*k, *argv], {"NODE_NAME": "n1", **env})
        assert s.output.hostname == hostname
        assert any("Hostname label is the address's host" in w for w in s.warnings)
