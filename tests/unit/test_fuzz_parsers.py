"""Property-based fuzzing of every parser a user or a peer feeds: metric lists,
scenario files, the CloudWatch declarations config, serve flags and environment, kubelet device
ids, cgroup files and paths, Accept-Encoding. (The web-config parser has its own fuzzing with
its module; the HTTP request line and headers are fuzzed against the real server in
tests/integration/test_fuzz_http.py.)

The properties: no exception but the parser's own documented one; no hang (hypothesis' deadline
per example); every rejection a clear error: one line, bounded length, naming the file it is
about. Random text explores the grammar's edges; structured strategies build near-valid
documents so the checks deep inside a parser are reached too.
"""

from __future__ import annotations

import json
import string
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podgpu.attribution.cgroups import parse_cgroup, parse_cgroup_path
from podgpu.attribution.deviceids import DeviceIndex, parse_device_id
from podgpu.config import parse_serve_args
from podgpu.errors import ConfigError
from podgpu.fields.metriclist import parse_metric_list
from podgpu.http.server import accepts_gzip
from podgpu.model import Device
from podgpu.sim.scenario import decode_scenario, parse_scenario
from podgpu.sinks.cloudwatch.declarations import parse_emf_config

FUZZ = settings(max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def clear(exc: Exception, source: str) -> None:
    """A rejection a person can act on: one line, not a wall, naming what it is about."""
    msg = str(exc)
    assert msg, repr(exc)
    assert "\n" not in msg, msg
    assert len(msg) < 2000, msg[:200]
    assert source in msg, (source, msg)
    assert "Traceback" not in msg


# --- JSON-ish documents

json_scalars = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() \
    | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=20,
)


