"""The live page's static files: the vendored uPlot is the version we say, with its licence, and
every file the page links is served from the fixed table."""

from __future__ import annotations

import re

from podgpu.http.live import STATIC_TYPES, UPLOT_VERSION, load_static
from podgpu.model import Snapshot
from podgpu.sinks.live.page import render_page
from podgpu.sinks.live.view import ViewOptions, build_view


def test_vendored_uplot_matches_its_declared_version_and_licence() -> None:
    files = load_static()
    banner = files["uPlot.iife.min.js"][:80].decode()
    assert banner.startswith(f"/*! https://github.com/leeoniya/uPlot (v{UPLOT_VERSION}) */")
    assert files["uPlot.LICENSE"].startswith(b"The MIT License")
    assert b"Leon Sorokin" in files["uPlot.LICENSE"]


def test_every_asset_the_page_links_is_in_the_table() -> None:
    page = render_page(build_view(Snapshot(1.0, ()), ViewOptions("n", "b", "v", 1.0))).decode()
    linked = set(re.findall(r'(?:src|href)="\./static/([^"]+)"', page))
    assert linked and linked <= set(STATIC_TYPES)
    assert all(load_static()[name] for name in STATIC_TYPES)
