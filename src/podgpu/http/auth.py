"""Who may read: basic auth with bcrypt hashes, client-certificate SANs, a rate limit, and the
web config's response headers, as the one middleware of the app (http.app), which covers every
route.

The middleware wraps the whole application, so a route added later (an API, a live page) is
protected without touching this file; only `/health` (and the readiness probe's `/health/ready`) is
exempt from basic auth and the rate limit, because Kubernetes probes cannot carry a password without
writing it into the pod spec (it still
needs TLS and, when required, a client certificate: docs/web-config.md).

Order per request: client-certificate SANs (403), then basic auth (401; 429 when
the client failed too often, or the line of waiting checks is full of better-ranked ones:
http.authcheck), then the rate limit
per client address (429), so unauthenticated clients cannot spend an authenticated scraper's
budget. Failed attempts are counted and logged at most once a minute with the count held back;
the log names the client address, never the user name tried (people type passwords there).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podgpu.http.app import App, Handler, Request, Response
from podgpu.http.authcheck import (
    FAILURE_INTERVAL,
    BasicAuthChecker,
    RateLimiter,
    parse_basic,
)
from podgpu.http.guard import RateLimitedLog, short

__all__ = ["EXEMPT_PATHS", "AccessControl", "BasicAuthChecker", "Policy",
           "RateLimiter", "parse_basic", "san_allowed"]

log = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/health", "/health/ready"})  # ready: http/ready.py
_UNAUTHORIZED = ("WWW-Authenticate", 'Basic realm="podgpu", charset="UTF-8"')


@dataclass(frozen=True, slots=True)
class Policy:
    """One generation of the web config's access rules; swapped whole on reload."""

    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    allowed_sans: tuple[str, ...] = ()
    rate: RateLimiter | None = None


class AccessControl:
    """The middleware and response hook; `policy` is replaced whole when the config reloads.

    Counters (plain attributes, with the checker's: `counters()`): `forbidden` (403, SAN),
    `unauthorized` (401), `rate_limited` (429 by `rate_limit`)."""

    def __init__(self, policy: Policy, checker: BasicAuthChecker | None = None) -> None:
        self.policy = policy
        self.checker = checker or BasicAuthChecker()
        self.forbidden = 0
        self.unauthorized = 0
        self.rate_limited = 0
        self._log = RateLimitedLog(log)
        self._app: App | None = None

    def counters(self) -> dict[str, int]:
        """Every count this layer keeps, for the self-metrics and /health."""
        c = self.checker
        return {"auth_failures": c.failures, "auth_throttled": c.throttled,
                "auth_busy": c.busy, "bcrypt_runs": c.bcrypt_runs,
                "unauthorized": self.unauthorized, "forbidden": self.forbidden,
                "rate_limited": self.rate_limited}

    def install(self, app: App) -> None:
        app.middleware = self.middleware
        app.response_headers.append(lambda: self.policy.headers)
        self._app = app

    async def middleware(self, request: Request, handler: Handler) -> Response:
        policy = self.policy
        if policy.allowed_sans and not san_allowed(request.peercert, policy.allowed_sans):
            self.forbidden += 1
            return Response.text(403, "client certificate not allowed\n", ("Connection", "close"))
        if self._exempt(request):
            return handler(request)
        client = request.remote
        if policy.users:
            creds = parse_basic(request.headers.get("authorization", ""))
            ok = None if creds is None else await self.checker.check(policy.users, *creds,
                                                                     client=client)
            if creds is None or ok is False:
                self.unauthorized += 1
                if creds is not None:
                    self._log("auth-failed", logging.WARNING,
                              "basic auth failed for a request from %s (%d failed in total, "
                              "%d refused for failing too often)", short(client, 64),
                              self.checker.failures, self.checker.throttled)
                return Response.text(401, "unauthorized\n", _UNAUTHORIZED)
            if ok is None:
                return Response.text(429, "too many authentication attempts\n",
                                     ("Retry-After", f"{FAILURE_INTERVAL:g}"))
        if policy.rate is not None and not policy.rate.allow(client):
            self.rate_limited += 1
            return Response.text(429, "too many requests\n",
                                 ("Retry-After", f"{max(1, round(policy.rate.interval))}"))
        return handler(request)

    def _exempt(self, request: Request) -> bool:
        """By the matched route of the percent-decoded path, so `/%68ealth` is /health but
        `/health/x` buys nothing."""
        route = self._app.route(request.path) if self._app is not None else None
        return route in EXEMPT_PATHS and request.method in ("GET", "HEAD")


def san_allowed(peercert: Any, allowed: tuple[str, ...]) -> bool:
    """True when the verified client certificate has a SAN (DNS, IP, e-mail or URI) equal to one
    in `allowed`; IP addresses compare as addresses (Python prints IPv6 uncompressed)."""
    if not isinstance(peercert, dict):
        return False
    wanted = set(allowed)
    wanted_ips = {_ip(a) for a in allowed} - {None}
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "IP Address":
            if _ip(value) in wanted_ips:
                return True
        elif kind in ("DNS", "email", "URI") and value in wanted:
            return True
    return False


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None
