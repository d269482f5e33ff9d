"""Who may read: basic auth with bcrypt hashes, client-certificate SANs, a rate limit, and the
web config's response headers, as one aiohttp middleware that covers every route.

The middleware wraps the whole application, so a route added later (an API, a live page) is
protected without touching this file; only `/health` is exempt from basic auth and the rate limit,
because Kubernetes probes cannot carry a password without writing it into the pod spec (it still
needs TLS and, when required, a client certificate: docs/security.md).

bcrypt is slow on purpose (cost 10 is ~60 ms here), so a scrape must not pay it every time and
must never run it on the event loop:
- results are cached per (user, stored hash, password) like exporter-toolkit, but the cache key is
  an HMAC under a per-process random key, so no password or hash is kept in memory by the cache;
  the cache is bounded and a changed hash (edit of the file) misses naturally;
- checks run on one worker thread (bcrypt releases the GIL) with a bounded queue: past it the
  request gets 429 instead of queueing without end; identical checks in flight share one result;
- an unknown user is checked against a dummy hash of the same cost, so timing does not tell which
  user names exist; bcrypt's own comparison is constant-time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/health"})
CACHE_SIZE = 1024
MAX_PENDING_CHECKS = 32
MAX_AUTH_HEADER = 4096
_UNAUTHORIZED = {"WWW-Authenticate": 'Basic realm="podgpu", charset="UTF-8"'}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RateLimiter:
    """Token bucket: one token every `interval` seconds, at most `burst` saved (exporter-toolkit
    `rate_limit`, one bucket for the whole server)."""

    def __init__(self, interval: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) / self.interval)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(frozen=True, slots=True)
class Policy:
    """One generation of the web config's access rules; swapped whole on reload."""

    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    allowed_sans: tuple[str, ...] = ()
    rate: RateLimiter | None = None


def parse_basic(header: str) -> tuple[bytes, bytes] | None:
    """(user, password) from an `Authorization: Basic ...` value, or None when malformed."""
    if len(header) > MAX_AUTH_HEADER:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    return (user, password) if sep else None


class BasicAuthChecker:
    """Checks passwords against bcrypt hashes off the event loop, with a safe bounded cache."""

    def __init__(self, checkpw: Callable[[bytes, bytes], bool] | None = None,
                 hashpw: Callable[[bytes, int], bytes] | None = None) -> None:
        """`checkpw`/`hashpw` default to the bcrypt library; tests pass counting wrappers."""
        self._checkpw = checkpw or _bcrypt_checkpw
        self._hashpw = hashpw or _bcrypt_hash
        self._secret = os.urandom(32)
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool]] = {}
        self._dummy: dict[int, bytes] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="podgpu-bcrypt")
        self.bcrypt_runs = 0
        self.failures = 0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def check(self, users: Mapping[str, str], user: bytes, password: bytes) -> bool | None:
        """True/False, or None when too many checks are queued (answer 429, try later)."""
        name = user.decode("utf-8", errors="surrogateescape")
        stored = users.get(name)
        hashed = stored.encode() if stored is not None else None
        cost = _cost(stored or next(iter(users.values()), "$2b$10$"))
        key = self._key(user, hashed or b"dummy:%d" % cost, password)
        ok = self._cache.get(key)
        if ok is None:
            pending = self._inflight.get(key)
            if pending is None:
                if len(self._inflight) >= MAX_PENDING_CHECKS:
                    return None
                loop = asyncio.get_running_loop()
                pending = loop.run_in_executor(self._pool, self._verify, hashed, cost, password)
                self._inflight[key] = pending
                try:
                    ok = await pending
                finally:
                    self._inflight.pop(key, None)
                self._cache[key] = ok
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                ok = await asyncio.shield(pending)
        ok = ok and hashed is not None
        if not ok:
            self.failures += 1
        return ok

    def _verify(self, hashed: bytes | None, cost: int, password: bytes) -> bool:
        self.bcrypt_runs += 1
        if hashed is None:  # unknown user: pay the same bcrypt cost, then refuse
            if cost not in self._dummy:
                self._dummy[cost] = self._hashpw(os.urandom(16), cost)
            self._checkpw(password[:72], self._dummy[cost])
            return False
        if len(password) > 72:  # bcrypt ignores or refuses bytes past 72: never a match
            return False
        try:
            return self._checkpw(password, hashed)
        except ValueError:
            return False

    def _key(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        for part in parts:  # length-prefixed so no two triples collide
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()


class AccessControl:
    """The middleware and response hook; `policy` is replaced whole when the config reloads."""

    def __init__(self, policy: Policy, checker: BasicAuthChecker | None = None) -> None:
        self.policy = policy
        self.checker = checker or BasicAuthChecker()
        self.forbidden = 0

    def install(self, app: web.Application) -> None:
        app.middlewares.insert(0, self.middleware)
        app.on_response_prepare.append(self._headers)

    async def _headers(self, _request: web.Request, response: web.StreamResponse) -> None:
        for name, value in self.policy.headers:
            response.headers[name] = value

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        policy = self.policy
        if policy.allowed_sans and not san_allowed(
                request.transport.get_extra_info("peercert") if request.transport else None,
                policy.allowed_sans):
            self.forbidden += 1
            return web.Response(status=403, text="client certificate not allowed\n",
                                headers={"Connection": "close"})
        if _exempt(request):
            return await handler(request)
        if policy.rate is not None and not policy.rate.allow():
            return web.Response(status=429, text="too many requests\n",
                                headers={"Retry-After": "1"})
        if policy.users:
            creds = parse_basic(request.headers.get("Authorization", ""))
            if creds is None:
                return web.Response(status=401, text="unauthorized\n", headers=_UNAUTHORIZED)
            ok = await self.checker.check(policy.users, *creds)
            if ok is None:
                return web.Response(status=429, text="too many authentication attempts\n",
                                    headers={"Retry-After": "1"})
            if not ok:
                return web.Response(status=401, text="unauthorized\n", headers=_UNAUTHORIZED)
        return await handler(request)


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


def _cost(hashed: str) -> int:
    """The cost field of a (validated) bcrypt hash: `$2y$10$...` -> 10."""
    parts = hashed.split("$")
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 10


def _exempt(request: web.Request) -> bool:
    """By the matched route, not the raw path, so `/%68ealth` or `/health/x` buy nothing."""
    resource = request.match_info.route.resource
    return (resource is not None and resource.canonical in EXEMPT_PATHS
            and request.method in ("GET", "HEAD"))


def _bcrypt_checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    return bool(bcrypt.checkpw(password, hashed))


def _bcrypt_hash(password: bytes, cost: int) -> bytes:
    import bcrypt

    return bytes(bcrypt.hashpw(password, bcrypt.gensalt(cost)))
