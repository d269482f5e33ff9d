"""What the CloudWatch Logs client costs: a boto3 `logs` client against podgpu's
logsapi.py (botocore's credential chain, SigV4 signer, endpoint rules and HTTP session, no
service client). One client per run, in this interpreter, on top of what `podgpu serve` has
loaded (h11, pynvml): create the group and the stream, then 20 PutLogEvents of 50 EMF-sized
events to the CloudWatch Logs stand-in (tests/deploy/standins.py). Prints one JSON line: RSS added
after the calls, the peak (VmHWM) over the start, and the time to the first answer.

    PYTHONPATH=src .venv/bin/python -m bench.archive.cloudwatch_clients logsapi
    PYTHONPATH=src .venv/bin/python -m bench.archive.cloudwatch_clients boto3
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import h11  # noqa: E402,F401  - what podgpu serve has loaded before the sink starts
import pynvml  # noqa: E402,F401
from tests.deploy.standins import DUMMY_AWS, LogsStandIn, environ_without_aws  # noqa: E402

PUTS = 20
EVENTS = 50


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def with_boto3(url: str, batches: list[list[dict[str, object]]]) -> float:
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"total_max_attempts": 1, "mode": "standard"}, user_agent_extra="podgpu")
    c = boto3.session.Session().client("logs", region_name="us-east-1", endpoint_url=url,
                                       config=cfg)
    c.create_log_group(logGroupName="/bench")
    first = time.perf_counter()
    c.create_log_stream(logGroupName="/bench", logStreamName="s")
    for b in batches:
        c.put_log_events(logGroupName="/bench", logStreamName="s", logEvents=b)
    return first


def with_logsapi(url: str, batches: list[list[dict[str, object]]]) -> float:
    from podgpu.sinks.cloudwatch.logsapi import LogsApi

    api = LogsApi(region="us-east-1", endpoint_url=url)
    api.call("CreateLogGroup", {"logGroupName": "/bench"})
    first = time.perf_counter()
    api.call("CreateLogStream", {"logGroupName": "/bench", "logStreamName": "s"})
    for b in batches:
        api.call("PutLogEvents", {"logGroupName": "/bench", "logStreamName": "s",
                                  "logEvents": b}, {"x-amzn-logs-format": "json/emf"})
    return first


def main() -> int:
    which = sys.argv[1]
    run = {"boto3": with_boto3, "logsapi": with_logsapi}[which]
    os.environ.clear()
    os.environ.update(environ_without_aws(), **DUMMY_AWS)
    logs = LogsStandIn().start()
    now = int(time.time() * 1000)
    doc = json.dumps({"_aws": {"Timestamp": now, "CloudWatchMetrics": [{
        "Namespace": "ContainerInsights/Prometheus", "Dimensions": [["ClusterName", "pod"]],
        "Metrics": [{"Name": "DCGM_FI_DEV_GPU_UTIL", "Unit": "Percent"}]}]},
        "ClusterName": "bench", "pod": "train-0", "DCGM_FI_DEV_GPU_UTIL": 97.0})
    batches = [[{"timestamp": now, "message": doc} for _ in range(EVENTS)] for _ in range(PUTS)]
    time.sleep(0.2)
    before, hwm_before = status_kib("VmRSS"), status_kib("VmHWM")
    t0 = time.perf_counter()
    first = run(logs.url, batches)
    after, hwm = status_kib("VmRSS"), status_kib("VmHWM")
    logs.stop()
    assert logs.calls.count("PutLogEvents") == PUTS, logs.calls
    print(json.dumps({"client": which, "start_s": round(first - t0, 3),
                      "rss_before_mib": round(before / 1024, 1),
                      "delta_mib": round((after - before) / 1024, 1),
                      "peak_delta_mib": round((hwm - max(before, hwm_before)) / 1024, 1),
                      "calls": len(logs.calls)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
