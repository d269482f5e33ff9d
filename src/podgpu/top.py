"""podgpu top: GPUs and pods of one or many podgpu endpoints in the terminal.

Reads each node's `/api/v1/snapshot` (the same document the live page draws), all nodes at once
with a per-node timeout, so one dead node costs at most --timeout and is shown as dead, and a
malformed one as bad (topdoc.py bounds, checks and escapes what a node sends). Pods are
sorted by GPU use; pods that hold a GPU and use under 1 % of it are marked IDLE. `--once`
prints one plain-text snapshot (scripts, CI logs); otherwise the view refreshes every interval
and reads keys: s sort, / filter, i idle only, c clear, q quit.

Imported lazily by cli (like burn): `rich` is needed only here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import select
import shutil
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from podgpu.errors import ConfigError
from podgpu.options import Option, add_options, go_int, parse_bool, resolve
from podgpu.sinks.live import fmt
from podgpu.sinks.live.page import pod_cells
from podgpu.sinks.live.schema import PodView, SnapshotView
from podgpu.topdoc import NodeResult, clean, fetch

__all__ = ["NodeResult", "clean", "fetch", "run"]

DEFAULT_URL = "http://127.0.0.1:9400"
SNAPSHOT_PATH = "/api/v1/snapshot"
DEFAULT_TIMEOUT = 2.0
SORTS = ("util", "memory", "name", "node")
BAR_WIDTH = 10


@dataclass(frozen=True, slots=True)
class TopState:
    """What the user chose: sort key, filter text, idle-only; `typing` while editing a filter."""

    sort: str = "util"
    filter: str = ""
    idle_only: bool = False
    typing: str | None = None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def _sort(text: str) -> str:
    if text not in SORTS:
        raise ValueError(f"use {', '.join(SORTS)}, got {text!r}")
    return text


OPTIONS: tuple[Option, ...] = (
    Option(("--once",), "once", None, False, "print one plain-text snapshot and exit",
           parse_bool, True),
    Option(("--timeout",), "timeout", None, DEFAULT_TIMEOUT, "seconds to wait for each node",
           _float, metavar="SECONDS"),
    Option(("--interval",), "interval", None, 0.0, "seconds between refreshes", _float,
           metavar="SECONDS", shown="the nodes' collect interval"),
    Option(("--sort",), "sort", None, "util",
           "pod order: util (busiest first), memory, name, node", _sort, metavar="|".join(SORTS)),
    Option(("--filter",), "filter", None, "",
           "only pods whose node, namespace, pod or container contains TEXT", metavar="TEXT",
           shown="none"),
    Option(("--idle",), "idle", None, False,
           "only pods that hold a GPU and use less than 1%% of it", parse_bool, True),
    Option(("--width",), "width", None, 0, "columns for --once", go_int, metavar="N",
           shown="the terminal's, or 160"),
)
"""`podgpu top`'s flags (podgpu.options, the engine every command uses), after the URLs."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("urls", nargs="*", metavar="URL",
                        help=f"podgpu endpoints: http://host:port, host:port or host "
                             f"(default {DEFAULT_URL})")
    add_options(parser, OPTIONS, bool_takes_word=False)


def main(argv: Sequence[str]) -> int:
    """`podgpu top [URL...] [flags]` (the command registry's entry point)."""
    parser = argparse.ArgumentParser(prog="podgpu top", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(list(argv)))


