"""The dcgm-exporter compatibility suite: dcgm-exporter's stock lists (restated in
tests/fixtures/dcgm-exporter/ from d5e5f51, every commented row enabled too), its 1.x list, and a
list of every DCGM field name go-dcgm knows, through podgpu on the simulated H100, H200, A100 and
A10G nodes: each list parses without an error, and every row is either exported under the list's
own name or named in podgpu_field_unavailable with a reason."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.fields import names
from podgpu.fields.metriclist import MetricList, parse_metric_list
from podgpu.model import Snapshot
from podgpu.sim.backend import MODELS, SimulatedBackend
from podgpu.sim.scenario import default_scenario
from podgpu.sinks.prometheus import RenderOptions, render
from podgpu.sinks.prometheus.labels import LabelOptions
from tests.conftest import InProcessAgent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter"
LISTS = ("default-counters.csv", "dcp-metrics-included.csv", "1.x-compatibility-metrics.csv")
_COMMENTED_ROW = re.compile(r"^#\s*((?:DCGM_|dcgm_)\w+\s*,.*)$")


def enable_commented_rows(text: str) -> str:
    """Uncomment every `# FIELD, type, help` line, as a user enabling all of them would."""
    return "\n".join(m[1] if (m := _COMMENTED_ROW.match(line)) else line
                     for line in text.splitlines())


def every_field_list() -> str:
    rows = [f"{name}, gauge, every DCGM name" for name in sorted(names.ids())]
    return "\n".join(rows) + "\n"


def rows_of(text: str) -> list[str]:
    """Names of the active rows, read independently of podgpu's parser."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            out.append(s.split(",")[0].strip())
    return out


def run(ml: MetricList, model: str, old: bool = False, count: int = 4
        ) -> dict[str, list[dict[str, str]]]:
    t = [1_000.0]
    backend = SimulatedBackend(count, MODELS[model], clock=lambda: t[0],
                               scenario=default_scenario(count))
    backend.read(ml.fields)  # a first cycle, as the collector makes, then one 5 s later
    t[0] += 5
    reading = backend.read(ml.fields)
    snap = Snapshot(taken_at=t[0], samples=reading.samples)
    body = render(snap, ml, RenderOptions(LabelOptions(hostname="n", old_namespace=old)))
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        # by family name: the parser adds `_total` to counter samples, dcgm-exporter names lack it
        for s in fam.samples:
            out.setdefault(fam.name, []).append(dict(s.labels))
    return out


def explainer(ml: MetricList, got: dict[str, list[dict[str, str]]]) -> Callable[[str], bool]:
    """name -> exported under its own name, or unavailable with a reason (node-wide or per
    device)."""
    unavailable = {u["field"] for u in got.get("podgpu_field_unavailable", []) if u.get("reason")}

    def explained(name: str) -> bool:
        if name in got or name.removesuffix("_total") in got:  # the parser's counter-name rule
            return True
        return name in unavailable  # under the list's own spelling, never the catalog's

    return explained


CASES = [(lst, enabled) for lst in LISTS for enabled in (False, True)]


@pytest.mark.parametrize("model", ["H100", "H200", "A100", "A10G"])
@pytest.mark.parametrize(("lst", "enabled"), CASES)
def test_stock_lists_start_and_every_row_is_exported_or_explained(
        lst: str, enabled: bool, model: str) -> None:
    text = (FIXTURES / lst).read_text()
    if enabled:
        text = enable_commented_rows(text)
    ml = parse_metric_list(text, lst)  # raises (exit 2 in serve) on any refused row
    got = run(ml, model, old=lst.startswith("1.x"))
    labels = {r.out for r in ml.labels}
    explained = explainer(ml, got)
    for name in rows_of(text):
        if name in labels:  # a label row: present as a label on the GPU series, or unavailable
            assert any(name in s for fam in got.values() for s in fam) or explained(name), (
                lst, model, name)
            continue
        assert explained(name), (lst, model, name)


@pytest.mark.parametrize("count", [1, 4])
@pytest.mark.parametrize("model", ["H100", "H200", "A100", "A10G"])
def test_a_list_of_every_dcgm_field_name(model: str, count: int) -> None:
    text = every_field_list()
    ml = parse_metric_list(text, "every.csv")
    got = run(ml, model, count=count)  # one GPU: P2P has no peer (found on the H200)
    explained = explainer(ml, got)
    missing = [n for n in rows_of(text) if not explained(n)]
    assert missing == []
    # the split is real: some exported, many unreadable, and unreadable ones carry a reason
    assert len(ml.metrics) > 100 and len(ml.unavailable) > 500


def test_the_1x_list_with_o_serves_dcgm_names_and_1x_labels(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    p = InProcessAgent("--simulate", "2xA100", "-o", "-f",
                       str(FIXTURES / "1.x-compatibility-metrics.csv"))
    try:
        p.wait_ready()
        _, _, body = p.get("/metrics")
        fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
        for name in ("dcgm_sm_clock", "dcgm_gpu_temp", "dcgm_fb_used", "dcgm_xid_errors"):
            [s, *_] = fams[name].samples
            assert "uuid" in s.labels and "UUID" not in s.labels, name
        assert "DCGM_FI_DEV_SM_CLOCK" not in fams  # the list's spelling, not the catalog's
        xid = fams["dcgm_xid_errors"].samples[0].labels
        assert xid["err_code"] == "0" and xid["err_msg"] == "No Error"
    finally:
        code = p.stop()
    assert code == 0
    # the 1.x list repeats dcgm_fi_prof_pcie_tx_bytes: a warning, not an exit
    assert "already listed" in caplog.text
