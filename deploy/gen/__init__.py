"""Generators for podgpu's Grafana dashboard and Prometheus rules.

Run through `scripts/gen-dashboard` and `scripts/gen-rules`; the tests regenerate into a
temporary directory and fail on any difference from the committed files.
"""
