"""A gpu-burn square wave (20 s busy, 20 s idle) is visible in one minute's statistics in
CloudWatch: Max 100 and Min 0 for DCGM_FI_DEV_GPU_UTIL (and 1.0 / 0.0 for the pod's utilization
ratio), because the minute's event carries every 1 s sample as a value distribution.

Two ways, both read back from moto server and extracted with the spec-written validator:
in-process, one aligned minute of the simulated node at its default 20 s / 20 s pattern with a
fast clock; and a real `podgpu serve` process, the same square wave scaled
down (`--simulate-burn 0.5,0.5`) so that each 2 s interval holds two busy and two idle phases.
"""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest

from podgpu.sinks.cloudwatch.declarations import load_emf_config
from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
from podgpu.sinks.cloudwatch.encode import Encoder
from podgpu.sinks.cloudwatch.queue import EventQueue
from podgpu.sinks.cloudwatch.sink import EmfSink
from tests.emf_validator import Extracted, extract
from tests.integration.aws_fakes import aws_env, moto_url, read_events
from tests.integration.test_cloudwatch_moto import EXAMPLE, GROUP, Node, extracted, seed_dims
from tests.unit.sinks.cloudwatch.simnode import SimNode

__all__ = ["aws_env", "moto_url"]  # fixtures
pytestmark = pytest.mark.integration

UTIL = "DCGM_FI_DEV_GPU_UTIL"
RATIO = "podgpu_pod_gpu_utilization_ratio"


@pytest.mark.usefixtures("aws_env")
def test_one_minute_of_20s_on_20s_off_shows_max_100_and_min_0(moto_url: str) -> None:
    minute = math.floor(time.time() / 60) * 60 - 120  # a whole past minute, within 14 days
    node = SimNode(4, start=minute)  # GPU 0 (train-0) burns 20 s, idles 20 s, from `minute`
    dest = CloudWatchDestination(log_group=GROUP, log_stream="burn-minute", region="us-east-1",
                                 endpoint_url=moto_url)
    queue = EventQueue(8 << 20)
    sink = EmfSink(node.builder(), Encoder(load_emf_config(str(EXAMPLE))), queue, dest,
                   interval=60.0)
    offered: list[float] = []
    for snap in node.snapshots(60):  # 1 s cycles over exactly one aligned minute
        sink.offer(snap)
        offered.append(float(snap.samples[0].values[UTIL]))
    sink.stop(grace=10.0)  # closes the minute and sends it
    assert sink.stats().sent > 0 and len(queue) == 0

    got = [x for e in read_events(moto_url, GROUP, "burn-minute") for x in extract(e["message"])]
    assert {x.timestamp_ms for x in got} == {minute * 1000}  # one minute, one event per set
    (util,) = [x for x in got if x.name == UTIL]
    assert dict(util.dimensions)["pod"] == "train-0"
    assert util.stats is not None
    low, high, total, count = util.stats
    assert (low, high, count) == (0.0, 100.0, 60.0)  # what CloudWatch's Min/Max/SampleCount use
    assert total == pytest.approx(sum(offered))
    assert Counter(util.values) == Counter(offered)  # every second's sample, as the GPU had it
    assert offered.count(100.0) >= 20 and offered.count(0.0) >= 20  # the square wave itself
    (ratio,) = [x for x in got if x.name == RATIO and dict(x.dimensions)["pod"] == "train-0"]
    assert ratio.stats is not None and (ratio.stats[0], ratio.stats[1]) == (0.0, 1.0)


def test_serve_with_a_fast_burn_shows_max_100_and_min_0_per_interval(moto_url: str) -> None:
    node = Node(moto_url, EXAMPLE, "burn-serve", "--simulate-burn", "0.5,0.5",
                "--emf-storage-resolution", "1", interval="2")
    try:
        node.wait("three intervals in moto", lambda: len(
            {x.timestamp_ms for x in extracted(moto_url, "burn-serve")}) >= 3, seconds=30)
    finally:
        node.stop()
    util: list[Extracted] = sorted((x for x in extracted(moto_url, "burn-serve")
                                    if x.name == UTIL), key=lambda x: x.timestamp_ms)
    assert util and {x.dimensions for x in util} == {seed_dims()}
    assert {x.storage_resolution for x in util} == {1}
    # the first and last intervals may be partial; a whole one holds both phases
    whole = util[1:-1]
    assert whole
    for x in whole:
        assert x.stats is not None and (x.stats[0], x.stats[1]) == (0.0, 100.0), x
        assert len(x.values) == x.stats[3] >= 5  # 2 s of 200 ms cycles, each one kept
