"""Basic auth with real bcrypt hashes, the safe cache, the rate limit and SAN matching, through a
real podgpu listener on loopback (no mocks)."""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import bcrypt
import pytest

from podgpu.http.auth import (
    AccessControl,
    BasicAuthChecker,
    Policy,
    RateLimiter,
    parse_basic,
    san_allowed,
)
from podgpu.http.authcheck import FAILURE_BURST, FAILURE_INTERVAL
from tests.conftest import FakeClock
from tests.unit.http.auth_support import basic, bcrypt_hash, serve_policy, with_checker
from tests.unit.http.loopback import Client

USERS = {"alice": bcrypt_hash(b"right"), "bob": bcrypt_hash("pässwörd".encode(), prefix="$2y$")}


class Counting:
    """bcrypt's checkpw, counting calls (a wrapper around the real function, not a mock)."""

    def __init__(self) -> None:
        self.calls = 0
        self.order: list[bytes] = []

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls += 1
        self.order.append(password)
        return bool(bcrypt.checkpw(password, hashed))


def test_basic_auth_right_wrong_missing_on_every_route() -> None:
    async def scenario(c: Client, _a: AccessControl) -> None:
        for path in ("/metrics", "/", "/api/v1/snapshot", "/nope", "/%68ealth/x"):
            r = await c.get(path)
            assert r.status == 401, path
            assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
            assert "secret" not in await r.text()
        assert (await c.get("/metrics", headers=basic("alice", "right"))).status == 200
        assert (await c.get("/metrics", headers=basic("alice", "wrong"))).status == 401
        assert (await c.get("/metrics", headers=basic("alice", ""))).status == 401
        assert (await c.get("/metrics", headers=basic("carol", "right"))).status == 401
        assert (await c.get("/metrics", headers=basic("bob", "pässwörd"))).status == 200  # $2y$, UTF-8
        assert (await c.get("/metrics", headers=basic("bob", "right"))).status == 401
        assert (await c.get("/nope", headers=basic("alice", "right"))).status == 404
        # /health is exempt (Kubernetes probes), by its route, with GET and HEAD only
        assert (await c.get("/health")).status == 200
        assert (await c.get("/%68ealth")).status == 200  # the same route, decoded
        for bad in ("Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(),
                    "Basic " + "A" * 5000):
            assert (await c.get("/metrics", headers={"Authorization": bad})).status == 401, bad

    serve_policy(Policy(users=USERS), scenario)


def test_cache_pays_bcrypt_once_per_triple_and_unknown_users_pay_too() -> None:
    counting = Counting()

    async def scenario(c: Client, access: AccessControl) -> None:
        for _ in range(5):
            assert (await c.get("/metrics", headers=basic("alice", "right"))).status == 200
        assert counting.calls == 1
        for _ in range(3):
            assert (await c.get("/metrics", headers=basic("alice", "wrong"))).status == 401
        assert counting.calls == 2
        # an unknown user still runs one bcrypt (against a dummy hash of the same cost)
        assert (await c.get("/metrics", headers=basic("mallory", "right"))).status == 401
        assert counting.calls == 3
        assert access.checker.failures == 4
        # a changed hash (the file was edited) is a new cache key: the old password stops working
        access.policy = Policy(users={"alice": bcrypt_hash(b"new")})
        assert (await c.get("/metrics", headers=basic("alice", "right"))).status == 401
        assert (await c.get("/metrics", headers=basic("alice", "new"))).status == 200
        # 20 concurrent identical requests share one check
        before = counting.calls
        access.policy = Policy(users={"alice": bcrypt_hash(b"fresh", cost=8)})
        rs = await asyncio.gather(*(c.get("/metrics", headers=basic("alice", "fresh"))
                                    for _ in range(20)))
        assert {r.status for r in rs} == {200}
        assert counting.calls == before + 1

    serve_policy(Policy(users=USERS), scenario, BasicAuthChecker(checkpw=counting))


def test_cache_key_holds_no_password() -> None:
    checker = BasicAuthChecker()

    async def main() -> None:
        assert await checker.check(USERS, b"alice", b"right")
        keys = list(checker._cache)
        assert len(keys) == 1 and b"right" not in keys[0] and len(keys[0]) == 32

    asyncio.run(main())
    checker.close()


