"""The option engine (podgpu.options): Go integer syntax, clamping with one warning, flag > env >
default, help text."""

from __future__ import annotations

import argparse
import os
import shutil
from unittest import mock

import pytest

from podgpu.config import parse_serve_args, serve_parser
from podgpu.errors import ConfigError
from podgpu.options import Option, go_int, new_parser, resolve, terminal_columns


@pytest.mark.parametrize(("text", "value"), [
    ("30000", 30000), ("0x7530", 30000), ("0X7530", 30000), ("30_000", 30000), ("0o17", 15),
    ("0O17", 15), ("017", 15), ("0b1", 1), ("0B101", 5), ("+5", 5), ("-5", -5), ("0", 0),
    ("0x_7530", 30000), ("1_0_0", 100), ("0_17", 15), (" 42 ", 42),
    (str((1 << 63) - 1), (1 << 63) - 1),
])
def test_go_int_accepts_what_strconv_parseint_base_0_accepts(text: str, value: int) -> None:
    assert go_int(text) == value


@pytest.mark.parametrize("text", ["", "_1", "1_", "1__0", "0x", "0b2", "08", "1e3", "1.0", "0x_",
                                  "abc", "--1", str(1 << 63), "٣", "1 0"])
def test_go_int_refuses_what_strconv_parseint_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="expected an integer"):
        go_int(text)


@pytest.mark.parametrize(("argv", "env", "ms"), [
    (["-c", "0x7530"], {}, 30000), (["-c", "30_000"], {}, 30000),
    ([], {"DCGM_EXPORTER_INTERVAL": "0x7530"}, 30000), (["-c", "0o1750"], {}, 1000),
])
def test_go_integer_syntax_for_the_interval(argv: list[str], env: dict[str, str], ms: int) -> None:
    assert parse_serve_args(argv, env).collect.interval_ms == ms


@pytest.mark.parametrize(("argv", "env", "dest", "used", "warning"), [
    # before: exit 2 ("must be at least 100 ms"); dcgm-exporter starts with these
    (["-c", "50"], {}, "interval_ms", 100, "--collect-interval 50: outside 100..3600000 ms; using 100 ms"),
    ([], {"DCGM_EXPORTER_INTERVAL": "3"}, "interval_ms", 100,
     "environment variable DCGM_EXPORTER_INTERVAL 3: outside 100..3600000 ms; using 100 ms"),
    (["-c", "-1"], {}, "interval_ms", 100, "--collect-interval -1: outside"),
    (["-c", "10000000000000"], {}, "interval_ms", 3_600_000, "using 3600000 ms"),
    (["-x", "0"], {}, "xid_window_ms", 1, "--xid-count-window-size 0: outside 1..604800000 ms; using 1 ms"),
    ([], {"DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "0"}, "clock_events_window_ms", 1,
     "environment variable DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE 0: outside"),
    ([], {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "99999999999"}, "xid_window_ms", 604_800_000,
     "using 604800000 ms"),
])
def test_out_of_range_intervals_and_windows_clamp_with_one_warning(
        argv: list[str], env: dict[str, str], dest: str, used: int, warning: str) -> None:
    s = parse_serve_args(argv, env)
    assert getattr(s.collect, dest) == used
    assert len(s.warnings) == 1 and warning in s.warnings[0], s.warnings


def test_values_that_are_not_integers_still_exit_2_naming_the_source() -> None:
    with pytest.raises(ConfigError, match=r"^--collect-interval: expected milliseconds"):
        parse_serve_args(["-c", "1s"], {})
    with pytest.raises(ConfigError, match=r"^environment variable DCGM_EXPORTER_INTERVAL: "):
        parse_serve_args([], {"DCGM_EXPORTER_INTERVAL": "fast"})


def test_flag_beats_env_beats_default_and_empty_env_is_unset() -> None:
    opts = (Option(("-n", "--number"), "n", "N_ENV", 7, "a number", go_int),)
    parser = new_parser("t", None, opts)
    assert resolve(parser.parse_args([]), opts, {}).values["n"] == 7
    assert resolve(parser.parse_args([]), opts, {"N_ENV": ""}).values["n"] == 7
    r = resolve(parser.parse_args([]), opts, {"N_ENV": "0x10"})
    assert r.values["n"] == 16 and r.origin["n"] == "environment variable N_ENV"
    assert resolve(parser.parse_args(["-n", "3"]), opts, {"N_ENV": "9"}).values["n"] == 3


def test_help_shows_readable_defaults() -> None:
    text = serve_parser().format_help()
    assert "DeviceSelection(" not in text  # before: -d's default printed as a dataclass repr
    assert "env DCGM_EXPORTER_DEVICES_STR; default f]" in " ".join(text.split())
    assert "default none]" not in text  # before: the allowlist's default read "none" (= all)


@pytest.mark.parametrize("columns", ["123", "60", "0", "-4", "wide", ""])
def test_the_help_width_is_the_one_shutil_finds(columns: str) -> None:
    with mock.patch.dict(os.environ, {"COLUMNS": columns}):
        assert terminal_columns() == shutil.get_terminal_size().columns


@pytest.mark.parametrize("columns", ["200", "60"])
def test_serve_help_is_argparses_default_help_at_the_same_width(columns: str) -> None:
    """The formatter only hands argparse the width it would have asked shutil for."""
    from podgpu.config import OPTIONS

    default = new_parser("podgpu serve", "collect GPU metrics and serve /metrics (dcgm-exporter's "
                         "flags)", OPTIONS, formatter_class=argparse.HelpFormatter)
    default.add_argument("-v", "--version", action="version", version="x")
    with mock.patch.dict(os.environ, {"COLUMNS": columns}):
        ours, theirs = serve_parser().format_help(), default.format_help()
    assert ours == theirs
    widest = max(map(len, ours.splitlines()))
    assert widest > 150 if columns == "200" else widest < 100  # the width reached argparse
