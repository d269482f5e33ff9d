"""The bounded, spooled queue and the sender's batching and retry rules (a fake destination
injects the failures; the real CloudWatch path is tested against moto in tests/integration)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.destinations import (
    Batch,
    SendError,
    StdoutDestination,
    _rejected,
    parse_target,
)
from podgpu.sinks.cloudwatch.queue import EVENT_OVERHEAD, EventQueue
from podgpu.sinks.cloudwatch.sender import MAX_AGE_MS, Sender
from podgpu.sinks.cloudwatch.spool import HELD_OVERHEAD, segment_name
from tests.conftest import FakeClock


class FakeDestination:
    name = "fake"
    max_batch_events = 10_000
    max_batch_bytes = 1_048_576

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, str]]] = []
        self.fail: list[SendError] = []
        self.reject = 0

    def send(self, batch: Batch) -> int:
        if self.fail:
            raise self.fail.pop(0)
        self.batches.append(list(batch))
        return self.reject

    def close(self) -> None:
        pass


def events(n: int, size: int = 10, tag: str = "e") -> list[str]:
    return [f"{tag}{i:0{size - len(tag)}d}" for i in range(n)]


def emf(n: int, tag: str = "e") -> list[str]:
    """Valid EMF events (what the spool accepts back), all of one length."""
    return [f'{{"_aws":{{"Timestamp":0}},"v":"{tag}{i:06d}"}}' for i in range(n)]


def test_queue_bound_drops_oldest_and_counts() -> None:
    q = EventQueue(max_bytes=10 * (10 + EVENT_OVERHEAD))
    assert q.put(1000, events(6, tag="a")) == 0
    assert q.put(2000, events(6, tag="b")) == 2
    assert q.dropped == 2 and len(q) == 10
    batch = q.peek(100, 1 << 20, 1 << 40)
    assert [m for _, m, _ in batch][:4] == ["a000000002", "a000000003", "a000000004", "a000000005"]
    assert q.bytes == 10 * (10 + EVENT_OVERHEAD)


def test_peek_respects_events_bytes_and_span() -> None:
    q = EventQueue(max_bytes=1 << 30)
    q.put(0, events(5))
    q.put(10, events(5))
    q.put(10 + 25 * 3600 * 1000, events(5))
    assert len(q.peek(3, 1 << 20, 1 << 40)) == 3
    assert len(q.peek(100, 4 * (10 + EVENT_OVERHEAD), 1 << 40)) == 4
    assert len(q.peek(100, 1 << 20, 24 * 3600 * 1000)) == 10  # the third segment is > 24 h later


def test_spool_survives_a_restart_and_acked_segments_are_deleted(tmp_path: Path) -> None:
    q = EventQueue(1 << 20, str(tmp_path))
    q.put(60_000, emf(3, tag="x"))
    q.put(120_000, emf(2, tag="y"))
    assert len(list(tmp_path.glob("*.jsonl"))) == 2
    q.ack(3)
    assert len(list(tmp_path.glob("*.jsonl"))) == 1
    again = EventQueue(1 << 20, str(tmp_path))
    assert [(ts, m) for ts, m, _ in again.peek(10, 1 << 20, 1 << 40)] == \
        [(120_000, e) for e in emf(2, tag="y")]


def test_spool_bound_applies_on_load(tmp_path: Path) -> None:
    EventQueue(1 << 20, str(tmp_path)).put(1, emf(10))
    small = EventQueue(3 * (len(emf(1)[0]) + EVENT_OVERHEAD + HELD_OVERHEAD), str(tmp_path))
    assert len(small) == 3 and small.dropped == 7 and small.accepted == 10
    assert [m for _, m, _ in small.peek(10, 1 << 20, 1 << 40)] == emf(10)[7:]  # the newest


def test_unreadable_spool_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "garbage-1.jsonl").write_text("x\n")
    (tmp_path / segment_name(1, 1, 1)).write_bytes(b"\xff\xfe\n")
    assert len(EventQueue(1 << 20, str(tmp_path))) == 0


def test_sender_sends_in_order_and_acks() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    s = Sender(dest, q, clock=clock)
    q.put(int(clock.now * 1000), events(3))
    assert s.pump() is None
    assert [m for _, m in dest.batches[0]] == events(3)
    st = s.stats()
    assert (st.sent, st.retried, st.rejected, st.queue_bytes) == (3, 0, 0, 0)
    assert st.last_success == clock.now


def test_batches_within_putlogevents_limits() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    s = Sender(dest, q, clock=clock)
    big = ["x" * 100_000] * 25  # 25 events of ~100 KB: 1 MiB counting 26 bytes each splits
    q.put(int(clock.now * 1000), big)
    q.put(int(clock.now * 1000) + 1, events(12_000))
    s.pump()
    assert sum(len(b) for b in dest.batches) == 12_025
    for b in dest.batches:
        assert len(b) <= 10_000
        assert sum(len(m.encode()) + 26 for _, m in b) <= 1_048_576
        assert [ts for ts, _ in b] == sorted(ts for ts, _ in b)


def test_retryable_errors_back_off_with_jitter_and_lose_nothing() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    dest.fail = [SendError("ThrottlingException", retryable=True) for _ in range(6)]
    s = Sender(dest, q, clock=clock, backoff_base=1.0, backoff_cap=8.0, rng=random.Random(1))
    q.put(int(clock.now * 1000), events(4))
    waits = []
    for _ in range(6):
        wait = s.pump()
        assert wait is not None and wait > 0
        waits.append(wait)
        assert s.pump() == pytest.approx(wait)  # not due yet: nothing is sent early
        clock.advance(wait)
    assert s.pump() is None
    assert [m for _, m in dest.batches[0]] == events(4)
    for i, w in enumerate(waits):  # equal jitter: between half and all of the capped delay
        cap = min(8.0, 2.0 ** i)
        assert cap / 2 <= w <= cap
    st = s.stats()
    assert (st.sent, st.retried, st.failing) == (4, 24, "")


def test_failing_status_is_reported_until_success() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    dest.fail = [SendError("cloudwatch: credentials or permissions: AccessDenied", retryable=True,
                           auth=True)]
    s = Sender(dest, q, clock=clock)
    q.put(int(clock.now * 1000), events(1))
    s.pump()
    assert "AccessDenied" in s.stats().failing
    clock.advance(120)
    s.pump()
    assert s.stats().failing == "" and s.stats().sent == 1


def test_permanent_error_rejects_the_batch_and_moves_on() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    dest.fail = [SendError("InvalidParameterException", retryable=False)]
    s = Sender(dest, q, clock=clock)
    q.put(int(clock.now * 1000), events(2))
    q.put(int(clock.now * 1000) + 1, events(1, tag="z"))
    s.pump()
    st = s.stats()
    # the first pump sends both segments in one batch; the batch is refused, counted, dropped
    assert st.rejected == 3 and st.sent == 0 and len(q) == 0


def test_rejected_log_events_info_counted_not_resent() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    dest.reject = 2
    s = Sender(dest, q, clock=clock)
    q.put(int(clock.now * 1000), events(5))
    s.pump()
    assert (s.stats().sent, s.stats().rejected, len(q)) == (3, 2, 0)
    assert _rejected({"tooNewLogEventStartIndex": 3, "tooOldLogEventEndIndex": 0}, 5) == 3
    assert _rejected({"expiredLogEventEndIndex": 1, "tooOldLogEventEndIndex": 1}, 5) == 2
    assert _rejected(None, 5) == 0


def test_events_older_than_14_days_are_given_up() -> None:
    clock = FakeClock(1_800_000_000.0)
    q = EventQueue(1 << 30)
    dest = FakeDestination()
    s = Sender(dest, q, clock=clock)
    q.put(int(clock.now * 1000) - MAX_AGE_MS - 1, events(2, tag="o"))
    q.put(int(clock.now * 1000), events(1))
    s.pump()
    assert s.stats().rejected == 2 and [m for b in dest.batches for _, m in b] == events(1)


def test_stdout_destination_writes_one_line_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    assert StdoutDestination().send([(1, '{"a":1}'), (1, '{"b":2}')]) == 0
    assert capsys.readouterr().out == '{"a":1}\n{"b":2}\n'


@pytest.mark.parametrize("text", ["tcp://", "http://x:1", "udp://h:0", "tcp://h:99999", "cw"])
def test_bad_destinations(text: str) -> None:
    with pytest.raises(ConfigError, match="--emf-destination"):
        parse_target(text)


def test_good_destinations() -> None:
    assert str(parse_target("udp://127.0.0.1:25888")) == "udp://127.0.0.1:25888"
    t = parse_target("tcp://[::1]:25888")
    assert (t.kind, t.host, t.port) == ("tcp", "::1", 25888)
    assert parse_target("cloudwatch").kind == "cloudwatch"
