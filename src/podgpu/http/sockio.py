"""How much of an answer to hand the transport at once, from what the kernel will take.

asyncio's socket transport sends what it is given at once and copies the part the kernel
refuses into its own buffer (Python 3.11: a bytearray; 3.12+: references). An answer is written
one step at a time, the next only once that buffer is empty, and a step is sized so the kernel
takes it whole: the whole rest of the answer when the send buffer surely has room for it, else
STEP bytes, else MIN_STEP (Linux takes a little past a full send buffer). What a client that
does not read leaves in podgpu is then at most one step's misestimate, and the memory budget
(http.budget) counts it.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct
import termios
from typing import Any

SEND_BUFFER = 128 * 1024
"""The kernel's send buffer per connection (SO_SNDBUF; Linux doubles it for its overhead). Over
loopback its autotuning starts near 2.5 MiB, so each client that pipelines and never reads had
podgpu write megabytes before it stalled; a 1 MB answer still goes out at 100+ MB/s in-cluster."""
STEP = 16 * 1024
"""A step when the send buffer has room for a step but not for the whole answer."""
MIN_STEP = 1024
"""A step when the send buffer has no room (measured: Linux takes 1 KiB more of a full one)."""


def limit_send_buffer(sock: Any) -> None:
    """Set SEND_BUFFER on a socket (best effort)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


def send_buffer(sock: Any) -> int:
    """The socket's send buffer size (SO_SNDBUF), or 0 if unknown."""
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
    except (OSError, AttributeError, ValueError):
        return 0


def send_room(sock: Any, size: int) -> int:
    """Bytes the kernel surely takes now: the send buffer less what is queued and not yet
    acknowledged (SIOCOUTQ), less a quarter for the kernel's own per-packet overhead, which it
    counts against the buffer too (measured: a peer with a 4 KiB receive window made the kernel
    take 14 % less than the buffer's size). 0 if unknown."""
    try:
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, AttributeError, ValueError, struct.error):
        return 0
    return max(0, size - int(queued) - size // 4)


def step_size(sock: Any, size: int, rest: int) -> int:
    """The next step of an answer with `rest` bytes unsent (see the module docstring)."""
    room = send_room(sock, size) if sock is not None else 0
    if rest <= room:
        return rest
    return min(rest, STEP if room >= STEP else MIN_STEP)


class Outgoing:
    """One answer being written: its head, then its body, a memoryview of the published bytes
    (the unsent rest is never copied by podgpu)."""

    __slots__ = ("body", "head", "sent")

    def __init__(self, head: bytes, body: bytes) -> None:
        self.head = head
        self.body = memoryview(body)
        self.sent = 0

    @property
    def done(self) -> bool:
        return not self.head and self.sent >= len(self.body)

    def step(self, sock: Any, size: int) -> tuple[bytes, memoryview]:
        """The next step: the head (b"" once written) and a slice of the body."""
        head, self.head = self.head, b""
        rest = len(self.body) - self.sent
        n = max(0, step_size(sock, size, rest + len(head)) - len(head))
        piece = self.body[self.sent:self.sent + n]
        self.sent += len(piece)
        return head, piece


WRITE_JOINED = 64 * 1024
"""A head and a body up to this size go in one write (one segment, one system call; asyncio
3.11 joins `writelines`, a copy freed at once); a larger body is written as its own view."""


def write_plain(transport: Any, head: bytes, piece: memoryview) -> None:
    """Hand one step to the transport (see WRITE_JOINED)."""
    if len(piece) <= WRITE_JOINED:
        transport.writelines([head, piece] if head else [piece])
        return
    if head:
        transport.write(head)
    transport.write(piece)


def reset_on_close(sock: Any) -> None:
    """SO_LINGER on with 0 s: closing the socket sends a reset and drops what is queued (for a
    peer that does not read, the kernel would otherwise keep sending it)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
