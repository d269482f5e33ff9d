"""Series as the agent would label them, and one interval's samples per label set."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podgpu.sinks.cloudwatch.series import COUNTER, GAUGE, SeriesOptions
from podgpu.sinks.cloudwatch.window import SlotSampler, WindowAccumulator
from tests.unit.sinks.cloudwatch.simnode import LABELS, SimNode, flat


def test_series_carry_exporter_labels_plus_the_agent_path_labels() -> None:
    node = SimNode(4)
    snap = next(node.snapshots(1))
    series = list(flat(node.builder().series(snap)))
    util = [dict(k) for k, name, _, _ in series if name == "DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 4  # one per GPU: the shared GPU has no arbitrary pod winner
    gpu0 = next(d for d in util if d["gpu"] == "0")
    # the exclusive GPU's holder, as /metrics labels it, and the labels the agent path adds
    holder = next(a.container for a in snap.allocations
                  if a.device_key == snap.samples[0].device.key)
    assert (gpu0["pod"], gpu0["namespace"], gpu0["container"]) == \
        (holder.pod, holder.namespace, holder.container)
    # the agent path's target labels (service-endpoints job): podgpu's own namespace and pod
    assert (gpu0["Namespace"], gpu0["pod_name"], gpu0["container_name"]) == \
        ("gpu-operator", "podgpu-x7k2p", "podgpu")
    assert (gpu0["ClusterName"], gpu0["job"], gpu0["instance"], gpu0["kubernetes_node"]) == \
        ("prod", "kubernetes-service-endpoints", "10.0.0.5:9400", "node-a")
    assert "NodeName" not in gpu0
    assert gpu0["Service"] == "nvidia-dcgm-exporter" and gpu0["prom_metric_type"] == "gauge"
    assert gpu0["UUID"] == snap.samples[0].device.uuid and gpu0["Hostname"] == "node-a"
    gpu1 = next(d for d in util if d["gpu"] == "1")
    assert "pod" not in gpu1 and gpu1["Namespace"] == "gpu-operator"


def test_workload_identity_keeps_podgpus_richer_labels() -> None:
    node = SimNode(1)
    snap = next(node.snapshots(1))
    opts = SeriesOptions(labels=LABELS, job="podgpu", instance="node-a:9400", cluster_name="prod",
                         node_name="node-a", identity="workload")
    key = dict(next(k for k, name, _, _ in flat(node.builder(opts).series(snap))
                    if name == "DCGM_FI_DEV_GPU_UTIL"))
    holder = snap.allocations[0].container
    assert (key["Namespace"], key["NodeName"], key["job"]) == (holder.namespace, "node-a", "podgpu")


def test_values_equal_the_snapshot_and_counters_are_typed() -> None:
    node = SimNode(2)
    snap = next(node.snapshots(1))
    for key, name, kind, value in flat(node.builder().series(snap)):
        labels = dict(key)
        if name.startswith("DCGM_"):
            sample = next(s for s in snap.samples if str(s.device.index) == labels["gpu"])
            row = next(r for r in node.metrics.metrics if r.name == name)
            if not any(lv.field == name for lv in sample.labeled):
                assert value == float(sample.values[name])
            assert kind == (COUNTER if row.prom_type == "counter" else GAUGE)
            assert labels["prom_metric_type"] == kind


def test_per_pod_series_cover_every_holder_of_a_shared_gpu() -> None:
    node = SimNode(4)
    snap = next(node.snapshots(1))
    pods = {dict(k)["pod"] for k, name, _, _ in flat(node.builder().series(snap))
            if name == "podgpu_pod_gpu_utilization_ratio"}
    holders = {a.container.pod for a in snap.allocations}
    assert holders and pods == holders
    shared_key = snap.samples[1].device.key
    assert len({a.container.pod for a in snap.allocations if a.device_key == shared_key}) >= 2


def test_extra_labels_win_and_cluster_name_is_not_overwritten() -> None:
    node = SimNode(1)
    snap = next(node.snapshots(1))
    opts = SeriesOptions(labels=LABELS, cluster_name="prod",
                         extra=(("job", "dcgm"), ("ClusterName", "override")))
    labels = dict(next(iter(node.builder(opts).series(snap)))[0])
    assert labels["job"] == "dcgm" and labels["ClusterName"] == "override"


def test_window_gauges_keep_every_sample_and_close_on_the_minute() -> None:
    node = SimNode(2, start=1_800_000_000.0 - 1_800_000_000.0 % 60)  # aligned to a minute
    builder = node.builder()
    acc = WindowAccumulator(60.0, lambda k, n: n == "DCGM_FI_DEV_GPU_UTIL")
    closed = []
    for snap in node.snapshots(125):
        c = acc.add(snap.taken_at, builder.series(snap))
        if c is not None:
            closed.append(c)
    assert [c.start for c in closed] == [node.clock.now - 125, node.clock.now - 65]
    first = closed[0]
    assert first.timestamp_ms % 60_000 == 0
    for metrics in first.groups.values():
        assert set(metrics) == {"DCGM_FI_DEV_GPU_UTIL"}
        assert len(metrics["DCGM_FI_DEV_GPU_UTIL"]) == 60
    busy = next(m for k, m in first.groups.items() if dict(k)["gpu"] == "0")
    assert max(busy["DCGM_FI_DEV_GPU_UTIL"]) == 100 and min(busy["DCGM_FI_DEV_GPU_UTIL"]) == 0


def test_counter_deltas_first_sample_seeds_and_reset_sends_the_new_value() -> None:
    key = (("gpu", "0"),)
    acc = WindowAccumulator(10.0, lambda k, n: True)
    feed = [100.0, 130.0, 180.0, 20.0, 50.0]
    for i, v in enumerate(feed):
        acc.add(1000.0 + i, [(key, COUNTER, [("c", v)])])
    closed = acc.add(1010.0, [(key, COUNTER, [("c", 60.0)])])
    assert closed is not None
    assert closed.groups[key]["c"] == [30.0, 50.0, 20.0, 30.0]
    nxt = acc.close()
    assert nxt is not None and nxt.groups[key]["c"] == [10.0]  # continues across windows


def test_counter_state_forgotten_after_a_window_without_the_series() -> None:
    key = (("gpu", "0"),)
    acc = WindowAccumulator(10.0, lambda k, n: True)
    acc.add(1000.0, [(key, COUNTER, [("c", 5.0)])])
    acc.add(1010.0, [])
    acc.add(1020.0, [])
    acc.add(1030.0, [(key, COUNTER, [("c", 9.0)])])  # seeds again: no delta from 5
    closed = acc.close()
    assert closed is None


def test_unwanted_series_are_not_kept() -> None:
    acc = WindowAccumulator(10.0, lambda k, n: n == "a")
    acc.add(0.0, [((), GAUGE, [("a", 1.0), ("b", 2.0)])])
    closed = acc.close()
    assert closed is not None and closed.groups == {(): {"a": [1.0]}}


def agent_path(times: list[float], scrape: float, interval: float,
               gauge: Callable[[float], float], counter: Callable[[float], float]
               ) -> dict[float, tuple[list[float], list[float]]]:
    """The agent path restated: a scrape at the first collection of every `scrape`-second slot
    reads the exporter's values; it sends each gauge value and each counter's increase since the
    previous scrape (the first scrape only seeds), one event per scrape, which CloudWatch
    aggregates into the `interval`-second period holding the scrape."""
    out: dict[float, tuple[list[float], list[float]]] = {}
    prev_slot, prev_counter = None, None
    for t in times:
        slot = t // scrape
        if slot == prev_slot:
            continue
        prev_slot = slot
        gauges, deltas = out.setdefault(t // interval * interval, ([], []))
        gauges.append(gauge(t))
        if prev_counter is not None:
            deltas.append(counter(t) - prev_counter)
        prev_counter = counter(t)
    return out


@pytest.mark.parametrize("scrape", [60.0, 15.0, 120.0])
def test_one_sample_per_interval_gives_the_agent_paths_statistics(scrape: float) -> None:
    key = (("gpu", "0"),)
    acc = WindowAccumulator(60.0, lambda k, n: True, sample_every=scrape)
    start = 1_800_000_000.0 - 1_800_000_000.0 % 3600 + 0.25  # cycles 0.25 s past each second

    def gauge(t: float) -> float:
        return float(int(t) % 7)

    def counter(t: float) -> float:
        return 3.0 * (t - start) + ((t - start) // 13) ** 2  # increasing, uneven steps

    times = [start + i for i in range(600)]
    got: dict[float, tuple[list[float], list[float]]] = {}
    for t in times:
        closed = acc.add(t, [(key, GAUGE, [("g", gauge(t))]), (key, COUNTER, [("c", counter(t))])])
        if closed is not None:
            got[closed.start] = (closed.groups.get(key, {}).get("g", []),
                                 closed.groups.get(key, {}).get("c", []))
    want = agent_path(times, scrape, 60.0, gauge, counter)
    assert got == {w: v for w, v in want.items() if w < times[-1] // 60 * 60}
    # one sample per minute: SampleCount 1, a counter's one value its minute's increase
    if scrape == 60.0:
        assert all(len(g) == 1 and len(c) <= 1 for g, c in got.values())


def test_slot_sampler_keeps_the_first_cycle_of_each_slot_and_never_goes_back() -> None:
    sampler = SlotSampler(15.0)
    # 15-second slots: [0, 15) [15, 30) [30, 45); 14.0 and 29.9 are later cycles of a kept slot,
    # 10.0 and 20.0 come after the clock stepped back to an older slot
    times = [0.5, 14.0, 15.0, 29.9, 10.0, 20.0, 31.0, 44.0]
    assert [t for t in times if sampler.take(t)] == [0.5, 15.0, 31.0]
    every_cycle = SlotSampler(0.0)
    assert all(every_cycle.take(t) for t in times)
