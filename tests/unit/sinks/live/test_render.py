"""The JSON and HTML renderers, number formats, and the Publisher hand-off."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from podgpu.http.publish import Publisher
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Sample, Snapshot
from podgpu.sinks.live import PAGE_KEY, SNAPSHOT_KEY, LiveRenderer, fmt, page, render_json
from podgpu.sinks.live.page import POD_COLUMNS, pod_cells, render_page, sorted_pods
from podgpu.sinks.live.schema import PodView
from podgpu.sinks.live.view import ViewOptions, build_view

OPTS = ViewOptions(node="<b>node</b>", backend="simulated", version="1", interval_seconds=0.5)
XSS = "<script>alert(1)</script>"


def snapshot(pod: str = XSS, ns: str = 'we"ird&<ns>', label: str = "</td><td>x") -> Snapshot:
    d = Device(0, "GPU-0", "0:0", "nvidia0", "Model <X>")
    ref = ContainerRef(ns, pod, "c'1", "", (("app", label),))
    return Snapshot(
        taken_at=1_800_000_000.25, cycle=3,
        samples=(Sample(d, {"DCGM_FI_DEV_GPU_UTIL": 42, "DCGM_FI_DEV_FB_USED": 100,
                            "DCGM_FI_DEV_FB_FREE": 900}),),
        allocations=(Allocation(d.key, ref, "nvidia.com/gpu", d.key),),
        processes=(GpuProcess(d.key, 7, 1 << 30, 42.0, ref),))


class _Cells(HTMLParser):
    """Text of every <td> of #pods, as a browser's parser would see it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.scripts: list[dict[str, Any]] = []
        self._in_td = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        if tag == "td":
            self._in_td = True
            self.rows[-1].append("")
        if tag == "script":
            self.scripts.append(dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_td = False

    def handle_data(self, data: str) -> None:
        if self._in_td:
            self.rows[-1][-1] += data


def test_json_is_html_inert_and_round_trips_pod_strings() -> None:
    view = build_view(snapshot(), OPTS)
    body = render_json(view)
    assert b"<" not in body and b">" not in body and b"&" not in body
    doc = json.loads(body)
    assert doc == json.loads(json.dumps(view))
    (pod,) = doc["pods"]
    assert (pod["pod"], pod["namespace"], pod["container"]) == (XSS, 'we"ird&<ns>', "c'1")
    assert pod["labels"] == {"app": "</td><td>x"}


def test_page_escapes_every_pod_string_and_has_only_same_origin_scripts() -> None:
    page = render_page(build_view(snapshot(), OPTS)).decode()
    assert XSS not in page and "<b>node</b>" not in page and "</td><td>x" not in page
    parser = _Cells()
    parser.feed(page)
    assert parser.scripts == [{"src": "./static/uPlot.iife.min.js"}, {"src": "./static/live.js"}]
    body_rows = [r for r in parser.rows if r]
    assert body_rows == [['we"ird&<ns>', XSS, "c'1", "0", "1.0 GiB", "42%"]]
    assert "&lt;b&gt;node&lt;/b&gt;" in page
    assert re.search(r'href="\./metrics"', page) and re.search(r'href="\./health"', page)


def test_page_summary_without_javascript_lists_tiles_and_no_pods_note() -> None:
    d = Device(1, "GPU-1", "0:1", "nvidia1", "M")
    page = render_page(build_view(Snapshot(5.0, (Sample(d, {}),)), OPTS)).decode()
    assert 'data-key="GPU-1"' in page and ">GPU 1<" in page
    assert 'id="nopods"' in page and "<noscript>" in page
    assert 'data-f="util">-</dd>' in page  # unsupported shows '-', never 0


def test_pod_table_order_is_busiest_first_unknown_last() -> None:
    pods = [PodView(namespace="a", pod=p, container="c", pod_uid="", labels={}, gpus=[],
                    devices=[], sources=[], memory_used_bytes=None, utilization_ratio=u,
                    idle=False)
            for p, u in (("x", None), ("y", 0.2), ("z", 0.9), ("w", 0.2))]
    assert [p["pod"] for p in sorted_pods(pods)] == ["z", "w", "y", "x"]


def test_pod_cells_match_the_columns() -> None:
    pod = build_view(snapshot(pod="p"), OPTS)["pods"][0]
    assert len(pod_cells(pod)) == len(POD_COLUMNS)


@pytest.mark.parametrize(("ratio", "text"), [
    (None, "-"), (0.0, "0%"), (0.004, "0%"), (0.005, "1%"), (0.125, "13%"), (0.735, "74%"), (1.0, "100%")])
def test_percent_rounds_half_up(ratio: float | None, text: str) -> None:
    assert fmt.percent(ratio) == text


@pytest.mark.parametrize(("n", "text"), [
    (None, "-"), (0, "0.0 GiB"), (1 << 30, "1.0 GiB"), ((1 << 30) // 4, "0.3 GiB"),  # 0.25 -> up
    (76427558912, "71.2 GiB"), (int(79.96 * (1 << 30)), "80.0 GiB")])
def test_gib_one_decimal(n: int | None, text: str) -> None:
    assert fmt.gib(n) == text


def test_watts_and_celsius() -> None:
    assert (fmt.watts(652.5), fmt.watts(None), fmt.celsius(61.49)) == ("653 W", "-", "61 °C")


def test_publisher_publishes_live_bodies_of_the_same_snapshot() -> None:
    pub = Publisher(lambda s, _t: f"cycle {s.cycle}\n".encode(), extra=LiveRenderer(OPTS))
    snap = snapshot()
    pub.publish(snap, 0.0)
    cur = pub.current
    assert cur is not None and cur.body == b"cycle 3\n"
    assert json.loads(cur.extra[SNAPSHOT_KEY])["cycle"] == 3
    assert b'data-cycle="3"' in cur.extra[PAGE_KEY]


def test_a_failing_live_renderer_never_stops_metrics() -> None:
    def broken(_s: Snapshot) -> dict[str, bytes]:
        raise RuntimeError("bug")

    pub = Publisher(lambda s, _t: b"m\n", extra=broken)
    pub.publish(snapshot(), 0.0)
    assert pub.current is not None and pub.current.body == b"m\n" and dict(pub.current.extra) == {}


ESCAPED = ["", "plain", XSS, 'we"ird&<ns>', "c'1", "&amp;", "&&<<>>\"\"''", "</td><td>x",
           "ü → ☃ \x00\n\t", "a" * 1000 + "<" + "'"]


@pytest.mark.parametrize("text", ESCAPED)
def test_page_escape_is_html_escape_with_quotes(text: str) -> None:
    """page.py escapes without importing html (html.entities comes with it)."""
    import html

    assert page._e(text) == html.escape(text, quote=True)
    assert page._e(3.5) == html.escape("3.5", quote=True)


@pytest.mark.parametrize("ts", [0.0, -0.0, 1.0, 59.9999994, 59.9999995, 59.9999996, 0.0000005,
                                0.0000015, 1_800_000_000.25, 1_799_999_999.9999995,
                                1_799_999_999.9999996, 1_733_356_799.999999, 951_782_400.0,
                                4_102_444_800.5, 253_402_300_799.0, 253_402_300_799.99997])
def test_page_time_is_datetime_fromtimestamp_utc(ts: float) -> None:
    """page.py prints a cycle's time without importing datetime, rounding as datetime does."""
    import datetime as dt

    want = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert page._utc(ts) == want


@pytest.mark.parametrize("ts", [-1.5, 253_402_300_800.0, float("inf"), float("nan"), 1e20])
def test_page_time_outside_datetime_gives_datetime_answer_or_error(ts: float) -> None:
    import datetime as dt

    try:
        want: object = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError) as exc:
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            page._utc(ts)
    else:
        assert page._utc(ts) == want


def test_page_time_matches_datetime_over_many_seconds() -> None:
    import datetime as dt
    import random

    rng = random.Random(7)
    for _ in range(20_000):
        ts = rng.uniform(0, 4e9) if rng.random() < 0.5 else rng.randrange(0, 4_000_000_000) + (
            rng.choice([0.9999995, 0.9999994, 0.9999996, 0.5, 0.0000005]))
        want = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        assert page._utc(ts) == want, ts
