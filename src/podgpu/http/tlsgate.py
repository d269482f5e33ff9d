"""The TLS record layer read by podgpu itself before OpenSSL sees a byte of a connection.

Why: OpenSSL buffers a handshake message whole before it looks at it, up to ~128 KiB for a
ClientHello, so 2,000 clients that each sent most of one and stopped held +348 MiB of the agent
(bench/RESULTS.md "Listener memory budget"). Here a connection's first flight is held as plain
bytes until its ClientHello message is whole, and refused at once when the message's own length
field says it is over MAX_HELLO; only then is an `ssl.SSLObject` made and fed those bytes. The
rest of the handshake (a client certificate chain, the Finished message) is bounded by
MAX_HANDSHAKE_INPUT, the bytes OpenSSL may be fed before the handshake completes.

Record and message layout: RFC 8446 section 5.1 (TLSPlaintext: type, legacy version, 16-bit
length of at most 2^14, no zero-length handshake fragments) and section 4 (Handshake: type, 24-bit
length; client_hello is type 1).
"""

from __future__ import annotations

RECORD_HEADER = 5
MAX_PLAINTEXT = 16384
"""The largest plaintext record payload (RFC 8446 section 5.1; Go's crypto/tls `maxPlaintext`)."""
MAX_HELLO = 16384
"""The largest ClientHello message accepted, in bytes. A browser's or Go's ClientHello is under
2 KiB, under ~8 KiB with post-quantum key shares; this leaves twice that, and one plaintext
record always holds it. Go's crypto/tls (src/crypto/tls/common.go, `maxHandshake = 65536`)
refuses any handshake message over 64 KiB; this is a quarter of that."""
MAX_HELLO_BYTES = 2 * MAX_HELLO
"""Raw bytes held for one ClientHello (records of tiny fragments carry 5 header bytes each)."""
MAX_HANDSHAKE_INPUT = 64 * 1024
"""Bytes OpenSSL is fed before the handshake completes (ClientHello, client certificate chain,
Finished): all OpenSSL can buffer for a connection that never completes its handshake."""
_HANDSHAKE = 22
_CLIENT_HELLO = 1


class Refused(Exception):
    """The first flight is not a ClientHello podgpu accepts; the message says why."""


class HelloGate:
    """Holds a connection's first bytes until its ClientHello message is whole.

    The records are read once each, as they become whole: a client that sends its ClientHello
    in one-byte records, one record a read, costs work in proportion to the bytes it sent, not
    to their square (re-reading the held bytes at every read took 27 s of CPU for 5,500 such
    records)."""

    __slots__ = ("_at", "_first", "_got", "held")

    def __init__(self) -> None:
        self.held = bytearray()
        self._at = 0  # where the first record not yet read whole starts in `held`
        # of the handshake bytes in the records read whole: the first 4 (the message's type and
        # length) and how many there are; the bytes themselves stay in `held` only
        self._first = b""
        self._got = 0

    def feed(self, data: bytes) -> bytes | None:
        """Every byte received so far once the ClientHello is whole (to go to OpenSSL), else
        None (held). Raises Refused on a record or message podgpu does not accept."""
        self.held += data
        if self._complete():
            held = bytes(self.held)
            self.held = bytearray()
            return held
        if len(self.held) > MAX_HELLO_BYTES:
            raise Refused("ClientHello spread over too many records")
        return None

    def _complete(self) -> bool:
        raw, at = self.held, self._at
        while at + RECORD_HEADER <= len(raw):
            length = record_length(raw, at)
            end = at + RECORD_HEADER + length
            if end > len(raw):  # a record still arriving: does the message end in what is here?
                start = at + RECORD_HEADER
                return hello_whole(self._first, self._got, raw[start:start + 4],
                                   len(raw) - start)
            if len(self._first) < 4:  # records may be shorter than 4 bytes
                start = at + RECORD_HEADER
                self._first += bytes(raw[start:min(end, start + 4 - len(self._first))])
            self._got += length
            at = self._at = end
            if hello_whole(self._first, self._got, b"", 0):
                return True
        if at < len(raw):
            _check_type(raw, at)  # refused at the record's first byte, before its header is in
        return False


def record_length(raw: bytearray, at: int) -> int:
    """The payload length of the record whose 5-byte header starts at `at`; Refused when the
    header is not one of a handshake record podgpu accepts."""
    _check_type(raw, at)
    if raw[at + 1] != 3:
        raise Refused("not a TLS record version")
    length = int.from_bytes(raw[at + 3:at + 5], "big")
    if length == 0 or length > MAX_PLAINTEXT:
        raise Refused(f"handshake record of {length} bytes")
    return length


def _check_type(raw: bytearray, at: int) -> None:
    """Refused unless the record starting at `at` is a handshake record."""
    if raw[at] != _HANDSHAKE:
        raise Refused("not a TLS handshake record" if at == 0 else
                      "a record of another type inside the ClientHello")


def hello_whole(first: bytes, got: int, more_head: bytes | bytearray, more: int) -> bool:
    """Whether `got` handshake bytes (beginning with `first`, at least their first 4 of them)
    and `more` bytes after them (beginning with `more_head`) hold a whole ClientHello; Refused
    when they begin with another message or announce one over MAX_HELLO. Copies at most 4
    bytes."""
    if got + more < 4:
        return False
    head = first[:4] + bytes(more_head[:max(0, 4 - got)])
    if head[0] != _CLIENT_HELLO:
        raise Refused("the first handshake message is not a ClientHello")
    size = int.from_bytes(head[1:4], "big")
    if size > MAX_HELLO:
        raise Refused(f"ClientHello of {size} bytes (at most {MAX_HELLO})")
    return got + more >= 4 + size