def test_a_closed_checker_answers_429_at_once() -> None:
    checker = BasicAuthChecker()
    checker.close()

    async def main() -> None:
        assert await checker.check(USERS, b"alice", b"right", client="10.0.0.1") is None
        assert checker.bcrypt_runs == 0

    asyncio.run(main())


def test_password_longer_than_72_bytes_is_refused_not_an_error() -> None:
    long = "x" * 80
    users = {"alice": bcrypt_hash(long[:72].encode())}  # bcrypt would match on the first 72 bytes

    async def scenario(c: Client, _a: AccessControl) -> None:
        assert (await c.get("/metrics", headers=basic("alice", long))).status == 401
        assert (await c.get("/metrics", headers=basic("alice", long[:72]))).status == 200

    serve_policy(Policy(users=users), scenario)


def test_parallel_guesses_from_one_address_are_throttled_before_they_queue() -> None:
    # Measured before: the token was checked, not taken, before the check was queued, so 32
    # parallel guesses from one address got 340 bcrypt runs in 30 s where 40 are allowed.
    gate = threading.Event()
    counting = Counting()

    def held(password: bytes, hashed: bytes) -> bool:
        gate.wait(10)  # the worker is busy: checks pile up behind it
        return counting(password, hashed)

    async def scenario(c: Client, access: AccessControl) -> None:
        tasks = [asyncio.create_task(c.get("/metrics", headers=basic("alice", f"guess{i}")))
                 for i in range(40)]
        for _ in range(500):
            if sum(t.done() for t in tasks) >= 40 - FAILURE_BURST:
                break
            await asyncio.sleep(0.01)
        done = [t.result().status for t in tasks if t.done()]
        assert done == [429] * (40 - FAILURE_BURST)  # refused at once, nothing queued for them
        assert access.checker.in_flight == FAILURE_BURST
        gate.set()
        rest = [r.status for r in await asyncio.gather(*(t for t in tasks if not t.done()))]
        assert rest == [401] * FAILURE_BURST
        assert counting.calls == FAILURE_BURST
        assert access.checker.throttled == 40 - FAILURE_BURST

    serve_policy(Policy(users={"alice": bcrypt_hash(b"right")}), scenario, BasicAuthChecker(checkpw=held))


def test_checks_per_address_stay_within_the_rate_under_concurrency(clock: FakeClock) -> None:
    counting = Counting()
    users = {"alice": bcrypt_hash(b"right")}

    async def main(checker: BasicAuthChecker) -> None:
        for second in range(30):  # 32 parallel guesses a second for 30 s
            await asyncio.gather(*(checker.check(users, b"alice", b"g%d-%d" % (second, i),
                                                 client="10.0.0.9") for i in range(32)))
            clock.advance(FAILURE_INTERVAL)
        # the right password still works from another address, and from this one once earned
        assert await checker.check(users, b"alice", b"right", client="10.0.0.8")

    with_checker(main, checkpw=counting, clock=clock)
    allowed = FAILURE_BURST + 30 / FAILURE_INTERVAL
    assert counting.calls <= allowed + 1  # +1: the right password from the other address
    assert counting.calls >= 30


