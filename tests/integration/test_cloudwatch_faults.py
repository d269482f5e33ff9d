"""Lossless delivery through CloudWatch faults, accelerated: the sink runs in this process on a
simulated node whose clock advances one second per cycle, its CloudWatch destination (boto3 over
real HTTP) goes through a fault proxy to moto server. The proxy is a fake that injects what AWS
will not produce on demand: ThrottlingException, 500s, slow answers, closed connections."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from podgpu.sinks.cloudwatch.declarations import load_emf_config
from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.cloudwatch.sender import Sender
from podgpu.sinks.cloudwatch.sink import EmfSink
from podgpu.sinks.cloudwatch.window import WindowAccumulator
from podgpu.sinks.prometheus.source import render
from tests.conftest import wait_for
from tests.emf_validator import extract, validate
from tests.integration.aws_fakes import (
    PUT,
    FaultProxy,
    aws_env,
    logs_client,
    moto_url,
    proxy,
    read_events,
)
from tests.integration.test_cloudwatch_moto import EXAMPLE
from tests.unit.sinks.cloudwatch.simnode import SimNode

__all__ = ["aws_env", "moto_url", "proxy"]  # fixtures
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("aws_env")]
GROUP = "/aws/containerinsights/faults/prometheus"


RAW: dict[int, list[float]] = {}
"""GPU 0's DCGM_FI_DEV_GPU_UTIL per minute (ms) as the snapshots had it, from the last run."""


def run_sink(proxy: FaultProxy, stream: str, minutes: int, queue_bytes: int,
             fault: str, fault_minutes: int, timeout: float = 30.0, group: str = GROUP,
             faulted: int = 1, send_timeout: float = 30.0
             ) -> tuple[EmfSink, dict[tuple[Any, int], str]]:
    """Drive `minutes` of 1 s cycles through the sink with `fault` on for the first
    `fault_minutes` (and until the proxy has answered `faulted` PutLogEvents with it, so a slow
    machine cannot skip the fault); returns the sink and what an ideal run would have sent, by
    (labels, minute)."""
    config = load_emf_config(str(EXAMPLE))
    node = SimNode(4, start=time.time() - time.time() % 60 - 60 * (minutes + 1))
    dest = CloudWatchDestination(log_group=group, log_stream=stream, region="us-east-1",
                                 endpoint_url=proxy.url, timeout=timeout)
    queue = EventQueue(queue_bytes)
    encoder = Encoder(config)
    sink = EmfSink(node.builder(), encoder, queue, dest, interval=60.0,
                   sender=Sender(dest, queue, backoff_base=0.01, backoff_cap=0.05,
                                 send_timeout=send_timeout))
    truth_encoder = Encoder(config)
    truth = WindowAccumulator(60.0, truth_encoder.wanted)
    truth_builder = node.builder()
    expected: dict[tuple[Any, int], str] = {}

    def keep(closed: Any) -> None:
        if closed is not None:
            for line in truth_encoder.encode(closed):
                doc = json.loads(line)
                expected[(_labels(doc), closed.timestamp_ms)] = line

    proxy.mode = fault
    RAW.clear()
    sink.start()
    for i, snap in enumerate(node.snapshots(60 * minutes)):
        if i == 60 * fault_minutes:
            wait_for(lambda: proxy.count(PUT, mode=fault) >= faulted, timeout=20,
                     what=f"a send to meet the {fault} fault")
            proxy.mode = "pass"
        sink.offer(snap)
        minute = int(snap.taken_at - snap.taken_at % 60) * 1000
        RAW.setdefault(minute, []).append(float(snap.samples[0].values["DCGM_FI_DEV_GPU_UTIL"]))
        keep(truth.add(snap.taken_at, truth_builder.series(snap)))
        if i % 60 == 59:
            time.sleep(0.05)  # let the sink's thread try (and fail) a few times a "minute"
    proxy.mode = "pass"
    keep(truth.close())
    wait_for(lambda: not len(queue), timeout=30, what="the queue drained", interval=0.05)
    sink.stop(grace=5.0)
    return sink, expected


def _labels(doc: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in doc.items() if isinstance(v, str)))


