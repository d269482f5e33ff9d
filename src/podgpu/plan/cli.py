"""`podgpu plan` flags and output (table or JSON). Bad input is one line naming the flag, exit 2."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

from podgpu.config.values import choice
from podgpu.errors import ConfigError
from podgpu.options import Option, go_flags, go_int, go_ms, new_parser, resolve
from podgpu.plan.insights import InsightsEstimate, estimate_insights
from podgpu.plan.model import (
    DEFAULT_INGEST_PER_GB,
    DEFAULT_METRIC_TIERS,
    PATHS,
    PRICES_AS_OF,
    PRICES_REGION,
    Estimate,
    PlanOptions,
    Prices,
    estimate,
)
from podgpu.sim.node import SHARING, Shape
from podgpu.sinks.cloudwatch.declarations import load_emf_config, parse_emf_config

TITLES = {"agent": "seed: central agent", "podgpu-60s": "podgpu EMF, 60 s",
          "podgpu-1s": "podgpu EMF, 1 s arrays"}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


OPTIONS: tuple[Option, ...] = (
    Option(("--nodes",), "nodes", None, 100, "GPU nodes", go_int, metavar="N"),
    Option(("--gpus-per-node",), "gpus_per_node", None, 8, "GPUs per node", go_int, metavar="N"),
    Option(("--gpu-model",), "gpu_model", None, "H100",
           "H100, H200, A100 or A10G: which fields exist", metavar="MODEL"),
    Option(("--sharing",), "sharing", None, "none",
           "none: one pod per GPU; time-slicing or mig: --pods-per-gpu pods share it",
           choice(*SHARING), metavar="|".join(SHARING)),
    Option(("--pods-per-gpu",), "pods_per_gpu", None, 1, "pods per GPU", go_int, metavar="N"),
    Option(("--churn-per-day",), "churn_per_day", None, 0.0,
           "pods replaced by newly named pods per day, cluster-wide", _float, metavar="N"),
    Option(("--cloudwatch-config",), "cloudwatch_config", None, None,
           "CloudWatch agent config with the declarations", metavar="FILE",
           shown="the seed's"),
    Option(("--cluster-name",), "cluster_name", None, "my-cluster", "ClusterName",
           metavar="NAME"),
    Option(("--emf-label",), "emf_label", None, None,
           "labels as `podgpu serve --emf-label` (repeatable)", metavar="KEY=VALUE",
           append=True, shown="with the seed's config Service=nvidia-dcgm-exporter, which its "
           "declaration matches"),
    Option(("--emf-interval",), "emf_interval", None, 60.0, "EMF interval in seconds (serve's "
           "--emf-interval)", _float, metavar="SECONDS"),
    Option(("--collect-interval",), "collect_interval_ms", None, 1000,
           "podgpu's collection interval in milliseconds, as serve's -c: samples per EMF "
           "interval", go_ms, metavar="MS"),
    Option(("--agent-scrape-interval",), "agent_scrape_interval", None, 60.0,
           "the central agent's scrape interval in seconds", _float, metavar="SECONDS"),
    Option(("--scrape-interval",), "scrape_interval", None, 15.0,
           "Prometheus' scrape interval in seconds, for the Prometheus side", _float,
           metavar="SECONDS"),
    Option(("--metric-prices",), "metric_prices", None, None,
           "$ per custom metric-month in the tiers 10k, 240k, 750k, rest", metavar="P1,P2,P3,P4",
           shown=f"{','.join(f'{p:g}' for _, p in DEFAULT_METRIC_TIERS)}: {PRICES_REGION} list "
           f"prices as of {PRICES_AS_OF}"),
    Option(("--ingest-price",), "ingest_price", None, DEFAULT_INGEST_PER_GB,
           "$ per GB of log ingestion", _float, metavar="PRICE"),
    Option(("--ci-observation-price",), "ci_observation_price", None, None,
           "$ per million observations of Container Insights with enhanced observability, for "
           "the --emf-container-insights profile's line (AWS bills those per observation; the "
           "price is not built in)", _float, metavar="PRICE", shown="none: observations only"),
    Option(("--format",), "format", None, "table", "table or json", choice("table", "json"),
           metavar="table|json"),
)
"""`podgpu plan`'s flags (podgpu.options: one engine for every command). Units as serve's:
--collect-interval in milliseconds like -c, every other duration in seconds."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags -> the namespace `build` reads; ConfigError (exit 2) on a bad value."""
    parser = new_parser("podgpu plan", "What per-pod GPU metrics of a cluster cost in "
                        "CloudWatch (custom metrics, PutLogEvents bytes and requests, dollars) "
                        "three ways, and what they weigh in Prometheus.", OPTIONS)
    values = resolve(parser.parse_args(go_flags(list(argv), OPTIONS)), OPTIONS, {}).values
    ms = values.pop("collect_interval_ms")
    if not 1 <= ms <= 3_600_000:
        raise ConfigError(f"--collect-interval {ms}: milliseconds in 1..3600000, as serve's -c")
    emf_label = values.pop("emf_label")
    return argparse.Namespace(collect_interval=ms / 1000.0,
                              emf_label=emf_label.split(",") if emf_label else None, **values)


