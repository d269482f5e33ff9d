"""The EMF sender against a destination that stops answering:
every send ends at its deadline, /health's emf entry goes `failing` then `stalled` and back to
`ok`, closed windows cannot pile up, and at shutdown every event is sent, spooled or counted.

The trickling endpoint is a real HTTP server on loopback (tests/hostile_peers.py) behind the real
CloudWatch destination; the other cases use a fake destination that blocks on purpose (fault
injection)."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest

from podgpu.sinks.cloudwatch.declarations import load_emf_config
from podgpu.sinks.cloudwatch.destinations import (
    Batch,
    SendError,
    make_destination,
    parse_target,
)
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue, Handoff
from podgpu.sinks.cloudwatch.sender import STALL_INTERVALS, Sender
from podgpu.sinks.cloudwatch.sink import EmfSink
from podgpu.sinks.cloudwatch.window import ClosedWindow
from tests.conftest import FakeClock, wait_for
from tests.hostile_peers import HostilePeers
from tests.unit.sinks.cloudwatch.simnode import SimNode

pytestmark = pytest.mark.slow  # each test waits through real send deadlines

SEED = Path(__file__).resolve().parents[3] / "fixtures" / "seed" / "cwagent-config.json"


def emf(n: int, tag: str = "e") -> list[str]:
    return [f'{{"_aws":{{"Timestamp":0}},"v":"{tag}{i:06d}"}}' for i in range(n)]


class Blocking:
    """Blocks in send() until released (the fault), then accepts."""

    name = "blocking"
    max_batch_events = 10_000
    max_batch_bytes = 1_048_576

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.blocked = False
        """True while a send is held by the fault."""
        self.sent: list[str] = []

    def send(self, batch: Batch) -> int:
        self.entered.set()
        self.blocked = not self.release.is_set()
        self.release.wait(60)
        self.blocked = False
        self.sent.extend(m for _, m in batch)
        return 0

    def deadline(self, done: threading.Event, _seconds: float) -> bool:
        """The sender's `wait`: the send deadline passes as soon as a send is held by the fault
        (no real waiting); a send that is not held is waited for."""
        wait_for(lambda: done.is_set() or self.blocked, what="the send done or held")
        return done.is_set()

    def close(self) -> None:
        pass


class Abortable(Blocking):
    """Blocks its first send; `abort()` lets the next one use a fresh connection that works."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted = 0
        self.calls = 0

    def send(self, batch: Batch) -> int:
        self.calls += 1
        if self.calls == 1:
            return super().send(batch)  # the stuck one: its result comes too late to count
        self.sent.extend(m for _, m in batch)
        return 0

    def abort(self) -> None:
        self.aborted += 1


def test_a_trickling_cloudwatch_endpoint_cannot_hold_a_send(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
                 "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    peers = HostilePeers()
    try:
        dest = make_destination(parse_target("cloudwatch"), log_group="g", log_stream="s",
                                region="us-east-1", endpoint_url=peers.url("/trickle"),
                                create_log_group=False)
        q = EventQueue(1 << 20)
        q.put(int(time.time() * 1000), emf(3))
        waited: list[float] = []

        def deadline_passes_mid_answer(done: threading.Event, seconds: float) -> bool:
            """The deadline, passed by hand once the endpoint has trickled three bytes."""
            waited.append(seconds)
            wait_for(lambda: peers.trickled >= 3 or done.is_set(), what="three trickled bytes")
            return done.is_set()

        sender = Sender(dest, q, send_timeout=1.5, interval=1.0, wait=deadline_passes_mid_answer)
        wait = sender.pump()
    finally:
        peers.close()
    assert waited == [1.5]  # one send, held by the trickle until its deadline passed
    assert wait is not None and wait > 0  # backing off, events kept
    st = sender.stats()
    assert st.failing == "cloudwatch: no complete answer within 1.5 s", st.failing
    assert (st.sent, st.retried, st.queue_events) == (0, 3, 3)
    assert sender.health()["status"].startswith("failing: ")


def sends_returned() -> None:
    """Wait until the sender's helper threads have ended (the released send returned)."""
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == "podgpu-emf-send"],
             what="the stuck send's thread to end")