def _resolved(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults applied and values parsed (ConfigError, exit 2, naming the flag)."""
    return argparse.Namespace(urls=args.urls, **resolve(args, OPTIONS, {}).values)


def snapshot_url(text: str) -> str:
    """'host', 'host:port', 'http://host:port[/prefix]' -> the snapshot URL. ConfigError on
    anything that is not an http(s) URL with a host (exit 2 with the argument named)."""
    raw = text.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parsed = urllib.parse.urlsplit(raw)
    try:
        port = parsed.port
    except ValueError as exc:
        raise ConfigError(f"top: URL {text!r}: bad port ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"top: URL {text!r}: expected http(s)://HOST[:PORT], HOST:PORT or HOST")
    netloc = parsed.netloc if port is not None else f"{parsed.netloc}:9400"
    path = parsed.path.rstrip("/")
    if not path.endswith(SNAPSHOT_PATH):
        path += SNAPSHOT_PATH
    return urllib.parse.urlunsplit((parsed.scheme, netloc, path, "", ""))


def poll(urls: Sequence[str], timeout: float, pool: ThreadPoolExecutor) -> list[NodeResult]:
    """All nodes at once, each within `timeout` for the whole answer (topdoc.fetch); the wait
    here is a second line of defence (plus a little) so one node never holds the view."""
    futures = [pool.submit(fetch, u, timeout) for u in urls]
    done, _ = wait(futures, timeout=timeout + 0.5)
    return [f.result() if f in done else NodeResult(u, None, f"no complete answer within {timeout:g} s")
            for u, f in zip(urls, futures, strict=True)]


def bar(ratio: float | None) -> str:
    if ratio is None:
        return " " * BAR_WIDTH
    n = max(0, min(BAR_WIDTH, math.floor(ratio * BAR_WIDTH + 0.5)))
    return "█" * n + "·" * (BAR_WIDTH - n)


def node_name(res: NodeResult) -> str:
    return clean(res.view["node"]) if res.view else urllib.parse.urlsplit(res.url).netloc


def pod_rows(results: Sequence[NodeResult], state: TopState) -> list[tuple[str, PodView]]:
    """(node, pod) pairs after the filter, in the chosen order."""
    rows = [(node_name(r), p) for r in results if r.view for p in r.view["pods"]]
    needle = state.filter.lower()
    if needle:
        rows = [(n, p) for n, p in rows
                if any(needle in str(x).lower() for x in (n, p["namespace"], p["pod"], p["container"]))]
    if state.idle_only:
        rows = [(n, p) for n, p in rows if p["idle"]]

    def name(row: tuple[str, PodView]) -> tuple[str, str, str, str]:
        n, p = row
        return (p["namespace"], p["pod"], p["container"], n)

    rows.sort(key=name)
    if state.sort == "util":
        rows.sort(key=lambda r: -1.0 if r[1]["utilization_ratio"] is None
                  else r[1]["utilization_ratio"], reverse=True)
    elif state.sort == "memory":
        rows.sort(key=lambda r: r[1]["memory_used_bytes"] or -1, reverse=True)
    elif state.sort == "node":
        rows.sort(key=lambda r: r[0])
    return rows


def _age(view: SnapshotView, now: float) -> tuple[str, bool]:
    age = max(0.0, now - float(view["taken_at"]))
    stale = age > 3 * float(view.get("interval_seconds") or 1.0) + 2.0
    return f"{age:.1f} s ago", stale


def render(results: Sequence[NodeResult], state: TopState, now: float) -> RenderableType:
    parts: list[RenderableType] = []
    for res in results:
        if res.view is None:
            state_word = "BAD" if res.bad else "DEAD"
            parts.append(Text(f"{node_name(res)}  {state_word}: {clean(res.error, 400)}  "
                              f"({clean(res.url, 400)})", style="bold red"))
            continue
        v = res.view
        age, stale = _age(v, now)
        health = v["health"]
        status = "STALE" if stale else clean(health["status"])
        line = Text(f"{clean(v['node'])}  {clean(v['backend'])}  cycle {v['cycle']}  {age}  {status}",
                    style="bold red" if stale or health["status"] != "ok" else "bold")
        if health["reasons"]:
            line.append("  " + clean("; ".join(health["reasons"])), style="red")
        gpus = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for col in ("GPU", "MODEL", "UTIL", "", "MEMORY", "", "POWER", "TEMP", "SHARING", "PODS"):
            gpus.add_column(col, no_wrap=col != "PODS")
        for d in v["devices"]:
            total = d["memory_total_bytes"]
            mem_ratio = (d["memory_used_bytes"] / total
                         if total and d["memory_used_bytes"] is not None else None)
            holders = ", ".join(f"{h['namespace']}/{h['pod']}" for h in d["holders"]) or "none"
            gpus.add_row(*(Text(clean(c)) for c in (
                d["gpu"], d["model"], bar(d["utilization_ratio"]), fmt.percent(d["utilization_ratio"]),
                bar(mem_ratio), fmt.gib(d["memory_used_bytes"]), fmt.watts(d["power_watts"]),
                fmt.celsius(d["temperature_celsius"]), d["sharing"], holders)))
        parts += [line, gpus, Text("")]
    rows = pod_rows(results, state)
    title = f"PODS sorted by {state.sort}"
    if state.filter:
        title += f", filter {clean(state.filter)!r}"
    if state.idle_only:
        title += ", idle only"
    parts.append(Text(f"{title} ({len(rows)})", style="bold"))
    pods = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("NODE", "NAMESPACE", "POD", "CONTAINER", "GPUS", "MEMORY", "UTIL", ""):
        pods.add_column(col, no_wrap=True)
    for node, p in rows:
        style = "bold yellow" if p["idle"] else ""
        pods.add_row(*(Text(clean(c)) for c in (node, *pod_cells(p), "IDLE" if p["idle"] else "")),
                     style=style)
    parts.append(pods)
    if state.typing is not None:
        parts.append(Text(f"filter: {clean(state.typing)}_", style="reverse"))
    else:
        parts.append(Text("s sort · / filter · i idle only · c clear · q quit", style="dim"))
    return Group(*parts)


def plain_text(results: Sequence[NodeResult], state: TopState, now: float, width: int) -> str:
    """The view as plain text (no colour, no cursor codes), as `--once` prints it."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, no_color=True,
                      color_system=None, highlight=False, emoji=False)
    group = render(results, state, now)
    assert isinstance(group, Group)
    console.print(Group(*group.renderables[:-1]))  # no key help in a snapshot
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def apply_key(state: TopState, key: str) -> TopState | None:
    """The next state after one key; None means quit."""
    if state.typing is not None:
        if key in ("\r", "\n"):
            return replace(state, filter=state.typing, typing=None)
        if key == "\x1b":
            return replace(state, typing=None)
        if key in ("\x7f", "\b"):
            return replace(state, typing=state.typing[:-1])
        return replace(state, typing=state.typing + key) if key.isprintable() else state
    if key in ("q", "Q", "\x03"):
        return None
    if key == "s":
        return replace(state, sort=SORTS[(SORTS.index(state.sort) + 1) % len(SORTS)])
    if key == "i":
        return replace(state, idle_only=not state.idle_only)
    if key == "/":
        return replace(state, typing=state.filter)
    if key == "c":
        return replace(state, filter="", idle_only=False)
    return state