def arrived(moto_url: str, stream: str, group: str = GROUP) -> dict[tuple[Any, int], list[str]]:
    out: dict[tuple[Any, int], list[str]] = {}
    for e in read_events(moto_url, group, stream):
        doc = validate(e["message"])  # every document that reached CloudWatch is spec-valid
        out.setdefault((_labels(doc), doc["_aws"]["Timestamp"]), []).append(e["message"])
    return out


def test_ten_minutes_of_throttling_lose_nothing_and_duplicate_nothing(
        proxy: FaultProxy, moto_url: str) -> None:
    # the fault stays on until at least 11 sends were throttled: the sender keeps retrying through
    # a sustained throttle (how many tries fit in the ten simulated minutes depends on the load)
    sink, expected = run_sink(proxy, "throttled", minutes=12, queue_bytes=8 << 20,
                              fault="throttle", fault_minutes=10, faulted=11)
    got = arrived(moto_url, "throttled")
    assert set(got) == set(expected)  # every label set, every minute
    assert all(len(v) == 1 for v in got.values())  # exactly once
    for key, lines in got.items():
        assert json.loads(lines[0]) == json.loads(expected[key])  # the values offered
    st = sink.stats()
    assert st.retried > 0 and st.dropped == 0 and st.rejected == 0
    assert st.sent == len(expected)
    assert proxy.count(PUT, mode="throttle") >= 11
    exposed = dict(line.rsplit(" ", 1) for line in render(sink.families()).splitlines()
                   if line.startswith("podgpu_emf_events_total{"))
    assert int(exposed['podgpu_emf_events_total{result="retried"}']) == st.retried > 0
    # extracted as CloudWatch would, against the snapshots themselves: the exclusive pod's
    # GPU_UTIL in each minute is exactly GPU 0's samples of that minute
    per_minute: dict[int, tuple[float, ...]] = {}
    for lines in got.values():
        for m in extract(lines[0]):
            if m.name == "DCGM_FI_DEV_GPU_UTIL":
                # the agent path's identity: podgpu's namespace, the agent's job,
                # the workload's pod, no unit
                assert m.namespace == "ContainerInsights/Prometheus" and m.unit == "None"
                assert dict(m.dimensions) == {"ClusterName": "prod", "Namespace": "gpu-operator",
                                              "Service": "nvidia-dcgm-exporter",
                                              "job": "kubernetes-service-endpoints",
                                              "pod": "train-0"}
                per_minute[m.timestamp_ms] = m.values
    assert per_minute.keys() == RAW.keys()
    for minute, values in per_minute.items():
        assert sorted(values) == sorted(RAW[minute])


def test_a_bound_too_small_drops_oldest_and_counts_exactly_what_is_missing(
        proxy: FaultProxy, moto_url: str) -> None:
    sink, expected = run_sink(proxy, "bounded", minutes=6, queue_bytes=12 * 1024,
                              fault="throttle", fault_minutes=5)
    got = arrived(moto_url, "bounded")
    missing = set(expected) - set(got)
    st = sink.stats()
    assert missing and st.dropped == len(missing)
    assert set(got) <= set(expected) and all(len(v) == 1 for v in got.values())
    newest = max(ts for _, ts in expected)
    assert all(ts < newest for _, ts in missing)  # the oldest went first


@pytest.mark.parametrize("fault", ["500", "slow", "close"])
def test_errors_and_slow_or_broken_connections_delay_but_lose_nothing(
        proxy: FaultProxy, moto_url: str, fault: str) -> None:
    sink, expected = run_sink(proxy, f"fault-{fault}", minutes=3, queue_bytes=8 << 20,
                              fault=fault, fault_minutes=2)
    got = arrived(moto_url, f"fault-{fault}")
    assert set(got) == set(expected) and all(len(v) == 1 for v in got.values())
    assert all(json.loads(v[0]) == json.loads(expected[k]) for k, v in got.items())
    st = sink.stats()
    assert st.dropped == 0 and st.rejected == 0 and st.sent == len(expected)
    assert proxy.count(PUT, mode=fault) > 0  # the fault was met, not skipped
    if fault != "slow":
        assert st.retried > 0