def _prices(args: argparse.Namespace) -> Prices:
    tiers = DEFAULT_METRIC_TIERS
    if args.metric_prices:
        try:
            values = [float(x) for x in args.metric_prices.split(",")]
        except ValueError:
            values = []
        if len(values) != 4 or any(v < 0 for v in values):
            raise ConfigError(f"--metric-prices {args.metric_prices!r}: expected four "
                              "non-negative numbers such as 0.30,0.10,0.05,0.02")
        tiers = tuple((size, v) for (size, _), v in zip(DEFAULT_METRIC_TIERS, values,
                                                           strict=True))
    if args.ingest_price < 0:
        raise ConfigError("--ingest-price must be >= 0")
    return Prices(tiers, args.ingest_price)


def _labels(items: list[str] | None, seed: bool) -> tuple[tuple[str, str], ...]:
    if items is None:
        return (("Service", "nvidia-dcgm-exporter"),) if seed else ()
    out = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip() or not v.strip():
            raise ConfigError(f"--emf-label {item!r}: expected KEY=VALUE")
        out.append((k.strip(), v.strip()))
    return tuple(out)


def build(args: argparse.Namespace) -> Estimate:
    for name in ("emf_interval", "collect_interval", "agent_scrape_interval", "scrape_interval"):
        if not 0 < getattr(args, name) <= 3600:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name):g}: must be in "
                              "(0, 3600] seconds")
    if args.collect_interval > args.emf_interval:
        raise ConfigError("--collect-interval: longer than --emf-interval")
    if args.cloudwatch_config:
        config = load_emf_config(args.cloudwatch_config)
    else:
        text = resources.files("podgpu.plan").joinpath("seed-cwagent-config.json").read_text()
        config = parse_emf_config(text, "the seed's cwagent-config.json")
    shape = Shape(nodes=args.nodes, gpus_per_node=args.gpus_per_node, gpu_model=args.gpu_model,
                  sharing=args.sharing, pods_per_gpu=args.pods_per_gpu,
                  churn_per_day=args.churn_per_day)
    opts = PlanOptions(cluster_name=args.cluster_name,
                       emf_labels=_labels(args.emf_label, not args.cloudwatch_config),
                       emf_interval=args.emf_interval, collect_interval=args.collect_interval,
                       agent_scrape_interval=args.agent_scrape_interval,
                       scrape_interval=args.scrape_interval, prices=_prices(args))
    return estimate(shape, config, opts)


def insights(args: argparse.Namespace, e: Estimate) -> InsightsEstimate:
    """The Container Insights profile's events, bytes and observations for the same shape."""
    price = args.ci_observation_price
    if price is not None and price < 0:
        raise ConfigError("--ci-observation-price must be >= 0")
    from podgpu.fields.metriclist import load_default

    return estimate_insights(e.shape, load_default(), cluster=args.cluster_name,
                             emf_interval=args.emf_interval,
                             collect_interval=args.collect_interval, days=e.options.days,
                             price_per_million=price)


