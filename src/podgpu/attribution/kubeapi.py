"""The Kubernetes API over plain HTTPS: in-cluster configuration and authenticated GETs.

podgpu's API calls are GETs: lists and watches (reflector.py: this node's pods, the cluster's
Services), one Node (nodeinfo.py) and one ConfigMap (`-m`), each caller reaching the API
through apiserver.py's `connect`. The official `kubernetes` client cost +46 MiB steady and
+105 MiB at start-up on the H200 for the pod watch and the ConfigMap; this module does the part
of it podgpu used with the standard library (`http.client`, `ssl`), which every podgpu process
has loaded already (docs/decisions/0010-kubernetes-api-http-client.md). Blocking calls, made on
each caller's own thread (the ConfigMap at start), every one under one deadline and with its
answer capped (podgpu.peers).

What it keeps from the official client's in-cluster configuration:
- the API address from KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT (an IPv6 host is
  bracketed), https verified against the service account's CA bundle;
- the service-account token read from its file before every request, so a bound token that the
  kubelet rotates (they expire after an hour) is used from the next request on, and a 401 answer
  re-reads the file and retries at once when the token there changed.
A kubeconfig outside a cluster is not supported: the callers only run in a DaemonSet pod.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from podgpu.files import FileReadError, read_text
from podgpu.peers.capped import read_capped
from podgpu.peers.deadline import Deadline, shut_down

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where Kubernetes mounts a pod's service account (token, ca.crt, namespace). Read when
`in_cluster()` runs, so a test harness may point it elsewhere."""
CONNECT_TIMEOUT_SECONDS = 10.0
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_LINE_BYTES = 2 * 1024 * 1024
"""Largest watch event accepted (one JSON object per line). etcd refuses a request over 1.5 MiB
(its default `--max-request-bytes`), so no stored object is bigger; an event wraps one object."""
MAX_TOKEN_BYTES = 64 * 1024
"""Of the service-account token file read (a bound token is about 1 KiB)."""


class KubeApiError(Exception):
    """An answer other than 200 from the API server. `status` is the HTTP status; `message` the
    `Status` object's message when the body had one."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"HTTP {status} {reason}" + (f": {message}" if message else ""))
        self.status = status
        self.reason = reason
        self.message = message


class NotInCluster(Exception):
    """No in-cluster configuration: not in a pod, or no service-account token mounted."""


class ApiAccessError(Exception):
    """A configuration that cannot reach the API: the CA bundle cannot be loaded (unreadable,
    not PEM, no certificate in it) or the address is not an http(s) URL."""


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API is and how to authenticate.

    `host` is the base URL (`https://10.100.0.1:443`; `http://` for local stand-ins);
    `token_file` is read before every request (rotation); `token` is a fixed bearer token used
    when there is no file; `ca_file` is the CA bundle for https ('' = the system's store).
    """

    host: str
    token_file: str = ""
    token: str = ""
    ca_file: str = ""