def mutate(doc: Any, path: list[Any], value: Any) -> Any:
    """`doc` with the node at `path` (followed as far as it exists) replaced by `value`."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(doc, dict) and doc:
        k = list(doc)[key % len(doc)] if isinstance(key, int) else key
        return {**doc, k: mutate(doc.get(k), rest, value)}
    if isinstance(doc, list) and doc:
        i = key % len(doc) if isinstance(key, int) else 0
        return [*doc[:i], mutate(doc[i], rest, value), *doc[i + 1:]]
    return value


paths = st.lists(st.integers(0, 7) | st.sampled_from(["pods", "containers", "gpus", "share",
                                                       "processes", "metric_declaration",
                                                       "dimensions", "source_labels"]),
                 max_size=6)

# --- metric lists

FIELD_NAMES = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DRIVER_VERSION",
               "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_XID_ERRORS"]
csv_cell = st.sampled_from([*FIELD_NAMES, "gauge", "counter", "label", "histogram", "", '"a,b"',
                           '"', "#", " "]) | st.text(max_size=20)
csv_lines = st.lists(st.lists(csv_cell, min_size=0, max_size=5).map(", ".join), max_size=12) \
    .map("\n".join)


@FUZZ
@given(text=csv_lines | st.text(max_size=400))
@example(text='DCGM_FI_DEV_GPU_UTIL, gauge, "unclosed')
@example(text="DCGM_FI_DEV_GPU_UTIL, gauge, a\x00b")
@example(text="\ufeffDCGM_FI_DEV_GPU_UTIL, gauge, bom")
def test_metric_lists(text: str) -> None:
    try:
        ml = parse_metric_list(text, "fuzz.csv")
    except ConfigError as exc:
        clear(exc, "fuzz.csv")
        return
    assert all(r.name for r in ml.metrics + ml.labels)


# --- scenario files

VALID_SCENARIO = {"pods": [
    {"namespace": "ml", "name": "train", "labels": {"a": "b"},
     "containers": [{"name": "c", "gpus": [{"gpu": 0}, {"gpu": 1, "replica": 0, "share": 0.5}]}]},
    {"namespace": "ml", "name": "infer", "containers": [
        {"name": "s", "gpus": [{"gpu": 1, "replica": 1, "share": 0.5, "processes": 3}]}]}],
    "xids": [{"gpu": 0, "xid": 31, "every": 60}]}


@FUZZ
@given(path=paths, value=json_values)
def test_scenario_documents(path: list[Any], value: Any) -> None:
    doc = mutate(VALID_SCENARIO, path, value)
    try:
        s = parse_scenario(doc, source="fuzz.json")
    except ConfigError as exc:
        clear(exc, "fuzz.json")
        return
    assert len(s.containers) <= 4096


@FUZZ
@given(text=st.text(max_size=300), yaml=st.booleans())
@example(text="[" * 5000, yaml=False)
@example(text="- " * 5000 + "x", yaml=True)
@example(text="a: &x [*x]", yaml=True)
@example(text="!!python/object/apply:os.system ['true']", yaml=True)
@example(text='{"pods": [], "pods": 1}', yaml=False)
def test_scenario_text(text: str, yaml: bool) -> None:
    try:
        parse_scenario(decode_scenario(text, "fuzz.s", yaml=yaml), source="fuzz.s")
    except ConfigError as exc:
        clear(exc, "fuzz.s")


# --- CloudWatch declarations (the agent's emf_processor)

VALID_EMF = {"metric_namespace": "ContainerInsights/Prometheus",
             "metric_unit": {"DCGM_FI_DEV_GPU_UTIL": "Percent"},
             "metric_declaration": [{"source_labels": ["job"], "label_matcher": "^podgpu$",
                                     "dimensions": [["ClusterName", "Namespace", "pod"]],
                                     "metric_selectors": ["^DCGM_FI_DEV_GPU_UTIL$"]}]}


@FUZZ
@given(path=paths, value=json_values, wrap=st.sampled_from(["emf", "prometheus", "agent"]))
@example(path=[1], value={"\n": None}, wrap="emf")  # a unit's metric name with a newline
def test_emf_declarations(path: list[Any], value: Any, wrap: str) -> None:
    emf = mutate(VALID_EMF, path, value)
    doc: Any = {"emf": emf, "prometheus": {"emf_processor": emf, "cluster_name": "c"},
                "agent": {"logs": {"metrics_collected": {"prometheus": {"emf_processor": emf}}}}}[wrap]
    try:
        cfg = parse_emf_config(json.dumps(doc), "fuzz-agent.json")
    except ConfigError as exc:
        clear(exc, "fuzz-agent.json")
        return
    assert cfg.namespace


@FUZZ
@given(text=st.text(max_size=300))
@example(text="[" * 100_000)
@example(text='{"metric_declaration": [{"source_labels": [], "metric_selectors": ["("]}]}')
@example(text='{"metric_namespace": NaN}')
def test_emf_declarations_text(text: str) -> None:
    try:
        parse_emf_config(text, "fuzz-agent.json")
    except ConfigError as exc:
        clear(exc, "fuzz-agent.json")


# --- serve flags and environment variables

FLAG_VALUES = st.text(max_size=25) | st.sampled_from(
    ["nan", "inf", "-1", "0", "1e309", "9" * 5000, "1,nan", ":99999", "[::1]:9400", "10000000000"])
FLAGS = ["-c", "-a", "-x", "--simulate", "--simulate-burn", "--emf-queue-bytes", "--emf-label",
         "--http-max-connections", "--http-request-timeout", "--kubernetes-gpu-id-type",
         "--kubernetes-pod-label-allowlist-regex", "--log-format", "--hostname-label"]
ENVS = ["DCGM_EXPORTER_INTERVAL", "DCGM_EXPORTER_LISTEN", "DCGM_EXPORTER_KUBERNETES",
        "PODGPU_SIMULATE_BURN", "PODGPU_HTTP_MAX_CONNECTIONS", "DCGM_EXPORTER_DEVICES_STR"]


@FUZZ
@given(flags=st.lists(st.tuples(st.sampled_from(FLAGS), FLAG_VALUES), max_size=3),
       env=st.dictionaries(st.sampled_from(ENVS), FLAG_VALUES, max_size=2))
def test_serve_flags_and_environment(flags: list[tuple[str, str]], env: dict[str, str]) -> None:
    argv = [x for flag, value in flags for x in (flag, value) if "\x00" not in value]
    try:
        parse_serve_args(argv, env)
    except ConfigError as exc:
        named = [f for f, _ in flags] + [f"environment variable {e}" for e in env]
        msg = str(exc)
        assert "\n" not in msg, msg
        assert any(n in msg for n in named) or "needs" in msg, msg
    except SystemExit:
        pass  # argparse's own usage error (e.g. a value that looks like a flag): exit 2


# --- kubelet device ids (a peer: whatever the device plugin reports)

UUID = "GPU-6f1c7a52-1d0e-4c55-9c3f-5d1e0a9b7e21"
DEVICES = (Device(0, UUID, "00000000:18:00.0", "nvidia0", "NVIDIA H100"),)
id_parts = st.sampled_from([UUID, "MIG-" + UUID[4:], "MIG-" + UUID, "nvidia0", "gpu-0", "::",
                            "/gi", "/vgpu", "-mig-", "1g.10gb", "/", "9" * 5000]) \
    | st.text(alphabet=string.printable, max_size=12)


@FUZZ
@given(raw=st.lists(id_parts, max_size=5).map("".join) | st.text(max_size=80))
@example(raw=UUID + "::" + "9" * 5000)
@example(raw="nvidia0/gi" + "9" * 5000)
@example(raw="gpu-" + "9" * 5000)
def test_kubelet_device_ids(raw: str) -> None:
    parsed = parse_device_id(raw)
    if parsed is None:
        return
    assert parsed.raw == raw
    for id_type in ("uid", "device-name"):
        DeviceIndex(DEVICES, id_type).match(parsed)


# --- cgroup files and paths (what /proc/<pid>/cgroup of any process holds)

cg_parts = st.sampled_from(["/", "kubepods", "kubepods-burstable-pod", ".slice", "pod",
                            "1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901", "cri-containerd-", ".scope",
                            "0" * 64, "..", ":", "0::", "\n"]) | st.text(max_size=10)


@FUZZ
@given(text=st.lists(cg_parts, max_size=12).map("".join) | st.text(max_size=300))
def test_cgroup_files(text: str) -> None:
    ident = parse_cgroup(text)
    if ident is not None:
        assert len(ident.pod_uid) in (32, 36) and ident.pod_uid == ident.pod_uid.lower()
        assert ident.container_id == "" or len(ident.container_id) == 64
    parse_cgroup_path(text)


# --- Accept-Encoding (every scraper's header)

coding = st.sampled_from(["gzip", "x-gzip", "*", "identity", "br", "GZIP", ""]) | st.text(max_size=8)
param = st.sampled_from(["q=0", "q=1", "q=0.5", "q=nan", "q=inf", "q=-1", "q=", "q", "Q=1e999"]) \
    | st.text(max_size=8)
header = st.lists(st.tuples(coding, st.lists(param, max_size=2)), max_size=5).map(
    lambda items: ", ".join(";".join([c, *ps]) for c, ps in items))


@FUZZ
@given(value=header | st.text(max_size=200))
@example(value="gzip;q=nan")
@example(value="gzip;q=inf")
@example(value="*;q=nan, identity")
def test_accept_encoding(value: str) -> None:
    result = accepts_gzip(value)
    assert isinstance(result, bool)
    if "gzip" not in value.lower() and "*" not in value:
        assert result is False
