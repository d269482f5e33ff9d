"""Fuzzing the bridge's exposition parser (issue 19 item 5): whatever a scrape target answers,
`parse_exposition` returns families or raises its own ParseError (one line), never anything
else, within hypothesis' deadline; and what it returns turns into EMF series without error.

Random text explores the edges; near-valid expositions (TYPE/HELP lines, label escapes, NaN,
Inf, timestamps, counters with and without `_total`, histograms and summaries) reach the
parser's and the name-restoring code's inner branches."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podgpu.bridge.parse import Family, ParseError, parse_exposition
from podgpu.bridge.series import Dropped, TargetLabels, to_series

FUZZ = settings(max_examples=400, deadline=2000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TARGET = TargetLabels(job="j", instance="127.0.0.1:9400", cluster_name="c", node_name="n")

names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
label_values = st.text(alphabet=st.sampled_from('ab\\"\n{}=,# \u202e\x00é'), max_size=8)
values = st.sampled_from(["0", "1", "-1.5", "1e308", "NaN", "+Inf", "-Inf", "0x1F", "1_000",
                          "", "abc", "1.0e-400", "9" * 40])
types = st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "info",
                         "stateset", "gaugehistogram", "unknown", "bogus", ""])


@st.composite
def sample_line(draw: st.DrawFn, name: str) -> str:
    suffix = draw(st.sampled_from(["", "", "_total", "_bucket", "_sum", "_count", "_created"]))
    labels = draw(st.lists(st.tuples(names, label_values), max_size=3))
    if suffix == "_bucket":
        labels.append(("le", draw(st.sampled_from(["0.5", "+Inf", "x"]))))
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    ts = draw(st.sampled_from(["", " 1700000000000", " -1", " 1.5"]))
    brace = f"{{{body}}}" if labels or draw(st.booleans()) else ""
    return f"{name}{suffix}{brace} {draw(values)}{ts}"


@st.composite
def exposition(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(names)
        if draw(st.booleans()):
            lines.append(f"# HELP {name} {draw(label_values)}")
        if draw(st.booleans()):
            lines.append(f"# TYPE {name} {draw(types)}")
        lines += [draw(sample_line(name)) for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.text(max_size=20)))
    end = draw(st.sampled_from(["\n", "", "\n\n", "\r\n", "\n# EOF\n"]))
    return "\n".join(lines) + end


def check(text: str) -> None:
    try:
        families = parse_exposition(text)
    except ParseError as exc:
        msg = str(exc)
        assert msg.startswith("not Prometheus text format") or "prometheus_client" in msg, msg
        assert "\n" not in msg and len(msg) < 2000
        return
    assert all(isinstance(f, Family) for f in families)
    to_series(families, TARGET, Dropped())


@FUZZ
@given(st.text(max_size=400))
@example("# TYPE a counter\na_total 1\na 2\n")
@example('a{b="\\"} 1\n')
@example("a{} 1 2 3\n")
@example("# TYPE a histogram\na_bucket{le=\"x\"} 1\n")
def test_any_text(text: str) -> None:
    check(text)


@FUZZ
@given(exposition())
def test_near_valid_expositions(text: str) -> None:
    check(text)


def test_many_counters_parse_in_bounded_time() -> None:
    """A target may declare many counters; naming them must stay linear-ish (a cost per counter
    that scans the whole text made 8,000 counters take 32 s, 10,000 are within the bridge's
    sample cap). A ratio within one run, not a time."""
    text = "".join(f"# TYPE c{i} counter\nc{i} {i}\n" for i in range(1000))
    t0 = time.perf_counter()
    assert len(parse_exposition(text)) == 1000
    small = time.perf_counter() - t0
    text4 = "".join(f"# TYPE c{i} counter\nc{i} {i}\n" for i in range(5000))
    t0 = time.perf_counter()
    assert len(parse_exposition(text4)) == 5000
    big = time.perf_counter() - t0
    assert big < 5 * small * 3, (small, big)  # 5x the input: at most ~5x the time (+ noise)
