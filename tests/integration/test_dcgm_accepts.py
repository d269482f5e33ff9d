"""What dcgm-exporter accepts, podgpu accepts (the real process): a pod-label allowlist with a
pattern Go's regexp refuses (`(?<=a)b`: RE2 has no look-behind) starts and serves, the pattern
skipped with one warning and the others used, as dcgm-exporter's newLabelFilterCache does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration
ALLOWLIST = "(?<=a)b,^team$"


def scenario(tmp_path: Path) -> str:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"pods": [{
        "namespace": "ml", "name": "train-0", "labels": {"team": "vision", "app": "trainer"},
        "containers": [{"name": "trainer", "gpus": [{"gpu": 0}]}]}]}))
    return str(path)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_allowlist_pattern_go_refuses_is_skipped_and_podgpu_serves(
        serve: Any, tmp_path: Path, how: str) -> None:
    args = ["--simulate", "1", "--simulate-scenario", scenario(tmp_path), "-c", "250",
            "--kubernetes-enable-pod-labels"]
    env = {}
    if how == "flag":
        args += ["--kubernetes-pod-label-allowlist-regex", ALLOWLIST]
    else:
        env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] = ALLOWLIST
    p = serve(*args, env=env)
    p.wait_ready()
    status, _, body = p.get("/metrics")
    assert status == 200
    (util,) = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples
               if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert util.labels["pod"] == "train-0"
    assert util.labels["team"] == "vision" and "app" not in util.labels  # ^team$ still applies
    code, err = p.stop()
    assert code == 0
    warned = [ln for ln in err.splitlines() if "bad regex '(?<=a)b'" in ln]
    assert len(warned) == 1 and "skipping that pattern" in warned[0], err
