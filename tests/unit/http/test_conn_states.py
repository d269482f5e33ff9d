"""One connection (http/conn.py) as the state machine of http/states.py, driven through a fake
transport, a fake clock and fake loop turns: no sockets, no waiting. TLS bytes come from a real
OpenSSL client (`ssl.SSLObject` over memory BIOs).

Each test pins down a failure a listener had: pipelined answers spliced into each other, a
request body read to its end before the answer, `Expect: 100-continue` never answered, a
smuggled request answered after Content-Length with Transfer-Encoding, a 400 eaten by a reset,
a stalled ClientHello buffered by OpenSSL, a client that never reads growing podgpu's memory."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import h11
import pytest

from podgpu.http import wire
from podgpu.http.app import App, Response
from podgpu.http.budget import MemoryBudget
from podgpu.http.conn import DISCARD_LIMIT, Connection
from podgpu.http.guard import LINGER_SECONDS, ConnectionGuard, Limits
from podgpu.http.listener import READ_SIZE, Listener
from podgpu.http.sockio import MIN_STEP
from podgpu.http.states import TRANSITIONS, Event, InvalidTransition, Machine, State
from podgpu.http.tlsgate import MAX_HELLO
from podgpu.http.tlslayer import STATE_BYTES
from podgpu.http.wire import Head, Seen
from tests.harness import unverified_tls
from tests.tlsutil import Pki
from tests.unit.http.fakes import FakeTransport, Scheduler

BODY = bytes(range(256)) * 400  # 100 KiB
GET = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n"


class Turns:
    """The event loop's `call_soon`, run by hand."""

    def __init__(self) -> None:
        self.queue: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], None]) -> object:
        self.queue.append(fn)
        return None

    def run(self) -> None:
        while self.queue:
            self.queue.pop(0)()


def _bug(_request: object) -> Response:
    raise KeyError("no such key")


def connection(room: int = 1 << 30, *, tls: ssl.SSLContext | None = None,
               budget: int | None = None, listener: Listener | None = None,
               ) -> tuple[Connection, FakeTransport, ConnectionGuard, Scheduler, Turns]:
    """A connection on a fake transport, of a new listener or of `listener` (its guard's
    clock and its loop turns are then the first connection's)."""
    if listener is not None:
        conn = listener()
        transport = FakeTransport(conn)
        conn.connection_made(transport)
        return conn, transport, listener.guard, Scheduler(), Turns()
    app = App()
    app.add_get("/metrics", lambda _r: Response.of(200, BODY, "text/plain"))
    app.add_get("/n", lambda r: Response.text(200, r.headers.get("x-n", "")))
    app.add_get("/bug", _bug)
    clock = Scheduler()
    limits = Limits(max_connections=10, memory_budget=budget or 16 << 20)
    guard = ConnectionGuard(limits, call_later=clock.call_later, now=clock.time, cap=10)
    listener = Listener(app, guard, ssl_context=tls)
    turns = Turns()
    listener.call_soon = turns
    conn = listener()
    transport = FakeTransport(conn, room)
    conn.connection_made(transport)
    return conn, transport, guard, clock, turns


def send(conn: Connection, data: bytes, size: int = READ_SIZE,
         transport: FakeTransport | None = None) -> None:
    """What asyncio does for a BufferedProtocol: fill its buffer, report the count (while
    `transport` reads, when given; the kernel keeps the rest)."""
    for i in range(0, len(data), size):
        if transport is not None and not transport.reading:
            return
        chunk = data[i:i + size]
        buf = conn.get_buffer(len(chunk))
        buf[:len(chunk)] = chunk
        conn.buffer_updated(len(chunk))


