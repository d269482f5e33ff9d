"""CloudWatch Logs' JSON API through botocore's pieces, without a boto3 client.

A boto3 `logs` client cost +11 MiB steady and +20 MiB at its peak on the H200 for three calls:
building it parses the service model, the endpoint rule set and endpoints.json into Python
objects. This module keeps what must not be hand-written and drops the rest:

- credentials: botocore's default chain from a botocore Session (environment, IRSA web identity,
  EKS Pod Identity, shared files, instance metadata), refreshed by botocore as they expire;
- signing: botocore's `SigV4Auth` (service `logs`);
- the endpoint: one configured as boto3 reads it (`AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`,
  `AWS_ENDPOINT_URL`, the shared config's services section), else botocore's `EndpointProvider`
  over the Logs endpoint rule set and partitions.json (a few KB), so FIPS and non-`aws`
  partitions resolve as boto3 would;
- transport: botocore's `URLLib3Session` (the proxy environment, AWS_CA_BUNDLE, timeouts), no
  retries (the sender retries);
- the AWS JSON 1.1 protocol itself (POST /, `X-Amz-Target: Logs_20140328.<Action>`, errors as
  `__type`/`message`) is three calls' worth of JSON and is done here.

Errors carry a botocore-shaped `response` (`Error.Code`, `ResponseMetadata.HTTPStatusCode`) so
destinations.py translates them at one boundary, whichever way the call was made.

Decision record: docs/decisions/0012-cloudwatch-logs-botocore.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

from podgpu.errors import ConfigError
from podgpu.peers.capped import OverCap, read_capped
from podgpu.peers.deadline import Deadline

TARGET_PREFIX = "Logs_20140328."
CONTENT_TYPE = "application/x-amz-json-1.1"
SIGNING_NAME = "logs"
MAX_ANSWER_BYTES = 64 * 1024
"""Of a CloudWatch Logs answer read at most (real ones are under 1 KiB; errors a few hundred
bytes); past it the connection is closed unread."""
ANSWER_CHUNK = 16 * 1024


class AnswerError(OSError):
    """The answer was not read: over MAX_ANSWER_BYTES, past the call's deadline, or broken.
    An OSError, so the sender retries it as any transport failure."""


LATE = "CloudWatch Logs answer not complete within the call's deadline"


def read_answer(raw: Any, limit: int, deadline: Deadline) -> bytes:
    """At most `limit` bytes of a urllib3 answer, read as they arrive and by `deadline`
    (podgpu.peers); past either the connection is closed, never drained (an endless answer from
    an endpoint or a proxy cost +3.4 GiB in 11 s when read whole). The deadline shuts the socket
    down where urllib3 can (2.3+: `shutdown`); otherwise it is checked between reads, each
    bounded by the read timeout."""
    import urllib3.exceptions

    deadline.watch(getattr(raw, "shutdown", None))
    try:
        return read_capped(getattr(raw, "read1", None) or raw.read, limit, deadline=deadline,
                           chunk=ANSWER_CHUNK)
    except OverCap:
        raw.close()
        error = (f"CloudWatch Logs answer over {limit // 1024} KiB (real answers are under "
                 "1 KiB); connection closed unread")
    except TimeoutError:
        raw.close()
        error = LATE + "; connection closed"
    except (urllib3.exceptions.HTTPError, ValueError) as exc:
        error = LATE if deadline.expired else f"CloudWatch Logs answer broken off: {exc}"
    finally:
        raw.release_conn()
    raise AnswerError(error)


class LogsApiError(Exception):
    """A non-2xx answer. `response` has the shape of botocore's ClientError.response."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"An error occurred ({code}) when calling CloudWatch Logs: {message}")
        self.response = {"Error": {"Code": code, "Message": message},
                         "ResponseMetadata": {"HTTPStatusCode": status}}


def error_code(header: str, body: Any) -> tuple[str, str]:
    """(code, message) of an AWS JSON error answer: `__type` (its part after '#') or the
    `x-amzn-ErrorType` header (its part before ':'), as botocore's JSON parser reads them."""
    code, message = "", ""
    if isinstance(body, dict):
        code = str(body.get("__type") or body.get("code") or "").rsplit("#", 1)[-1]
        message = str(body.get("message") or body.get("Message") or "")
    if not code and header:
        code = header.split(":", 1)[0]
    return code, message


