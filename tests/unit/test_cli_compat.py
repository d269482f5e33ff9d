"""Issue 9: dcgm-exporter's command-line habits (Go single-dash long flags, serve --version)."""

from __future__ import annotations

import pytest

from podgpu import __version__
from podgpu.cli import build_parser, go_style_flags, main
from podgpu.config import settings_from


def test_go_style_single_dash_long_flags_become_double_dash() -> None:
    args = go_style_flags(["-collectors", "/etc/dcgm-exporter/dcp-metrics-included.csv",
                           "-collect-interval=500", "-kubernetes", "-rbmn", "-f", "x", "-d", "g",
                           "-kubernetes-gpu-id-type", "device-name", "--address", ":9400"])
    ns = build_parser().parse_args(["serve", *args])
    s = settings_from(ns, {})
    # -f given after -collectors wins, as the last occurrence does in both parsers
    assert s.collectors == "x" and s.collect_interval_ms == 500 and s.kubernetes
    assert s.replace_blanks_in_model_name and s.kubernetes_gpu_id_type == "device-name"
    assert not s.devices.flex


def test_unknown_single_dash_words_are_left_for_the_parser_to_refuse() -> None:
    assert go_style_flags(["-bogus", "-o"]) == ["-bogus", "-o"]


@pytest.mark.parametrize("argv", [["serve", "--version"], ["serve", "-v"], ["-v"], ["--version"]])
def test_version_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"podgpu {__version__}"
