"""Health and shutdown that tell the truth: /health's `emf` entry names the events the last
interval dropped as over 256 KiB (not `ok`), and SIGTERM's stop makes one final attempt even in
the middle of a backoff longer than its grace (the endpoint is back: the events are sent)."""

from __future__ import annotations

import json
import random
import time

from podgpu.sinks.cloudwatch.declarations import parse_emf_config
from podgpu.sinks.cloudwatch.destinations import SendError
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.cloudwatch.sender import Sender
from podgpu.sinks.cloudwatch.series import GAUGE
from podgpu.sinks.cloudwatch.sink import EmfSink
from podgpu.sinks.prometheus.source import render
from tests.conftest import wait_for
from tests.unit.sinks.cloudwatch.test_queue_sender import FakeDestination

CONFIG = parse_emf_config(json.dumps({"emf_processor": {"metric_declaration": [
    {"source_labels": ["job"], "label_matcher": ".*", "dimensions": [["job"]],
     "metric_selectors": [".*"]}]}}))
SMALL = (("job", "j"),)
HUGE = (("big", "x" * (300 * 1024)), ("job", "j"))  # one metric cannot fit 256 KiB


def test_health_names_events_dropped_as_too_large_while_it_happens() -> None:
    dest = FakeDestination()
    sink = EmfSink(None, Encoder(CONFIG), EventQueue(1 << 24), dest, interval=1.0)
    sink.start()
    try:
        assert sink.health()["status"] == "ok"
        sink.offer_series(1000.0, [(HUGE, GAUGE, [("m", 1.0)]), (SMALL, GAUGE, [("m", 2.0)])])
        sink.offer_series(1001.0, [(SMALL, GAUGE, [("m", 3.0)])])  # closes the first second
        h = wait_for(lambda: (b := sink.health())["status"] != "ok" and b, what="a warning")
        assert h["status"].startswith("dropping: 1 event(s) of the last interval over 256 KiB")
        assert h["too_large_events"] == 1
        sink.offer_series(1002.0, [(SMALL, GAUGE, [("m", 4.0)])])  # an interval without any
        h = wait_for(lambda: (b := sink.health())["status"] == "ok" and b, what="ok again")
        assert h["too_large_events"] == 1  # the count since start stays
    finally:
        sink.stop(grace=1.0)
    assert 'podgpu_emf_events_total{result="too_large"} 1' in render(sink.families())


def test_stop_makes_a_final_attempt_during_a_backoff_longer_than_the_grace() -> None:
    dest = FakeDestination()
    dest.fail = [SendError("ServiceUnavailableException", retryable=True)]
    queue = EventQueue(1 << 24)
    # the first failure backs off 50..100 s, far longer than the 1 s grace given to stop()
    sender = Sender(dest, queue, backoff_base=100.0, backoff_cap=100.0, rng=random.Random(3),
                    interval=1.0)
    sink = EmfSink(None, Encoder(CONFIG), queue, dest, interval=1.0, sender=sender)
    sink.start()
    start = float(int(time.time())) - 20.0  # recent: CloudWatch refuses events over 14 days
    for t in range(10):
        sink.offer_series(start + t, [(SMALL, GAUGE, [("m", float(t))])])
    wait_for(lambda: sender.stats().retried > 0, what="the failed attempt")
    assert dest.batches == []  # backing off: the endpoint is back, but no attempt is due
    sink.stop(grace=1.0)
    sent = [m for b in dest.batches for _, m in b]
    assert len(sent) == 10 and sender.stats().sent == 10  # 9 closed seconds and the open one
    assert len(queue) == 0