def in_cluster(environ: Mapping[str, str], sa_dir: str | None = None) -> KubeConfig:
    """The pod's own API access, as the kubelet sets it up: env for the address, the mounted
    service account for the token and CA. Raises NotInCluster saying what is missing."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not host or not port:
        raise NotInCluster("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set "
                           "(not running in a pod)")
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise NotInCluster(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number")
    directory = Path(sa_dir or SERVICE_ACCOUNT_DIR)
    token, ca = directory / "token", directory / "ca.crt"
    for path, what in ((token, "service-account token"), (ca, "service-account CA bundle")):
        if not path.is_file():
            raise NotInCluster(f"no {what} at {path} (automountServiceAccountToken: false?)")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6: the API server's address on an IPv6 or dual-stack cluster
    return KubeConfig(f"https://{host}:{port}", token_file=str(token), ca_file=str(ca))


class Connection:
    """One keep-alive connection to the API server, re-opened as needed. Not thread-safe, except
    `interrupt()`, which unblocks a read from another thread."""

    def __init__(self, config: KubeConfig, *,
                 connect_timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
        try:
            url = urlsplit(config.host)
            port = url.port
        except ValueError as exc:  # a port that is not a number
            raise ApiAccessError(f"API address {config.host!r}: {exc}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ApiAccessError(f"API address {config.host!r}: expected http(s)://HOST[:PORT]")
        self._config = config
        self._tls = url.scheme == "https"
        self._host = url.hostname
        self._port = port or (443 if self._tls else 80)
        self._connect_timeout = connect_timeout
        self._ssl: ssl.SSLContext | None = None
        if self._tls:
            try:
                self._ssl = ssl.create_default_context(cafile=config.ca_file or None)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                where = config.ca_file or "the system's CA store"
                raise ApiAccessError(f"CA bundle {where} cannot be loaded: {exc}") from None
        self._conn: http.client.HTTPConnection | None = None
        self._interrupted = False

    def token(self) -> str:
        """The bearer token now: the file's content (re-read every time) or the fixed token."""
        if self._config.token_file:
            try:
                return read_text(self._config.token_file, MAX_TOKEN_BYTES).strip()
            except FileReadError as exc:
                raise OSError(f"service-account token {self._config.token_file}: {exc}") from None
        return self._config.token

    def open(self, path: str, query: Mapping[str, str] | None = None, *,
             timeout: float) -> http.client.HTTPResponse:
        """GET `path?query`; the 200 response, its body unread. `timeout` (s) bounds the
        connect and every read. Raises KubeApiError for another status, OSError (including
        ssl.SSLError and socket timeouts) or http.client.HTTPException for transport failures."""
        target = path + ("?" + urlencode(query) if query else "")
        token = self.token()
        for attempt in (1, 2):
            resp = self._send(target, token, timeout)
            if resp.status == 200:
                return resp
            error = _error(resp)
            self.close()
            if error.status == 401 and attempt == 1:
                fresh = self.token()  # rotated since it was read: retry at once with the new one
                if fresh != token:
                    token = fresh
                    continue
            raise error
        raise AssertionError("unreachable")

    def get_json(self, path: str, query: Mapping[str, str] | None = None, *,
                 timeout: float, max_bytes: int = MAX_LINE_BYTES) -> dict[str, Any]:
        """GET and decode a JSON object of at most `max_bytes` (by default one object's largest
        size, MAX_LINE_BYTES), all of it within `timeout` (the socket is shut down then, so a
        trickled body cannot hold the call). Raises peers.capped.OverCap past the cap (the
        connection is closed, the rest never read)."""
        try:
            with self.deadline(timeout), self.open(path, query, timeout=timeout) as resp:
                data = read_capped(resp.read1, max_bytes,
                                   length=resp.getheader("Content-Length"))
            body = json.loads(data)
            del data
        except BaseException:
            self.close()
            raise
        if not isinstance(body, dict):
            raise KubeApiError(200, "OK", "the answer is not a JSON object")
        return body

    def _send(self, target: str, token: str, timeout: float, *,
              retry: bool = True) -> http.client.HTTPResponse:
        """The one retry policy of the Kubernetes API client: a connection that broke before any
        answer came (closed, reset, broken pipe; an idle keep-alive the server dropped, or a
        server restarting) is sent once more on a fresh connection, once. Other failures
        (refused, timed out, TLS) are raised at once."""
        conn = self._conn
        if conn is None:
            if self._ssl is not None:
                conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl,
                                                   timeout=self._connect_timeout)
            else:
                conn = http.client.HTTPConnection(self._host, self._port,
                                                  timeout=self._connect_timeout)
            self._conn = conn
        headers = {"Accept": "application/json", "User-Agent": "podgpu"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            if conn.sock is None:
                conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.request("GET", target, headers=headers)
            return conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            stopped = self._interrupted  # broken on purpose (a deadline, a stop): no retry
            self.close()
            if not retry or stopped:
                raise
            return self._send(target, token, timeout, retry=False)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """The block's deadline (podgpu.peers.deadline): after `seconds` this connection's socket
        is shut down, which wakes a read blocked on it (a socket timeout alone bounds each read
        only); the block then raises TimeoutError, even when the shutdown looked like a clean
        end."""
        with Deadline(seconds) as deadline:
            deadline.watch(self.interrupt)  # whichever socket the connection has by then
            try:
                yield
            except Exception:
                if deadline.expired:
                    raise TimeoutError(deadline.message) from None
                raise
            if deadline.expired:
                raise TimeoutError(deadline.message)

    def interrupt(self) -> None:
        """Unblock a thread reading from this connection (a watch): shut its socket down."""
        self._interrupted = True
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            shut_down(sock)

    def close(self) -> None:
        self._interrupted = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def lines(resp: http.client.HTTPResponse, max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The non-empty lines of a streamed (chunked) answer, until the server ends it. A line over
    `max_bytes` raises ValueError rather than growing without bound."""
    while True:
        line = resp.readline(max_bytes + 1)
        if not line:
            return
        if len(line) > max_bytes and not line.endswith(b"\n"):
            raise ValueError(f"a watch event over {max_bytes} bytes")
        line = line.strip()
        if line:
            yield line


def describe(exc: BaseException) -> str:
    """A short reason for a failed call, for the log and /health."""
    if isinstance(exc, KubeApiError):
        return f"HTTP {exc.status}: {exc.message or exc.reason}"[:300]
    if isinstance(exc, http.client.HTTPException) and not str(exc):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}"[:300]


def _error(resp: http.client.HTTPResponse) -> KubeApiError:
    """A non-200 answer -> KubeApiError with the `Status` message when there is one."""
    message = ""
    try:
        body = resp.read(MAX_ERROR_BODY_BYTES)
        status = json.loads(body)
        if isinstance(status, dict):
            message = str(status.get("message") or "")
    except Exception:  # not JSON, or the connection broke: the status line is enough
        message = ""
    return KubeApiError(resp.status, resp.reason, message[:300])
