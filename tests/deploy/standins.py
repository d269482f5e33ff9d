"""What a node gives podgpu, as real local servers, for the start-up contract test and
bench/prod_memory.py (fakes at the boundary, real protocols).

- `KubeApi`: the pod API stand-in (tests/integration/kube_api_fake.py) behind real TLS, with a
  service-account directory (token, ca.crt) as Kubernetes mounts it, so podgpu's unmodified
  in-cluster configuration (KUBERNETES_SERVICE_HOST/PORT, https, bearer token) reaches it.
- `LogsStandIn`: a CloudWatch Logs endpoint answering CreateLogGroup, CreateLogStream and
  PutLogEvents with 200 JSON and keeping every event's message; boto3 signs with dummy keys.
- `incluster_shim.py` (beside this file) runs `podgpu` with the service-account paths pointed at
  the stand-in's directory, the one thing a process outside a pod cannot have at the real path.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.integration.kube_api_fake import FakeKubeApi

TOKEN = "podgpu-test-token"
SHIM = Path(__file__).resolve().parent / "incluster_shim.py"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(cert, key) for 127.0.0.1, made by the openssl command (present wherever Python is)."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60)
    return cert, key


class KubeApi:
    """The pod list/watch stand-in over HTTPS, plus the service-account files podgpu reads."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pgsa")
        self.sa_dir = Path(self._tmp.name)
        cert, key = self_signed(self.sa_dir)
        (self.sa_dir / "token").write_text(TOKEN)
        (self.sa_dir / "ca.crt").write_bytes(cert.read_bytes())
        (self.sa_dir / "namespace").write_text("podgpu")
        self.fake = FakeKubeApi()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        server = self.fake._server
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self.port = int(server.server_address[1])

    def start(self) -> KubeApi:
        self.fake.start()
        return self

    def env(self) -> dict[str, str]:
        """What the kubelet puts in every container's environment for the API."""
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def stop(self) -> None:
        self.fake.stop()
        self._tmp.cleanup()


class LogsStandIn:
    """CloudWatch Logs over HTTP (JSON 1.1, X-Amz-Target: Logs_20140328.<Action>)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.messages: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                action = (self.headers.get("X-Amz-Target") or "").rpartition(".")[2]
                answer: dict[str, Any] = {}
                with owner.lock:
                    owner.calls.append(action)
                    if action == "PutLogEvents":
                        req = json.loads(body)
                        owner.messages.extend(e["message"] for e in req.get("logEvents", ()))
                        answer = {"nextSequenceToken": str(len(owner.calls))}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> LogsStandIn:
        self._thread.start()
        return self

    def documents(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(m) for m in self.messages]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


DUMMY_AWS = {"AWS_ACCESS_KEY_ID": "AKIDSTANDIN", "AWS_SECRET_ACCESS_KEY": "standin",
             "AWS_EC2_METADATA_DISABLED": "true"}
"""Credentials for the Logs stand-in (boto3 signs every request; the stand-in does not check)."""


def environ_without_aws() -> dict[str, str]:
    """This process's environment minus AWS and Kubernetes settings that would leak in."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AWS_", "KUBERNETES_", "PODGPU_", "DCGM_"))}
