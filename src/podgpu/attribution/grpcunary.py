"""One unary gRPC call over a unix socket, on h2 (the sans-IO HTTP/2 library), with the receive
limit enforced as bytes arrive.

grpclib (and grpcio) check a message's size after buffering all of it: a peer announcing a 2 GiB
message grew the process by +2.4 GiB within one `List` deadline. Here the 5-byte length prefix is
read first and a length over `max_bytes` ends the call (RESOURCE_EXHAUSTED, as grpcio names it)
and closes the connection before one byte of the message is read. The whole call (connect,
request, answer) runs under one deadline (podgpu.peers.deadline: the socket is shut down when it
passes), so a peer trickling bytes cannot hold the call past it (DEADLINE_EXCEEDED).

The wire format is the documented gRPC over HTTP/2 protocol
(https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md): a POST with `content-type:
application/grpc` and `te: trailers`, each message as a 1-byte compressed flag, a 4-byte
big-endian length and the bytes, and the status in the `grpc-status`/`grpc-message` trailers.
A fresh connection per call: on a unix socket it costs microseconds and leaves no HTTP/2 state
(closed-stream records) behind between polls.

Decision record: docs/decisions/0011-kubelet-client-h2.md.
"""

from __future__ import annotations

import importlib
import socket
import struct
import urllib.parse
from typing import Any

from podgpu.peers.deadline import Deadline

STATUS_NAMES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
"""gRPC status codes by number (grpc/doc/statuscodes.md)."""
READ_CHUNK = 64 * 1024


class GrpcError(Exception):
    """A call that ended without a message: `status` is the gRPC status name."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def status_name(code: str) -> str:
    n = int(code) if code.isdigit() else -1
    return STATUS_NAMES[n] if 0 <= n < len(STATUS_NAMES) else f"status {code[:20]}"


class _Call:
    """The state of one call's answer: headers, trailers, the message bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.length: int | None = None
        self.headers: dict[str, str] = {}
        self.trailers: dict[str, str] = {}
        self.ended = False

    def data(self, chunk: bytes) -> None:
        if not chunk:  # an empty DATA frame (e.g. one that only ends the stream)
            return
        if self.length is not None and len(self.buffer) >= 5 + self.length:
            raise GrpcError("UNIMPLEMENTED", "more than one message in a unary answer")
        self.buffer += chunk
        if self.length is None and len(self.buffer) >= 5:
            if self.buffer[0] != 0:
                raise GrpcError("UNIMPLEMENTED", "compressed answer (no compression was asked)")
            self.length = struct.unpack(">I", self.buffer[1:5])[0]
            if self.length > self.max_bytes:
                raise GrpcError("RESOURCE_EXHAUSTED", "received message larger than max "
                                f"({self.length} vs. {self.max_bytes})")
        if self.length is not None and len(self.buffer) > 5 + self.length:
            raise GrpcError("UNIMPLEMENTED", "more than one message in a unary answer")

    def result(self) -> memoryview:
        fields = self.trailers or self.headers  # a trailers-only answer has them in the headers
        if self.headers.get(":status", "200") != "200":
            raise GrpcError("UNAVAILABLE" if self.headers.get(":status") in ("502", "503", "504")
                            else "UNKNOWN", f"HTTP status {self.headers[':status'][:10]}")
        code = fields.get("grpc-status")
        if code is None:
            raise GrpcError("UNKNOWN", "the answer ended without a grpc-status")
        if code != "0":
            message = urllib.parse.unquote(fields.get("grpc-message", ""))
            raise GrpcError(status_name(code), message[:300])
        if self.length is None or len(self.buffer) != 5 + self.length:
            raise GrpcError("INTERNAL", "the answer ended inside its message")
        return memoryview(self.buffer)[5:].toreadonly()  # no second copy of up to 16 MiB


def unary(socket_path: str, method: str, request: bytes, *, timeout: float,
          max_bytes: int) -> memoryview:
    """Call `method` (`/package.Service/Method`) on the server at the unix socket `socket_path`
    with the serialized `request`; the serialized answer (a read-only view). Raises GrpcError (a gRPC status,
    DEADLINE_EXCEEDED past `timeout`, RESOURCE_EXHAUSTED over `max_bytes`) or OSError when the
    socket cannot be reached."""
    h2conn: Any = importlib.import_module("h2.connection")
    h2config: Any = importlib.import_module("h2.config")
    events: Any = importlib.import_module("h2.events")

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = Deadline(timeout)
    deadline.watch(sock)
    call = _Call(max_bytes)
    try:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        conn = h2conn.H2Connection(config=h2config.H2Configuration(client_side=True,
                                                                   header_encoding="utf-8"))
        conn.initiate_connection()
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                (":path", method), (":authority", "localhost"),
                                ("content-type", "application/grpc"), ("te", "trailers"),
                                ("grpc-timeout", f"{max(1, int(timeout * 1000))}m")])
        conn.send_data(sid, b"\0" + struct.pack(">I", len(request)) + request, end_stream=True)
        sock.sendall(conn.data_to_send())
        while not call.ended:
            try:
                sock.settimeout(max(0.001, deadline.left()))
                data = sock.recv(READ_CHUNK)
            except TimeoutError:
                raise GrpcError("DEADLINE_EXCEEDED", "Deadline exceeded") from None
            if deadline.expired:
                raise GrpcError("DEADLINE_EXCEEDED", "Deadline exceeded")
            if not data:
                raise GrpcError("UNAVAILABLE", "the connection closed before the answer ended")
            for event in conn.receive_data(data):
                _on_event(event, events, sid, conn, call)
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
        return call.result()
    except OSError:
        if deadline.expired:
            raise GrpcError("DEADLINE_EXCEEDED", "Deadline exceeded") from None
        raise
    except Exception as exc:
        if isinstance(exc, GrpcError):
            raise
        if deadline.expired:
            raise GrpcError("DEADLINE_EXCEEDED", "Deadline exceeded") from None
        # an h2 protocol error: the peer does not speak HTTP/2 as gRPC does
        raise GrpcError("UNAVAILABLE", f"HTTP/2: {type(exc).__name__}: {exc}"[:300]) from None
    finally:
        deadline.cancel()
        sock.close()


def _on_event(event: Any, events: Any, sid: int, conn: Any, call: _Call) -> None:
    if isinstance(event, events.ResponseReceived) and event.stream_id == sid:
        call.headers = {str(k): str(v) for k, v in event.headers}
    elif isinstance(event, events.TrailersReceived) and event.stream_id == sid:
        call.trailers = {str(k): str(v) for k, v in event.headers}
    elif isinstance(event, events.DataReceived) and event.stream_id == sid:
        call.data(event.data)
        conn.acknowledge_received_data(event.flow_controlled_length, sid)
    elif isinstance(event, events.StreamEnded) and event.stream_id == sid:
        call.ended = True
    elif isinstance(event, events.StreamReset) and event.stream_id == sid:
        raise GrpcError("UNAVAILABLE", f"the stream was reset (HTTP/2 error {event.error_code})")
    elif isinstance(event, events.ConnectionTerminated):
        raise GrpcError("UNAVAILABLE", f"the connection was closed (HTTP/2 error "
                                       f"{event.error_code})")
