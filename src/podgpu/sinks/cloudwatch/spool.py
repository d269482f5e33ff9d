"""The EMF spool directory: one file per interval's events, written atomically, read back at start
within the queue's byte bound.

The directory is usually a hostPath shared with earlier runs, so what is in it is not trusted:

- only **regular files** with the spool's own name pattern are read, opened without following
  symlinks and without blocking (a FIFO, a device or a symlink to `/dev/zero` is skipped with a
  log line, never read);
- loading is **bounded by the queue's byte bound**: the newest files are read first, and once the
  bound is reached the older files are only counted (line by line, in fixed chunks) and deleted,
  as the queue would have dropped them; a line longer than an event can be is never held whole;
- every line is **validated** before it can be sent: a JSON object with an `_aws.Timestamp` or
  a `Timestamp` number (or, EMF v0 as the Container Insights events are, root
  `CloudWatchMetrics` and a `Timestamp` string of digits), at most MAX_EVENT_BYTES; other lines
  are dropped and counted;
- **only podgpu's own files are touched**: segments are named `podgpu-emf-<timestamp_ms>-<pid>-
  <seq>.jsonl` (temporary ones end `.jsonl.tmp`); any other entry in the directory (another
  program's `.jsonl` or `.tmp`, a file of an earlier podgpu naming) is never read, sent or
  deleted, only counted in one log line. A directory shared with other programs therefore works,
  though a directory of its own is the documented setup;
- **temporary files** of podgpu's naming (left by a crash or a full disk) are removed at start,
  and a write that fails removes its own;
- loaded events are charged their **memory** against the bound (the text plus the cost of
  holding one event), so a spool of tiny events cannot take several times the bound.

Decision record: docs/decisions/0021-emf-spool-bounded.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from podgpu.errors import ConfigError
from podgpu.files import FileReadError, open_regular

log = logging.getLogger(__name__)

EVENT_OVERHEAD = 26  # PutLogEvents counts 26 bytes per event on top of the message
MAX_EVENT_BYTES = 256 * 1024 - EVENT_OVERHEAD
"""The largest message the encoder writes (the agent's 256 KiB cap, message + 26)."""
READ_CHUNK = 1 << 20
PREFIX = "podgpu-emf-"
NAME = re.compile(r"^podgpu-emf-(\d{15})-\d{1,10}-\d{6,12}\.jsonl$")
"""`podgpu-emf-<timestamp_ms>-<pid>-<seq>.jsonl`, as `segment_name` names them."""
TEMP = re.compile(r"^podgpu-emf-\d{15}-\d{1,10}-\d{6,12}\.jsonl\.tmp$")
HELD_OVERHEAD = 96
"""Bytes of memory one loaded event costs besides its text (a str object's header, its list
slot, its size as an int), charged against the bound while loading."""


def segment_name(timestamp_ms: int, pid: int, seq: int) -> str:
    """The file name of one segment: only names of this form are ever read or deleted."""
    return f"{PREFIX}{timestamp_ms:015d}-{pid}-{seq:06d}.jsonl"


@dataclass(slots=True)
class Loaded:
    """What a start found in the spool: segments (oldest first) and the counts of what it did
    not load."""

    segments: list[tuple[int, list[str], str]] = field(default_factory=list)
    """(timestamp ms, events, path)."""
    over_bound: int = 0
    """Events dropped because the spool held more than the queue's bound (oldest first)."""
    invalid: int = 0
    """Lines that are not EMF events (or are longer than one can be)."""
    skipped: list[str] = field(default_factory=list)
    """Entries that are not regular files, or could not be read."""
    temp_removed: int = 0
    foreign: int = 0
    """Entries not named as podgpu names its files: left alone."""


def prepare(path: str) -> None:
    """Create the directory if needed; ConfigError (exit 2, one line) when it cannot be used."""
    flag = f"--emf-spool-dir {path!r}"
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{flag}: exists and is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot create it: {exc.strerror or exc}") from None
    if not os.path.isdir(path):
        raise ConfigError(f"{flag}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK | os.R_OK):
        raise ConfigError(f"{flag}: not readable and writable by this process (uid {os.getuid()})")


def _open_regular(path: str) -> IO[bytes] | None:
    """The file for reading if it is a regular file (never following a symlink, never blocking
    on a FIFO), through the one bounded file reader's open; None when it is not one. OSError
    when it cannot be opened."""
    try:
        return open_regular(path, follow_symlinks=False)
    except FileReadError as exc:
        if exc.errno is not None:
            raise OSError(exc.errno, str(exc).removeprefix("cannot read: ")) from None
        return None


def _lines(fh: IO[bytes]) -> Iterator[bytes | None]:
    """Each line without its newline; None for a line longer than MAX_EVENT_BYTES (consumed in
    chunks, never held whole)."""
    while True:
        line = fh.readline(MAX_EVENT_BYTES + 2)
        if not line:
            return
        if not line.endswith(b"\n") and len(line) > MAX_EVENT_BYTES:
            while (more := fh.readline(READ_CHUNK)) and not more.endswith(b"\n"):
                pass
            yield None
            continue
        yield line.rstrip(b"\n")


def valid_event(line: bytes) -> str | None:
    """The line as an event if it is one podgpu could have written, else None."""
    if not line or len(line) > MAX_EVENT_BYTES or line[:1] != b"{":
        return None
    try:
        text = line.decode("utf-8")
        doc = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    aws = doc.get("_aws")
    ts = aws.get("Timestamp") if isinstance(aws, dict) else doc.get("Timestamp")
    if isinstance(ts, str) and ts.isdigit() and isinstance(doc.get("CloudWatchMetrics"), list):
        return text  # EMF v0, the Container Insights events': a string of milliseconds
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return None
    return text


def count_lines(fh: IO[bytes]) -> int:
    n, last = 0, b"\n"
    while chunk := fh.read(READ_CHUNK):
        n += chunk.count(b"\n")
        last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)


def load(path: str, budget: int) -> Loaded:
    """Read the spool newest first within `budget` bytes (message + 26 per event)."""
    out = Loaded()
    found: list[tuple[int, str]] = []
    with os.scandir(path) as it:
        for entry in it:
            if TEMP.match(entry.name):
                if entry.is_file(follow_symlinks=False):
                    remove(entry.path)
                    out.temp_removed += 1
                continue
            m = NAME.match(entry.name)
            if m is None:
                out.foreign += 1
                continue
            if not entry.is_file(follow_symlinks=False):
                out.skipped.append(f"{entry.path} (not a regular file)")
                continue
            found.append((int(m[1]), entry.path))
    found.sort(reverse=True)
    for ts, file in found:
        try:
            fh = _open_regular(file)
        except OSError as exc:
            out.skipped.append(f"{file} ({exc.strerror or exc})")
            continue
        if fh is None:
            out.skipped.append(f"{file} (not a regular file)")
            continue
        with fh:
            if budget <= 0:
                out.over_bound += count_lines(fh)
                remove(file)
                continue
            events: deque[str] = deque()
            sizes: deque[int] = deque()
            size = 0
            for line in _lines(fh):
                event = valid_event(line) if line is not None else None
                if event is None:
                    out.invalid += 1
                    continue
                n = len(line) + EVENT_OVERHEAD + HELD_OVERHEAD if line is not None else 0
                events.append(event)
                sizes.append(n)
                size += n
                while size > budget and events:  # this file's oldest events go first
                    events.popleft()
                    size -= sizes.popleft()
                    out.over_bound += 1
        if not events:
            remove(file)
            continue
        budget -= size
        out.segments.append((ts, list(events), file))
        del events, sizes
    out.segments.reverse()
    return out


def write(path: str, name: str, events: list[str]) -> str | None:
    """Write one segment atomically (a temp file renamed); the path, or None when the disk
    refuses (the temp file is removed, the in-memory queue goes on)."""
    final = os.path.join(path, name)
    tmp = final + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(events) + "\n")
        os.replace(tmp, final)
        return final
    except OSError as exc:
        log.warning("EMF spool: cannot write %s: %s", final, exc.strerror or exc)
        remove(tmp, quiet=True)
        return None


def remove(path: str, *, quiet: bool = False) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if not quiet:
            log.warning("EMF spool: cannot remove %s: %s", path, exc.strerror or exc)
