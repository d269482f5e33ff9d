"""Password checks for basic auth, without oracles, and the per-client buckets.

bcrypt is slow on purpose (cost 10 is ~60 ms here), so a scrape must not pay it every time and
must never run it on the event loop:
- a verified (user, stored hash, password) is kept in a success cache keyed by an HMAC under a
  per-process random key (no password or hash is held by the cache). Failed triples go to a
  separate, smaller cache: a flood of wrong passwords cannot evict the scraper's entry (it did, and
  Prometheus then got 429s). A changed hash (edit of the file) misses both naturally;
- checks run on one worker thread (bcrypt releases the GIL), taken from a ranked line
  (http.authqueue): a check from an address with fewer failures since its last success, and
  fewer checks of its own waiting, goes first, so a flood of guesses from many addresses cannot
  keep a scraper's first check waiting behind it; a full line refuses its worst-ranked check
  (429); identical checks in flight share one result;
- every check not answered by a cache runs exactly one bcrypt of the stored cost on at most the
  first 72 bytes of the password: an unknown user runs it against a dummy hash of the same cost
  (built without hashing, so the first unknown user costs no more than the next), and a password
  longer than 72 bytes runs it too before it is refused (bcrypt ignores, or since bcrypt 5
  refuses, the bytes past 72, so such a password never matches), so no answer time tells a
  known user from an unknown one;
- failures are throttled per client address (`failure_bucket`): every check not answered by the
  success cache takes a token first (given back when the password was right), so a client out of
  tokens gets 429 before any bcrypt runs, and checks in flight count. A client whose credentials are
  in the success cache is answered before the throttle is consulted, so it is never throttled.

The measurements behind this: docs/decisions/0016-basic-auth-without-oracles.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import functools
import hashlib
import hmac
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from podgpu.http.authqueue import MAX_WAITING_CHECKS, CheckLine

SUCCESS_CACHE_SIZE = 1024
FAILURE_CACHE_SIZE = 256
MAX_AUTH_HEADER = 4096
BCRYPT_MAX_BYTES = 72
FAILURE_BURST = 10
"""Failed attempts a client may make at once before it is throttled."""
FAILURE_INTERVAL = 1.0
"""Seconds per further failed attempt a throttled client earns back."""
MAX_CLIENTS = 4096
"""Client addresses tracked per bucket set; the least recently seen is forgotten first."""
_B64 = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class RateLimiter:
    """Token buckets per client: one token every `interval` seconds, at most `burst` saved.

    exporter-toolkit's `rate_limit` has one bucket for the whole server, so four anonymous
    clients used up the scraper's budget (246 of 300 authenticated scrapes failed); podgpu keeps
    one bucket per client address and charges it after authentication (http.auth)."""

    def __init__(self, interval: float, burst: int,
                 clock: Callable[[], float] = time.monotonic,
                 max_clients: int = MAX_CLIENTS) -> None:
        self.interval = interval
        self.burst = burst
        self._clock = clock
        self._max = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def _tokens(self, client: str) -> float:
        now = self._clock()
        tokens, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) / self.interval)

    def allow(self, client: str = "") -> bool:
        """Take a token for `client`; False when it has none."""
        tokens = self._tokens(client)
        ok = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if ok else tokens, self._clock())
        self._buckets.move_to_end(client)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return ok

    def has_token(self, client: str = "") -> bool:
        """Whether `client` has a token, without taking it."""
        return self._tokens(client) >= 1.0

    def refund(self, client: str = "") -> None:
        """Give back a token taken by `allow` (the attempt it paid for did not count)."""
        if client in self._buckets:
            tokens, at = self._buckets[client]
            self._buckets[client] = (min(float(self.burst), tokens + 1.0), at)


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
    """Checks passwords against bcrypt hashes off the event loop, with safe bounded caches.

    Counters (plain attributes, read by the self-metrics): `bcrypt_runs`, `failures` (wrong or
    unknown credentials), `throttled` (refused before checking: the client had failed too
    often), `busy` (refused: the line of waiting checks was full of better-ranked ones)."""

    def __init__(self, checkpw: Callable[[bytes, bytes], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 max_waiting: int = MAX_WAITING_CHECKS) -> None:
        """`checkpw` defaults to the bcrypt library; tests pass counting wrappers."""
        self._checkpw = checkpw or _bcrypt_checkpw
        self._secret = os.urandom(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._bad: OrderedDict[bytes, None] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool | None]] = {}
        self._dummy: dict[int, bytes] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="podgpu-bcrypt")
        self._line = CheckLine(self._pool, max_waiting)
        self._failed: OrderedDict[str, int] = OrderedDict()  # rank: -1 succeeded, n failures
        self._pending: dict[str, int] = {}  # checks waiting or running, per client
        self.failure_bucket = RateLimiter(FAILURE_INTERVAL, FAILURE_BURST, clock)
        self.bcrypt_runs = 0
        self.failures = 0
        self.throttled = 0
        self.busy = 0

    @property
    def _cache(self) -> OrderedDict[bytes, None]:
        """The success cache (what tests inspect)."""
        return self._ok

    def close(self) -> None:
        self._line.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def check(self, users: Mapping[str, str], user: bytes, password: bytes,
                    client: str = "") -> bool | None:
        """True/False, or None when the check was refused (answer 429): `client` failed too
        often, or the line of waiting checks was full of better-ranked ones."""
        name = user.decode("utf-8", errors="surrogateescape")
        stored = users.get(name)
        hashed = stored.encode() if stored is not None else None
        cost = _cost(stored) if stored is not None else _dummy_cost(users)
        key = self._key(user, hashed or b"dummy:%d" % cost, password)
        if key in self._ok:
            self._ok.move_to_end(key)
            return True
        pending = self._inflight.get(key)
        if pending is None:  # else the same check is waiting or running: share it, pay nothing
            # The client's token is taken before the check is queued and given back when it
            # succeeds (or was refused unchecked): checks in flight count against the bucket,
            # so parallel guesses from one address get no more bcrypt runs than sequential ones.
            if not self.failure_bucket.allow(client):
                self.throttled += 1
                return None
            if key in self._bad:
                self._bad.move_to_end(key)
                self.failures += 1
                return False
            pending = self._start(key, client, hashed, cost, password)
        # shielded: a request that goes away leaves the check in its place (http.authqueue)
        ok = await asyncio.shield(pending)
        if ok is None:
            self.busy += 1
        elif not ok:
            self.failures += 1
        return ok

    def _start(self, key: bytes, client: str, hashed: bytes | None, cost: int,
               password: bytes) -> asyncio.Future[bool | None]:
        """Queue one bcrypt, ranked by the client's record and its checks already queued: -1
        when its last check succeeded (a scraper after a password rotation), 0 for an address
        not seen (or forgotten), n after n failures since its last success."""
        rank = self._failed.get(client, 0) + self._pending.get(client, 0)
        self._pending[client] = self._pending.get(client, 0) + 1
        future = self._line.submit(rank, functools.partial(self._verify, hashed, cost, password))
        self._inflight[key] = future
        future.add_done_callback(functools.partial(self._settle, key, client))
        return future

    def _settle(self, key: bytes, client: str, future: asyncio.Future[bool | None]) -> None:
        """Once per check, whoever waited for it: caches, the client's token and failure count."""
        if self._inflight.get(key) is future:
            del self._inflight[key]
        left = self._pending.pop(client, 1) - 1
        if left:
            self._pending[client] = left
        if future.cancelled() or future.exception() is not None:
            return  # the checker closed, or the worker failed
        ok = future.result()
        if ok is None or ok:  # refused unchecked, or right: the attempt costs nothing
            self.failure_bucket.refund(client)
        if ok is None:
            return
        _remember(self._ok if ok else self._bad, key,
                  SUCCESS_CACHE_SIZE if ok else FAILURE_CACHE_SIZE)
        self._failed[client] = -1 if ok else max(0, self._failed.get(client, 0)) + 1
        self._failed.move_to_end(client)
        while len(self._failed) > MAX_CLIENTS:
            self._failed.popitem(last=False)

    @property
    def in_flight(self) -> int:
        """Checks queued or running now."""
        return len(self._inflight)

    def _verify(self, hashed: bytes | None, cost: int, password: bytes) -> bool:
        """One bcrypt of `cost` whatever the user and the password length (no timing oracle)."""
        self.bcrypt_runs += 1
        target = hashed if hashed is not None else self._dummy_hash(cost)
        try:
            match = self._checkpw(password[:BCRYPT_MAX_BYTES], target)
        except ValueError:  # a hash bcrypt rejects (validated at load, so not expected)
            match = False
        return match and hashed is not None and len(password) <= BCRYPT_MAX_BYTES

    def _dummy_hash(self, cost: int) -> bytes:
        """A well-formed bcrypt hash of `cost` with a random salt and digest: checking against
        it costs the same as against a real one, and building it costs nothing."""
        if cost not in self._dummy:
            body = "".join(secrets.choice(_B64) for _ in range(53))
            body = body[:21] + secrets.choice(".Oeu") + body[22:]  # salt's last char: 2 bits
            self._dummy[cost] = f"$2b${cost:02d}${body}".encode()
        return self._dummy[cost]

    def _key(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        for part in parts:  # length-prefixed so no two triples collide
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()


def _remember(cache: OrderedDict[bytes, None], key: bytes, size: int) -> None:
    cache[key] = None
    while len(cache) > size:
        cache.popitem(last=False)


def _cost(hashed: str) -> int:
    """The cost field of a (validated) bcrypt hash: `$2y$10$...` -> 10."""
    parts = hashed.split("$")
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 10


def _dummy_cost(users: Mapping[str, str]) -> int:
    """The cost an unknown user pays: the highest of the configured hashes. Give every user
    the same cost: a user whose hash has a lower cost answers faster than an unknown name
    (docs/web-config.md)."""
    return max((_cost(h) for h in users.values()), default=10)


def _bcrypt_checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    return bool(bcrypt.checkpw(password, hashed))
