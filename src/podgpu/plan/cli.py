"""`podgpu plan` flags and output (table or JSON). Bad input is one line naming the flag, exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any

from podgpu.errors import ConfigError
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=100, help="GPU nodes (default 100)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--gpu-model", default="H100",
                   help="H100, H200, A100 or A10G: which fields exist (default H100)")
    p.add_argument("--sharing", default="none", choices=SHARING,
                   help="none: one pod per GPU; time-slicing or mig: --pods-per-gpu pods share it")
    p.add_argument("--pods-per-gpu", type=int, default=1, help="pods per GPU (default 1)")
    p.add_argument("--churn-per-day", type=float, default=0.0,
                   help="pods replaced by newly named pods per day, cluster-wide (default 0)")
    p.add_argument("--cloudwatch-config", metavar="FILE",
                   help="CloudWatch agent config with the declarations (default: the seed's)")
    p.add_argument("--cluster-name", default="my-cluster", help="ClusterName (default my-cluster)")
    p.add_argument("--emf-label", action="append", metavar="KEY=VALUE",
                   help="labels as `podgpu serve --emf-label` (default with the seed's config: "
                   "Service=nvidia-dcgm-exporter, which its declaration matches)")
    p.add_argument("--emf-interval", type=float, default=60.0, help="EMF interval s (default 60)")
    p.add_argument("--collect-interval", type=float, default=1.0,
                   help="podgpu's collection interval s: samples per EMF interval (default 1)")
    p.add_argument("--agent-scrape-interval", type=float, default=60.0,
                   help="the central agent's scrape interval s (default 60)")
    p.add_argument("--scrape-interval", type=float, default=15.0,
                   help="Prometheus' scrape interval s, for the Prometheus side (default 15)")
    p.add_argument("--metric-prices", metavar="P1,P2,P3,P4",
                   help="$ per custom metric-month in the tiers 10k, 240k, 750k, rest (default "
                   f"{','.join(f'{p:g}' for _, p in DEFAULT_METRIC_TIERS)}: {PRICES_REGION} "
                   f"list prices as of {PRICES_AS_OF})")
    p.add_argument("--ingest-price", type=float, default=DEFAULT_INGEST_PER_GB,
                   help=f"$ per GB of log ingestion (default {DEFAULT_INGEST_PER_GB:g})")
    p.add_argument("--format", choices=("table", "json"), default="table")


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


def as_dict(e: Estimate) -> dict[str, Any]:
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
            "events_per_minute": round(p.events_per_minute),
            "put_log_events_bytes": round(p.bytes_per_minute * minutes),
            "put_log_events_requests": round(p.requests_per_minute * minutes),
            "metrics_dollars": round(p.metrics_dollars, 2),
            "ingest_dollars": round(p.ingest_dollars, 2),
            "total_dollars": round(p.metrics_dollars + p.ingest_dollars, 2)}
    return out


def table(e: Estimate) -> str:
    d = as_dict(e)
    s = e.shape
    rows: list[tuple[str, ...]] = [("per month (" + f"{e.options.days:g} days)", *(
        TITLES[p] for p in PATHS))]

    def row(label: str, key: str, fmt: str) -> None:
        rows.append((label, *(format(d["paths"][p][key], fmt) for p in PATHS)))

    row("custom metrics active", "custom_metrics_active", ",")
    row("custom metrics in the month (churn)", "custom_metrics_in_period", ",")
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
                 "Metrics are billed here for the whole month (an upper bound with churn).")
    lines.append("The agent path (its default service-endpoints job) keeps the workload's `pod`, so "
                 "it makes the same custom metrics as podgpu; it also ingests every undeclared "
                 "series as logs, one event per label set per scrape; see docs/cloudwatch.md, "
                 "'Reading podgpu plan'.")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="podgpu plan", description="What per-pod GPU metrics of a cluster cost in "
        "CloudWatch (custom metrics, PutLogEvents bytes and requests, dollars) three ways, and "
        "what they weigh in Prometheus.")
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    try:
        e = build(args)
    except ConfigError as exc:
        print(f"podgpu plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(as_dict(e), indent=2) if args.format == "json" else table(e))
    return 0
