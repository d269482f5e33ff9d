"""The live page in a real headless browser (Debian's chromium driven by Playwright) against
`podgpu serve --simulate` agents in this process.

The only fault injection is Playwright's request routing, used to log every request and to
refuse any that leaves the origin (there must be none), and to keep the snapshot bodies the page
received so `podgpu top --once` can be run on exactly the snapshot the page shows.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from tests.conftest import wait_for
from tests.integration.live_support import (
    POD_NAMES,
    XSS,
    colour_stats,
    launch,
    serve_bytes,
    top_pod_rows,
    write_scenario,
)

pytestmark = pytest.mark.integration

ROWS_JS = """() => ({
  cycle: parseInt(document.body.dataset.cycle),
  rows: [...document.querySelectorAll('#pods tbody tr')].map(tr => ({
    idle: tr.classList.contains('idle'),
    cells: [...tr.querySelectorAll('td')].map(td => td.textContent)})),
  util0: document.querySelector('article[data-key] dd[data-f="util"]').textContent,
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(autouse=True)
def _close_contexts(browser) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """A failed test must not leave a context polling a stopped server into the next test."""
    yield
    for context in browser.contexts:
        with contextlib.suppress(PlaywrightError):
            context.unroute_all(behavior="ignoreErrors")
            context.close()


@pytest.fixture
def node(agent, tmp_path: Path):  # type: ignore[no-untyped-def]
    # 1 s busy / 1 s idle and a 250 ms interval: GPU 0's tile must change within seconds
    proc = agent("--simulate", "4", "-c", "250", "--simulate-burn", "1,1",  # in this process
                 "--simulate-scenario", write_scenario(tmp_path))
    proc.wait_ready()
    return proc


class Watch:
    """Every request the page makes, refusing any that leaves the origin; snapshot bodies kept
    by cycle; dialogs (an alert() would mean a pod name ran as script) and page errors."""

    def __init__(self, context: Any, origin: str) -> None:
        self.origin = origin
        self.urls: list[str] = []
        self.outside: list[str] = []
        self.snapshots: dict[int, bytes] = {}
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        context.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.urls.append(url)
        parts = urllib.parse.urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.origin:
            self.outside.append(url)
            route.abort()
            return
        if parts.path == "/api/v1/snapshot":
            try:
                resp = route.fetch()
                body = resp.body()
            except PlaywrightError:  # the server stopped under a poll (end of a test)
                with contextlib.suppress(PlaywrightError):
                    route.abort()
                return
            if resp.status == 200:
                self.snapshots[json.loads(body)["cycle"]] = body
            route.fulfill(response=resp, body=body)
            return
        route.continue_()

    def close(self, context: Any) -> None:
        """Close the context without a poll in flight failing inside the route handler."""
        context.unroute_all(behavior="ignoreErrors")
        context.close()

    def attach(self, page: Any) -> None:
        def on_dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)


def test_live_page_updates_escapes_and_stays_on_its_origin(browser, node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watch = Watch(context, node.url)
    page = context.new_page()
    watch.attach(page)
    page.goto(node.url + "/")
    first = int(page.get_attribute("body", "data-cycle"))  # the server-rendered cycle

    # values update in place across cycles: GPU 0 goes through busy and idle without a reload
    seen_util: set[str] = set()
    cycles: set[int] = set()
    busy_state = None  # a cycle in the busy half of the burn pattern

    def busy_idle_and_three_cycles() -> bool:
        nonlocal busy_state
        state = page.evaluate(ROWS_JS)
        seen_util.add(state["util0"])
        if state["util0"] == "100%":
            busy_state = state
        if state["cycle"] > first:
            cycles.add(state["cycle"])
        return {"100%", "0%"} <= seen_util and len(cycles) >= 3

    wait_for(busy_idle_and_three_cycles, timeout=15, interval=0.1,
             what="GPU 0 busy and idle over 3 cycles, updated in place")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # never reloaded

    assert busy_state is not None
    names = {r["cells"][1] for r in busy_state["rows"]}
    assert names == POD_NAMES
    # while the burn pattern is busy, only the pod that never uses its GPU is highlighted
    idle = [r["cells"][1] for r in busy_state["rows"] if r["idle"]]
    assert idle == ["idle-0"]
    # the hostile name is text in a cell, not markup: no dialog, no extra script element
    assert watch.dialogs == []
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    assert page.evaluate(f"[...document.querySelectorAll('td')].some(td => td.textContent === {json.dumps(XSS)})")
    assert page.locator("#gpus article").count() == 4
    assert page.locator("#gpus canvas").count() == 4  # one uPlot chart per GPU, drawn locally

    # no request left the origin; the page asked only for itself, its static files and the JSON
    assert watch.outside == []
    paths = {urllib.parse.urlsplit(u).path for u in watch.urls}
    assert paths == {"/", "/static/uPlot.min.css", "/static/live.css", "/static/uPlot.iife.min.js",
                     "/static/live.js", "/api/v1/snapshot"}
    assert watch.errors == []

    shot = tmp_path / "live.png"
    page.screenshot(path=str(shot), full_page=True)
    colours, top_share = colour_stats(shot)
    assert colours > 50 and top_share < 0.95, (colours, top_share)

    # the page and `podgpu top --once` show the same pods and values for the same snapshot
    state = page.evaluate(ROWS_JS)
    body = watch.snapshots[state["cycle"]]
    watch.close(context)
    with serve_bytes(body) as url:
        out = subprocess.run([sys.executable, "-m", "podgpu", "top", "--once", "--width", "200", url],
                             capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    top_rows = top_pod_rows(out.stdout)
    page_rows = [["test-node", *r["cells"]] + (["IDLE"] if r["idle"] else []) for r in state["rows"]]
    assert top_rows == page_rows


def test_without_javascript_the_page_is_a_plain_summary(browser, node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1000, "height": 800})
    watch = Watch(context, node.url)
    page = context.new_page()
    watch.attach(page)
    page.goto(node.url + "/")
    rows = page.locator("#pods tbody tr")
    assert {rows.nth(i).locator("td").nth(1).text_content() for i in range(rows.count())} == POD_NAMES
    # the pod that never uses its GPU is highlighted in any phase of the burn pattern
    assert "idle-0" in page.locator("tr.idle td:nth-child(2)").all_text_contents()
    assert page.locator("#gpus article").count() == 4
    assert "JavaScript is off" in page.locator("body").inner_text()
    assert watch.dialogs == [] and watch.outside == []
    assert not any(u.endswith("/api/v1/snapshot") for u in watch.urls)  # nothing polls
    shot = tmp_path / "nojs.png"
    page.screenshot(path=str(shot), full_page=True)
    colours, top_share = colour_stats(shot)
    assert colours > 20 and top_share < 0.95, (colours, top_share)
    watch.close(context)


def test_readable_on_a_phone(browser, node) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                  device_scale_factor=2, has_touch=True)
    page = context.new_page()
    page.goto(node.url + "/")
    # a function, not an expression string: the page's CSP forbids eval
    page.wait_for_function("() => parseInt(document.body.dataset.cycle) > 0 && "
                           "document.querySelectorAll('#gpus canvas').length === 4")
    # the page itself never scrolls sideways; only the pod table may, inside its own box
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    widths = page.evaluate("[...document.querySelectorAll('#gpus article')].map(a => a.getBoundingClientRect().width)")
    assert all(200 < w <= 390 for w in widths), widths  # one tile per row, full width
    context.close()


def test_basic_auth_of_the_web_config_covers_the_page_and_its_json(browser, agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same access control as /metrics: without the password nothing of the page is served;
    with it, the browser's credentials carry over to the page's own polls."""
    import bcrypt

    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web.write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    node = agent("--simulate", "2", "-c", "250", "--web-config-file", str(web))
    node.wait_ready()  # listening: /metrics needs the password now
    for path in ("/", "/api/v1/snapshot", "/static/live.js", "/metrics"):
        status, headers, _ = node.get(path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), path

    context = browser.new_context(http_credentials={"username": "alice", "password": "s3cret"})
    page = context.new_page()
    assert page.goto(node.url + "/").status == 200
    first = int(page.get_attribute("body", "data-cycle"))
    page.wait_for_function(f"() => parseInt(document.body.dataset.cycle) >= {first + 2}")
    assert page.locator("#status").get_attribute("class") == "ok"
    context.close()
