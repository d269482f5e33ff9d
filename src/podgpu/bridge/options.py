"""`podgpu emf` flags: its own (targets, scrape timing, target labels) plus the EMF and logging
tables `podgpu serve` uses (podgpu.config.emf), through the same option engine.

Flag > environment > default, validated before anything starts; a bad value is one line naming
the flag or variable (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podgpu.bridge.scrape import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_SAMPLES,
    parse_sample_limit,
    parse_url,
)
from podgpu.config import values as v
from podgpu.config.emf import EMF_OPTIONS, LOG_OPTIONS, emf_settings, log_settings, section
from podgpu.config.serve import HTTP_LIMIT_OPTIONS
from podgpu.errors import ConfigError
from podgpu.options import Option, csv_list, env_value, go_flags, new_parser, parse_bool, resolve
from podgpu.settings import EmfSettings, HttpSettings, LogSettings

DEFAULT_SCRAPE_INTERVAL = 10.0
DEFAULT_LISTEN = ":9401"
DEFAULT_JOB = "kubernetes-service-endpoints"  # the agent's default job

OWN: tuple[Option, ...] = (
    Option(("--scrape",), "scrape", "PODGPU_EMF_SCRAPE", (),
           "Prometheus text endpoint to scrape, repeatable (environment: comma-separated)",
           csv_list, metavar="URL", append=True),
    Option(("--scrape-interval",), "scrape_interval", "PODGPU_EMF_SCRAPE_INTERVAL",
           DEFAULT_SCRAPE_INTERVAL, "seconds between scrapes; every scrape's values go into the "
           "interval's value distributions", v.seconds_between(0.1, 3600.0), metavar="SECONDS"),
    Option(("--scrape-timeout",), "scrape_timeout", "PODGPU_EMF_SCRAPE_TIMEOUT", None,
           "seconds a target has to answer", v.seconds_between(0.1, 3600.0),
           metavar="SECONDS", shown="the scrape interval, at most 10"),
    Option(("--scrape-body-limit",), "scrape_body_limit", "PODGPU_EMF_SCRAPE_BODY_LIMIT",
           DEFAULT_MAX_BODY_BYTES, "largest answer of a target after gzip decompression (e.g. "
           "16M), like Prometheus' body_size_limit; a larger one fails that scrape", v.size,
           metavar="SIZE", shown="4M"),
    Option(("--scrape-sample-limit",), "scrape_sample_limit", "PODGPU_EMF_SCRAPE_SAMPLE_LIMIT",
           DEFAULT_MAX_SAMPLES, "most samples in one scrape of a target, like Prometheus' "
           "sample_limit; more fail that scrape", parse_sample_limit, metavar="N"),
    Option(("--job",), "job", "PODGPU_EMF_JOB_NAME", DEFAULT_JOB,
           "the job label of every scraped series, as a Prometheus scrape job name",
           metavar="NAME"),
    Option(("--target-label",), "target_labels", "PODGPU_EMF_TARGET_LABELS", (),
           "KEY=VALUE attached to every scraped series like a Prometheus target label, "
           "repeatable (e.g. Service=nvidia-dcgm-exporter for the seed's declaration)", v.labels,
           metavar="KEY=VALUE", append=True),
    Option(("--honor-labels",), "honor_labels", "PODGPU_EMF_HONOR_LABELS", False,
           "on a clash between a target label (job, instance, --target-label) and the series' "
           "own label, keep the series' value (true), or set the target's and keep the series' "
           "as exported_<name> (false), as Prometheus' honor_labels", parse_bool, True),
    Option(("-a", "--address"), "address", "PODGPU_EMF_LISTEN", DEFAULT_LISTEN,
           "where /metrics and /health listen (HOST:PORT or :PORT), or 'off'", metavar="ADDR"),
    Option(("--web-config-file",), "http.web_config_file", "PODGPU_EMF_WEB_CONFIG_FILE", None,
           "exporter-toolkit web config of /metrics and /health: TLS, client certificates, "
           "bcrypt basic auth, response headers; followed while running (docs/web-config.md)",
           metavar="FILE"),
)
OPTIONS: tuple[Option, ...] = OWN + HTTP_LIMIT_OPTIONS + EMF_OPTIONS + LOG_OPTIONS
"""Every `podgpu emf` flag; add one with an entry in OWN and a field in BridgeSettings."""


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    """`podgpu emf`, validated: the scrape side here, the EMF sink, listener and logging in the
    same component objects `serve` uses (seconds)."""

    targets: tuple[str, ...]
    scrape_interval: float
    scrape_timeout: float
    job: str
    target_labels: tuple[tuple[str, str], ...]
    honor_labels: bool
    node_name: str
    emf: EmfSettings
    http: HttpSettings
    """port None: no HTTP endpoint (--address off)."""
    log: LogSettings
    scrape_body_limit: int = DEFAULT_MAX_BODY_BYTES
    """Bytes after decompression."""
    scrape_sample_limit: int = DEFAULT_MAX_SAMPLES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from podgpu.options import add_options

    add_options(parser, OPTIONS)


def settings_from(ns: argparse.Namespace, env: Mapping[str, str] | None = None
                  ) -> BridgeSettings:
    r = resolve(ns, OPTIONS, env)
    val = r.values
    if not val["scrape"]:
        raise ConfigError("--scrape URL is required (the endpoint to bridge, e.g. "
                          "http://127.0.0.1:9400/metrics for dcgm-exporter on this node)")
    emf = emf_settings(r, OPTIONS, required=True)
    assert emf is not None
    interval = val["scrape_interval"]
    if emf.interval < interval:
        raise ConfigError(f"--emf-interval {emf.interval:g}: shorter than --scrape-interval "
                          f"{interval:g}")
    timeout = val["scrape_timeout"] or min(interval, 10.0)
    if timeout > interval:
        raise ConfigError(f"--scrape-timeout {timeout:g}: longer than --scrape-interval "
                          f"{interval:g}")
    try:
        host, port = v.address_or_off(val["address"])
    except ValueError as exc:
        raise r.fail("address", f"{exc}, or off") from None
    targets = val["scrape"]
    for t in targets:
        parse_url(t)  # ConfigError for anything but an http(s) URL
    if len(set(targets)) != len(targets):
        raise ConfigError("--scrape: the same URL is given twice")
    import socket

    node = env_value("NODE_NAME", env) or socket.gethostname()
    return BridgeSettings(
        targets=targets, scrape_interval=interval, scrape_timeout=timeout, job=val["job"],
        target_labels=val["target_labels"], honor_labels=val["honor_labels"], node_name=node,
        emf=emf, http=HttpSettings(host=host, port=port, **section(r, "http")),  # type: ignore[arg-type]
        log=log_settings(r), scrape_body_limit=val["scrape_body_limit"],
        scrape_sample_limit=val["scrape_sample_limit"])


def parser() -> argparse.ArgumentParser:
    return new_parser("podgpu emf", "Scrape Prometheus text endpoints (e.g. dcgm-exporter on "
                      "this node) and send CloudWatch EMF with the CloudWatch agent's "
                      "declarations, from every node.", OPTIONS)


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> BridgeSettings:
    return settings_from(parser().parse_args(go_flags(list(argv), OPTIONS)), env)
