"""The CloudWatch commands beyond `serve`, dispatched by cli.main and imported lazily.

`podgpu emf` (the EMF bridge for any Prometheus endpoint), `podgpu plan` (what a cluster costs in
CloudWatch and Prometheus), `podgpu cloudwatch-dashboard` and `podgpu cloudwatch-alarms`. Each
parses its own flags, so `podgpu serve` never imports them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "emf": ("podgpu.bridge.run",
            "scrape Prometheus endpoints (e.g. dcgm-exporter) and send CloudWatch EMF"),
    "plan": ("podgpu.plan.cli",
             "custom metrics, log bytes and dollars of a cluster shape, three ways side by side"),
    "cloudwatch-dashboard": ("podgpu.cwassets.cli",
                             "print a CloudWatch dashboard body (PutDashboard) for a config"),
    "cloudwatch-alarms": ("podgpu.cwassets.cli",
                          "print PutMetricAlarm requests: XID errors, a lost GPU, an idle GPU"),
}


def run(command: str, argv: Sequence[str]) -> int:
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(list(argv)) if command in ("emf", "plan")
               else module.main(command, list(argv)))