class Gated:
    """bcrypt's checkpw behind a gate, recording the order of the passwords it was given: the
    worker is busy until the test lets it go, so checks pile up in the line."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.order: list[bytes] = []

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.gate.wait(10)
        self.order.append(password)
        return bool(bcrypt.checkpw(password, hashed))


async def settle(tasks: list[asyncio.Task[bool | None]], done: int) -> None:
    for _ in range(500):
        if sum(t.done() for t in tasks) >= done:
            return
        await asyncio.sleep(0.01)


def test_a_full_line_refuses_the_check_that_would_run_last_and_it_costs_nothing() -> None:
    gated = Gated()
    users = {"alice": bcrypt_hash(b"right")}

    async def main(checker: BasicAuthChecker) -> None:
        # 1 runs (held) and 8 wait, from 9 addresses none of which has failed: all rank 0
        first = [asyncio.create_task(checker.check(users, b"alice", b"g%d" % i,
                                                   client=f"10.0.0.{i}")) for i in range(9)]
        await settle(first, 0)
        while checker.in_flight < 9:
            await asyncio.sleep(0.01)
        # a tenth from a new address ranks with the others and would run last: refused
        assert await checker.check(users, b"alice", b"g9", client="10.0.0.9") is None
        assert checker.busy == 1
        assert checker.failure_bucket.has_token("10.0.0.9")  # refused unchecked: costs nothing
        # an address with a check waiting ranks lower with its second: refused too
        assert await checker.check(users, b"alice", b"g2b", client="10.0.0.2") is None
        assert checker.busy == 2
        gated.gate.set()
        assert await asyncio.gather(*first) == [False] * 9
        assert gated.order == [b"g%d" % i for i in range(9)]  # equals run oldest first

    with_checker(main, checkpw=gated, max_waiting=8)


def test_a_new_address_is_checked_before_addresses_that_failed() -> None:
    gated = Gated()
    users = {"alice": bcrypt_hash(b"right")}

    async def main(checker: BasicAuthChecker) -> None:
        gated.gate.set()
        for i in range(8):  # eight guessers fail once each
            assert await checker.check(users, b"alice", b"warm%d" % i, client=f"10.0.1.{i}") is False
        gated.gate.clear()
        gated.order.clear()
        blocker = asyncio.create_task(checker.check(users, b"alice", b"held", client="10.0.2.1"))
        while checker.in_flight < 1:
            await asyncio.sleep(0.01)
        guesses = [asyncio.create_task(checker.check(users, b"alice", b"again%d" % i,
                                                     client=f"10.0.1.{i}")) for i in range(8)]
        while checker.in_flight < 9:  # the line is full of addresses that failed (rank 1)
            await asyncio.sleep(0.01)
        # the scraper's first check, from an address that never failed: it pushes the guess
        # that would run last (the newest) out of the full line and runs next
        scraper = asyncio.create_task(checker.check(users, b"alice", b"right", client="10.0.3.1"))
        await settle(guesses, 1)
        assert [t.result() for t in guesses if t.done()] == [None]
        assert guesses[-1].done()
        gated.gate.set()
        assert await scraper is True
        assert await asyncio.gather(*guesses[:-1]) == [False] * 7
        assert gated.order == [b"held", b"right", *(b"again%d" % i for i in range(7))]
        await blocker

    with_checker(main, checkpw=gated, max_waiting=8)


def test_a_check_keeps_its_place_when_its_request_goes_away() -> None:
    # A scraper that timed out while its first check waited: the check still runs, and the
    # retry is answered from the success cache without a second bcrypt.
    gated = Gated()
    users = {"alice": bcrypt_hash(b"right")}

    async def main(checker: BasicAuthChecker) -> None:
        held = asyncio.create_task(checker.check(users, b"alice", b"held", client="10.0.0.1"))
        first = asyncio.create_task(checker.check(users, b"alice", b"right", client="10.0.0.2"))
        while checker.in_flight < 2:
            await asyncio.sleep(0.01)
        first.cancel()  # its connection closed (the listener cancels the request's task)
        gated.gate.set()
        assert await held is False
        while checker.in_flight:
            await asyncio.sleep(0.01)
        assert first.cancelled()
        assert await checker.check(users, b"alice", b"right", client="10.0.0.2") is True
        assert gated.order == [b"held", b"right"]

    with_checker(main, checkpw=gated)


def test_a_distributed_flood_never_keeps_a_scraper_waiting_behind_it() -> None:
    # The flood's shape in the checker: 64 guessers over 250 addresses (127.0.0.2-251, taken in
    # turn), each waiting for its answer before its next guess; bcrypt at cost 4. Before, a line
    # of 32 was always full and a scraper whose password was not cached got 429 every time.
    # Counted for each scraper check: the checks that started between its asking and its own.
    counting = Counting()
    policy = {"users": {"prometheus": bcrypt_hash(b"right")}}

    async def main(checker: BasicAuthChecker) -> None:
        stop = asyncio.Event()
        failed: set[str] = set()
        turn = [0]

        async def guesser(n: int) -> None:
            i = 0
            while not stop.is_set():
                client = f"127.0.0.{2 + turn[0] % 250}"
                turn[0] += 1
                ok = await checker.check(policy["users"], b"prometheus", b"g%d-%d" % (n, i),
                                         client=client)
                assert ok is False
                failed.add(client)
                i += 1

        async def scrape(password: bytes, client: str) -> int:
            """The scraper's check of `password` (right, never cached): how long it waited."""
            policy["users"] = {"prometheus": bcrypt_hash(password)}  # a rotation, or a first check
            mark = len(counting.order)
            assert await checker.check(policy["users"], b"prometheus", password,
                                       client=client) is True
            return counting.order.index(password) - mark

        flood = [asyncio.create_task(guesser(n)) for n in range(64)]
        while counting.calls < 40:  # the flood has run a while: its addresses are still new
            await asyncio.sleep(0.01)
        # a new scraper ranks with the flood's new addresses, oldest first: at most the
        # guessers' checks (one each) and the one running are ahead of it
        assert await scrape(b"first", "127.0.0.1") <= 64 + 1
        # its address has succeeded: after a rotation it is next, every time
        assert max([await scrape(b"rotated-%d" % r, "127.0.0.1") for r in range(6)]) <= 1
        while len(failed) < 250:  # every flood address has failed once
            await asyncio.sleep(0.01)
        # a new scraper (a new replica) ranks ahead of every address that failed
        assert await scrape(b"replica", "127.0.0.252") <= 1
        stop.set()
        await asyncio.gather(*flood)

    with_checker(main, checkpw=counting)


