"""`podgpu cloudwatch-dashboard` and `podgpu cloudwatch-alarms`: print JSON for a config."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from importlib import resources

from podgpu.config.values import choice, service_labels
from podgpu.cwassets.alarms import alarms
from podgpu.cwassets.dashboard import dashboard
from podgpu.errors import ConfigError
from podgpu.options import Option, go_flags, go_int, new_parser, resolve
from podgpu.sinks.cloudwatch.declarations import EmfConfig, load_emf_config, parse_emf_config

_SAFE = re.compile(r"[A-Za-z0-9._\-]+")


def _config(path: str | None) -> EmfConfig:
    if path:
        return load_emf_config(path)
    text = resources.files("podgpu.plan").joinpath("seed-cwagent-config.json").read_text()
    return parse_emf_config(text, "the seed's cwagent-config.json")


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


COMMON: tuple[Option, ...] = (
    Option(("--cloudwatch-config",), "cloudwatch_config", None, None,
           "the CloudWatch agent config podgpu sends with", metavar="FILE", shown="the seed's"),
    Option(("--cluster-name",), "cluster_name", None, "",
           "only this ClusterName", metavar="NAME", shown="every cluster in the namespace"),
    # what podgpu sends with: the assets follow the same identity
    Option(("--emf-identity",), "emf_identity", "PODGPU_EMF_IDENTITY", "agent",
           "as podgpu serve's --emf-identity", choice("agent", "workload"),
           metavar="agent|workload"),
    Option(("--emf-namespace",), "emf_namespace", "POD_NAMESPACE", "",
           "as serve's: the namespace podgpu runs in", metavar="NAME", shown="unset"),
    Option(("--emf-job",), "emf_job", "PODGPU_EMF_JOB", "kubernetes-service-endpoints",
           "as serve's --emf-job", metavar="NAME"),
    Option(("--emf-label",), "emf_label", None, None,
           "as serve's --emf-label, repeatable (e.g. Service=nvidia-dcgm-exporter)",
           metavar="KEY=VALUE", append=True),
    Option(("--emf-container-name",), "emf_container_name", "PODGPU_EMF_CONTAINER_NAME",
           "podgpu", "as serve's: podgpu's own container", metavar="NAME"),
    Option(("--emf-service",), "emf_service", "PODGPU_EMF_SERVICE", "",
           "as serve's: the Service in front of podgpu", metavar="NAME", shown="unset"),
    Option(("--emf-service-labels",), "emf_service_labels", "PODGPU_EMF_SERVICE_LABELS", (),
           "as serve's: that Service's labels, KEY=VALUE as on the object", service_labels,
           metavar="KEY=VALUE", append=True, shown="unset"),
)
DASHBOARD: tuple[Option, ...] = (
    *COMMON,
    Option(("--region",), "region", "AWS_REGION", "us-east-1", "the region the graphs read",
           metavar="REGION"),
    Option(("--period",), "period", None, 60, "seconds per point", go_int, metavar="SECONDS"),
)
ALARMS: tuple[Option, ...] = (
    *COMMON,
    Option(("--expected-gpus",), "expected_gpus", None, None,
           "GPUs that should report (makes the lost-GPU alarm)", go_int, metavar="N"),
    Option(("--samples-per-minute",), "samples_per_minute", None, 60,
           "samples per GPU per minute: 60000 / podgpu's -c in ms; with `podgpu emf`, "
           "60 / --scrape-interval", go_int, metavar="N"),
    Option(("--idle-percent",), "idle_percent", None, 1.0,
           "at most this much use counts as idle", _float, metavar="PERCENT"),
    Option(("--alarm-prefix",), "alarm_prefix", None, "podgpu", "alarm name prefix",
           metavar="PREFIX"),
    Option(("--alarm-action",), "alarm_action", None, None,
           "SNS topic or other action ARN, repeatable", metavar="ARN", append=True),
)
"""The two commands' flags (podgpu.options, the engine every command uses)."""


def parse_args(command: str, argv: Sequence[str]) -> argparse.Namespace:
    options = DASHBOARD if command == "cloudwatch-dashboard" else ALARMS
    parser = new_parser(f"podgpu {command}", None, options)
    values = resolve(parser.parse_args(go_flags(list(argv), options)), options).values
    for dest in ("emf_label", "alarm_action"):  # repeatable: a list, as before
        if dest in values:
            values[dest] = values[dest].split(",") if values[dest] else []
    return argparse.Namespace(**values)


def _constant(args: argparse.Namespace) -> dict[str, str]:
    """The labels every series podgpu sends carries with these settings."""
    from podgpu.sinks.cloudwatch.series import SeriesOptions
    from podgpu.sinks.prometheus.labels import LabelOptions

    extra = []
    for item in args.emf_label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--emf-label {item!r}: expected KEY=VALUE")
        extra.append((key, value))
    opts = SeriesOptions(labels=LabelOptions(hostname=""), job=args.emf_job, cluster_name=args.cluster_name,
                         extra=tuple(extra), identity=args.emf_identity,
                         namespace=args.emf_namespace, container_name=args.emf_container_name,
                         service=args.emf_service, service_labels=args.emf_service_labels)
    return opts.constant_labels()


def main(command: str, argv: Sequence[str]) -> int:
    """`podgpu cloudwatch-dashboard|cloudwatch-alarms [flags]`; a ConfigError reaches cli.main's
    one exit-status mapping (2, one line)."""
    args = parse_args(command, argv)
    if args.cluster_name and not _SAFE.fullmatch(args.cluster_name):
        raise ConfigError(f"--cluster-name {args.cluster_name!r}: letters, digits, '.', '_' "
                          "and '-' only")
    config = _config(args.cloudwatch_config)
    constant = _constant(args)
    if command == "cloudwatch-dashboard":
        if not 1 <= args.period <= 86400 or (args.period >= 60 and args.period % 60):
            raise ConfigError(f"--period {args.period}: 1, 5, 10, 30 or a multiple of 60")
        body, missing = dashboard(config, region=args.region, cluster=args.cluster_name,
                                  period=args.period, constant=constant)
        for m in missing:
            print(f"podgpu {command}: not graphed, the config extracts no per-pod {m}",
                  file=sys.stderr)
        print(json.dumps(body, indent=2))
        return 0
    if args.expected_gpus is not None and args.expected_gpus < 1:
        raise ConfigError("--expected-gpus must be >= 1")
    if args.samples_per_minute < 1:
        raise ConfigError("--samples-per-minute must be >= 1")
    out, skipped = alarms(config, cluster=args.cluster_name, prefix=args.alarm_prefix,
                          expected_gpus=args.expected_gpus,
                          samples_per_minute=args.samples_per_minute,
                          idle_percent=args.idle_percent, actions=tuple(args.alarm_action),
                          constant=constant)
    for s in skipped:
        print(f"podgpu {command}: no alarm for {s}", file=sys.stderr)
    print(json.dumps(out, indent=2))
    return 0
