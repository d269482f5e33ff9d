"""`podgpu report` against a real Prometheus holding a simulated day of podgpu's accounting
counters: the numbers per pod and namespace equal the values computed from the
schedule in continuous time, across podgpu's restart at noon; long ranges print progress; bad
input and an unreachable or wrong server are one-line errors with the right exit status."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import threading
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podgpu import cli
from tests.conftest import free_port
from tests.fakes.churn_node import BUSY_W
from tests.hostile_peers import hostile_peers
from tests.integration.accounting_day import RESTART_AT, SCRAPE, Day, start_day

pytestmark = pytest.mark.integration

GPU_HOUR, KWH = 2.5, 0.2
TOL = 0.01
"""The counters are exact to a cycle (5 s) per pod start and end and at the restart; a pod lives
at least 30 minutes."""


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Day]:
    d = start_day(tmp_path_factory.mktemp("day"))
    try:
        yield d
    finally:
        d.stop()


def report(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["report", *args])
    return code, out.getvalue(), err.getvalue()


def day_args(d: Day, *more: str) -> list[str]:
    return ["--prometheus", d.url, "--start", repr(d.start), "--end", repr(d.end),
            "--price-gpu-hour", str(GPU_HOUR), "--price-kwh", str(KWH), *more]


def close(have: float, want: float, absolute: float = 0.002) -> bool:
    return abs(have - want) <= max(absolute, TOL * abs(want))


def across_restart(d: Day) -> set[tuple[str, str]]:
    """Pods running when podgpu restarted: their counters lose what they gained after the last
    scrape before the restart (at most a scrape interval; Prometheus' increase() loses it too)."""
    return {(p.namespace, p.name) for p in d.pods if p.start < RESTART_AT <= p.end}


def expected_rows(d: Day) -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """(namespace, pod) -> GPU-hours, used GPU-hours, kWh, cost, from the schedule alone."""
    out = {}
    for p in d.pods:
        w = d.want[p.name]
        gh, uh, kwh = w.allocated / 3600, w.used / 3600, w.energy / 3.6e6
        out[(p.namespace, p.name)] = (gh, uh, kwh, gh * GPU_HOUR + kwh * KWH)
    return out


def test_json_equals_the_schedule_per_pod_and_namespace(day: Day) -> None:
    code, out, err = report(*day_args(day, "--format", "json"))
    assert code == 0, err
    doc = json.loads(out)
    want = expected_rows(day)
    restarted = across_restart(day)
    assert restarted
    seen = set()
    for ns in doc["namespaces"]:
        sums = [0.0, 0.0, 0.0, 0.0]
        for p in ns["pods"]:
            key = (ns["namespace"], p["pod"])
            seen.add(key)
            gh, uh, kwh, cost = want[key]
            for i, v in enumerate((gh, uh, kwh, cost)):
                sums[i] += v
            if key in restarted:  # at most one scrape interval of one whole GPU lost
                lost_h, lost_kwh = SCRAPE / 3600, BUSY_W * SCRAPE / 3.6e6
                assert gh - lost_h <= p["gpu_hours"] <= gh * (1 + TOL), (key, p, gh)
                assert kwh - lost_kwh <= p["kwh"] <= kwh * (1 + TOL), (key, p, kwh)
                continue
            assert close(p["gpu_hours"], gh), (key, p, gh)
            assert close(p["used_gpu_hours"], uh), (key, p, uh)
            assert close(p["kwh"], kwh), (key, p, kwh)
            assert close(p["cost"], cost, 0.01), (key, p, cost)
        assert close(ns["gpu_hours"], sum(p["gpu_hours"] for p in ns["pods"]), 1e-9)
        assert close(ns["kwh"], sum(p["kwh"] for p in ns["pods"]), 1e-9)
        assert close(ns["gpu_hours"], sums[0], 0.02) and close(ns["kwh"], sums[2], 0.02)
        assert close(ns["efficiency"], sums[1] / sums[0]), ns["namespace"]
    assert seen == set(want)
    # every pod on the node over the day: allocated GPU-hours of four GPUs, some idle time
    total = sum(v[0] for v in want.values())
    assert close(doc["total"]["gpu_hours"], total) and 40 < total < 96


def _numbers(line: str) -> list[float]:
    out = []
    for cell in line.split()[2:] if not line.startswith("TOTAL") else line.split()[1:]:
        out.append(-1.0 if cell == "-" else float(cell.rstrip("%")))
    return out


def test_table_prints_every_pod_with_namespace_totals(day: Day) -> None:
    code, out, err = report(*day_args(day))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "POD", "GPU-HOURS", "USED", "GPU-HOURS",
                                "EFFICIENCY", "KWH", "COST"]
    want = expected_rows(day)
    by_ns: dict[str, list[tuple[float, float, float, float]]] = {}
    for (ns, _), v in sorted(want.items()):
        by_ns.setdefault(ns, []).append(v)
    rows = [line for line in lines[1:] if "(total)" not in line and not line.startswith("TOTAL")]
    assert [tuple(r.split()[:2]) for r in rows] == sorted(want)  # sorted by namespace, pod
    restarted = across_restart(day)
    for r in rows:
        if tuple(r.split()[:2]) in restarted:
            continue  # checked with their allowance in the JSON test
        gh, uh, eff, kwh, cost = _numbers(r)
        w = want[tuple(r.split()[:2])]  # type: ignore[index]
        assert close(gh, w[0], 0.0015) and close(uh, w[1], 0.0015) and close(kwh, w[2], 0.0015)
        assert close(cost, w[3], 0.011)
        assert eff == -1.0 or close(eff, 100 * w[1] / w[0], 0.06)
    totals = [line for line in lines if "(total)" in line]
    assert [t.split()[0] for t in totals] == sorted(by_ns)
    for t in totals:
        ns = t.split()[0]
        gh, uh, _, kwh, cost = _numbers(t)
        assert close(gh, sum(v[0] for v in by_ns[ns]), 0.02)
        assert close(kwh, sum(v[2] for v in by_ns[ns]), 0.02)
        assert close(cost, sum(v[3] for v in by_ns[ns]), 0.05)
    assert lines[-1].startswith("TOTAL")
    assert close(_numbers(lines[-1])[0], sum(v[0] for v in want.values()), 0.05)
    assert err == ""  # one chunk per counter: no progress line


