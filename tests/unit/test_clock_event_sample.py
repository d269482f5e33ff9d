"""Clock-event counts are samples at the interval dcgm-exporter would sample at:
the -c (or DCGM_EXPORTER_INTERVAL) the user gave, else dcgm-exporter's default 30 s, whatever
podgpu's own default interval is."""

from __future__ import annotations

from podgpu.config.serve import parse_serve_args


def test_default_interval_counts_per_30s_a_given_interval_counts_per_that_interval() -> None:
    default = parse_serve_args([], env={})
    assert default.collect.interval_ms == 1000
    assert default.collect.clock_events_sample_ms == 30000
    assert parse_serve_args(["-c", "5000"], env={}).collect.clock_events_sample_ms == 5000
    assert parse_serve_args([], env={"DCGM_EXPORTER_INTERVAL": "30000"}
                            ).collect.clock_events_sample_ms == 30000
    assert parse_serve_args(["-c", "1000"], env={}).collect.clock_events_sample_ms == 1000
