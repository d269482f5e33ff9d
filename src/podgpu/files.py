"""The one bounded file reader: every file podgpu reads (config files, lists, scenarios, cgroup
and `/proc` files, HPC job files, the spool, the service-account token) is read here.

- **Regular files only**, opened without blocking (`O_NONBLOCK`: opening a FIFO for reading
  would wait for a writer forever) and then checked on the open descriptor (`fstat`), so a FIFO,
  a directory, `/dev/zero` or another device is refused before one byte is read, and a file
  swapped between a check and the open cannot slip through.
- **A size cap per kind of file**: at most `limit + 1` bytes are ever read, in steps, so a file
  that grows without end (or a `/proc` or `/sys` file, which says size 0) costs the cap.
- A read that fails (`/proc/self/mem` answers EIO) is the same one-line error as a missing file.

`FileReadError` holds one line saying why; the caller adds the flag or purpose it was read for.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO

CHUNK = 64 * 1024


class FileReadError(Exception):
    """The file cannot be read within its bounds; the message is one line (no path). `errno`
    is the OS error's number when opening or reading failed (ENOENT: it is not there)."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words for an error."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """At most `limit` bytes of the regular file at `path`; FileReadError when it is not a
    regular file, cannot be opened or read, or holds more than `limit` bytes."""
    data, more = read_head(path, limit, follow_symlinks=follow_symlinks)
    if more:
        raise FileReadError(f"larger than {describe(limit)}")
    return data


def read_head(path: str | os.PathLike[str], limit: int, *,
              follow_symlinks: bool = True) -> tuple[bytes, bool]:
    """The first `limit` bytes of the regular file at `path`, and whether it holds more;
    FileReadError as `read_bytes` for anything but the size."""
    fd = _open_regular_fd(path, follow_symlinks)
    try:
        parts: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(CHUNK, limit + 1 - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileReadError(f"cannot read: {exc.strerror or exc}", exc.errno) from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    data = b"".join(parts)
    return data[:limit], size > limit


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """The regular file at `path` open for reading in binary (for a reader that streams it, such
    as the spool's, with its own caps per line); opened without blocking and checked on the
    descriptor as `read_bytes` does. FileReadError says why not."""
    fd = _open_regular_fd(path, follow_symlinks)
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def _open_regular_fd(path: str | os.PathLike[str], follow_symlinks: bool) -> int:
    """A descriptor open for reading on the regular file at `path`: opened without blocking, then
    checked with `fstat` on that descriptor (closed again when it is not a regular file)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileReadError(f"cannot read: {exc.strerror or exc}", exc.errno) from None
    except ValueError as exc:  # a NUL in the path
        raise FileReadError(f"cannot read: {exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise FileReadError(f"cannot read: {exc.strerror or exc}", exc.errno) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FileReadError(f"{kind_of(mode)}, not a regular file")
    return fd


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """`read_bytes` decoded as UTF-8; FileReadError names the first bad byte."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileReadError(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def describe(limit: int) -> str:
    """A byte count in words: `4 MiB`, `64 KiB`, `100 bytes`."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def packaged(module_file: str, *name: str) -> bytes:
    """A file shipped in podgpu's package, `name` beside the module whose `__file__` is given;
    read whole, without pathlib or importlib.resources (both cost start-up time)."""
    with open(os.path.join(os.path.dirname(module_file), *name), "rb") as f:
        return f.read()
