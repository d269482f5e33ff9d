"""The spool directory is not trusted: only regular files are read, loading stays
within the queue's bound, temp files are cleaned, every line is checked before it can be sent,
and a directory podgpu cannot use is one ConfigError. Real files, FIFOs and symlinks in tmp_path;
a directory in the way of a rename injects the failed write."""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

import pytest

from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.queue import EVENT_OVERHEAD, EventQueue
from podgpu.sinks.cloudwatch.spool import (
    HELD_OVERHEAD,
    MAX_EVENT_BYTES,
    segment_name,
    valid_event,
)

MIB = 1 << 20


def emf(n: int, tag: str = "e", pad: int = 0) -> list[str]:
    return [f'{{"_aws":{{"Timestamp":0}},"v":"{tag}{i:06d}","p":"{"x" * pad}"}}' for i in range(n)]


def seg(ts: int, seq: int = 1, pid: int = 1) -> str:
    return segment_name(ts, pid, seq)


def load(path: Path, max_bytes: int = MIB, timeout: float = 10.0) -> EventQueue:
    """EventQueue(...) on a thread, so a start that hangs fails the test instead of hanging it."""
    box: list[EventQueue] = []
    t = threading.Thread(target=lambda: box.append(EventQueue(max_bytes, str(path))), daemon=True)
    t.start()
    t.join(timeout)
    assert box, "loading the spool hung"
    return box[0]


def queued(q: EventQueue) -> list[str]:
    return [m for _, m, _ in q.peek(1 << 20, 1 << 40, 1 << 60)]


def test_a_fifo_a_device_link_and_a_link_out_are_skipped_not_read(tmp_path: Path) -> None:
    good = emf(3)
    (tmp_path / seg(3000)).write_text("\n".join(good) + "\n")
    os.mkfifo(tmp_path / seg(1000))
    (tmp_path / seg(2000)).symlink_to("/dev/zero")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.jsonl"
    outside.write_text("\n".join(emf(2, "o")) + "\n")
    (tmp_path / seg(2500)).symlink_to(outside)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q = load(tmp_path)
    assert queued(q) == good
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 16 * 1024  # KiB
    assert (tmp_path / seg(1000)).exists() and outside.exists()  # left alone, not deleted