def test_csv_one_line_per_pod(day: Day) -> None:
    code, out, _ = report(*day_args(day, "--format", "csv"))
    lines = out.splitlines()
    assert code == 0 and lines[0] == "namespace,pod,gpu_hours,used_gpu_hours,efficiency,kwh,cost"
    assert len(lines) == 1 + len(day.pods)


def test_a_long_range_prints_progress_and_the_same_totals(day: Day) -> None:
    one = json.loads(report(*day_args(day, "--format", "json"))[1])
    code, out, err = report("--prometheus", day.url, "--start", repr(day.start - 86400),
                            "--end", repr(day.end + 86400), "--format", "json",
                            "--price-gpu-hour", str(GPU_HOUR), "--price-kwh", str(KWH))
    assert code == 0
    assert "podgpu report: 9/9 queries" in err  # 3 days x 3 counters, one day per query
    three = json.loads(out)
    assert close(three["total"]["gpu_hours"], one["total"]["gpu_hours"], 1e-6)
    assert close(three["total"]["kwh"], one["total"]["kwh"], 1e-6)


def test_a_selector_narrows_to_a_namespace(day: Day) -> None:
    code, out, _ = report(*day_args(day, "--format", "json", "--selector", 'namespace="ml"'))
    doc = json.loads(out)
    assert code == 0 and [ns["namespace"] for ns in doc["namespaces"]] == ["ml"]


@pytest.mark.parametrize(("args", "code", "text"), [
    (["--prometheus", "prometheus:9090"], 2, "expected an http:// or https:// URL"),
    (["--prometheus", "http://x", "--start", "2026-12-02T00:00:00Z", "--end",
      "2026-12-01T00:00:00Z"], 2, "the range is empty or backwards"),
    (["--prometheus", "http://x", "--start", "yesterday"], 2, "--start 'yesterday': expected"),
    (["--prometheus", "http://x", "--start", "2026-12-01T00:00:00"], 2, "give a time zone"),
    (["--prometheus", "http://x", "--last=-3d"], 2, "--last '-3d': expected a positive"),
    (["--prometheus", "http://x", "--price-kwh", "-1"], 2, "--price-kwh -1.0: expected a price"),
    (["--prometheus", "http://x", "--selector", "namespace=ml"], 2, "--selector"),
])
def test_bad_input_is_exit_2_with_the_flag_named(args: list[str], code: int, text: str) -> None:
    got, out, err = report(*args)
    assert (got, out) == (code, "") and text in err and "Traceback" not in err
    assert err.startswith("podgpu report: ") and err.count("\n") == 1


