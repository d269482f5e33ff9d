"""The soak's short form: bench/soak.py for a few seconds with fast churn, as a
leak check on counts, not time: no failed scrape, no series of a deleted pod, descriptors and
threads flat across many pod generations. The hour-long run and its RSS figures are in
bench/RESULTS.md."""

from __future__ import annotations

from tests.support.soak import run_soak


def test_short_soak_counts_stay_flat_while_pods_churn() -> None:
    # 20 s: longer than a finished pod's accounting counters may linger (grace 2 s + the 10 s
    # prune cadence + snapshot age), so counters that are never dropped are caught too
    res = run_soak(duration=20.0, sample_every=1.0, churn_every=1.0, scrape_every=0.25,
                   interval_ms=250)
    assert res.failures == [] and res.failed_scrapes == 0
    assert res.generations >= 18
    assert res.stale_series_seen == 0
    assert res.scrapes_with_pods > res.scrapes // 2  # the stale check saw pods at all
    after = res.samples[3:]
    assert len(after) >= 6
    assert max(s.fds for s in after) - min(s.fds for s in after) <= 2
    assert max(s.threads for s in after) - min(s.threads for s in after) <= 2
