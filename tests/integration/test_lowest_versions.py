"""The lowest versions pyproject.toml declares for the kubelet client (grpclib, protobuf) and the
CloudWatch Logs client (botocore) work (the checked-in stubs once refused the
grpcio the range allowed). They are installed, as wheels, into a throwaway target directory that
a child interpreter puts ahead of the venv; the child then calls the real kubelet stand-in and
the CloudWatch Logs stand-in with podgpu's own clients."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from tests.deploy.standins import DUMMY_AWS, LogsStandIn, environ_without_aws
from tests.integration.kubelet_fake import FakeKubelet, gpu_pod, socket_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def lowest(extra: str) -> dict[str, str]:
    """name -> the version after '>=' of each requirement of `extra` in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    line = re.search(rf"^{extra} = \[(.*)\]$", text, re.M)
    assert line, f"no {extra} extra in pyproject.toml"
    reqs = re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][^",<]*)"', line[1])
    assert reqs, line[1]
    return dict(reqs)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    t = tmp_path_factory.mktemp("lowest")
    pins = [f"{n}=={v}" for extra in ("kubernetes", "cloudwatch") for n, v in lowest(extra).items()]
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--only-binary=:all:", "--target", str(t), *pins],
                   check=True, capture_output=True, timeout=300)
    yield t


def child(target: Path, code: str, **env: str) -> dict[str, Any]:
    """Run `code` with the target directory first on the path; its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
        env={**environ_without_aws(), **env,
             "PYTHONPATH": os.pathsep.join([str(target), str(ROOT / "src"), str(ROOT)])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_kubelet_client_with_the_lowest_grpclib_and_protobuf(target: Path) -> None:
    want = lowest("kubernetes")
    with socket_path() as sock:
        kubelet = FakeKubelet(sock).start()
        kubelet.set_pods([gpu_pod("ml", "train", "main", "nvidia.com/gpu", "GPU-1")])
        try:
            got = child(target, f"""
                import importlib.metadata as md, json
                from podgpu.attribution.kubelet import PodResourcesClient
                c = PodResourcesClient({sock!r})
                s = c.poll_once()
                c.close()
                print(json.dumps({{"ok": s.ok, "reason": s.reason,
                                  "entries": [[e.pod, list(e.device_ids)] for e in s.entries],
                                  "versions": {{n: md.version(n) for n in {sorted(want)!r}}}}}))
            """)
        finally:
            kubelet.stop()
    assert {n: Version(v) for n, v in got["versions"].items()} == \
        {n: Version(v) for n, v in want.items()}
    assert got["ok"] and got["entries"] == [["train", ["GPU-1"]]], got


def test_logs_client_with_the_lowest_botocore(target: Path) -> None:
    want = lowest("cloudwatch")
    logs = LogsStandIn().start()
    try:
        got = child(target, f"""
            import importlib.metadata as md, json
            from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
            from podgpu.sinks.cloudwatch.logsapi import LogsApi
            d = CloudWatchDestination(log_group="/low", log_stream="s", region="us-east-1",
                                      endpoint_url={logs.url!r})
            rejected = d.send([(1, '{{"a": 1}}')])
            url = LogsApi(region="eu-west-1", endpoint_url=None).url
            print(json.dumps({{"rejected": rejected, "url": url,
                              "versions": {{n: md.version(n) for n in {sorted(want)!r}}}}}))
        """, **DUMMY_AWS, AWS_DEFAULT_REGION="us-east-1")
    finally:
        logs.stop()
    assert {n: Version(v) for n, v in got["versions"].items()} == \
        {n: Version(v) for n, v in want.items()}  # 1.34 is 1.34.0
    assert got["rejected"] == 0 and got["url"] == "https://logs.eu-west-1.amazonaws.com"
    assert logs.calls == ["PutLogEvents"]  # signed by the lowest botocore, sent, answered
    assert logs.messages == ['{"a": 1}']
