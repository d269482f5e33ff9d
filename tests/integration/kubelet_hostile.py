"""A hostile kubelet on a unix socket: real HTTP/2 (h2, server side) that answers the PodResources
`List` with a length prefix it never honours. A FAKE for faults only; the good paths use the grpcio
stand-in (kubelet_fake.py).

Modes:
- `huge`: a message announced as 2 GiB, then zeros as fast as the client's window allows;
- `trickle`: the answer's headers, then one byte every 0.2 s, forever;
- `message`: `self.message` as the one message of a complete answer (status 0), whatever its
  bytes are.

`sent` counts the bytes of message data written, `calls` the requests seen."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading

import h2.config
import h2.connection
import h2.events


class HostileKubelet:
    def __init__(self, path: str, mode: str) -> None:
        self.path, self.mode = path, mode
        self.sent = 0
        self.calls = 0
        self.message = b""
        self._stop = threading.Event()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        sock.settimeout(5)
        with contextlib.suppress(OSError, h2.exceptions.ProtocolError), sock:
            sock.sendall(conn.data_to_send())
            sid = None
            while sid is None or not self._request_ended:
                data = sock.recv(65536)
                if not data:
                    return
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        sid = ev.stream_id
                        self._request_ended = False
                    if isinstance(ev, h2.events.StreamEnded):
                        self._request_ended = True
                sock.sendall(conn.data_to_send())
            self.calls += 1
            conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
            if self.mode == "huge":
                conn.send_data(sid, b"\0" + struct.pack(">I", 2**31))
                sock.sendall(conn.data_to_send())
                block = bytes(16384)
                while not self._stop.is_set():
                    window = min(conn.local_flow_control_window(sid), len(block))
                    if window > 0:  # as fast as the client's window allows
                        conn.send_data(sid, block[:window])
                        self.sent += window
                        sock.sendall(conn.data_to_send())
                        continue
                    data = sock.recv(65536)  # the window is spent: wait for an update
                    if not data:
                        return
                    conn.receive_data(data)
                    sock.sendall(conn.data_to_send())
            elif self.mode == "message":
                conn.send_data(sid, b"\0" + struct.pack(">I", len(self.message)) + self.message)
                conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
                sock.sendall(conn.data_to_send())
                self.sent += len(self.message)
                while sock.recv(65536):  # until the client closes
                    pass
            else:
                sock.sendall(conn.data_to_send())
                while not self._stop.wait(0.2):
                    conn.send_data(sid, b"\0")
                    self.sent += 1
                    sock.sendall(conn.data_to_send())

    _request_ended = False