def test_headers_from_the_config_on_every_response() -> None:
    headers = (("X-Frame-Options", "deny"), ("Strict-Transport-Security", "max-age=60"))

    async def scenario(c: Client, _a: AccessControl) -> None:
        for path, want in (("/metrics", 401), ("/health", 200), ("/nope", 401)):
            r = await c.get(path)
            assert r.status == want
            assert r.headers["X-Frame-Options"] == "deny"
            assert r.headers["Strict-Transport-Security"] == "max-age=60"

    serve_policy(Policy(users=USERS, headers=headers), scenario)


def test_rate_limit_token_bucket(clock: FakeClock) -> None:
    rl = RateLimiter(interval=1.0, burst=3, clock=clock)
    assert [rl.allow() for _ in range(4)] == [True, True, True, False]
    clock.advance(1.0)
    assert [rl.allow() for _ in range(2)] == [True, False]
    clock.advance(100.0)  # refills up to burst, not beyond
    assert sum(rl.allow() for _ in range(10)) == 3


def test_rate_limit_answers_429_but_not_on_health() -> None:
    async def scenario(c: Client, _a: AccessControl) -> None:
        codes = [(await c.get("/metrics")).status for _ in range(4)]
        assert codes == [200, 200, 429, 429]
        assert (await c.get("/health")).status == 200

    serve_policy(Policy(rate=RateLimiter(interval=3600.0, burst=2)), scenario)


@pytest.mark.parametrize(("sans", "allowed", "ok"), [
    ((("DNS", "scraper.example"),), ("scraper.example",), True),
    ((("DNS", "other.example"),), ("scraper.example",), False),
    ((("IP Address", "2001:DB8:0:0:0:0:0:1"),), ("2001:db8::1",), True),  # Python prints it long
    ((("IP Address", "10.0.0.1"),), ("10.0.0.1",), True),
    ((("email", "ops@example.com"),), ("ops@example.com",), True),
    ((("URI", "spiffe://cluster/ns/monitoring/sa/prometheus"),),
     ("spiffe://cluster/ns/monitoring/sa/prometheus",), True),
    ((), ("x",), False),
])
def test_san_matching(sans: tuple[tuple[str, str], ...], allowed: tuple[str, ...], ok: bool) -> None:
    peer: dict[str, Any] = {"subject": ((("commonName", "x"),),), "subjectAltName": sans}
    assert san_allowed(peer, allowed) is ok
    assert san_allowed(None, allowed) is False


def test_parse_basic() -> None:
    assert parse_basic(basic("a", "b:c")["Authorization"]) == (b"a", b"b:c")
    assert parse_basic("basic " + base64.b64encode(b"u:").decode()) == (b"u", b"")
    assert parse_basic("Basic") is None
    assert parse_basic("Digest x") is None
