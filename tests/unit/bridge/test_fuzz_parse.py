"""Fuzzing the bridge's exposition parser: whatever a scrape target answers,
`parse_exposition` returns families or raises its own ParseError (one line), never anything
else, within hypothesis' deadline; and what it returns turns into EMF series without error.

Random text explores the edges; near-valid expositions (TYPE/HELP lines, label escapes, NaN,
Inf, timestamps, counters with and without `_total`, histograms and summaries) reach the
parser's and the name-restoring code's inner branches."""

from __future__ import annotations

import re
import sys
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podgpu.bridge import parse
from podgpu.bridge.parse import Family, ParseError, parse_exposition
from podgpu.bridge.series import Dropped, TargetLabels, to_series

FUZZ = settings(max_examples=400,
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
    brace = f"{{{body}}}" if bool(labels) or draw(st.booleans()) else ""
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


class _Text(str):
    """The scraped text, counting the scans parse.py makes of it with str methods or `in`."""

    scans = 0


def _counting(name: str) -> Any:
    plain = getattr(str, name)

    def method(self: _Text, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code.co_filename == parse.__file__:
            _Text.scans += 1
        return plain(self, *args, **kwargs)
    return method


for _name in ("__contains__", "find", "rfind", "index", "rindex", "count", "split", "rsplit",
              "splitlines", "partition", "rpartition", "startswith", "endswith", "replace"):
    setattr(_Text, _name, _counting(_name))


class _Counting:
    """A regex pattern or the `re` module as parse.py sees it: a call given the text counts as
    one scan; `compile` hands back a counting pattern."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or isinstance(attr, type):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if any(isinstance(a, _Text) for a in (*args, *kwargs.values())):
                _Text.scans += 1
            out = attr(*args, **kwargs)
            return _Counting(out) if isinstance(out, re.Pattern) else out
        return call


def _scans_to_parse(counters: int) -> int:
    _Text.scans = 0
    text = _Text("".join(f"# TYPE c{i} counter\nc{i} {i}\n" for i in range(counters)))
    fams = parse_exposition(text)
    assert [(f.name, f.samples[0].name) for f in fams] == [(f"c{i}", f"c{i}")
                                                          for i in range(counters)]
    return _Text.scans


def test_many_counters_parse_with_a_bounded_number_of_scans(monkeypatch: Any) -> None:
    """A target may declare many counters; naming them must not scan the whole text once per
    counter (that made 8,000 counters take 32 s; 10,000 are within the bridge's sample cap).
    Counted, not timed: every regex call (module `re` or a pattern of parse.py) and every str
    method or `in` that parse.py applies to the text is one scan; 4x the counters, same scans."""
    monkeypatch.setattr(parse, "re", _Counting(re))
    for name, value in list(vars(parse).items()):
        if isinstance(value, re.Pattern):
            monkeypatch.setattr(parse, name, _Counting(value))
    small, big = _scans_to_parse(250), _scans_to_parse(1000)
    assert 0 < small == big <= 4, (small, big)