def as_dict(e: Estimate, ci: InsightsEstimate | None = None) -> dict[str, Any]:
    minutes = e.minutes
    out: dict[str, Any] = {
        "shape": {"nodes": e.shape.nodes, "gpus_per_node": e.shape.gpus_per_node,
                  "gpu_model": e.shape.gpu_model, "sharing": e.shape.sharing,
                  "pods_per_gpu": e.shape.pods_per_gpu, "churn_per_day": e.shape.churn_per_day},
        "prices": {"as_of": PRICES_AS_OF, "region": PRICES_REGION,
                   "metric_tiers": [[t if t != float("inf") else None, p]
                                    for t, p in e.options.prices.metric_tiers],
                   "ingest_per_gb": e.options.prices.ingest_per_gb},
        "days": e.options.days, "paths": {},
        "prometheus": {"active_series": e.prometheus_series,
                       "samples_per_second": round(e.prometheus_samples_per_second, 1),
                       "scrape_interval_seconds": e.options.scrape_interval}}
    for name, p in e.paths.items():
        out["paths"][name] = {
            "custom_metrics_active": p.metrics_steady,
            "custom_metrics_per_new_pod": p.metrics_per_new_pod,
            "custom_metrics_in_period": round(p.metrics_in_period),
            "custom_metric_months_billed": round(p.metric_months, 1),
            "events_per_minute": round(p.events_per_minute),
            "put_log_events_bytes": round(p.bytes_per_minute * minutes),
            "put_log_events_requests": round(p.requests_per_minute * minutes),
            "metrics_dollars": round(p.metrics_dollars, 2),
            "ingest_dollars": round(p.ingest_dollars, 2),
            "total_dollars": round(p.metrics_dollars + p.ingest_dollars, 2)}
    if ci is not None:
        out["container_insights"] = {
            "events_per_minute": round(ci.events_per_minute),
            "put_log_events_bytes": round(ci.bytes_per_minute * minutes),
            "observations_in_period": round(ci.observations_in_period),
            "price_per_million_observations": ci.price_per_million,
            "dollars": None if ci.dollars is None else round(ci.dollars, 2)}
    return out


def table(e: Estimate, ci: InsightsEstimate | None = None) -> str:
    d = as_dict(e)
    s = e.shape
    rows: list[tuple[str, ...]] = [("per month (" + f"{e.options.days:g} days)", *(
        TITLES[p] for p in PATHS))]

    def row(label: str, key: str, fmt: str) -> None:
        rows.append((label, *(format(d["paths"][p][key], fmt) for p in PATHS)))

    row("custom metrics active", "custom_metrics_active", ",")
    row("custom metrics in the month (churn)", "custom_metrics_in_period", ",")
    row("custom metric-months billed (hourly)", "custom_metric_months_billed", ",.1f")
    row("EMF events per minute", "events_per_minute", ",")
    row("PutLogEvents GB", "put_log_events_bytes", ",")
    rows[-1] = (rows[-1][0], *(f"{d['paths'][p]['put_log_events_bytes'] / 1e9:,.1f}"
                               for p in PATHS))
    row("PutLogEvents requests", "put_log_events_requests", ",")
    row("$ custom metrics", "metrics_dollars", ",.2f")
    row("$ log ingestion", "ingest_dollars", ",.2f")
    row("$ total", "total_dollars", ",.2f")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{s.nodes} nodes x {s.gpus_per_node} {s.gpu_model}, sharing {s.sharing}"
             f"{f' ({s.pods_per_gpu} pods per GPU)' if s.sharing != 'none' else ''}, "
             f"{s.churn_per_day:g} pods replaced per day"]
    for i, r in enumerate(rows):
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in
                                                          zip(r[1:], widths[1:], strict=True)]))
        if i == 0:
            lines.append("-" * len(lines[-1]))
    prom = d["prometheus"]
    lines.append("")
    lines.append(f"Prometheus: {prom['active_series']:,} active series, "
                 f"{prom['samples_per_second']:,} samples/s at a {e.options.scrape_interval:g} s "
                 "scrape interval")
    lines.append(f"Prices: {PRICES_REGION} list prices as of {PRICES_AS_OF} (reference "
                 "cloudwatch.md 5.3); override with --metric-prices and --ingest-price. "
                 "Custom metrics are prorated by the hour: a replaced pod's metrics add one "
                 "metric-hour each.")
    lines.append("The agent path (its default service-endpoints job) keeps the workload's `pod`, so "
                 "it makes the same custom metrics as podgpu; it also ingests every undeclared "
                 "series as logs, one event per label set per scrape; see docs/cloudwatch.md, "
                 "'Reading podgpu plan'.")
    if ci is not None:
        cost = (f"${ci.dollars:,.2f} at ${ci.price_per_million:g} per million observations"
                if ci.dollars is not None and ci.price_per_million is not None
                else "priced with --ci-observation-price ($ per million; AWS bills enhanced "
                     "observability per observation)")
        lines.append(f"Container Insights profile (--emf-container-insights): "
                     f"{ci.events_per_minute:,.0f} events/min, "
                     f"{ci.bytes_per_minute * e.minutes / 1e9:,.1f} GB, "
                     f"{ci.observations_in_period / 1e6:,.1f} M observations per month: {cost}.")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """`podgpu plan [flags]`; errors reach cli.main's one exit-status mapping."""
    args = parse_args(argv)
    e = build(args)
    ci = insights(args, e)
    print(json.dumps(as_dict(e, ci), indent=2) if args.format == "json" else table(e, ci))
    return 0
