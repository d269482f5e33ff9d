"""The sink as a whole, in process: collect-thread offers, its own thread sends; the agent's TCP and
UDP listeners are real sockets on loopback."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from podgpu.config import parse_serve_args
from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.declarations import load_emf_config
from podgpu.sinks.cloudwatch.destinations import SocketDestination, parse_target
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.cloudwatch.sink import EmfSink
from podgpu.sinks.prometheus.source import render
from tests.conftest import wait_for
from tests.unit.sinks.cloudwatch.simnode import SimNode
from tests.unit.sinks.cloudwatch.test_queue_sender import FakeDestination

SEED = Path(__file__).resolve().parents[3] / "fixtures" / "seed" / "cwagent-config.json"


def test_sink_sends_each_closed_window_and_reports_metrics() -> None:
    node = SimNode(4)
    node.clock.now -= node.clock.now % 60
    dest = FakeDestination()
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(SEED))), EventQueue(1 << 20), dest,
                   interval=60.0)
    sink.start()
    for snap in node.snapshots(121):
        sink.offer(snap)
    wait_for(lambda: len(dest.batches) == 2)
    sink.stop()
    docs = [json.loads(m) for b in dest.batches for _, m in b]
    # two label sets (the exclusive GPU's series, and its XID with err_code/err_msg labels)
    assert len(docs) == 6
    docs = [d for d in docs if "DCGM_FI_DEV_GPU_UTIL" in d]
    # two closed minutes, then the open one at stop: one event per label set per minute
    assert [d["_aws"]["Timestamp"] for d in docs] == [
        int((node.clock.now - 121) * 1000), int((node.clock.now - 61) * 1000),
        int((node.clock.now - 1) * 1000)]
    text = render(sink.families())
    assert 'podgpu_emf_events_total{result="sent"} 6\n' in text
    assert "podgpu_emf_last_success_timestamp_seconds " in text
    assert sink.health()["status"] == "ok"


def test_offer_never_waits_on_a_stuck_destination() -> None:
    gate, entered = threading.Event(), threading.Event()
    sent: list[str] = []

    class Stuck(FakeDestination):
        def send(self, batch):  # type: ignore[no-untyped-def]
            entered.set()
            gate.wait(30)
            sent.extend(m for _, m in batch)
            return 0

    node = SimNode(2)
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(SEED))), EventQueue(1 << 20),
                   Stuck(), interval=1.0)
    sink.start()
    snaps = list(node.snapshots(30))
    for snap in snaps[:3]:
        sink.offer(snap)
    wait_for(entered.is_set)  # the sink's thread is now blocked inside the destination
    for snap in snaps[3:]:
        sink.offer(snap)  # were offer() to wait on the destination, this would never return
    released_by_test = not gate.is_set()
    gate.set()
    sink.stop(grace=5.0)
    assert released_by_test
    # every one-second window (2 label sets each), the ones offered while stuck included
    assert len(sent) == 60


@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_socket_destination_reaches_a_listener(kind: str) -> None:
    stype = socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM
    srv = socket.socket(socket.AF_INET, stype)
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    got: list[bytes] = []
    if kind == "tcp":
        srv.listen(1)

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                while data := conn.recv(65536):
                    got.append(data)
    else:
        def serve() -> None:
            for _ in range(2):
                got.append(srv.recv(65536))
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    dest = SocketDestination(parse_target(f"{kind}://127.0.0.1:{port}"))
    assert dest.send([(1, '{"a":1}'), (1, '{"b":2}')]) == 0
    dest.close()
    t.join(5)
    srv.close()
    joined = b"".join(got) if kind == "tcp" else b"\n".join(got) + b"\n"
    assert joined == b'{"a":1}\n{"b":2}\n'


def test_socket_destination_failure_is_retryable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    from podgpu.sinks.cloudwatch.destinations import SendError

    with pytest.raises(SendError) as err:
        SocketDestination(parse_target(f"tcp://127.0.0.1:{port}")).send([(1, "{}")])
    assert err.value.retryable


def test_emf_flags() -> None:
    s = parse_serve_args(["--cloudwatch-config", "c.json", "--emf-label", "Service=x",
                          "--emf-label", "A=b", "--emf-interval", "30", "--emf-queue-bytes", "4M",
                          "--emf-storage-resolution", "1"])
    assert s.emf is not None and s.emf.labels == (("Service", "x"), ("A", "b"))
    assert (s.emf.interval, s.emf.queue_bytes, s.emf.storage_resolution) == (30.0, 4 << 20, 1)
    env = parse_serve_args([], {"PODGPU_CLOUDWATCH_CONFIG": "c.json",
                                "PODGPU_EMF_LABELS": "Service=y,B=c"})
    assert env.emf is not None and env.emf.config == "c.json"
    assert env.emf.labels == (("Service", "y"), ("B", "c"))


@pytest.mark.parametrize(("args", "expect"), [
    (["--emf-interval", "30"], "--emf-interval needs --cloudwatch-config"),
    (["--cloudwatch-config", "c", "--emf-interval", "0.5"], "--emf-interval: must be between"),
    (["--cloudwatch-config", "c", "--emf-interval", "5000"], "--emf-interval: must be between"),
    (["--cloudwatch-config", "c", "--emf-storage-resolution", "5"], "use 1 (high resolution)"),
    (["--cloudwatch-config", "c", "--emf-queue-bytes", "1K"], "--emf-queue-bytes: expected a size"),
    (["--cloudwatch-config", "c", "--emf-label", "noequals"], "--emf-label: expected KEY=VALUE"),
    (["--cloudwatch-config", "c", "--emf-label", "1x=y"], "--emf-label: expected KEY=VALUE"),
    (["--cloudwatch-config", "c", "-c", "5000", "--emf-interval", "2"], "shorter than the collect"),
])
def test_bad_emf_flags(args: list[str], expect: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_serve_args(args)
    assert expect in str(err.value)


@pytest.mark.integration  # starts `podgpu serve` processes
def test_stdout_needs_no_cluster_name_but_cloudwatch_does() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[4]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = [sys.executable, "-m", "podgpu", "serve", "--simulate", "1", "-a",
            f"127.0.0.1:{port}", "--cloudwatch-config", str(SEED)]
    env = {"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([*base, "--emf-destination", "cloudwatch"], capture_output=True,
                         text=True, timeout=30, env=env)
    assert res.returncode == 2 and "--cluster-name" in res.stderr and res.stderr.count("\n") == 1
    proc = subprocess.Popen([*base, "--emf-destination", "stdout"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # ends when the process ends: a config error would end it
            seen.append(line)
            if "listening on" in line:
                break
        assert any("listening on" in line for line in seen), seen
    finally:
        proc.terminate()
        proc.wait(10)


def test_abort_after_a_failed_start_sends_nothing() -> None:
    """A `serve` whose port is taken aborts the sink: the open window and any
    handed-off one are discarded, nothing reaches the destination (stop() would send them)."""
    sent = {}
    for end in ("abort", "stop"):
        node = SimNode(2)
        node.clock.now -= node.clock.now % 60
        dest = FakeDestination()
        sink = EmfSink(node.builder(), Encoder(load_emf_config(str(SEED)), keep_unmatched=True),
                       EventQueue(1 << 20), dest, interval=1.0)
        for snap in node.snapshots(3):  # two windows handed off, one open
            sink.offer(snap)
        getattr(sink, end)()
        sent[end] = sum(len(b) for b in dest.batches)
    assert sent["abort"] == 0 and sent["stop"] > 0
