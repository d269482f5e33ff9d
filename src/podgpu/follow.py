"""Following files while running: the one way podgpu notices that a file it reads has changed
(the metric list, fields/listfollow.py; the web config and the files it names,
http/websecurity.py).

A set of files has a `Version`: each path with the SHA-256 of what the one bounded reader
(podgpu.files) returns for it, through symlinks, or the reason it cannot be read (gone, not a
regular file). Content, not `stat()`: a Kubernetes ConfigMap or Secret volume changes by swapping
its `..data` symlink (new inode, new realpath), an editor may rewrite in place (same inode), and a
coarse mtime can hide a quick rewrite; each of these changes the content and is seen. A `touch`,
or kubelet projecting the same bytes again, changes nothing and reloads nothing. The cost is one
bounded read of a small file per poll (once a second by default), off the collect path.

`Follower.poll()` is one look and the only place a change is decided; with `settle`, a change is
reported once two polls in a row saw the same new version (an editor writing in two steps is read
once, whole). `poll_every` and `poll_on_loop` run the looks, on a thread or on an event loop, with
the wait injected so tests count polls instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Sequence

from podgpu.files import FileReadError, read_head

log = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0
DEFAULT_LIMIT = 2 << 20
"""Bytes of each file that count (a larger file reads as its first DEFAULT_LIMIT bytes and a
mark that there is more; its reader refuses it anyway)."""

Version = tuple[tuple[str, str], ...]
"""(path, "sha256:<hex>" or "unreadable: <reason>") per followed path, in order."""


def read_version(paths: Sequence[str], *, limit: int = DEFAULT_LIMIT) -> Version:
    """The version of `paths` now."""
    out = []
    for path in paths:
        try:  # regular files only: opening a FIFO never blocks
            data, more = read_head(path, limit)
        except FileReadError as exc:
            out.append((path, f"unreadable: {exc}"))
            continue
        digest = hashlib.sha256(data)
        if more:
            digest.update(b"\0more")
        out.append((path, f"sha256:{digest.hexdigest()}"))
    return tuple(out)


def unreadable(version: Version) -> list[str]:
    """The paths of `version` that could not be read."""
    return [path for path, state in version if not state.startswith("sha256:")]


class Follower:
    """Decides when the files at `paths` have changed since the version last reported."""

    def __init__(self, paths: Sequence[str], *, settle: bool = False,
                 look: Callable[[Sequence[str]], Version] = read_version) -> None:
        """`look` reads a version (tests inject one that counts); `settle`: see the module."""
        self._look = look
        self._settle = settle
        self.paths: tuple[str, ...] = ()
        self.version: Version = ()
        self._seen: Version = ()
        self.watch(paths)

    def watch(self, paths: Sequence[str]) -> None:
        """Follow `paths` from their version now (a reload that changed which files count)."""
        self.paths = tuple(paths)
        self.version = self._seen = self._look(self.paths)

    def poll(self) -> Version | None:
        """Look once: the new version when it differs from the one last reported (and, with
        `settle`, the previous look saw it too), else None."""
        now = self._look(self.paths)
        settled = now == self._seen or not self._settle
        self._seen = now
        if not settled or now == self.version:
            return None
        self.version = now
        return now


def poll_every(step: Callable[[], object], seconds: float,
               wait: Callable[[float], bool]) -> None:
    """Call `step` every `seconds` until `wait(seconds)` returns True (a stop event's `wait`)."""
    while not wait(seconds):
        step()


async def poll_on_loop(step: Callable[[], object], seconds: float, kick: asyncio.Event, *,
                       what: str) -> None:
    """Call `step` on the running loop every `seconds`, and at once when `kick` is set, until
    cancelled; an exception from `step` is logged (naming `what`) and the polling goes on."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kick.wait(), seconds)
        kick.clear()
        try:
            step()
        except Exception:  # a bug here must not stop following the file
            log.exception("checking %s failed", what)