@contextlib.contextmanager
def _cbreak() -> Iterator[bool]:
    """Keys without Enter while the view runs; yields False when stdin is not a terminal."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _read_key(timeout: float, keys: bool) -> str:
    if not keys:
        time.sleep(timeout)
        return ""
    ready, _, _ = select.select([sys.stdin], [], [], max(0.0, timeout))
    return os.read(sys.stdin.fileno(), 1).decode(errors="replace") if ready else ""


def run(args: argparse.Namespace) -> int:
    """Exit 0, 1 when --once finds a node dead, 2 on a bad URL or option."""
    try:
        args = _resolved(args)
        urls = [snapshot_url(u) for u in (args.urls or [DEFAULT_URL])]
        if not (0 < args.timeout <= 3600 and 0 <= args.interval <= 3600
                and 0 <= args.width <= 10_000):
            raise ConfigError("top: --timeout must be in (0, 3600], --interval in [0, 3600], "
                              "--width in [0, 10000]")
    except ConfigError as exc:
        print(f"podgpu: {exc}", file=sys.stderr)
        return 2
    state = TopState(sort=args.sort, filter=args.filter, idle_only=args.idle)
    try:
        with ThreadPoolExecutor(max_workers=min(32, len(urls))) as pool:
            if args.once:
                results = poll(urls, args.timeout, pool)
                width = args.width or (shutil.get_terminal_size((160, 24)).columns
                                       if sys.stdout.isatty() else 160)
                sys.stdout.write(plain_text(results, state, time.time(), width))
                return 1 if any(r.view is None for r in results) else 0
            return _interactive(urls, args, state, pool)
    except KeyboardInterrupt:  # Ctrl-C while waiting for nodes: no traceback
        return 130


def _interactive(urls: list[str], args: argparse.Namespace, state: TopState,
                 pool: ThreadPoolExecutor) -> int:
    from rich.live import Live

    console = Console()
    results = poll(urls, args.timeout, pool)
    with (contextlib.suppress(KeyboardInterrupt), _cbreak() as keys,
          Live(console=console, screen=True, auto_refresh=False) as live):
        next_poll = time.monotonic()
        while True:
            if time.monotonic() >= next_poll:
                results = poll(urls, args.timeout, pool)
                views = [r.view for r in results if r.view]
                interval = args.interval or min(
                    (float(v.get("interval_seconds") or 1.0) for v in views), default=1.0)
                next_poll = time.monotonic() + max(interval, 0.2)
            live.update(render(results, state, time.time()), refresh=True)
            key = _read_key(next_poll - time.monotonic(), keys)
            if key:
                new = apply_key(state, key)
                if new is None:
                    break
                state = new
    return 0
