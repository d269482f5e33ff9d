"""Where EMF events go: CloudWatch Logs (PutLogEvents), the agent's EMF listener (TCP/UDP), stdout.

Each destination sends one batch and either returns how many events CloudWatch refused for good
(`rejectedLogEventsInfo`) or raises `SendError` saying whether a retry can help. CloudWatch Logs is
called through logsapi.py (botocore's credentials, signer and HTTP session, no boto3 client); the
errors of that one external system are translated here. No retries below the
sender, which retries.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from podgpu.errors import ConfigError, PodgpuError

log = logging.getLogger(__name__)

Batch = Sequence[tuple[int, str]]
"""(timestamp in ms, message) in chronological order."""

V0_PREFIX = '{"CloudWatchMetrics":'
"""How a Container Insights event (EMF v0, keys in sorted order) starts; the declarations'
events start with `{"_aws"` or `{"Timestamp"`."""


def is_insights_event(message: str) -> bool:
    """A Container Insights event: it goes to the Container Insights log group and stream. The
    queue hands out batches of one kind only (EventQueue.peek)."""
    return message.startswith(V0_PREFIX)

_RETRYABLE_CODES = frozenset((
    "ThrottlingException", "Throttling", "ServiceUnavailableException", "ServiceUnavailable",
    "InternalFailure", "InternalServerError", "RequestTimeout", "RequestTimeoutException",
    "OperationAbortedException", "LimitExceededException", "RequestLimitExceeded",
))
_AUTH_CODES = frozenset((
    "AccessDeniedException", "AccessDenied", "UnrecognizedClientException",
    "InvalidClientTokenId", "ExpiredTokenException", "ExpiredToken", "SignatureDoesNotMatch",
    "IncompleteSignature", "MissingAuthenticationToken", "InvalidSignatureException",
    "UnauthorizedOperation",
))


class SendError(PodgpuError):
    """A batch was not delivered. `retryable`: the same batch may succeed later; `auth`: the
    credentials or the IAM policy are wrong (retried, slowly, and reported in /health)."""

    def __init__(self, reason: str, *, retryable: bool, auth: bool = False) -> None:
        super().__init__(reason)
        self.retryable = retryable
        self.auth = auth


class Destination(Protocol):
    name: str
    max_batch_events: int
    max_batch_bytes: int

    def send(self, batch: Batch) -> int:
        """Deliver `batch`; return how many events were rejected for good. Raises SendError."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed --emf-destination."""

    kind: str  # cloudwatch | stdout | tcp | udp
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        return f"{self.kind}://{self.host}:{self.port}" if self.host else self.kind


def parse_target(text: str) -> Target:
    t = text.strip()
    if t in ("cloudwatch", "stdout"):
        return Target(t)
    m = re.fullmatch(r"(tcp|udp)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(\d{1,5})", t)
    if not m or not 0 < int(m[3]) <= 65535:
        raise ConfigError(f"--emf-destination {text!r}: use cloudwatch, stdout, tcp://HOST:PORT or "
                          "udp://HOST:PORT (the CloudWatch agent's EMF listener is port 25888)")
    return Target(m[1], m[2].strip("[]"), int(m[3]))


class StdoutDestination:
    """One JSON line per event on stdout, for a log shipper (Fluent Bit) to forward."""

    name = "stdout"
    max_batch_events = 10_000
    max_batch_bytes = 1_048_576

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream or sys.stdout

    def send(self, batch: Batch) -> int:
        try:
            self._stream.write("".join(m + "\n" for _, m in batch))
            self._stream.flush()
        except (OSError, ValueError) as exc:
            raise SendError(f"stdout: {exc}", retryable=True) from None
        return 0

    def close(self) -> None:
        pass


class SocketDestination:
    """The CloudWatch agent's EMF listener: newline-delimited JSON over TCP, or one UDP datagram
    per event. The events carry `_aws.LogGroupName`/`LogStreamName` so the agent routes them.
    No `abort()`: every socket call has `timeout` (5 s; `sendall` in all, connect alone), well
    inside the sender's deadline, so a send never needs abandoning."""

    max_batch_events = 10_000
    max_batch_bytes = 1_048_576
    MAX_DATAGRAM = 65_000

    def __init__(self, target: Target, timeout: float = 5.0) -> None:
        self.name = str(target)
        self._target = target
        self._timeout = timeout
        self._sock: socket.socket | None = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            kind = socket.SOCK_STREAM if self._target.kind == "tcp" else socket.SOCK_DGRAM
            infos = socket.getaddrinfo(self._target.host, self._target.port, type=kind)
            family, stype, proto, _, addr = infos[0]
            sock = socket.socket(family, stype, proto)
            sock.settimeout(self._timeout)
            sock.connect(addr)
            self._sock = sock
        return self._sock

    def send(self, batch: Batch) -> int:
        rejected = 0
        try:
            sock = self._connect()
            if self._target.kind == "tcp":
                sock.sendall("".join(m + "\n" for _, m in batch).encode())
            else:
                for _, m in batch:
                    data = m.encode()
                    if len(data) > self.MAX_DATAGRAM:
                        rejected += 1  # cannot fit one datagram; TCP has no such limit
                        continue
                    sock.send(data)
        except OSError as exc:
            self.close()
            raise SendError(f"{self.name}: {exc.strerror or exc}", retryable=True) from None
        return rejected

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


