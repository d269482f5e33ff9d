"""`podgpu report`: GPU-hours, efficiency, kWh and cost per namespace and pod, from a Prometheus.

    podgpu report --prometheus http://prometheus:9090 --last 30d --price-gpu-hour 2.5 --price-kwh 0.15

Asks Prometheus (GET `/api/v1/query_range`, podgpu.boundedget: each query within --timeout in
all, redirects refused) for podgpu's accounting counters over the range, in
chunks of at most a day (a progress line on stderr when there is more than one), and adds up each
series' increase (docs/accounting.md). Exit status 2 for bad flags, 1 when Prometheus cannot be
asked or answers with an error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from podgpu.accounting.report import (
    FORMATS,
    METRICS,
    CounterIncrease,
    Prices,
    Report,
    Row,
    add_series,
)
from podgpu.boundedget import GetError, get
from podgpu.errors import ConfigError, PodgpuError
from podgpu.options import Option, go_flags, new_parser, resolve

CHUNK_SECONDS = 86_400.0
MAX_POINTS = 11_000
"""Prometheus refuses query_range answers of more than 11,000 points per series."""
MAX_BODY_BYTES = 512 << 20
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|w)$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_MATCHERS = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*,?\s*)*$')


class PrometheusError(PodgpuError):
    """Prometheus could not be reached or answered with an error (exit status 1)."""


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def _format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(f"use {', '.join(FORMATS)}, got {text!r}")
    return text


OPTIONS: tuple[Option, ...] = (
    Option(("--prometheus",), "prometheus", None, None,
           "base URL of the Prometheus (or compatible) HTTP API, e.g. http://prometheus:9090 "
           "(required)", metavar="URL"),
    Option(("--start",), "start", None, None, "start: RFC 3339 (2026-12-01T00:00:00Z), Unix "
           "seconds, or now-DURATION", metavar="TIME", shown="END minus --last"),
    Option(("--end",), "end", None, "now", "end, same forms as --start", metavar="TIME"),
    Option(("--last",), "last", None, "1d", "the range when --start is not given, e.g. 24h, 7d",
           metavar="DURATION"),
    Option(("--step",), "step", None, "60s", "resolution of the samples asked for (the "
           "counters are exact at any step)", metavar="DURATION"),
    Option(("--selector",), "selector", None, "", "extra label matchers, e.g. "
           '\'Hostname=~"gpu-.*",namespace!="kube-system"\'', metavar="MATCHERS", shown="none"),
    Option(("--price-gpu-hour",), "price_gpu_hour", None, 0.0,
           "price of one allocated GPU-hour", _float, metavar="PRICE"),
    Option(("--price-kwh",), "price_kwh", None, 0.0, "price of one kWh of GPU energy", _float,
           metavar="PRICE"),
    Option(("--format",), "format", None, "table", "output format", _format,
           metavar="|".join(FORMATS)),
    Option(("--timeout",), "timeout", None, 60.0, "seconds per query, for the whole of it "
           "(connect, answer); redirects are refused", _float,
           metavar="SECONDS"),
)
"""`podgpu report`'s flags (podgpu.options, the engine every command uses)."""


def parse_duration(text: str, flag: str) -> float:
    m = _DURATION.match(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise ConfigError(f"{flag} {text!r}: expected a positive duration like 90s, 15m, 24h, 7d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str, flag: str, now: float) -> float:
    """RFC 3339, Unix seconds, `now` or `now-DURATION` -> Unix seconds."""
    t = text.strip()
    if t == "now":
        return now
    if t.startswith("now-"):
        return now - parse_duration(t[4:], flag)
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{flag} {text!r}: not a valid Unix time")
        return value
    try:
        stamp = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected RFC 3339 (2026-12-01T00:00:00Z), Unix "
                          "seconds, now or now-DURATION") from None
    if stamp.tzinfo is None:
        raise ConfigError(f"{flag} {text!r}: give a time zone (Z or +HH:MM)")
    return stamp.timestamp()


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--prometheus {url!r}: expected an http:// or https:// URL with a host, "
                          "e.g. http://prometheus:9090")
    if parts.query or parts.fragment:
        raise ConfigError(f"--prometheus {url!r}: give the base URL without ?query or #fragment")
    if "@" in parts.netloc:
        raise ConfigError("--prometheus: credentials in the URL are not supported; give the "
                          "URL of a Prometheus that needs none (e.g. through kubectl port-forward)")
    return url.rstrip("/")


ANSWERED = frozenset({200, *range(400, 600)})
"""Statuses whose body is read: Prometheus' error answers carry `errorType` and `error`."""