def test_loading_is_bounded_newest_first_and_the_rest_counted(tmp_path: Path) -> None:
    one = len(emf(1, "f00-", 1000)[0]) + EVENT_OVERHEAD + HELD_OVERHEAD
    for i in range(40):  # 40 files of 100 events of ~1 KiB: ~4 MiB on disk
        (tmp_path / seg(1000 * (i + 1))).write_text("\n".join(emf(100, f"f{i:02d}-", 1000)) + "\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q = load(tmp_path, max_bytes=250 * one)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert len(q) == 250 and q.dropped == 4000 - 250 and q.accepted == 4000
    kept = queued(q)
    assert kept[0].startswith('{"_aws":{"Timestamp":0},"v":"f37-000050"')  # newest 250 events
    assert kept[-1].startswith('{"_aws":{"Timestamp":0},"v":"f39-000099"')
    assert len(list(tmp_path.glob("*.jsonl"))) == 3  # older files counted and deleted
    assert grown_kib < 8 * 1024


def test_lines_are_validated_and_a_huge_line_is_never_held(tmp_path: Path) -> None:
    good = emf(2)
    plain = '{"Timestamp":5,"gpu":"0"}'
    lines = ["garbage", good[0], "[1,2]", '{"_aws":{"Timestamp":"soon"}}', '{"a":1}',
             "{" + "x" * 100, plain, '{"_aws":{"Timestamp":0},"v":"\\ud800"}', good[1]]
    path = tmp_path / seg(1000)
    with path.open("w") as fh:
        fh.write("\n".join(lines) + "\n")
        fh.write('{"_aws":{"Timestamp":0},"p":"' + "y" * (5 * MIB) + '"}\n')
        fh.write(good[0])  # the last line without a newline still counts
    q = load(tmp_path)
    assert queued(q)[:3] == [good[0], plain, '{"_aws":{"Timestamp":0},"v":"\\ud800"}']
    assert queued(q)[3:] == [good[1], good[0]]
    assert q.dropped == 6  # 5 garbage lines and the 5 MiB one


def test_valid_event_bounds() -> None:
    assert valid_event(b'{"_aws":{"Timestamp":1}}') is not None
    assert valid_event(b'{"_aws":{"Timestamp":true}}') is None
    assert valid_event(b'{"Timestamp":1,"p":"' + b"z" * MAX_EVENT_BYTES + b'"}') is None
    assert valid_event(b"\xff") is None


def test_temp_files_are_cleaned_at_start_and_after_a_failed_write(tmp_path: Path) -> None:
    (tmp_path / (seg(1000) + ".tmp")).write_bytes(b"")
    (tmp_path / "other.tmp").write_bytes(b"half")  # another program's: left alone
    q = load(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["other.tmp"]
    (tmp_path / "other.tmp").unlink()
    # the next segment's final name is taken by a directory: the rename fails like a full disk
    blocked = tmp_path / seg(2000, 1, os.getpid())
    blocked.mkdir()
    assert q.put(2000, emf(2)) == 0
    assert len(q) == 2  # the in-memory queue goes on
    assert sorted(p.name for p in tmp_path.iterdir()) == [blocked.name]  # no *.tmp left


@pytest.mark.parametrize(("sub", "why"), [
    ("", "exists and is not a directory"),
    ("sub", "cannot create it: Not a directory"),
])
def test_a_bad_spool_dir_is_one_config_error(tmp_path: Path, sub: str, why: str) -> None:
    (tmp_path / "file").write_text("x")
    path = tmp_path / "file" / sub if sub else tmp_path / "file"
    with pytest.raises(ConfigError) as info:
        EventQueue(MIB, str(path))
    assert str(info.value).startswith(f"--emf-spool-dir {str(path)!r}: {why}")


def test_at_shutdown_events_whose_file_was_not_written_are_counted(tmp_path: Path) -> None:
    from podgpu.sinks.cloudwatch.sender import Sender
    from tests.unit.sinks.cloudwatch.test_queue_sender import FakeDestination

    q = EventQueue(MIB, str(tmp_path))
    q.put(1000, emf(3, "a"))
    (tmp_path / seg(2000, 2, os.getpid())).mkdir()  # this write fails
    q.put(2000, emf(2, "b"))
    assert Sender(FakeDestination(), q).finish(spooled=True) == 5
    assert q.dropped == 2 and q.accepted == 5 and len(q) == 3
    assert len(EventQueue(MIB, str(tmp_path))) == 3  # what a restart finds


def test_foreign_files_are_never_read_sent_or_deleted(tmp_path: Path) -> None:
    """A mistyped `--emf-spool-dir /var/tmp`: another program's `.jsonl` with a Timestamp line,
    its `.tmp` files and names of podgpu's old form (`<digits>-<name>.jsonl`) were loaded, sent or
    deleted at start. Now only podgpu's own names are touched."""
    foreign = {"1700000000000-backup.jsonl": "\n".join(emf(2, "theirs")) + "\n",
               "session.tmp": "x", "000000000001000-1-000001.jsonl": "\n".join(emf(1)) + "\n",
               "podgpu-emf-notes.jsonl": "\n".join(emf(1)) + "\n",
               seg(5000) + ".bak": "\n".join(emf(1)) + "\n"}
    for name, text in foreign.items():
        (tmp_path / name).write_text(text)
    mine = emf(2, "mine")
    (tmp_path / seg(4000)).write_text("\n".join(mine) + "\n")
    q = load(tmp_path)
    assert queued(q) == mine and q.accepted == 2
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.name in foreign} == foreign


@pytest.mark.slow  # writes and loads a spool of a million events
def test_loaded_tiny_events_cost_at_most_about_twice_the_bound(tmp_path: Path) -> None:
    """64 MiB of tiny events cost +232 MiB (3.6x the bound) when only their text was charged."""
    import tracemalloc

    tiny = '{"Timestamp":1}'
    for i in range(8):
        (tmp_path / seg(1000 + i)).write_text((tiny + "\n") * 100_000)
    bound = 4 * MIB
    tracemalloc.start()
    q = load(tmp_path, max_bytes=bound, timeout=120)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert 0 < len(q) < 800_000 and q.dropped == 800_000 - len(q)
    assert held <= 2 * bound, held
