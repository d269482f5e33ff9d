"""Prometheus text format 0.0.4, rendered once per cycle from a frozen snapshot."""

from podgpu.sinks.prometheus.exposition import CONTENT_TYPE, RenderOptions, render

__all__ = ["CONTENT_TYPE", "RenderOptions", "render"]
