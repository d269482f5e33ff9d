"""`podgpu emf` flags: its own (targets, scrape timing, target labels) plus the EMF flags of
`podgpu serve`, reused from config.OPTIONS so both commands parse and document them alike.

Flag > environment > default, validated before anything starts; a bad value is one line naming
the flag or variable (exit 2).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podgpu.bridge.scrape import parse_url
from podgpu.config import OPTIONS as SERVE_OPTIONS
from podgpu.config import Option, parse_bool
from podgpu.errors import ConfigError

DEFAULT_SCRAPE_INTERVAL = 10.0
DEFAULT_LISTEN = ":9401"
DEFAULT_JOB = "podgpu-emf"
REUSED = ("cloudwatch_config", "emf_destination", "cluster_name", "aws_region",
          "emf_endpoint_url", "emf_log_group", "emf_log_stream", "emf_create_log_group",
          "emf_interval", "emf_storage_resolution", "emf_queue_bytes", "emf_spool_dir",
          "emf_keep_unmatched", "debug", "log_format")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not (value == value and 0.1 <= value <= 3600):
        raise ValueError(f"must be between 0.1 and 3600 seconds, got {text!r}")
    return value


def _list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


_REUSED = {o.dest: o for o in SERVE_OPTIONS if o.dest in REUSED}
_LABELS = next(o for o in SERVE_OPTIONS if o.dest == "emf_labels").parse

OWN: tuple[Option, ...] = (
    Option(("--scrape",), "scrape", "PODGPU_EMF_SCRAPE", (),
           "Prometheus text endpoint to scrape, repeatable (environment: comma-separated)",
           _list, metavar="URL", append=True),
    Option(("--scrape-interval",), "scrape_interval", "PODGPU_EMF_SCRAPE_INTERVAL",
           DEFAULT_SCRAPE_INTERVAL, "seconds between scrapes; every scrape's values go into the "
           "interval's value distributions", _interval, metavar="SECONDS"),
    Option(("--scrape-timeout",), "scrape_timeout", "PODGPU_EMF_SCRAPE_TIMEOUT", None,
           "seconds a target has to answer (default: the scrape interval, at most 10)",
           _interval, metavar="SECONDS"),
    Option(("--job",), "job", "PODGPU_EMF_JOB_NAME", DEFAULT_JOB,
           "the job label of every scraped series, as a Prometheus scrape job name",
           metavar="NAME"),
    Option(("--target-label",), "target_labels", "PODGPU_EMF_TARGET_LABELS", (),
           "KEY=VALUE attached to every scraped series like a Prometheus target label, "
           "repeatable (e.g. Service=nvidia-dcgm-exporter for the seed's declaration)", _LABELS,
           metavar="KEY=VALUE", append=True),
    Option(("--honor-labels",), "honor_labels", "PODGPU_EMF_HONOR_LABELS", True,
           "on a clash between a target label (job, instance, --target-label) and the series' "
           "own label, keep the series' value (true), or set the target's and keep the series' "
           "as exported_<name> (false), as Prometheus' honor_labels", parse_bool, True),
    Option(("-a", "--address"), "address", "PODGPU_EMF_LISTEN", DEFAULT_LISTEN,
           "where /metrics and /health listen (HOST:PORT or :PORT), or 'off'", metavar="ADDR"),
)
OPTIONS: tuple[Option, ...] = OWN + tuple(_REUSED[d] for d in REUSED)


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    targets: tuple[str, ...]
    scrape_interval: float
    scrape_timeout: float
    job: str
    target_labels: tuple[tuple[str, str], ...]
    honor_labels: bool
    host: str | None
    port: int | None
    """None: no HTTP endpoint."""
    node_name: str
    cloudwatch_config: str
    emf_destination: str = "cloudwatch"
    cluster_name: str = ""
    aws_region: str | None = None
    emf_endpoint_url: str | None = None
    emf_log_group: str | None = None
    emf_log_stream: str | None = None
    emf_create_log_group: bool = True
    emf_interval: float = 60.0
    emf_storage_resolution: int = 60
    emf_queue_bytes: int = 8 << 20
    emf_spool_dir: str | None = None
    emf_keep_unmatched: bool = False
    debug: bool = False
    log_format: str = "text"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for opt in OPTIONS:
        shown = opt.default if opt.default not in (None, ()) else "none"
        env_help = f" [env {opt.env}; default {shown}]"
        if opt.is_bool:
            parser.add_argument(*opt.flags, dest=opt.dest, nargs="?", const="true", default=None,
                                metavar="BOOL", help=opt.help + env_help)
        else:
            parser.add_argument(*opt.flags, dest=opt.dest, default=None, metavar=opt.metavar,
                                action="append" if opt.append else "store",
                                help=opt.help + env_help)


def settings_from(ns: argparse.Namespace, env: Mapping[str, str] | None = None
                  ) -> BridgeSettings:
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw = getattr(ns, opt.dest, None)
        if isinstance(raw, list):
            raw = ",".join(raw)
        source = opt.flags[-1]
        if raw is None and env.get(opt.env) not in (None, ""):
            raw, source = env[opt.env], f"environment variable {opt.env}"
        if raw is None:
            values[opt.dest] = opt.default
            continue
        try:
            values[opt.dest] = parse_bool(raw) if opt.is_bool else opt.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    if not values["scrape"]:
        raise ConfigError("--scrape URL is required (the endpoint to bridge, e.g. "
                          "http://127.0.0.1:9400/metrics for dcgm-exporter on this node)")
    if not values["cloudwatch_config"]:
        raise ConfigError("--cloudwatch-config FILE is required (the CloudWatch agent config "
                          "whose metric_declaration says what to extract)")
    if values["emf_interval"] < values["scrape_interval"]:
        raise ConfigError(f"--emf-interval {values['emf_interval']:g}: shorter than "
                          f"--scrape-interval {values['scrape_interval']:g}")
    if values["log_format"] not in ("text", "json"):
        raise ConfigError(f"--log-format {values['log_format']!r}: use text or json")
    timeout = values.pop("scrape_timeout") or min(values["scrape_interval"], 10.0)
    if timeout > values["scrape_interval"]:
        raise ConfigError(f"--scrape-timeout {timeout:g}: longer than --scrape-interval "
                          f"{values['scrape_interval']:g}")
    host, port = _address(values.pop("address"))
    targets = values.pop("scrape")
    for t in targets:
        parse_url(t)  # ConfigError for anything but an http(s) URL
    if len(set(targets)) != len(targets):
        raise ConfigError("--scrape: the same URL is given twice")
    node = env.get("NODE_NAME", "") or socket.gethostname()
    return BridgeSettings(targets=targets, scrape_timeout=timeout, host=host, port=port,
                          node_name=node, **values)


def _address(text: str) -> tuple[str | None, int | None]:
    if text.strip().lower() in ("off", "none", ""):
        return None, None
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--address {text!r}: expected HOST:PORT, :PORT or off, e.g. :9401")
    return host or None, int(port)


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> BridgeSettings:
    parser = argparse.ArgumentParser(prog="podgpu emf")
    add_arguments(parser)
    return settings_from(parser.parse_args(list(argv)), env)
