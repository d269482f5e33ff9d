"""Regenerate the README screenshots of the live page and of `podgpu top`.

    .venv/bin/python -m tests.integration.make_live_screenshots [--out docs/img] [--seconds 24]

Starts `podgpu serve --simulate 4` with the built-in pods plus one idle pod, lets the page chart
about `--seconds` of the compressed gpu-burn pattern in Debian's chromium (the same browser set-up
as test_live_browser.py), and writes live-page.png. For top it renders `podgpu top`'s own view
(rich, colours included) to HTML with rich's recorder and photographs that: top.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from playwright.sync_api import sync_playwright
from rich.console import Console

from podgpu.top import TopState, poll, render, snapshot_url
from tests.conftest import free_port
from tests.integration.live_support import colour_stats, launch

ROOT = Path(__file__).resolve().parents[2]
PODS = {"pods": [
    {"namespace": "ml", "name": "train-0", "containers": [{"name": "trainer", "gpus": [{"gpu": 0}]}]},
    {"namespace": "inference", "name": "infer-a",
     "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 0, "share": 0.6}]}]},
    {"namespace": "inference", "name": "infer-b",
     "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 1, "share": 0.4}]}]},
    {"namespace": "research", "name": "notebook-7f9c", "containers": [
        {"name": "jupyter", "gpus": [{"gpu": 3, "share": 0}]}]},
]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--seconds", type=float, default=24.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "pods.json"
        scenario.write_text(json.dumps(PODS))
        server = subprocess.Popen(
            [sys.executable, "-m", "podgpu", "serve", "--simulate", "4", "-c", "500",
             "--simulate-burn", "6,6", "--simulate-scenario", str(scenario),
             "--address", f"127.0.0.1:{port}"],
            env={**os.environ, "NODE_NAME": "gpu-node-1"}, stderr=subprocess.DEVNULL)
        try:
            with sync_playwright() as p:
                browser = launch(p)
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                deadline = time.monotonic() + 10
                while True:
                    try:
                        page.goto(url + "/")
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                page.wait_for_timeout(args.seconds * 1000)
                shot = args.out / "live-page.png"
                page.screenshot(path=str(shot), full_page=True)
                print(shot, "colours/top share:", colour_stats(shot))

                with ThreadPoolExecutor(2) as pool:
                    results = poll([snapshot_url(url)], 2.0, pool)
                console = Console(record=True, width=118, file=open(os.devnull, "w"),  # noqa: SIM115
                                  force_terminal=True, color_system="truecolor")
                console.print(render(results, TopState(), time.time()))
                html = Path(tmp) / "top.html"
                html.write_text(console.export_html(inline_styles=True, code_format=(
                    "<!doctype html><html><head><meta charset='utf-8'><style>"
                    "body{{margin:0;background:#1e1e1e;color:#ddd}}pre{{margin:12px;font:13px/1.35 "
                    "'DejaVu Sans Mono',monospace}}</style></head><body><pre>{code}</pre></body></html>")))
                page = browser.new_page(viewport={"width": 1000, "height": 300})
                page.goto(html.as_uri())
                shot = args.out / "top.png"
                page.screenshot(path=str(shot), full_page=True)
                print(shot, "colours/top share:", colour_stats(shot))
                browser.close()
        finally:
            server.terminate()
            server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
