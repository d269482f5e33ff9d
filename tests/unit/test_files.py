"""The one bounded file reader: regular files only, never blocking, never past its cap."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from podgpu.files import FileReadError, describe, read_bytes, read_text


def test_a_regular_file_is_read_whole_within_its_cap(tmp_path: Path) -> None:
    f = tmp_path / "a"
    f.write_bytes(b"x" * 1000)
    assert read_bytes(f, 1000) == b"x" * 1000
    with pytest.raises(FileReadError, match="larger than 999 bytes"):
        read_bytes(f, 999)


@pytest.mark.parametrize(("make", "kind"), [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: os.mkdir(p), "a directory"),
    (lambda p: os.symlink("/dev/zero", p), "a character device"),
])
def test_special_files_are_refused_before_a_byte_is_read(tmp_path: Path, make: object,
                                                          kind: str) -> None:
    """A FIFO with no writer would block a plain open(); /dev/zero never ends."""
    path = tmp_path / "special"
    make(path)  # type: ignore[operator]
    with pytest.raises(FileReadError, match=f"^{kind}, not a regular file$"):
        read_bytes(path, 1 << 20)


def test_a_unix_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(FileReadError, match=r"cannot read|a socket"):
            read_bytes(path, 100)


def test_proc_files_are_read_with_the_cap() -> None:
    """/proc files say size 0 and are regular: read in steps, never past the cap."""
    assert b"Name:" in read_bytes("/proc/self/status", 1 << 20)
    with pytest.raises(FileReadError, match="larger than 10 bytes"):
        read_bytes("/proc/self/status", 10)


def test_an_unreadable_special_file_is_one_line() -> None:
    """/proc/self/mem is a regular file whose read at offset 0 fails (EIO)."""
    with pytest.raises(FileReadError) as info:
        read_bytes("/proc/self/mem", 1 << 20)
    assert str(info.value).startswith("cannot read:") and "\n" not in str(info.value)


def test_an_endless_file_costs_the_cap_not_more(tmp_path: Path) -> None:
    """A file that is bigger than its cap is never read past cap + 1 bytes."""
    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.truncate(256 << 20)  # sparse: 256 MiB of zeros, no disk
    tracemalloc.start()
    with pytest.raises(FileReadError, match="larger than 1 MiB"):
        read_bytes(big, 1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 << 20


def test_text_names_the_first_bad_byte(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_bytes(b"ok\xff")
    with pytest.raises(FileReadError, match=r"not UTF-8 text \(byte 2:"):
        read_text(f, 100)


def test_describe() -> None:
    assert (describe(4 << 20), describe(64 << 10), describe(100)) == ("4 MiB", "64 KiB",
                                                                      "100 bytes")


@pytest.mark.parametrize(("flag", "path", "needle"), [
    ("--cloudwatch-config", "/dev/zero", "--cloudwatch-config /dev/zero: a character device"),
    ("-f", "/proc/self/mem", "-f /proc/self/mem: cannot read: Input/output error"),
    ("--simulate-scenario", "FIFO", "a FIFO, not a regular file"),
])
def test_serve_refuses_special_files_with_one_line(tmp_path: Path, flag: str, path: str,
                                                   needle: str) -> None:
    """Exit 2 and one line, never a hang (FIFO), a read without end (/dev/zero) or a traceback."""
    if path == "FIFO":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    extra = ["--emf-destination", "stdout"] if flag == "--cloudwatch-config" else []
    proc = subprocess.run(
        [sys.executable, "-m", "podgpu", "serve", "--simulate", "1", "-a", "127.0.0.1:0",
         flag, path, *extra], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero", "mem"])
def test_a_reload_onto_a_special_file_keeps_the_list_with_one_line(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """A list file swapped for a FIFO, /dev/zero or /proc/self/mem between two reloads: the
    reload is refused in one log line and the list in use stays (no hang, no traceback)."""
    import logging

    from podgpu.fields.metriclist import load_metric_list
    from podgpu.reload import MetricListSwitch

    path = tmp_path / "list.csv"
    path.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n")
    switch = MetricListSwitch(load_metric_list(str(path)), lambda: load_metric_list(str(path)))
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "zero" else "/proc/self/mem")
    with caplog.at_level(logging.INFO, logger="podgpu.reload"):
        assert switch.request() is False
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "\n" not in caplog.records[0].getMessage() and not caplog.records[0].exc_info
    assert switch.current.metrics and "still exporting" in str(switch.health()["status"])


def test_open_regular_streams_regular_files_only(tmp_path: Path) -> None:
    """The spool's streaming open: a FIFO is refused without blocking, a symlink is not
    followed when asked (ELOOP), a regular file is returned open and blocking."""
    import errno

    from podgpu.files import open_regular

    f = tmp_path / "seg"
    f.write_bytes(b"a\nb\n")
    with open_regular(f, follow_symlinks=False) as fh:
        assert fh.readline() == b"a\n"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FileReadError, match=r"^a FIFO, not a regular file$"):
        open_regular(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(f)
    with pytest.raises(FileReadError) as info:
        open_regular(tmp_path / "link", follow_symlinks=False)
    assert info.value.errno == errno.ELOOP