class Client:
    """query_range against one Prometheus through podgpu.boundedget (one deadline for the whole
    call, a size cap, redirects refused), errors translated to PrometheusError."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout = url, timeout

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        where = f"{self.url}/api/v1/query_range"
        query = urllib.parse.urlencode({"query": expr, "start": repr(start), "end": repr(end),
                                        "step": repr(step)})
        try:
            answer = get(f"{where}?{query}", timeout=self.timeout, max_bytes=MAX_BODY_BYTES,
                         headers={"Accept": "application/json"}, statuses=ANSWERED)
        except GetError as exc:
            why = str(exc)
            if why.startswith("answer"):
                why += "; use a coarser --step or a --selector"
            elif why.startswith("no complete answer"):
                why += " (--timeout)"
            raise PrometheusError(f"cannot reach Prometheus at {where}: {why}") from None
        raw = answer.body
        if answer.status != 200:
            raise PrometheusError(f"{self.url}: HTTP {answer.status} for query_range: "
                                  f"{_prom_error(raw[:4096])}")
        try:
            doc = json.loads(raw)
        except ValueError:
            raise PrometheusError(f"{self.url}: the answer to /api/v1/query_range is not JSON; "
                                  "is this a Prometheus?") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise PrometheusError(f"{self.url}: query failed: {_prom_error(raw)}")
        data = doc.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "matrix" \
                or not isinstance(data.get("result"), list):
            raise PrometheusError(f"{self.url}: unexpected answer shape (no matrix result)")
        result: list[Any] = data["result"]
        return result


def _prom_error(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        return f"{doc.get('errorType', 'error')}: {doc.get('error', '?')}"
    except (ValueError, AttributeError):
        return raw.decode("utf-8", "replace")[:200] or "(empty answer)"


def build_report(client: Client, start: float, end: float, step: float, selector: str,
                 prices: Prices, progress: Callable[[int, int], None]) -> Report:
    """Every accounting counter over [start, end], chunk by chunk, summed per pod."""
    chunk = min(CHUNK_SECONDS, step * (MAX_POINTS - 1))
    bounds: list[tuple[float, float]] = []
    t = start
    while t < end:
        bounds.append((t, min(end, t + chunk)))
        t += chunk
    # the grid of the last chunk stops at the last step before `end` when the range is not a
    # multiple of the step: one more point at `end` itself, so the range's last sample counts
    last = start
    for i, (a, b) in enumerate(bounds):
        first = a if i == 0 else a + step
        if first <= b:
            last = first + (b - first) // step * step
    if last < end - 1e-6:
        bounds.append((end - step, end))  # a chunk whose only point is `end`
    series: dict[tuple[str, tuple[tuple[str, str], ...]], CounterIncrease] = {}
    done, total = 0, len(bounds) * len(METRICS)
    for metric in METRICS:
        expr = f"{metric}{{{selector}}}" if selector else metric
        for i, (a, b) in enumerate(bounds):
            # each chunk after the first starts one step later: its first point is the previous
            # chunk's last
            first = a if i == 0 else a + step
            if first > b:
                continue
            for item in client.query_range(expr, first, b, step):
                labels = {k: v for k, v in item.get("metric", {}).items() if k != "__name__"}
                key = (metric, tuple(sorted(labels.items())))
                values = item.get("values") or []
                inc = series.get(key)
                if inc is None:
                    # present at the range's first instant: the baseline; later: born inside
                    born = not values or float(values[0][0]) > start + step / 2
                    inc = series[key] = CounterIncrease(born_inside=born)
                inc.feed(float(v) for _, v in values)
            done += 1
            progress(done, total)
    rows: dict[tuple[str, str], Row] = {}
    for (metric, pairs), inc in series.items():
        add_series(rows, metric, dict(pairs), inc.increase)
    return Report(start, end, prices, sorted(rows.values(), key=lambda r: (r.namespace, r.pod)))


def _progress(stream: TextIO) -> Callable[[int, int], None]:
    started = time.monotonic()

    def show(done: int, total: int) -> None:
        if total <= len(METRICS):  # one chunk per metric: no progress line
            return
        end = "\n" if done == total else ("\r" if stream.isatty() else "\n")
        stream.write(f"podgpu report: {done}/{total} queries "
                     f"({time.monotonic() - started:.1f} s){end}")
        stream.flush()
    return show


def main(argv: Sequence[str], *, out: TextIO | None = None, err: TextIO | None = None,
         now: Callable[[], float] = time.time) -> int:
    p = new_parser("podgpu report", __doc__, OPTIONS,
                   formatter_class=argparse.RawDescriptionHelpFormatter)
    a = argparse.Namespace(**resolve(p.parse_args(go_flags(list(argv), OPTIONS)), OPTIONS,
                                     {}).values)
    if not a.prometheus:
        raise ConfigError("--prometheus URL is required (the Prometheus that scraped podgpu)")
    out = out or sys.stdout
    err = err or sys.stderr
    url = check_url(a.prometheus)
    t_now = now()
    end = parse_time(a.end, "--end", t_now)
    start = (parse_time(a.start, "--start", t_now) if a.start
             else end - parse_duration(a.last, "--last"))
    if start >= end:
        raise ConfigError(f"the range is empty or backwards: --start {a.start or 'END-' + a.last} "
                          f"is not before --end {a.end}")
    step = parse_duration(a.step, "--step")
    for flag, price in (("--price-gpu-hour", a.price_gpu_hour), ("--price-kwh", a.price_kwh)):
        if not math.isfinite(price) or price < 0:
            raise ConfigError(f"{flag} {price}: expected a price >= 0")
    if a.selector and not _MATCHERS.match(a.selector):
        raise ConfigError(f"--selector {a.selector!r}: expected label matchers like "
                          'namespace="ml",Hostname=~"gpu-.*"')
    if not math.isfinite(a.timeout) or a.timeout <= 0:
        raise ConfigError(f"--timeout {a.timeout}: expected seconds > 0")
    report = build_report(Client(url, a.timeout), start, end, step, a.selector.strip().rstrip(","),
                          Prices(a.price_gpu_hour, a.price_kwh), _progress(err))
    if not report.rows:
        err.write(f"podgpu report: no podgpu accounting series in {url} between "
                  f"{_iso(start)} and {_iso(end)} (is podgpu's /metrics scraped, with "
                  "accounting on?)\n")
    out.write(FORMATS[a.format](report))
    return 0


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
