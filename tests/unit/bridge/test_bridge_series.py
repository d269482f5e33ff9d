"""The bridge's parsing, labels and type rules, on small hand-written expositions (these tests are
about the rules, so the inputs are literal text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podgpu.bridge.options import parse_args
from podgpu.bridge.parse import ParseError, parse_exposition
from podgpu.bridge.series import Dropped, Group, TargetLabels, to_series
from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.series import COUNTER, GAUGE
from podgpu.sinks.cloudwatch.window import WindowAccumulator

SEED_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "seed"
             / "dcgm-exporter-metrics-a10g.txt").read_text()
T = TargetLabels(job="dcgm", instance="10.0.0.5:9400",
                 extra=(("Service", "nvidia-dcgm-exporter"), ("Namespace", "gpu-operator")),
                 cluster_name="prod", node_name="ip-10-0-0-5")


def by_name(groups: list[Group]) -> dict[str, tuple[dict[str, str], str, float]]:
    return {name: (dict(key), kind, value) for key, kind, items in groups for name, value in items}


def test_dcgm_counter_names_keep_their_exposed_spelling() -> None:
    families = parse_exposition("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
                                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 15\n"
                                "# TYPE http_requests_total counter\n"
                                "http_requests_total{code=\"200\"} 3\n")
    names = {s.name for f in families for s in f.samples}
    assert names == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "http_requests_total"}


def test_counter_typed_foo_with_a_foo_total_sample_is_kept_as_written() -> None:
    """`# TYPE foo counter` then `foo_total 3`: the agent looks the type up without `_total` and
    keeps `foo_total` (prometheus_client alone leaves it untyped, which would drop it)."""
    dropped = Dropped()
    groups = to_series(parse_exposition("# TYPE foo counter\nfoo_total 3\n"
                                        "# TYPE bar counter\nbar 5\n"), T, dropped)
    series = by_name(groups)
    assert set(series) == {"foo_total", "bar"}
    assert series["foo_total"][1] == COUNTER and series["foo_total"][0]["prom_metric_type"] == "counter"
    assert dropped.unsupported_type == 0


def test_seed_sample_every_series_with_scrape_and_agent_labels() -> None:
    series = by_name(to_series(parse_exposition(SEED_TEXT), T))
    labels, kind, value = series["DCGM_FI_DEV_GPU_UTIL"]
    assert (kind, value) == (GAUGE, 100)
    assert labels["pod"] == "gpu-burn-c68d8c774-ltg9s"  # the workload's: no target label clashes
    assert labels["namespace"] == "kube-system" and labels["Namespace"] == "gpu-operator"
    assert (labels["job"], labels["instance"], labels["Service"]) == (
        "dcgm", "10.0.0.5:9400", "nvidia-dcgm-exporter")
    assert (labels["ClusterName"], labels["kubernetes_node"], labels["prom_metric_type"]) == (
        "prod", "ip-10-0-0-5", "gauge")
    assert "NodeName" not in labels
    energy = series["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy[1] == COUNTER and energy[0]["prom_metric_type"] == "counter"
    assert energy[2] == 15782796862
    assert series["DCGM_FI_DEV_POWER_USAGE"][2] == pytest.approx(299.437)
    # the seed's 23 samples all arrive, gauges in one label set and counters in another
    assert len(series) == sum(1 for line in SEED_TEXT.splitlines()
                              if line and not line.startswith("#"))


@pytest.mark.parametrize(("honor", "pod", "exported"), [
    (True, "train-0", None),
    (False, "exporter-abc", "train-0"),
])
def test_honor_labels_decides_a_clash_like_prometheus(honor: bool, pod: str,
                                                      exported: str | None) -> None:
    target = TargetLabels(job="dcgm", instance="h:1", extra=(("pod", "exporter-abc"),),
                          honor_labels=honor)
    fams = parse_exposition('# TYPE g gauge\ng{pod="train-0",job="theirs"} 1\n')
    (key, _, _), = to_series(fams, target)
    labels = dict(key)
    assert labels["pod"] == pod
    assert labels.get("exported_pod") == exported
    assert labels["job"] == ("theirs" if honor else "dcgm")
    assert labels.get("exported_job") == (None if honor else "theirs")


def test_cluster_name_on_the_series_is_kept() -> None:
    fams = parse_exposition('# TYPE g gauge\ng{ClusterName="other"} 1\n')
    (key, _, _), = to_series(fams, T)
    assert dict(key)["ClusterName"] == "other"


def test_summary_histogram_and_untyped() -> None:
    text = ("# TYPE lat summary\nlat{quantile=\"0.5\"} 0.2\nlat_sum 10\nlat_count 4\n"
            "# TYPE size histogram\nsize_bucket{le=\"1\"} 2\nsize_bucket{le=\"+Inf\"} 5\n"
            "size_sum 7\nsize_count 5\n"
            "# TYPE g gauge\ng NaN\n"
            "loose 3\n")
    dropped = Dropped()
    groups = to_series(parse_exposition(text), T, dropped)
    kinds = {(name, dict(key).get("le"), dict(key).get("quantile")): (kind, dict(key)["prom_metric_type"])
             for key, kind, items in groups for name, _ in items}
    assert kinds == {
        ("lat", None, "0.5"): (GAUGE, "summary"),
        ("lat_sum", None, None): (COUNTER, "summary"),
        ("lat_count", None, None): (COUNTER, "summary"),
        ("size_bucket", "1", None): (COUNTER, "histogram"),
        ("size_bucket", "+Inf", None): (COUNTER, "histogram"),
        ("size_sum", None, None): (COUNTER, "histogram"),
        ("size_count", None, None): (COUNTER, "histogram"),
    }
    assert (dropped.unsupported_type, dropped.not_finite, dropped.names) == (1, 1, {"loose"})


def test_counters_become_deltas_across_scrapes_like_the_agent() -> None:
    acc = WindowAccumulator(60, lambda key, name: True)
    for t, value in ((0, 100), (10, 130), (20, 5), (30, 25)):  # 5 < 130: a reset
        fams = parse_exposition(f"# TYPE c counter\nc 0\n# TYPE e counter\ne {value}\n")
        acc.add(1_800_000_000 + t, to_series(fams, T))
    window = acc.close()
    assert window is not None
    (values,) = [m["e"] for m in window.groups.values() if "e" in m]
    assert values == [30, 5, 20]  # the first scrape only seeds; a fall sends the new value


def test_bad_text_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_exposition('metric{a="1" 3\n')


@pytest.mark.parametrize(("argv", "expect"), [
    ([], "--scrape URL is required"),
    (["--scrape", "ftp://x/metrics"], "--scrape 'ftp://x/metrics': expected an http"),
    (["--scrape", "http://h:1/m", "--scrape-interval", "0"], "--scrape-interval: must be"),
    (["--scrape", "http://h:1/m", "--emf-interval", "5", "--scrape-interval", "10"],
     "--emf-interval 5: shorter than --scrape-interval 10"),
    (["--scrape", "http://h:1/m", "--target-label", "bad"], "--target-label: expected KEY=VALUE"),
    (["--scrape", "http://h:1/m", "--honor-labels", "maybe"], "--honor-labels: expected true"),
])
def test_bad_flags_name_the_flag(argv: list[str], expect: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args([*argv, "--cloudwatch-config", "cw.json"], env={})
    assert expect in str(err.value)
