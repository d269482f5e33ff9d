"""The live view: `/api/v1/snapshot` (JSON) and the page at `/`, both rendered once per cycle on
the collect thread from the same view, like the exposition (docs/live.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from podgpu.model import Snapshot
from podgpu.sinks.live.page import render_page
from podgpu.sinks.live.view import SCHEMA, ViewOptions, build_view

JSON_CONTENT_TYPE = "application/json"
SNAPSHOT_KEY = "snapshot.json"
PAGE_KEY = "index.html"

# JSON is valid HTML-inert too: '<', '>' and '&' become \u escapes, so a pod named
# "<script>..." cannot close a tag even if a client ever pastes the body into a page.
_INERT = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_json(view: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON; non-finite floats are already None in the view (allow_nan=False
    turns a miss into an error in tests instead of invalid JSON on the wire)."""
    text = json.dumps(view, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.translate(_INERT).encode()


class LiveRenderer:
    """snapshot -> {SNAPSHOT_KEY: json, PAGE_KEY: html}; handed to the Publisher by cli."""

    def __init__(self, opts: ViewOptions) -> None:
        self._opts = opts

    def __call__(self, snapshot: Snapshot) -> Mapping[str, bytes]:
        view = build_view(snapshot, self._opts)
        return {SNAPSHOT_KEY: render_json(view), PAGE_KEY: render_page(view)}


__all__ = ["JSON_CONTENT_TYPE", "PAGE_KEY", "SCHEMA", "SNAPSHOT_KEY", "LiveRenderer",
           "ViewOptions", "build_view", "render_json", "render_page"]
