"""The entry point: one lazily loaded command registry and one error-to-exit-code mapping.

`podgpu [serve] [flags]` (serve is the default, so a dcgm-exporter DaemonSet's args work as they
are), and the commands in COMMANDS. A command's module is imported only when it runs, so `serve`
never loads the CloudWatch tools and `top` alone needs `rich`. Exit status (errors.exit_status):
0 ok, 1 runtime failure (no GPU driver outside Kubernetes, port in use), 2 bad input (flags,
environment, files). In a pod, "no GPU driver yet" is waited for, never an exit
(`--wait-for-driver`, backends/driverwait.py).

SIGHUP is ignored from the first line of `main`, before any import that takes time, so a reload
signal sent while podgpu starts never kills it; the agent's reload handler
takes over once it serves.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from podgpu import signals

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


class Command(NamedTuple):
    """`target` is "module:function", imported when the command runs; the function takes the
    arguments after the command name (with `with_name`, the name first) and returns the exit
    status or raises a PodgpuError. `extra` names the pip extra an ImportError asks for."""

    target: str
    help: str
    with_name: bool = False
    extra: str | None = None


COMMANDS: dict[str, Command] = {
    "serve": Command("podgpu.serve:main", "collect GPU metrics and serve /metrics (default)"),
    "fields": Command("podgpu.fields.listing:main", "list every DCGM field podgpu can export"),
    "burn": Command("podgpu.burn:main", "GPU load generator (gpu-burn pattern)"),
    "top": Command("podgpu.top:main", "GPUs and pods of one or many nodes in the terminal",
                   extra="top"),
    "emf": Command("podgpu.bridge.run:main",
                   "scrape Prometheus endpoints (e.g. dcgm-exporter) and send CloudWatch EMF"),
    "plan": Command("podgpu.plan.cli:main", "custom metrics, log bytes and dollars of a cluster "
                    "shape, three ways side by side"),
    "cloudwatch-dashboard": Command("podgpu.cwassets.cli:main", "print a CloudWatch dashboard "
                                    "body (PutDashboard) for a config", with_name=True),
    "cloudwatch-alarms": Command("podgpu.cwassets.cli:main", "print PutMetricAlarm requests: XID "
                                 "errors, a lost GPU, an idle GPU", with_name=True),
    "report": Command("podgpu.accounting.report_cli:main", "GPU-hours, efficiency, kWh and cost "
                      "per namespace and pod, from a Prometheus"),
}
"""Add a command with one entry here."""

DAEMONS = ("serve", "emf")
"""Long-running commands: SIGHUP never kills them."""


def build_parser() -> argparse.ArgumentParser:
    """`podgpu --help`: the commands; each command parses its own flags."""
    import argparse

    from podgpu import __version__

    parser = argparse.ArgumentParser(
        prog="podgpu", allow_abbrev=False,
        description="Per-pod NVIDIA GPU metrics for Prometheus and CloudWatch, dcgm-exporter "
        "compatible, read from NVML without the DCGM daemon.")
    parser.add_argument("-v", "--version", action="version", version=f"podgpu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        sub.add_parser(name, help=f"{cmd.help}: podgpu {name} --help", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
        args.insert(0, "serve")  # dcgm-exporter style: flags only
    name, rest = args[0], args[1:]
    if name in DAEMONS:  # first, before any slow import
        signals.ignore_sighup_at_start()
        if argv is None:  # a real process; the server's graceful handlers take over once it
            signals.end_on_sigint_at_start()  # serves (http/server.py, bridge/run.py)
    elif argv is None:
        signals.end_quietly_on_sigpipe()
    cmd = COMMANDS.get(name)
    if cmd is None:
        build_parser().parse_args(args)  # --help, --version, or a usage error (exit 2)
        return 2
    from podgpu.errors import PodgpuError, exit_status

    prog = "podgpu" if name == "serve" else f"podgpu {name}"
    try:
        return _run(name, cmd, rest)
    except PodgpuError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exit_status(exc)


def _run(name: str, cmd: Command, argv: list[str]) -> int:
    import importlib

    module_name, _, function = cmd.target.partition(":")
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if cmd.extra is None:
            raise
        print(f"podgpu: {name} needs the '{cmd.extra}' extra (pip install "
              f"'podgpu[{cmd.extra}]'): {exc}", file=sys.stderr)
        return 1
    entry = getattr(module, function)
    return int(entry(name, argv) if cmd.with_name else entry(argv))


__all__ = ["COMMANDS", "Command", "build_parser", "main"]
