"""TLS for one connection through `ssl.MemoryBIO`/`SSLObject`, behind http.tlsgate: bytes in,
plaintext and ciphertext out, so http.conn drives it like the rest of its state.

No OpenSSL state exists until the client's ClientHello is whole (the gate holds it), and OpenSSL
is fed at most tlsgate.MAX_HANDSHAKE_INPUT bytes before the handshake completes.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Any, NamedTuple

from podgpu.http.ratelog import short
from podgpu.http.tlsgate import MAX_HANDSHAKE_INPUT, HelloGate, Refused

__all__ = ["Received", "Refused", "TlsLayer"]

_PLAIN_READ = 16384
STATE_BYTES = 32 * 1024
"""What OpenSSL holds for one connection once its SSLObject exists, charged to the memory budget
(measured: ~19 KiB after a handshake, ~35 KiB with a partial record buffered; bench/RESULTS.md
"Listener memory budget")."""


class Received(NamedTuple):
    plain: bytes
    """Application data decrypted from what arrived."""
    eof: bool
    """The peer sent close_notify."""
    hello_whole: bool
    """The ClientHello became whole with these bytes (OpenSSL took over)."""
    shaken: bool
    """The handshake completed with these bytes."""


class TlsLayer:
    """One connection's TLS. `receive` raises Refused for a first flight or handshake podgpu
    does not accept (the message says why); `outgoing()` is what to send."""

    __slots__ = ("_context", "fed", "gate", "incoming", "obj", "outgoing_bio", "peercert",
                 "shaken")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self.gate: HelloGate | None = HelloGate()
        self.incoming: ssl.MemoryBIO | None = None
        self.outgoing_bio: ssl.MemoryBIO | None = None
        self.obj: ssl.SSLObject | None = None
        self.fed = 0
        """Bytes written into OpenSSL before the handshake completed."""
        self.shaken = False
        self.peercert: Any = None

    def held(self) -> int:
        """Bytes held for the peer (http.budget): the ClientHello arriving, else OpenSSL's
        state and what it was fed before the handshake completed."""
        if self.gate is not None:
            return len(self.gate.held)
        return STATE_BYTES + (0 if self.shaken else self.fed)

    def receive(self, data: bytes) -> Received:
        hello_whole = False
        if self.gate is not None:
            first = self.gate.feed(data)
            if first is None:
                return Received(b"", False, False, False)
            self.gate = None
            self.incoming, self.outgoing_bio = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.obj = self._context.wrap_bio(self.incoming, self.outgoing_bio,
                                              server_side=True)
            hello_whole, data = True, first
        assert self.incoming is not None and self.obj is not None
        self.incoming.write(data)
        shaken = False
        if not self.shaken:
            self.fed += len(data)
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                if self.fed > MAX_HANDSHAKE_INPUT:
                    raise Refused(f"handshake over {MAX_HANDSHAKE_INPUT} bytes") from None
                return Received(b"", False, hello_whole, False)
            except (ssl.SSLError, OSError) as exc:
                raise Refused(short(getattr(exc, "reason", None) or exc)) from None
            self.shaken = shaken = True
            self.peercert = self.obj.getpeercert()
        plain, eof = [], False
        while True:
            try:
                chunk = self.obj.read(_PLAIN_READ)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                chunk = b""
            except (ssl.SSLError, OSError) as exc:
                raise Refused(short(getattr(exc, "reason", None) or exc)) from None
            if not chunk:
                eof = True
                break
            plain.append(chunk)
        return Received(b"".join(plain), eof, hello_whole, shaken)

    def outgoing(self) -> bytes:
        """Ciphertext to send (handshake answers, alerts, encrypted data)."""
        return self.outgoing_bio.read() if self.outgoing_bio is not None else b""

    def encrypt(self, *parts: Any) -> bytes:
        """`parts` (bytes or memoryviews) as ciphertext."""
        assert self.obj is not None
        for part in parts:
            if part:
                self.obj.write(part)
        return self.outgoing()

    def close_notify(self) -> bytes:
        """The close_notify alert to send (the peer's is not awaited); b"" before the
        handshake completed."""
        if not self.shaken or self.obj is None:
            return b""
        with contextlib.suppress(ssl.SSLError, OSError, ValueError):
            self.obj.unwrap()
        return self.outgoing()
