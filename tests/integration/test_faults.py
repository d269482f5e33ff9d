"""The kubelet gone and back, short form of bench/faults.py (whose 5-minute
figure is in bench/RESULTS.md): GPU series on every scrape and a collect cycle per interval while
the socket is gone, pod labels dropped, and back within three collect cycles of its return. Counted
in scrapes and cycles, not seconds."""

from __future__ import annotations

from tests.support.faults import kubelet_outage


def test_kubelet_gone_and_back() -> None:
    res = kubelet_outage(outage=4.0, interval_ms=250, gpus=4)
    assert res.failed_scrapes == 0
    assert res.scrapes_missing_gpus == 0  # every GPU on every scrape, kubelet or not
    assert res.cycles_after_outage - res.cycles_before >= 4.0 / 0.25 / 2  # the loop kept going
    assert res.labels_gone_after_intervals is not None  # stale labels were dropped
    # Counted from a scrape just before the kubelet returns, the worst case is three cycles: the
    # one under way at its return, the one that starts before the next retry (at most an interval
    # later, the backoff is capped at the interval) has listed the pods, and the one that carries
    # the labels. Two is the usual figure; a loaded machine reaches three.
    assert res.labels_back_after_cycles is not None and res.labels_back_after_cycles <= 3
    assert res.kubelet_errors_during_outage >= 1  # and the outage was counted
