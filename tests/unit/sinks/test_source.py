"""The one renderer of podgpu's own families (sinks/prometheus/source.py): the
text it makes is parsed back with prometheus_client's parser, the reference implementation."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from podgpu.sinks.prometheus.source import Family, Sample, counter, gauge, render, render_sources


class _Source:
    def __init__(self, *families: Family) -> None:
        self._families = families

    def families(self) -> list[Family]:
        return list(self._families)


def test_families_render_to_text_the_reference_parser_reads_back() -> None:
    text = render_sources([
        _Source(counter("x_events_total", 'help with "quotes" and \\ backslash', "result",
                        [("ok", 3), ('we"ird\n', 1)])),
        _Source(gauge("x_seconds", "a float", 0.25),
                Family("x_send_duration_seconds", "a summary", "summary",
                       (Sample((), 1.5, "_sum"), Sample((), 4, "_count")))),
    ])
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in fams["x_events"].samples] == [
        ({"result": "ok"}, 3.0), ({"result": 'we"ird\n'}, 1.0)]
    assert fams["x_seconds"].samples[0].value == 0.25
    assert {s.name: s.value for s in fams["x_send_duration_seconds"].samples} == {
        "x_send_duration_seconds_sum": 1.5, "x_send_duration_seconds_count": 4.0}
    assert "x_events_total{result=\"ok\"} 3\n" in text  # counts stay integers


def test_a_family_without_samples_is_left_out() -> None:
    assert render([Family("x_empty", "nothing", "gauge", ()), gauge("x_one", "one", 1)]) == (
        "# HELP x_one one\n# TYPE x_one gauge\nx_one 1\n")


def test_values_are_formatted_as_the_text_format_spells_them() -> None:
    """Counts as integers, floats as their shortest round-trip form (exponent past 1e16), and
    the non-finite as NaN, +Inf and -Inf (Python's repr says nan and inf)."""
    values = [3, 0.1, 2.0, 3.152519739159347e16, 1e20, float("nan"), float("inf"), float("-inf")]
    text = render([Family("x", "x", "gauge", tuple(Sample((("i", str(i)),), v)
                                                   for i, v in enumerate(values)))])
    assert [ln.split()[-1] for ln in text.splitlines()[2:]] == [
        "3", "0.1", "2.0", "3.152519739159347e+16", "1e+20", "NaN", "+Inf", "-Inf"]
    parsed = next(iter(text_string_to_metric_families(text))).samples
    assert [s.value for s in parsed][:5] == [3, 0.1, 2.0, 3.152519739159347e16, 1e20]