class LogsApi:
    """Signed CloudWatch Logs calls. `timeout` (s) is the read timeout of one call; the connect
    timeout is at most 10 s of it. Raises ConfigError when no region is known."""

    def __init__(self, *, region: str | None, endpoint_url: str | None,
                 timeout: float = 30.0) -> None:
        import botocore  # type: ignore[import-untyped]
        import botocore.session  # type: ignore[import-untyped]
        from botocore.httpsession import URLLib3Session  # type: ignore[import-untyped]
        from botocore.utils import get_environ_proxies  # type: ignore[import-untyped]

        self._session: Any = botocore.session.Session()
        self.region = str(region or self._session.get_config_variable("region") or "")
        if not self.region:
            raise ConfigError("CloudWatch Logs client: no region (set --aws-region or AWS_REGION)")
        self.url = endpoint_url or self._configured_endpoint() or self._resolve_endpoint()
        verify = self._session.get_config_variable("ca_bundle") or True
        proxies = get_environ_proxies(self.url)

        def connection() -> Any:
            return URLLib3Session(verify=verify, proxies=proxies,
                                  timeout=(min(10.0, timeout), timeout), max_pool_connections=1)

        self._connection = connection
        self._timeout = timeout
        self._http: Any = connection()
        self._user_agent = f"podgpu botocore/{botocore.__version__}"

    def _configured_endpoint(self) -> str | None:
        """An endpoint set as boto3 clients read one: AWS_ENDPOINT_URL_CLOUDWATCH_LOGS, then
        AWS_ENDPOINT_URL, then `endpoint_url` in the shared config file's services section or
        profile; none when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true."""
        if self._session.get_config_variable("ignore_configured_endpoint_urls"):
            return None
        from botocore.configprovider import (  # type: ignore[import-untyped]
            ConfiguredEndpointProvider,
        )

        found = ConfiguredEndpointProvider(
            full_config=self._session.full_config, scoped_config=self._session.get_scoped_config(),
            client_name="logs").provide()
        return str(found) if found else None

    def _resolve_endpoint(self) -> str:
        from botocore.endpoint_provider import EndpointProvider  # type: ignore[import-untyped]

        loader = self._session.get_component("data_loader")
        provider = EndpointProvider(
            ruleset_data=loader.load_service_model("logs", "endpoint-rule-set-1"),
            partition_data=loader.load_data("partitions"))
        fips = str(self._session.get_config_variable("use_fips_endpoint") or "").lower()
        dual = str(self._session.get_config_variable("use_dualstack_endpoint") or "").lower()
        try:
            endpoint = provider.resolve_endpoint(Region=self.region, UseFIPS=fips == "true",
                                                 UseDualStack=dual == "true")
        except Exception as exc:  # EndpointResolutionError: a region the rules refuse
            raise ConfigError(f"CloudWatch Logs endpoint for region {self.region!r}: {exc}"
                              ) from None
        return str(endpoint.url)

    def call(self, action: str, body: dict[str, Any],
             headers: dict[str, str] | None = None) -> dict[str, Any]:
        """One API call; the decoded answer. Raises LogsApiError for an error answer and
        botocore's own exceptions for credentials (NoCredentialsError, CredentialRetrievalError)
        and transport (EndpointConnectionError, ReadTimeoutError ...)."""
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
        from botocore.exceptions import NoCredentialsError  # type: ignore[import-untyped]

        credentials = self._session.get_credentials()  # cached by the session once found
        if credentials is None:
            raise NoCredentialsError()
        request = AWSRequest(method="POST", url=self.url, data=json.dumps(body).encode(),
                             headers={"Content-Type": CONTENT_TYPE,
                                      "X-Amz-Target": TARGET_PREFIX + action,
                                      "User-Agent": self._user_agent, **(headers or {})},
                             stream_output=True)  # the answer is read here, capped
        SigV4Auth(credentials.get_frozen_credentials(), SIGNING_NAME, self.region
                  ).add_auth(request)
        http = self._http
        deadline = Deadline(self._timeout)
        try:
            response = http.send(request.prepare())
            content = read_answer(response.raw, MAX_ANSWER_BYTES, deadline) or b"{}"
        finally:
            deadline.cancel()
            if http is not self._http:  # renewed while this call ran: nobody reuses its pool
                http.close()
        try:
            answer = json.loads(content)
        except ValueError:
            answer = None
        status = int(response.status_code)
        if 200 <= status < 300:
            return answer if isinstance(answer, dict) else {}
        code, message = error_code(str(response.headers.get("x-amzn-ErrorType") or ""), answer)
        xml = re.search(rb"<Code>([^<]{1,100})</Code>", content) if answer is None else None
        if not code and xml:  # an XML error from a proxy or an emulator's auth layer
            code = xml[1].decode("utf-8", "replace")
            found = re.search(rb"<Message>([^<]{0,300})</Message>", content)
            message = found[1].decode("utf-8", "replace") if found else ""
        if not code:
            code = f"HTTP{status}"
            message = message or content[:200].decode("utf-8", "replace")
        raise LogsApiError(code, message, status)

    def renew(self) -> None:
        """Make the next call on a fresh connection, from any thread; a call still running on
        the old one ends on its own (its read timeout, or the peer) and closes it then."""
        self._http = self._connection()

    def close(self) -> None:
        self._http.close()
