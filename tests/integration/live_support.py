"""Shared by the live-page tests and tests/integration/make_live_screenshots.py: a scenario with
a hostile pod name and an idle pod, Debian's chromium under Playwright, a non-blank check for
screenshots, and a one-file HTTP server for feeding `podgpu top` a fixed snapshot."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

XSS = "<script>alert(1)</script>"
SCENARIO: dict[str, Any] = {"pods": [
    {"namespace": "ml", "name": "train-0", "containers": [{"name": "trainer", "gpus": [{"gpu": 0}]}]},
    {"namespace": "inference", "name": "infer-a",
     "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 0, "share": 0.6}]}]},
    {"namespace": "inference", "name": "infer-b",
     "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 1, "share": 0.4}]}]},
    # a pod-supplied string that would run as script if the page or JSON did not escape it
    {"namespace": "evil", "name": XSS, "containers": [{"name": "x", "gpus": [{"gpu": 2}]}]},
    # holds GPU 3 and never uses it: the allocated-but-idle case
    {"namespace": "ml", "name": "idle-0", "containers": [{"name": "notebook",
                                                          "gpus": [{"gpu": 3, "share": 0}]}]},
]}
POD_NAMES = {"train-0", "infer-a", "infer-b", XSS, "idle-0"}


def write_scenario(directory: Path) -> str:
    path = directory / "scenario.json"
    path.write_text(json.dumps(SCENARIO), encoding="utf-8")
    return str(path)


def chromium_path() -> str:
    """Debian's chromium (scripts/check installs it); PODGPU_CHROMIUM overrides."""
    path = os.environ.get("PODGPU_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise AssertionError(f"chromium not found at {path}: run scripts/check (apt-get install chromium)")
    return path


def launch(playwright: Any) -> Any:
    # --no-sandbox: CI runs as root, where chromium refuses its sandbox
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                      args=["--no-sandbox", "--disable-gpu"])


def colour_stats(png: Path) -> tuple[int, float]:
    """(distinct colours, share of the most common colour) of a screenshot."""
    from PIL import Image

    with Image.open(png) as im:
        rgb = im.convert("RGB")
        counts = rgb.getcolors(maxcolors=1 << 24) or []
        total = rgb.width * rgb.height
    return len(counts), max(c for c, _ in counts) / total


def top_pod_rows(text: str) -> list[list[str]]:
    """Pod rows of `podgpu top --once` output, split on runs of two or more spaces."""
    import re

    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    return [re.split(r" {2,}", line.strip()) for line in lines[start + 1:] if line.strip()]


@contextmanager
def serve_bytes(body: bytes, content_type: str = "application/json") -> Iterator[str]:
    """Serve one body at every path on a loopback port; yields the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