class CloudWatchDestination:
    """PutLogEvents signed by botocore with its default credential chain (env, IRSA web
    identity, EKS Pod Identity, instance profile), sent without a boto3 client (logsapi.py).
    Creates the log stream, and the group when allowed, the first time CloudWatch says it is
    missing. `timeout` (s) bounds one call's read."""

    name = "cloudwatch"
    max_batch_events = 10_000
    max_batch_bytes = 1_048_576

    def __init__(self, *, log_group: str, log_stream: str, region: str | None = None,
                 endpoint_url: str | None = None, create_log_group: bool = True,
                 timeout: float = 30.0, insights: tuple[str, str] | None = None) -> None:
        try:
            from podgpu.sinks.cloudwatch.logsapi import LogsApi

            self._api = LogsApi(region=region, endpoint_url=endpoint_url, timeout=timeout)
        except ImportError as exc:
            raise ConfigError(f"--emf-destination cloudwatch needs botocore ({exc}): install "
                              "podgpu[cloudwatch], or use stdout, tcp:// or udp://") from None
        self._group = log_group
        self._stream = log_stream
        self._create_group = create_log_group
        self._insights = insights
        """(log group, log stream) of Container Insights events (--emf-container-insights)."""

    def send(self, batch: Batch) -> int:
        group, stream = self._group, self._stream
        if self._insights is not None and batch and is_insights_event(batch[0][1]):
            group, stream = self._insights
        body = {"logGroupName": group, "logStreamName": stream,
                "logEvents": [{"timestamp": ts, "message": m} for ts, m in batch]}
        for attempt in (1, 2):
            try:
                # CloudWatch no longer needs this header for EMF; the agent still sends it.
                resp = self._api.call("PutLogEvents", body, {"x-amzn-logs-format": "json/emf"})
                return _rejected(resp.get("rejectedLogEventsInfo"), len(batch))
            except Exception as exc:
                code = _code(exc)
                if code == "ResourceNotFoundException" and attempt == 1:
                    self._create(group, stream)
                    continue
                raise _translate(exc, code) from None
        raise SendError("cloudwatch: log stream still missing after creating it", retryable=True)

    def abort(self) -> None:
        """The sender gave up waiting for a send (its deadline): the next one goes out on a fresh
        connection, so an endpoint that trickles its answer holds one connection, not the sink.
        Should the abandoned call still land, its events are sent twice; retries after a lost
        answer do the same (at least once, as the CloudWatch agent)."""
        self._api.renew()

    def _create(self, group: str, stream: str) -> None:
        """Create the log group (if allowed) and the log stream; 'already exists' is fine."""
        steps = [("CreateLogGroup", {"logGroupName": group})] if self._create_group else []
        steps.append(("CreateLogStream", {"logGroupName": group, "logStreamName": stream}))
        for action, body in steps:
            try:
                self._api.call(action, body)
                log.info("CloudWatch Logs: %s %s", action, body)
            except Exception as exc:
                code = _code(exc)
                if code == "ResourceAlreadyExistsException":
                    continue
                if code == "ResourceNotFoundException" and action == "CreateLogStream":
                    raise SendError(
                        f"cloudwatch: log group {group!r} does not exist and creating it is "
                        "off (--emf-create-log-group=false)", retryable=True, auth=True) from None
                raise _translate(exc, code) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing must not fail shutdown
            self._api.close()


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return type(exc).__name__


def _status(exc: Exception) -> int:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def _translate(exc: Exception, code: str) -> SendError:
    """botocore's exceptions -> SendError, at this one boundary."""
    msg = str(exc).splitlines()[0][:300] if str(exc) else code
    if code in _AUTH_CODES or _status(exc) in (401, 403) or type(exc).__name__ in (
            "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return SendError(f"cloudwatch: credentials or permissions: {msg}", retryable=True,
                         auth=True)
    if code in _RETRYABLE_CODES or _status(exc) >= 500:
        return SendError(f"cloudwatch: {msg}", retryable=True)
    if type(exc).__name__ in ("EndpointConnectionError", "ConnectionClosedError",
                              "ReadTimeoutError", "ConnectTimeoutError", "ConnectionError",
                              "ProxyConnectionError", "HTTPClientError", "SSLError"):
        return SendError(f"cloudwatch: {msg}", retryable=True)
    if isinstance(exc, OSError):
        return SendError(f"cloudwatch: {msg}", retryable=True)
    return SendError(f"cloudwatch: {msg}", retryable=False)


def _rejected(info: Any, n: int) -> int:
    """Count events CloudWatch refused for being too new, too old or past retention."""
    if not isinstance(info, dict):
        return 0
    bad: set[int] = set()
    if "tooNewLogEventStartIndex" in info:
        bad.update(range(int(info["tooNewLogEventStartIndex"]), n))
    for key in ("tooOldLogEventEndIndex", "expiredLogEventEndIndex"):
        if key in info:
            bad.update(range(0, int(info[key]) + 1))
    return len(bad)


def make_destination(target: Target, *, log_group: str, log_stream: str, region: str | None,
                     endpoint_url: str | None, create_log_group: bool,
                     insights: tuple[str, str] | None = None) -> Destination:
    """`insights`: the Container Insights (log group, stream), for the cloudwatch destination;
    stdout prints every event."""
    if target.kind == "cloudwatch":
        return CloudWatchDestination(log_group=log_group, log_stream=log_stream, region=region,
                                     endpoint_url=endpoint_url, create_log_group=create_log_group,
                                     insights=insights)
    if target.kind == "stdout":
        return StdoutDestination()
    return SocketDestination(target)