def test_an_unreachable_prometheus_is_exit_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = report("--prometheus", url, "--last", "1h", "--timeout", "5")
    assert code == 1 and f"cannot reach Prometheus at {url}" in err and "Traceback" not in err


class _NotPrometheus(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>login page</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return None


def test_a_server_that_is_not_prometheus_is_exit_1(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotPrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, _, err = report("--prometheus", f"http://127.0.0.1:{server.server_port}",
                              "--last", "1h")
    finally:
        server.shutdown()
    assert code == 1 and "is not JSON; is this a Prometheus?" in err


def test_a_redirect_is_exit_1_naming_the_url_and_the_location() -> None:
    with hostile_peers() as peers:
        peers.aliases["/api/v1/query_range"] = "/redirect?to=http://elsewhere:9090/login"
        base = peers.url("")
        code, out, err = report("--prometheus", base, "--last", "1h", "--timeout", "5")
        assert peers.hits == {"/redirect": 1}  # asked once, not followed
    assert (code, out) == (1, "") and err.count("\n") == 1 and "Traceback" not in err
    assert f"{base}/api/v1/query_range" in err
    assert "HTTP 302 redirect to http://elsewhere:9090/login not followed" in err


def test_a_trickling_prometheus_is_cut_at_the_timeout() -> None:
    """The server sends a byte a second forever; --timeout 0.5 is for the whole query."""
    with hostile_peers() as peers:
        peers.aliases["/api/v1/query_range"] = "/trickle"
        base = peers.url("")
        code, out, err = report("--prometheus", base, "--last", "1h", "--timeout", "0.5")
        assert peers.hits == {"/trickle": 1} and peers.trickled >= 1
    assert (code, out) == (1, "") and err.count("\n") == 1 and "Traceback" not in err
    assert f"{base}/api/v1/query_range: no complete answer within 0.5 s" in err


def test_credentials_in_the_url_are_refused_without_showing_them() -> None:
    code, out, err = report("--prometheus", "http://user:s3cret@prometheus:9090")
    assert (code, out) == (2, "") and "--prometheus" in err and "s3cret" not in err


def test_prometheus_refusing_the_query_is_exit_1_with_its_reason(day: Day) -> None:
    code, _, err = report(*day_args(day, "--selector", 'namespace=~"("'))
    assert code == 1 and "HTTP 400" in err and "bad_data" in err


# --- the dashboard's Accounting row on the same day ------------------------------------------

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "podgpu-dashboard.json"


def accounting_panels() -> dict[str, dict[str, str]]:
    """title -> {refId: expr} of the Accounting row's panels."""
    doc = json.loads(DASHBOARD.read_text())
    out: dict[str, dict[str, str]] = {}
    row = None
    for p in doc["panels"]:
        if p["type"] == "row":
            row = p["title"]
        elif row == "Accounting":
            out[p["title"]] = {t["refId"]: t["expr"] for t in p["targets"]}
    return out


def query(d: Day, expr: str, at: float, rng: str = "86400s") -> dict[str, float]:
    """The panel's query as Grafana sends it with every variable on "All", keyed by namespace."""
    expr = (expr.replace("$__range", rng).replace("$__rate_interval", "5m")
            .replace("$Hostname", ".*").replace("$namespace", ".*").replace("$pod", ".*")
            .replace("$gpu", ".*"))
    q = urllib.parse.urlencode({"query": expr, "time": repr(at)})
    with urllib.request.urlopen(f"{d.url}/api/v1/query?{q}", timeout=30) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return {x["metric"].get("namespace", ""): float(x["value"][1]) for x in doc["data"]["result"]}


def test_accounting_panels_show_the_days_numbers(day: Day) -> None:
    panels = accounting_panels()
    assert set(panels) == {"GPU-hours by namespace", "GPUs held and used by namespace",
                           "GPU power by namespace", "GPU efficiency", "Energy"}
    want = expected_rows(day)
    held: dict[str, float] = defaultdict(float)
    used: dict[str, float] = defaultdict(float)
    kwh: dict[str, float] = defaultdict(float)
    for (ns, _), (gh, uh, k, _) in want.items():
        held[ns] += gh
        used[ns] += uh
        kwh[ns] += k
    table = panels["GPU-hours by namespace"]
    # increase() over the day: each pod's first minute and the restart's minute are lost to
    # extrapolation, a few GPU-minutes in a namespace's tens of GPU-hours
    for ref, exp in (("A", held), ("B", used), ("D", kwh)):
        got = query(day, table[ref], day.end)
        assert set(got) == set(exp)
        for ns, v in exp.items():
            assert abs(got[ns] - v) <= 0.02 * v + 0.05, (ref, ns, got[ns], v)
    idle = query(day, table["C"], day.end)
    for ns in held:
        assert abs(idle[ns] - max(held[ns] - used[ns], 0.0)) <= 0.02 * held[ns] + 0.05
    (eff,) = query(day, panels["GPU efficiency"]["A"], day.end).values()
    assert abs(eff - sum(used.values()) / sum(held.values())) < 0.02
    (energy,) = query(day, panels["Energy"]["A"], day.end).values()
    assert abs(energy - sum(kwh.values())) <= 0.02 * sum(kwh.values())
    # GPUs held now, at an instant with no pod starting or ending in the 5 minutes before
    t = next(day.start + s for s in range(6 * 3600, 18 * 3600, 60)
             if not any(day.start + s - 360 <= day.start + e <= day.start + s
                        for p in day.pods for e in (p.start, p.end)))
    now = query(day, panels["GPUs held and used by namespace"]["A"], t)
    shares = held_at(day, t - day.start)
    assert set(now) == set(shares)
    for ns, v in shares.items():
        assert abs(now[ns] - v) < 0.02, (ns, now[ns], v)
    watts = query(day, panels["GPU power by namespace"]["A"], t)
    assert set(watts) == set(shares) and all(0 <= w <= 640 * 4 for w in watts.values())


def held_at(d: Day, t: float) -> dict[str, float]:
    """GPUs held per namespace at simulated time t, from the schedule."""
    from tests.fakes.churn_node import SLICES
    from tests.integration.accounting_day import GPUS

    out: dict[str, float] = defaultdict(float)
    for g in GPUS:
        active = [p for p in d.pods if p.gpu == g.index and p.start < t <= p.end]
        for p in active:
            out[p.namespace] += g.profiles[p.slot] / SLICES if g.kind == "mig" else 1 / len(active)
    return dict(out)


def instant(d: Day, metric: str, at: float) -> dict[tuple[str, str], float]:
    """Prometheus' own answer: each pod's counter at `at` (its latest sample at or before it)."""
    q = urllib.parse.urlencode({"query": metric, "time": repr(at)})
    with urllib.request.urlopen(f"{d.url}/api/v1/query?{q}", timeout=30) as r:
        doc = json.load(r)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for item in doc["data"]["result"]:
        out[(item["metric"]["namespace"], item["metric"]["pod"])] += float(item["value"][1])
    return out


@pytest.mark.parametrize("step", ["60s", "600s", "1000s", "7m"])
def test_a_range_not_a_multiple_of_the_step_counts_up_to_its_last_sample(
        day: Day, step: str) -> None:
    """3,570 s from 03:00:10 (before the restart): the query grid at 600 s stops at 03:50:10, so
    the last 570 s were lost before; every pod's GPU-seconds now equal its counter's value at the
    range's end less its value at the start (0 for a pod that started inside), as Prometheus
    itself answers them."""
    s = day.start + 3 * 3600 + 10
    e = s + 3570
    metric = "podgpu_pod_gpu_allocated_seconds_total"
    at_s, at_e = instant(day, metric, s), instant(day, metric, e)
    code, out, err = report("--prometheus", day.url, "--start", repr(s), "--end", repr(e),
                            "--step", step, "--format", "json")
    assert code == 0, err
    got = {(ns["namespace"], p["pod"]): p["gpu_hours"] * 3600
           for ns in json.loads(out)["namespaces"] for p in ns["pods"]}
    assert at_e
    for key, value in at_e.items():
        assert got[key] == pytest.approx(value - at_s.get(key, 0.0), abs=1e-6), key