def answers(raw: bytes) -> list[tuple[bytes, bytes]]:
    """(status line, body) of each answer in `raw`, read by Content-Length as a client would."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        lines = head.split(b"\r\n")
        length = next(int(v) for n, _, v in (x.partition(b": ") for x in lines[1:])
                      if n.lower() == b"content-length")
        out.append((lines[0], rest[:length]))
        raw = rest[length:]
    return out


# --- the table


def test_every_listed_transition_is_taken_and_any_other_is_refused() -> None:
    for (state, event), nxt in TRANSITIONS.items():
        m = Machine(state)
        assert m.fire(event) is nxt
    m = Machine(State.IDLE)
    with pytest.raises(InvalidTransition):
        m.fire(Event.ANSWERED)  # nothing was being answered
    assert m.state is State.IDLE
    assert all((s, Event.CLOSE) in TRANSITIONS for s in State)
    assert {nxt for nxt in TRANSITIONS.values()} == set(State) - {State.HELLO}


# --- HTTP/1.1


def test_a_reading_client_is_answered_and_the_connection_goes_idle() -> None:
    conn, t, guard, _, _ = connection()
    send(conn, GET)
    assert answers(bytes(t.sent)) == [(b"HTTP/1.1 200 OK", BODY)]
    assert conn.state is State.IDLE and guard.state(conn) == "idle" and t.reading
    send(conn, GET * 3)  # written at once: reading is never paused (no epoll calls)
    assert len(answers(bytes(t.sent))) == 4 and t.pauses == 0


@pytest.mark.parametrize("split", [1, 7, READ_SIZE])
def test_pipelined_requests_from_a_slow_reader_are_answered_whole_and_in_order(
        split: int) -> None:
    conn, t, guard, clock, turns = connection(room=0)
    pipelined = b"".join(b"GET /n HTTP/1.1\r\nHost: x\r\nX-N: %d\r\n\r\n" % i for i in range(4))
    send(conn, pipelined + GET, size=split)
    for _ in range(4 * len(BODY) // MIN_STEP):  # the peer takes what is queued, no more
        assert len(t.buffered) <= MIN_STEP + 512
        t.drain(room=0)
        turns.run()
    got = answers(bytes(t.sent))
    assert got == [(b"HTTP/1.1 200 OK", str(i).encode()) for i in range(4)] + [
        (b"HTTP/1.1 200 OK", BODY)]
    assert conn.state is State.IDLE and guard.state(conn) == "idle" and t.reading
    clock.advance(14)
    assert not t.aborted


def test_a_client_that_never_reads_holds_one_step_and_reading_pauses() -> None:
    conn, t, guard, clock, _ = connection(room=0)
    send(conn, GET * 60, transport=t)
    assert not t.reading and conn.state is State.ANSWER
    assert len(t.buffered) <= MIN_STEP + 512
    # charged: the unsent copy and the unparsed requests of one read
    assert len(t.buffered) < guard.budget.held(conn) <= len(t.buffered) + READ_SIZE
    clock.advance(15.1)  # the request deadline covers an answer that is not read
    assert t.aborted and guard.timed_out == 1 and guard.budget.total == 0


def test_a_slow_reader_holds_nothing_once_its_answer_is_taken() -> None:
    conn, t, guard, _, turns = connection(room=0)
    send(conn, GET)
    assert guard.budget.held(conn) > 0  # the unsent step
    while conn.state is not State.IDLE:  # the answer finishes in a later turn, not the read's
        t.drain(room=0)
        turns.run()
    assert guard.budget.held(conn) == 0 and guard.budget.total == 0


def test_nothing_more_is_written_once_a_write_has_failed() -> None:
    conn, t, _, _, _ = connection()
    writes = 0

    def reset_by_peer(data: object) -> None:  # asyncio: the write fails, the transport closes,
        nonlocal writes                        # connection_lost comes in a later loop turn
        writes += 1
        t.closed = True

    t.write = reset_by_peer  # type: ignore[method-assign]
    send(conn, GET * 5)  # pipelined: four more answers behind the failed one
    assert writes == 1


def test_resume_writing_writes_in_the_next_loop_turn_not_inside_the_transport() -> None:
    conn, t, _, _, turns = connection(room=0)
    send(conn, GET)
    sent, buffered = len(t.sent), len(t.buffered)
    t.drain(room=0)  # the transport calls resume_writing from inside its write handler
    assert len(t.sent) == sent + buffered and not t.buffered  # nothing written in there
    assert len(turns.queue) == 1
    turns.run()
    assert len(t.buffered) == MIN_STEP  # the next step, in the loop's next turn


@pytest.mark.parametrize("request_bytes", [
    b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /" + b"A" * 40_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 65 + b"\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
])
def test_a_bad_request_gets_a_400_echoing_nothing_delivered_before_a_polite_close(
        request_bytes: bytes) -> None:
    conn, t, guard, _, _ = connection()
    send(conn, request_bytes)
    assert answers(bytes(t.sent)) == [(b"HTTP/1.1 400 Bad Request", b"400 Bad Request\n")]
    assert b"AAAA" not in t.sent and b"9.9" not in t.sent and b"X-A" not in t.sent
    # our side is shut after the 400, the peer's bytes are still read: no reset eats the 400
    assert t.eof_written and not t.closed and not t.aborted and t.reading
    assert conn.state is State.LINGER and guard.state(conn) == "closing"
    assert conn.eof_received() is None  # the peer closes: so do we, politely
    assert t.closed and not t.aborted and conn.state is State.CLOSED


def test_a_peer_that_does_not_close_after_the_last_answer_is_reset_after_the_linger() -> None:
    conn, t, _, clock, _ = connection()
    send(conn, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert answers(bytes(t.sent))[0][0] == b"HTTP/1.1 200 OK" and b"Connection: close" in t.sent
    assert conn.state is State.LINGER
    clock.advance(LINGER_SECONDS + 0.01)
    assert t.aborted


def test_a_peer_already_gone_after_the_last_answer_is_closed_without_an_error() -> None:
    """The socket's shutdown after a last answer fails with ENOTCONN when the peer has closed
    first (a client that read its answer and left): the connection just closes."""
    conn, t, _, _, _ = connection()
    t.gone = True
    send(conn, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answers(bytes(t.sent))[0][0] == b"HTTP/1.1 200 OK"
    assert t.closed and not t.eof_written and conn.state is State.CLOSED


def test_a_request_with_a_body_is_answered_at_once_and_its_body_dropped_up_to_a_bound() -> None:
    conn, t, _, _, _ = connection()
    send(conn, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n"
               b"Expect: 100-continue\r\n\r\n")
    # the final status at once (RFC 9110 section 10.1.1), before any byte of the body
    assert answers(bytes(t.sent))[0][0] == b"HTTP/1.1 405 Method Not Allowed"
    assert b"Connection: close" in t.sent and t.eof_written and conn.state is State.LINGER
    chunk = b"x" * 65536
    for _ in range(DISCARD_LIMIT // len(chunk)):
        send(conn, chunk, size=len(chunk))
    assert not t.aborted  # what a client had in flight is read and dropped...
    send(conn, chunk, size=len(chunk))
    assert t.aborted  # ...up to the bound; then a reset


def test_content_length_with_transfer_encoding_gets_one_400_and_the_smuggled_request_none(
        ) -> None:
    conn, t, _, _, _ = connection()
    smuggled = b"GET /n HTTP/1.1\r\nHost: x\r\nX-N: smuggled\r\n\r\n"
    send(conn, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled)
    assert answers(bytes(t.sent)) == [(b"HTTP/1.1 400 Bad Request", b"400 Bad Request\n")]
    assert conn.state is State.LINGER and b"smuggled" not in t.sent


def test_a_half_closed_client_gets_its_answers_and_then_the_close() -> None:
    conn, t, _, _, turns = connection(room=0)
    send(conn, GET * 2)
    assert conn.eof_received() is True  # the transport stays open for the answers
    for _ in range(3 * len(BODY) // MIN_STEP):
        t.drain(room=0)
        turns.run()
    assert [a[0] for a in answers(bytes(t.sent))] == [b"HTTP/1.1 200 OK"] * 2
    assert t.closed and not t.aborted


def test_a_bug_in_a_handler_is_a_500_with_its_traceback_and_the_connection_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    conn, t, _, _, _ = connection()
    send(conn, b"GET /bug HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
    assert [a[0] for a in answers(bytes(t.sent))] == [b"HTTP/1.1 500 Internal Server Error",
                                                      b"HTTP/1.1 200 OK"]
    (record,) = [r for r in caplog.records if "answering GET /bug failed" in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is KeyError


# --- TLS, and the memory budget


@pytest.fixture(scope="module")
def server_tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    leaf = Pki(Path(tmp_path_factory.mktemp("pki")), "unit").leaf("server", server=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(leaf.cert, leaf.key)
    return ctx


def client_hello() -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO, bytes]:
    """A real OpenSSL client's first flight."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = unverified_tls().wrap_bio(inc, out, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return obj, inc, out, out.read()