def test_failing_then_stalled_then_ok(clock: FakeClock) -> None:
    dest = Blocking()
    q = EventQueue(1 << 20)
    sender = Sender(dest, q, clock=clock, send_timeout=0.3, interval=10.0,
                    wait=dest.deadline)
    q.put(int(clock.now * 1000), emf(5))
    assert sender.health()["status"] == "ok"
    sender.pump()
    h = sender.health()
    assert h["status"] == "failing: blocking: no complete answer within 0.3 s"
    assert h["queued_events"] == 5
    clock.advance(STALL_INTERVALS * 10.0 + 0.3 + 1)
    assert sender.health()["status"] == ("stalled: the oldest unsent event is 41 s old, more "
                                         "than 40.3 s (blocking: no complete answer within 0.3 s)")
    # the stuck send has not returned: no second send starts on the same destination
    clock.advance(120)
    sender.pump()
    assert sender.stats().failing.endswith("has not returned yet")
    dest.release.set()
    sends_returned()
    clock.advance(120)
    assert sender.pump() is None
    h = sender.health()
    assert h["status"] == "ok" and h["queued_events"] == 0 and "oldest_unsent_age_seconds" not in h
    assert dest.sent[-5:] == emf(5)


def test_an_abortable_destination_is_used_again_at_once(clock: FakeClock) -> None:
    dest = Abortable()
    q = EventQueue(1 << 20)
    sender = Sender(dest, q, clock=clock, send_timeout=0.3, interval=10.0,
                    wait=dest.deadline)
    q.put(int(clock.now * 1000), emf(4))
    sender.pump()
    assert dest.aborted == 1 and sender.stats().failing.endswith("within 0.3 s")
    clock.advance(5)
    assert sender.pump() is None  # a second send started while the first is still stuck
    assert dest.sent == emf(4) and sender.stats().sent == 4 and sender.health()["status"] == "ok"
    dest.release.set()  # the abandoned send returns late: ignored, nothing acked twice
    sends_returned()
    assert sender.stats().sent == 4 and len(q) == 0


def test_the_hand_off_is_bounded_and_counts_what_it_drops() -> None:
    q = EventQueue(1 << 20)
    h = Handoff(q, max_windows=3)
    for i in range(5):
        h.append(ClosedWindow(float(i), {(("gpu", str(g)),): {"m": [1.0]} for g in range(2)}))
    assert len(h) == 3 and h.popleft().start == 2.0
    assert q.dropped == 4 and q.accepted == 4  # two windows of two label sets


@pytest.mark.parametrize("spool", [False, True])
def test_shutdown_with_a_stuck_destination_spools_or_counts_everything(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, spool: bool) -> None:
    before = set(threading.enumerate())
    dest = Blocking()
    q = EventQueue(1 << 20, str(tmp_path) if spool else None)
    sender = Sender(dest, q, send_timeout=1.0, interval=1.0, wait=dest.deadline)
    node = SimNode(2)
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(SEED))), q, dest, interval=1.0,
                   sender=sender)
    sink.start()
    snaps = list(node.snapshots(40))
    for snap in snaps:
        sink.offer(snap)
    assert dest.entered.wait(10)
    caplog.set_level(logging.INFO)
    sink.stop(grace=0.5)
    dest.release.set()
    st = sender.stats()
    line = next(r.getMessage() for r in caplog.records if "EMF at shutdown" in r.getMessage())
    m = re.search(r"(\d+) event\(s\) queued in all = (\d+) sent \+ (\d+) rejected \+ (\d+) "
                  r"dropped \+ (\d+) (kept in the spool|dropped at shutdown)", line)
    assert m, line
    total, sent, rejected, dropped, left = map(int, m.groups()[:5])
    assert total == sent + rejected + dropped + left == st.accepted
    assert left > 0 and total > 20  # the windows offered while the send was stuck are in it
    if spool:
        on_disk = sum(len(p.read_text().splitlines()) for p in tmp_path.glob("*.jsonl"))
        assert on_disk == left
    else:
        assert st.dropped == dropped + left and len(q) == 0
    # the released send's thread and the sink's end; nothing was sent after the shutdown line
    wait_for(lambda: not [t for t in threading.enumerate()
                          if t.name.startswith("podgpu-emf") and t not in before],
             what="this sink's threads ended")
    assert sender.stats().sent == sent
    if spool:
        assert sum(len(p.read_text().splitlines()) for p in tmp_path.glob("*.jsonl")) == left


def test_a_send_error_from_the_helper_thread_is_the_senders(clock: FakeClock) -> None:
    class Refusing(Blocking):
        def send(self, batch: Batch) -> int:
            raise SendError("nope", retryable=False)

    q = EventQueue(1 << 20)
    q.put(int(clock.now * 1000), emf(2))
    sender = Sender(Refusing(), q, clock=clock, send_timeout=5)
    assert sender.pump() is None
    assert sender.stats().rejected == 2
