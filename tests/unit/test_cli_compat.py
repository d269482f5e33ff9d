"""dcgm-exporter's command-line habits: flags as Go's flag package reads them,
`serve --version`, the lazily loaded command registry and its exit statuses."""

from __future__ import annotations

import sys

import pytest

from podgpu import __version__
from podgpu.cli import COMMANDS, main
from podgpu.config import OPTIONS, parse_serve_args
from podgpu.options import go_flags


def test_go_style_single_dash_long_flags_become_double_dash() -> None:
    s = parse_serve_args(["-collectors", "/etc/dcgm-exporter/dcp-metrics-included.csv",
                          "-collect-interval=500", "-kubernetes", "-rbmn", "-f", "x", "-d", "g",
                          "-kubernetes-gpu-id-type", "device-name", "--address", ":9400"], {})
    # -f given after -collectors wins, as the last occurrence does in both parsers
    assert s.collect.collectors == "x" and s.collect.interval_ms == 500 and s.kubernetes.enabled
    assert s.output.replace_blanks_in_model_name and s.kubernetes.gpu_id_type == "device-name"
    assert not s.collect.devices.flex


def test_go_double_dash_short_flags_mean_the_short_flag() -> None:
    # Before: `--f FILE` was an ambiguous argparse prefix (exit 2) and `--c 500` too; Go's flag
    # package reads one and two dashes alike, so dcgm-exporter takes them.
    s = parse_serve_args(["--f", "x.csv", "--a", "127.0.0.1:9500", "--c", "500", "--k", "--o",
                          "--d", "g:0", "--m", "ns:cm", "--rbmn", "--x=1000"], {})
    assert s.collect.collectors == "x.csv" and (s.http.host, s.http.port) == ("127.0.0.1", 9500)
    assert s.collect.interval_ms == 500 and s.kubernetes.enabled and s.output.old_namespace
    assert s.collect.devices.gpus == (0,) and s.collect.configmap == ("ns", "cm")
    assert s.output.replace_blanks_in_model_name and s.collect.xid_window_ms == 1000


@pytest.mark.parametrize(("argv", "expected"), [
    (["-k"], True), (["--k"], True), (["-kubernetes"], True), (["--kubernetes"], True),
    (["-k=false"], False), (["--kubernetes=false"], False), (["-kubernetes=0"], False),
    (["-k=true"], True), (["--k=F"], False),
])
def test_go_bool_flag_forms(argv: list[str], expected: bool) -> None:
    assert parse_serve_args(argv, {}).kubernetes.enabled is expected


def test_unknown_words_and_three_dashes_are_left_for_the_parser_to_refuse() -> None:
    assert go_flags(["-bogus", "-o", "---f", "--", "-collectors"], OPTIONS) == [
        "-bogus", "-o", "---f", "--", "-collectors"]
    for argv in (["-bogus"], ["---f", "x"], ["--coll", "x"]):  # no prefixes: Go has none
        with pytest.raises(SystemExit) as exc:
            parse_serve_args(argv, {})
        assert exc.value.code == 2


@pytest.mark.parametrize("argv", [["serve", "--version"], ["serve", "-v"], ["-v"], ["--version"],
                                  ["-version"], ["--v"]])
def test_version_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"podgpu {__version__}"


def test_the_registry_imports_a_command_only_when_it_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("podgpu.bridge.run", "podgpu.plan.cli", "podgpu.cwassets.cli", "podgpu.burn"):
        sys.modules.pop(name, None)
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert not {"podgpu.bridge.run", "podgpu.plan.cli", "podgpu.burn"} & set(sys.modules)


@pytest.mark.parametrize(("argv", "status", "needle"), [
    (["serve", "--simulate-scenario", "s.json"], 2, "podgpu: --simulate-scenario needs"),
    (["emf", "--cloudwatch-config", "c.json"], 2, "podgpu emf: --scrape URL is required"),
    (["emf", "--scrape", "ftp://x", "--cloudwatch-config", "c.json"], 2, "podgpu emf: "),
])
def test_one_exit_status_mapping(argv: list[str], status: int, needle: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == status
    err = capsys.readouterr().err
    assert err.startswith(needle) and err.count("\n") == 1, err