def test_an_endpoint_that_trickles_its_answer_holds_one_connection_not_the_sink(
        proxy: FaultProxy, moto_url: str) -> None:
    """The first PutLogEvents gets a status line and then a header byte a second, for ever: the
    read timeout never fires. The sender gives up at its deadline and aborts, so the destination
    sends the batch again on a fresh connection while the first is still trickling (without
    abort() every later send waited for that one)."""
    sink, expected = run_sink(proxy, "trickled", minutes=3, queue_bytes=8 << 20,
                              fault="trickle", fault_minutes=2, send_timeout=1.0)
    assert proxy.count(PUT, mode="trickle") == 1
    assert proxy.trickling == 1  # still holding its connection: nothing waited for it
    got = arrived(moto_url, "trickled")
    assert set(got) == set(expected) and all(len(v) == 1 for v in got.values())
    st = sink.stats()
    assert st.dropped == 0 and st.sent == len(expected) and st.retried > 0


def test_access_denied_is_reported_kept_and_recovers(proxy: FaultProxy, moto_url: str) -> None:
    config = load_emf_config(str(EXAMPLE))
    node = SimNode(2, start=time.time() - time.time() % 60 - 180)
    dest = CloudWatchDestination(log_group=GROUP, log_stream="denied", region="us-east-1",
                                 endpoint_url=proxy.url)
    queue = EventQueue(8 << 20)
    sink = EmfSink(node.builder(), Encoder(config), queue, dest, interval=60.0,
                   sender=Sender(dest, queue, backoff_base=0.01, backoff_cap=0.05))
    proxy.mode = "denied"
    sink.start()
    snaps = list(node.snapshots(121))
    for snap in snaps[:61]:
        sink.offer(snap)
    # "failing: <why>", or "stalled: ... (<why>)" when the replayed minutes are already older than
    # the stall bound (they start 3-4 minutes back, so which one depends on the clock's second;
    # before the first answer comes back a stalled queue says only "sends too slow")
    wait_for(lambda: "AccessDenied" in sink.health()["status"], timeout=60,
             what="the sink's health to name AccessDenied", interval=0.05)
    health = sink.health()
    assert "credentials or permissions" in health["status"] and "AccessDenied" in health["status"]
    assert health["queued_events"] > 0  # kept, not dropped
    proxy.mode = "pass"
    for snap in snaps[61:]:
        sink.offer(snap)
    sink.stop(grace=5.0)
    assert sink.health()["status"] == "ok"
    minutes = {json.loads(m)["_aws"]["Timestamp"] for m in
               [e for v in arrived(moto_url, "denied").values() for e in v]}
    assert len(minutes) == 3 and sink.stats().dropped == 0


def test_an_answer_lost_after_cloudwatch_took_the_batch_duplicates_but_loses_nothing(
        proxy: FaultProxy, moto_url: str) -> None:
    """The limit of "exactly once": the proxy forwards each request after 1 s, when podgpu has
    already timed out (0.4 s) and will send the batch again. PutLogEvents has no idempotency
    token, so moto keeps both copies; EMF promises at-least-once delivery. Every
    duplicate must come from an attempt podgpu counted as retried, and nothing may be lost."""
    proxy.slow_seconds = 1.0
    logs = logs_client(moto_url)  # the stream exists, so every late copy is stored
    logs.create_log_group(logGroupName=GROUP + "/late")
    logs.create_log_stream(logGroupName=GROUP + "/late", logStreamName="late")
    sink, expected = run_sink(proxy, "late", minutes=3, queue_bytes=8 << 20, fault="slow",
                              fault_minutes=2, timeout=0.4, group=GROUP + "/late")
    # the late copies reach moto once the proxy has finished forwarding every request it took
    wait_for(lambda: proxy.handling == 0, timeout=30, what="the proxy's late forwards")
    got = arrived(moto_url, "late", GROUP + "/late")
    assert set(got) == set(expected)  # none lost
    for key, lines in got.items():
        assert all(json.loads(line) == json.loads(expected[key]) for line in lines)
    st = sink.stats()
    duplicates = sum(len(v) - 1 for v in got.values())
    assert st.retried > 0 and st.dropped == 0
    assert 0 < duplicates <= st.retried
