"""The TLS record layer podgpu reads itself before OpenSSL (http/tlsgate.py, http/tlslayer.py).

Record and message layout restated from RFC 8446: section 5.1 (TLSPlaintext: content type 22 for
handshake, a 16-bit length of at most 2^14, no zero-length handshake fragments) and section 4
(Handshake: msg_type, a 24-bit length; client_hello is 1, certificate is 11). Real handshakes
come from OpenSSL clients over memory BIOs."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest

from podgpu.http.tlsgate import MAX_HANDSHAKE_INPUT, MAX_HELLO, HelloGate, Refused
from podgpu.http.tlslayer import TlsLayer
from tests.tlsutil import Pki


def record(payload: bytes, kind: int = 22, minor: int = 1) -> bytes:
    return bytes([kind, 3, minor]) + len(payload).to_bytes(2, "big") + payload


def client_hello_message(size: int) -> bytes:
    return b"\x01" + size.to_bytes(3, "big") + b"\x03\x03" + b"\x00" * (size - 2)


def test_a_clienthello_fragmented_over_records_is_held_until_whole() -> None:
    message = client_hello_message(3000)
    records = b"".join(record(message[i:i + 700]) for i in range(0, len(message), 700))
    gate = HelloGate()
    for i in range(0, len(records) - 1, 333):
        assert gate.feed(records[i:min(i + 333, len(records) - 1)]) is None
    assert gate.feed(records[-1:]) == records  # every byte goes to OpenSSL, in order


@pytest.mark.parametrize(("data", "why"), [
    (record(client_hello_message(MAX_HELLO + 1)[:100]), "ClientHello of 16385 bytes"),
    (b"GET / HTTP/1.1\r\n", "not a TLS handshake record"),
    (record(b"\x01\x00\x00\x40" + b"\x00" * 8) + record(b"x", kind=23),
     "a record of another type inside the ClientHello"),
    (record(b"", 22), "handshake record of 0 bytes"),
    (b"\x16\x03\x01\x40\x01", "handshake record of 16385 bytes"),
    (record(b"\x02\x00\x00\x10" + b"\x00" * 16), "not a ClientHello"),
    (b"\x16\x02\x00\x00\x10", "not a TLS record version"),
])
def test_what_is_not_an_acceptable_clienthello_is_refused_from_its_first_bytes(
        data: bytes, why: str) -> None:
    with pytest.raises(Refused, match=why):
        HelloGate().feed(data)


def test_a_clienthello_in_one_byte_fragments_is_refused_past_twice_its_cap() -> None:
    message = client_hello_message(MAX_HELLO - 100)
    gate = HelloGate()
    with pytest.raises(Refused, match="too many records"):
        for i in range(len(message)):
            gate.feed(record(message[i:i + 1]))


def one_byte_records_cpu(count: int) -> float:
    """This process's CPU seconds to feed a gate `count` one-byte records, one record a read
    (the least of three tries)."""
    message = client_hello_message(MAX_HELLO - 100)
    feeds = [record(message[i:i + 1]) for i in range(count)]
    best = float("inf")
    for _ in range(3):
        gate = HelloGate()
        start = time.process_time()
        for data in feeds:
            gate.feed(data)
        best = min(best, time.process_time() - start)
    return best


def test_the_gates_work_grows_with_the_bytes_not_their_square() -> None:
    """One-byte records, one a read: re-reading every held byte at each read made twice the
    records cost four times the CPU (27 s for the 5,461 records under the cap); reading each
    record once makes it twice. Compared as a ratio of this process's CPU time."""
    assert one_byte_records_cpu(5000) / one_byte_records_cpu(2500) < 3.0


def test_openssl_is_fed_at_most_the_handshake_input_cap(tmp_path: Path) -> None:
    """TLS 1.2 with client certificates: the client's Certificate message is plaintext, and
    OpenSSL would buffer one of up to 100 KiB; this one announces 96 KiB."""
    pki = Pki(tmp_path, "gate")
    leaf = pki.leaf("server", server=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(leaf.cert, leaf.key)
    server.load_verify_locations(cafile=str(pki.ca))
    server.verify_mode = ssl.CERT_REQUIRED
    server.maximum_version = ssl.TLSVersion.TLSv1_2
    layer = TlsLayer(server)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    client = client_ctx.wrap_bio(inc, out)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    got = layer.receive(out.read())
    assert got.hello_whole and not got.shaken and layer.outgoing()  # ServerHello ... Done
    certificate = b"\x0b" + (96 * 1024).to_bytes(3, "big") + b"\x00" * (96 * 1024)
    fed = 0
    with pytest.raises(Refused, match="handshake over"):
        for i in range(0, len(certificate), 16384):
            layer.receive(record(certificate[i:i + 16384], minor=3))
            fed += 16384 + 5
    assert MAX_HANDSHAKE_INPUT - 16384 <= fed <= MAX_HANDSHAKE_INPUT + 16384


def test_a_clienthello_in_one_byte_records_is_read_across_its_4_byte_header() -> None:
    message = client_hello_message(60)
    records = [record(message[i:i + 1]) for i in range(len(message))]
    gate = HelloGate()
    assert all(gate.feed(r) is None for r in records[:-1])
    assert gate.feed(records[-1]) == b"".join(records)
    with pytest.raises(Refused, match="not a ClientHello"):  # type and length in 1-byte records
        HelloGate().feed(b"".join(record(bytes([b])) for b in b"\x02\x00\x00\x10"))


def test_the_gate_holds_the_records_once_not_a_second_copy_of_the_message() -> None:
    import tracemalloc

    message = client_hello_message(16_000)
    records = b"".join(record(message[i:i + 100]) for i in range(0, 15_000, 100))
    tracemalloc.start()
    try:
        gate = HelloGate()
        before = tracemalloc.get_traced_memory()[0]
        assert gate.feed(records) is None
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # the budget charges len(gate.held); a second copy of the payloads made it ~2x that
    assert len(gate.held) == len(records) and held < 1.25 * len(records)
