"""Upper bounds on intervals and simulation sizes, errors naming the environment variable
a bad value came from, and --proc-root checked at start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podgpu.attribution.cgroups import CgroupReader
from podgpu.config import parse_serve_args
from podgpu.errors import ConfigError


@pytest.mark.parametrize(("argv", "env", "message"), [
    ([], {"DCGM_EXPORTER_LISTEN": "foo"}, "environment variable DCGM_EXPORTER_LISTEN 'foo': expected"),
    (["-a", "foo"], {}, "--address 'foo': expected HOST:PORT"),
    # out-of-range -c / windows now clamp with a warning: tests/unit/test_options.py
    ([], {"DCGM_EXPORTER_LOG_FORMAT": "xml"},
     "environment variable DCGM_EXPORTER_LOG_FORMAT: use text or json, got 'xml'"),
    (["--simulate", "1", "--simulate-burn", "nan,nan"], {}, "--simulate-burn: expected ON,OFF"),
    (["--simulate", "1", "--simulate-burn", "inf,0"], {}, "--simulate-burn: expected ON,OFF"),
    (["--simulate", "1", "--simulate-burn", "1,1e300"], {}, "--simulate-burn: expected ON,OFF"),
    (["--http-max-connections", "0"], {}, "--http-max-connections: expected a number of connections in 16..1000000"),
    (["--http-request-timeout", "nan"], {}, "--http-request-timeout: must be between 1 and 600"),
    ([], {"PODGPU_HTTP_REQUEST_TIMEOUT": "0.1"},
     "environment variable PODGPU_HTTP_REQUEST_TIMEOUT: must be between 1 and 600"),
])
def test_bad_values_are_refused_naming_where_they_came_from(argv: list[str], env: dict[str, str],
                                                             message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_serve_args(argv, env)
    assert str(info.value).startswith(message), str(info.value)


def test_the_largest_accepted_values_still_parse() -> None:
    s = parse_serve_args(["-c", "3600000", "-x", str(7 * 24 * 3_600_000), "--simulate", "1",
                          "--simulate-burn", "86400,86400", "--http-max-connections", "1000000",
                          "--http-request-timeout", "600"], {})
    assert s.simulation is not None
    assert s.collect.interval_ms == 3_600_000 and s.simulation.burn == (86400.0, 86400.0)
    assert s.http.max_connections == 1_000_000 and s.http.request_timeout == 600.0


@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: d / "missing", "does not exist"),
    (lambda d: d, "holds no <pid>/ directories"),
    (lambda d: (d / "file").write_text("x") and d / "file", "is not a directory"),
])
def test_a_proc_root_without_processes_is_refused_with_k(tmp_path: Path, make, problem: str) -> None:  # type: ignore[no-untyped-def]
    root = make(tmp_path)
    with pytest.raises(ConfigError) as info:
        parse_serve_args(["-k", "--proc-root", str(root)], {})
    assert str(info.value) == f"--proc-root {str(root)!r}: {problem}" or problem in str(info.value)
    assert str(info.value).startswith(f"--proc-root {str(root)!r}: ")
    with pytest.raises(ConfigError, match="environment variable PODGPU_PROC_ROOT"):
        parse_serve_args(["-k"], {"PODGPU_PROC_ROOT": str(root)})
    parse_serve_args(["--proc-root", str(root)], {})  # unused without -k: not checked


def test_a_real_proc_root_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    assert parse_serve_args(["-k", "--proc-root", str(tmp_path)], {}).kubernetes.proc_root == str(tmp_path)


def test_a_proc_root_that_disappears_counts_errors_instead_of_exited_pids(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    (root / "4101").mkdir(parents=True)
    (root / "4101" / "cgroup").write_text("0::/kubepods/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/x\n")
    reader = CgroupReader(str(root))
    assert set(reader.resolve([4101, 4102])) == {4101}
    assert reader.errors == 0  # 4102 simply exited
    os.rename(root, tmp_path / "gone")
    assert reader.resolve([4103, 4104]) == {}
    assert reader.errors == 2  # each PID that could not be read because the root is gone