def test_tls_pipelined_requests_in_odd_record_splits_are_answered_whole_and_in_order(
        server_tls: ssl.SSLContext) -> None:
    conn, t, _, _, turns = connection(room=0, tls=server_tls)
    client, inc, out, hello = client_hello()
    send(conn, hello, size=3)  # the ClientHello in 3-byte reads
    assert conn.state is State.HANDSHAKE
    inc.write(bytes(t.sent) + bytes(t.buffered))
    t.sent.clear()
    t.buffered.clear()
    client.do_handshake()
    for i in range(4):  # one record per request
        client.write(b"GET /n HTTP/1.1\r\nHost: x\r\nX-N: %d\r\n\r\n" % i)
    client.write(GET)
    send(conn, out.read(), size=5)
    # mypy keeps conn.state narrowed to HANDSHAKE past send(), which moved it on
    assert conn.state is State.ANSWER  # type: ignore[comparison-overlap]
    for _ in range(2 * len(BODY) // MIN_STEP):  # a small receive window
        t.drain(room=0)
        turns.run()
    inc.write(bytes(t.sent))
    plain = b""
    while True:
        try:
            plain += client.read(65536)
        except ssl.SSLWantReadError:
            break
    assert answers(plain) == [(b"HTTP/1.1 200 OK", str(i).encode()) for i in range(4)] + [
        (b"HTTP/1.1 200 OK", BODY)]
    assert conn.state is State.IDLE


def test_a_clienthello_larger_than_the_cap_is_refused_from_its_length_field(
        server_tls: ssl.SSLContext) -> None:
    conn, t, guard, _, _ = connection(tls=server_tls)
    size = 128 * 1024  # spread over 8 records of 16 KiB; the first says how long it is
    send(conn, b"\x16\x03\x01\x40\x00" + b"\x01" + size.to_bytes(3, "big") + b"\x03\x03")
    assert t.aborted and conn.state is State.CLOSED and guard.budget.total == 0


def test_a_clienthello_arriving_is_held_by_podgpu_and_charged_to_the_budget(
        server_tls: ssl.SSLContext) -> None:
    conn, t, guard, _, _ = connection(tls=server_tls)
    size = MAX_HELLO - 100
    start = b"\x16\x03\x01\x40\x00" + b"\x01" + size.to_bytes(3, "big")
    send(conn, start + b"\x00" * 4000)
    assert conn.state is State.HELLO and not t.aborted
    assert guard.budget.held(conn) == len(start) + 4000


def test_over_the_budget_the_connections_holding_the_most_go_first_never_idle_scrapers(
        server_tls: ssl.SSLContext) -> None:
    conn, t, guard, _, _ = connection(tls=server_tls, budget=1)
    send(conn, b"\x16\x03\x01\x40\x00\x01\x00\x10")  # 8 bytes held: over a 1-byte budget
    assert t.aborted and guard.budget.evicted == 1


class Holder:
    def __init__(self, name: str) -> None:
        self.peer, self.aborted = name, False

    def abort(self) -> None:
        self.aborted = True


def test_the_budget_sheds_the_oldest_work_first_down_to_three_quarters() -> None:
    budget = MemoryBudget(1000)
    a, b, c, d = (Holder(n) for n in "abcd")
    budget.charge(a, 300)
    budget.charge(b, 100)
    budget.charge(c, 300)
    budget.charge(a, 200)  # still the same work: a keeps its place as the oldest
    budget.charge(d, 100)
    assert budget.total == 700 and not any(h.aborted for h in (a, b, c, d))
    budget.charge(b, 0)  # b's request completed: it holds nothing
    budget.charge(b, 500)  # new work, the youngest: 1,100 is over, a (oldest) and c go
    assert a.aborted and c.aborted and not b.aborted and not d.aborted
    assert budget.total == 600 and budget.evicted == 2
    budget.release(b)
    budget.release(d)
    assert budget.total == 0


def test_a_tls_scraper_mid_handshake_outlives_older_stalled_clienthellos(
        server_tls: ssl.SSLContext) -> None:
    """The scraper's handshake state is the largest single charge; it is still not closed."""
    hello = client_hello()[3]
    # over the budget once the scraper's handshake is charged; under its three quarters once
    # two of the three stalled ones are gone
    limit = (8009 + STATE_BYTES + len(hello)) * 4 // 3 + 1
    assert 3 * 8009 + STATE_BYTES + len(hello) > limit
    first, t0, guard, _, _ = connection(tls=server_tls, budget=limit)
    listener = first._listener
    stalled = [(first, t0)] + [connection(listener=listener)[:2] for _ in range(2)]
    for conn, _ in stalled:  # ClientHellos of 16,112 bytes, 8,009 of them sent
        send(conn, b"\x16\x03\x01\x3f\x00\x01\x00\x3e\xf0" + b"\x00" * 8000)
    assert guard.budget.total == 3 * 8009
    scraper, st, _, _, _ = connection(listener=listener)
    send(scraper, hello)  # its handshake begins: OpenSSL's state is charged
    assert scraper.state is State.HANDSHAKE and not st.aborted
    assert guard.budget.held(scraper) > max(guard.budget.held(c) for c, _ in stalled)
    assert [t.aborted for _, t in stalled] == [True, True, False]  # the oldest went


# --- heads h11 read whole before (http.wire.Seen)


def counting_parsers(listener: Listener) -> list[int]:
    """Counts the fresh h11 parsers `listener` makes from now on."""
    made = [0]
    parser = listener.parser

    def counted() -> h11.Connection:
        made[0] += 1
        return parser()

    listener.parser = counted  # type: ignore[method-assign]
    return made


def test_a_read_that_is_exactly_a_head_h11_read_before_is_answered_without_a_parser() -> None:
    conn, t, _, _, _ = connection()
    listener = conn._listener
    made = counting_parsers(listener)
    send(conn, GET)
    assert made == [1]
    send(conn, GET)
    other, t2, _, _, _ = connection(listener=listener)
    send(other, GET)
    assert made == [1]  # the same bytes, on this connection and another
    assert answers(bytes(t.sent)) == [(b"HTTP/1.1 200 OK", BODY)] * 2
    assert bytes(t2.sent) == bytes(t.sent)[:len(t2.sent)] and other.state is State.IDLE
    send(conn, GET, size=10)  # the same head split over reads: h11 reads it
    send(conn, GET.replace(b"Host: x", b"Host: y"))  # one byte differs: h11 reads it
    send(conn, GET * 3)  # three copies in one read: h11 frames them, a parser each
    assert made == [6]
    assert answers(bytes(t.sent)) == [(b"HTTP/1.1 200 OK", BODY)] * 7


def test_a_remembered_head_keeps_what_h11_read_in_it_the_close_and_the_headers() -> None:
    conn, t, _, _, _ = connection()
    made = counting_parsers(conn._listener)
    closing = b"GET /n HTTP/1.1\r\nHost: x\r\nX-N: 7\r\nConnection: close\r\n\r\n"
    send(conn, closing)
    again, t2, _, _, _ = connection(listener=conn._listener)
    send(again, closing)
    assert made == [1]
    for c, tr in ((conn, t), (again, t2)):
        assert answers(bytes(tr.sent)) == [(b"HTTP/1.1 200 OK", b"7")]
        assert b"\r\nConnection: close\r\n" in bytes(tr.sent)
        assert c.state is State.LINGER and tr.eof_written


def test_a_head_that_announces_a_body_is_never_remembered() -> None:
    conn, _, _, _, _ = connection()
    made = counting_parsers(conn._listener)
    post = b"POST /n HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
    for _ in range(2):
        c, t, _, _, _ = connection(listener=conn._listener)
        send(c, post)
        assert answers(bytes(t.sent))[0][0] == b"HTTP/1.1 405 Method Not Allowed"
        assert c.state is State.LINGER
    assert made == [2]


def test_the_heads_remembered_are_bounded_the_oldest_forgotten_first() -> None:
    seen = Seen()
    head = Head("GET", "/", {}, keep=True, body=False)
    for i in range(Seen.MAX_HEADS + 1):
        seen.add(b"%d" % i, head)
    assert seen.get(b"0") is None and seen.get(b"1") is head
    assert seen.get(b"%d" % Seen.MAX_HEADS) is head
    seen.add(b"x" * (Seen.MAX_BYTES + 1), head)
    assert seen.get(b"x" * (Seen.MAX_BYTES + 1)) is None
    seen.add(b"post", head._replace(body=True))
    assert seen.get(b"post") is None


def test_an_answer_carries_the_headers_of_now_though_its_head_was_made_before() -> None:
    conn, t, _, _, _ = connection()
    value = ["one"]
    conn._listener.app.response_headers.append(lambda: [("X-Config", value[0])])
    send(conn, GET)
    value[0] = "two"  # the web config reloaded
    send(conn, GET)
    sent = bytes(t.sent)
    assert sent.count(b"\r\nX-Config: one\r\n") == 1 and sent.count(b"\r\nX-Config: two\r\n") == 1


def test_the_answer_heads_made_once_are_bounded_and_each_is_its_answers() -> None:
    for n in range(3 * wire.MAX_RESPONSE_HEADS):
        resp = Response.text(200, "x" * n, ("X-N", str(n)))
        head = wire.response_head(resp, close=n % 2 == 0)
        assert f"\r\nContent-Length: {n}\r\nX-N".encode() not in head  # the header's order kept
        assert f"\r\nX-N: {n}\r\nContent-Length: {n}\r\n".encode() in head
        assert (b"\r\nConnection: close\r\n" in head) == (n % 2 == 0)
        assert len(wire._HEADS) <= wire.MAX_RESPONSE_HEADS
