"""The live page at `/`, rendered once per cycle from the view (never on the request path).

The HTML already holds the whole summary (tiles and the pod table), so the page is useful with
JavaScript off; with it on, static/live.js polls `/api/v1/snapshot` and redraws the same
elements in place with the same number formats (fmt.py). Every pod-supplied string goes through
`_e`, `html.escape` with quotes; the server sends a Content-Security-Policy that allows only
same-origin scripts, so nothing inline runs even if escaping were ever missed.

The first page is rendered before the port accepts, so this module imports neither `html` (with
`html.entities`, ~1.7 ms, for an escape of five replacements) nor `datetime` (~1.5 ms, for one
timestamp); the unit tests hold both to the stdlib functions they stand for.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from podgpu.sinks.live import fmt

if TYPE_CHECKING:  # types only: creating schema.py's TypedDicts is ~1 ms of the start
    from podgpu.sinks.live.schema import DeviceView, PodView, SnapshotView

_YEAR_10000 = 253402300800.0
"""The first second `datetime` cannot hold: from there (and below 0) `_utc` leaves it to datetime."""


def _e(v: object) -> str:
    """`html.escape(str(v), quote=True)`: its replacements, in its order ('&' first)."""
    return (str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def _utc(ts: float) -> str:
    """`datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")`: datetime rounds `ts`
    to the microsecond, half to even, before it takes the second."""
    if not 0.0 <= ts < _YEAR_10000:  # NaN included: datetime's own result, or its own error
        import datetime as dt  # loaded on first use: a clock this far off is never the start

        return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    frac, whole = math.modf(ts)
    if round(frac * 1e6) >= 1_000_000:
        whole += 1.0
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(whole)))


def _holders(dev: DeviceView) -> str:
    if not dev["holders"]:
        return "none"
    return ", ".join(f"{h['namespace']}/{h['pod']}" for h in dev["holders"])


def _tile(dev: DeviceView) -> str:
    mem = fmt.gib(dev["memory_used_bytes"])
    if dev["memory_total_bytes"] is not None:
        mem += f" / {fmt.gib(dev['memory_total_bytes'])}"
    mig = f" {dev['mig']['profile']}" if dev["mig"] else ""
    rows = (("util", "Utilization", fmt.percent(dev["utilization_ratio"])),
            ("mem", "Memory", mem),
            ("power", "Power", fmt.watts(dev["power_watts"])),
            ("temp", "Temperature", fmt.celsius(dev["temperature_celsius"])),
            ("holders", "Pods", _holders(dev)),
            ("sharing", "Sharing", dev["sharing"]))
    dl = "".join(f'<dt>{label}</dt><dd data-f="{f}">{_e(text)}</dd>' for f, label, text in rows)
    return (f'<article class="tile {_e(dev["sharing"])}" data-key="{_e(dev["key"])}">'
            f'<h3>GPU {_e(dev["gpu"])}<small>{_e(dev["model"])}{_e(mig)}</small></h3>'
            f'<dl>{dl}</dl><div class="chart" aria-hidden="true"></div>'
            '<p class="key"><span class="k-util">utilization</span><span class="k-mem">memory'
            '</span> · last 5 min</p></article>')


def pod_cells(pod: PodView) -> tuple[str, ...]:
    """The pod table's cells as text; `podgpu top` prints the same cells."""
    return (pod["namespace"], pod["pod"], pod["container"], ",".join(pod["gpus"]),
            fmt.gib(pod["memory_used_bytes"]), fmt.percent(pod["utilization_ratio"]))


POD_COLUMNS = ("Namespace", "Pod", "Container", "GPUs", "Memory", "Utilization")


def sorted_pods(pods: list[PodView]) -> list[PodView]:
    """Busiest first, unknown utilization last, then by name (live.js sorts the same way)."""
    def key(p: PodView) -> tuple[float, str, str, str]:
        u = p["utilization_ratio"]
        return (-(-1.0 if u is None else u), p["namespace"], p["pod"], p["container"])
    return sorted(pods, key=key)


def _pod_row(pod: PodView) -> str:
    cls = ' class="idle"' if pod["idle"] else ""
    cells = "".join(f"<td>{_e(c)}</td>" for c in pod_cells(pod))
    return f"<tr{cls}>{cells}</tr>"


def status_line(view: SnapshotView) -> str:
    taken = _utc(view["taken_at"])
    h = view["health"]
    text = f"{view['backend']} · cycle {view['cycle']} · {taken} · {h['status']}"
    return text + (f": {'; '.join(h['reasons'])}" if h["reasons"] else "")


def render_page(view: SnapshotView) -> bytes:
    tiles = "".join(_tile(d) for d in view["devices"]) or "<p>No GPU devices.</p>"
    rows = "".join(_pod_row(p) for p in sorted_pods(view["pods"]))
    head = "".join(f"<th>{c}</th>" for c in POD_COLUMNS)
    empty = "" if rows else '<p id="nopods">No pod holds a GPU on this node.</p>'
    node = _e(view["node"])
    return f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>podgpu · {node}</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="./static/uPlot.min.css"><link rel="stylesheet" href="./static/live.css">
</head>
<body data-interval="{_e(view['interval_seconds'])}" data-cycle="{_e(view['cycle'])}">
<header><h1>podgpu <span id="node">{node}</span></h1>
<p id="status" class="{_e(view['health']['status'])}">{_e(status_line(view))}</p>
<nav><a href="./metrics">/metrics</a> <a href="./health">/health</a>
<a href="./api/v1/snapshot">/api/v1/snapshot</a> <span>podgpu {_e(view['version'])}</span></nav>
<noscript><p>JavaScript is off: this is the summary of cycle {_e(view['cycle'])}; reload for new
values.</p></noscript></header>
<main><h2>GPUs</h2><section id="gpus" class="tiles">{tiles}</section>
<h2>Pods</h2><div class="scroll"><table id="pods"><thead><tr>{head}</tr></thead>
<tbody>{rows}</tbody></table></div>{empty}
<p class="legend">Highlighted rows hold a GPU and use less than 1 % of it. Memory and
utilization come from the container's GPU processes, or from the GPU itself when it is held
exclusively and NVML gives no process data; "-" means unknown.</p></main>
<script src="./static/uPlot.iife.min.js"></script><script src="./static/live.js"></script>
</body>
</html>
""".encode()
