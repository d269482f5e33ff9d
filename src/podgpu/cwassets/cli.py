"""`podgpu cloudwatch-dashboard` and `podgpu cloudwatch-alarms`: print JSON for a config."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from importlib import resources

from podgpu.cwassets.alarms import alarms
from podgpu.cwassets.dashboard import dashboard
from podgpu.errors import ConfigError
from podgpu.sinks.cloudwatch.declarations import EmfConfig, load_emf_config, parse_emf_config

_SAFE = re.compile(r"[A-Za-z0-9._\-]+")


def _config(path: str | None) -> EmfConfig:
    if path:
        return load_emf_config(path)
    text = resources.files("podgpu.plan").joinpath("seed-cwagent-config.json").read_text()
    return parse_emf_config(text, "the seed's cwagent-config.json")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cloudwatch-config", metavar="FILE",
                   help="the CloudWatch agent config podgpu sends with (default: the seed's)")
    p.add_argument("--cluster-name", default="",
                   help="only this ClusterName (default: every cluster in the namespace)")
    # what podgpu sends with (issue 18): the assets follow the same identity
    p.add_argument("--emf-identity", choices=("agent", "workload"),
                   default=os.environ.get("PODGPU_EMF_IDENTITY", "agent"),
                   help="as podgpu serve's --emf-identity (default agent)")
    p.add_argument("--emf-namespace", metavar="NAME", default=os.environ.get("POD_NAMESPACE", ""),
                   help="as serve's: the namespace podgpu runs in (default $POD_NAMESPACE)")
    p.add_argument("--emf-job", metavar="NAME",
                   default=os.environ.get("PODGPU_EMF_JOB", "kubernetes-service-endpoints"),
                   help="as serve's --emf-job (default kubernetes-service-endpoints)")
    p.add_argument("--emf-label", action="append", default=[], metavar="KEY=VALUE",
                   help="as serve's --emf-label, repeatable (e.g. Service=nvidia-dcgm-exporter)")


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
                         namespace=args.emf_namespace)
    return opts.constant_labels()


def main(command: str, argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog=f"podgpu {command}")
    _common(p)
    if command == "cloudwatch-dashboard":
        p.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"),
                       help="the region the graphs read (default $AWS_REGION or us-east-1)")
        p.add_argument("--period", type=int, default=60, help="seconds per point (default 60)")
    else:
        p.add_argument("--expected-gpus", type=int, metavar="N",
                       help="GPUs that should report (makes the lost-GPU alarm)")
        p.add_argument("--samples-per-minute", type=int, default=60,
                       help="samples per GPU per minute: 60 / podgpu's collect interval in s "
                       "(default 60); with `podgpu emf`, 60 / --scrape-interval")
        p.add_argument("--idle-percent", type=float, default=1.0,
                       help="at most this much use counts as idle (default 1)")
        p.add_argument("--alarm-prefix", default="podgpu", help="alarm name prefix")
        p.add_argument("--alarm-action", action="append", default=[], metavar="ARN",
                       help="SNS topic or other action ARN, repeatable")
    args = p.parse_args(list(argv))
    try:
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
    except ConfigError as exc:
        print(f"podgpu {command}: {exc}", file=sys.stderr)
        return 2
    for s in skipped:
        print(f"podgpu {command}: no alarm for {s}", file=sys.stderr)
    print(json.dumps(out, indent=2))
    return 0
