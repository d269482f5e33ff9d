"""The image recipe. No container daemon exists here, so the Dockerfile is linted
by hadolint and its promises are checked one by one: pinned hashed dependencies that match
pyproject.toml, a non-root final stage without compilers, dcgm-exporter's metric-list paths, and
a site-packages pruning that leaves what podgpu loads working."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from podgpu.fields.metriclist import MetricList, load_metric_list
from tests.deploy.contract import IMAGE_FILES
from tests.deploy.render import ROOT, tool
from tests.deploy.standins import DUMMY_AWS, LogsStandIn, environ_without_aws

DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = ROOT / "requirements.lock"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last:]


def test_hadolint_passes() -> None:
    out = subprocess.run([tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def build_args() -> dict[str, str]:
    return dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)


def test_final_stage_runs_podgpu_as_the_documented_user_without_installers() -> None:
    ins = instructions()
    assert sum(w == "FROM" for w, _ in ins) == 2  # multi-stage
    base = build_args()["BASE"]
    # the registry default: the official slim image of the one Python minor, pinned by digest
    assert re.fullmatch(r"docker\.io/library/python:3\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    final = final_stage()
    assert final[0] == ("FROM", "${BASE}")
    (user,) = [a for w, a in final if w == "USER"]
    # root on purpose (docs/deploy.md, "Which user"): the image-only swap into the GPU
    # Operator's DaemonSet sets no user and needs the root-only kubelet socket
    assert user == "0:0"
    assert "hadolint ignore=DL3002" in DOCKERFILE
    (entry,) = [a for w, a in final if w == "ENTRYPOINT"]
    assert json.loads(entry) == ["podgpu"]  # the DaemonSet's args start with `serve`
    runs = [a for w, a in final if w == "RUN"]
    # one RUN: the standard library's bytecode, exec form (the Debian-made base has no shell)
    assert len(runs) == 1 and json.loads(runs[0])[:2] == [f"python{python_minor()}", "-c"], runs
    for compiler_ish in ("apt-get", "gcc", "build-essential", "pip"):
        assert compiler_ish not in runs[0]


def python_minor() -> str:
    """The one Python minor of the image: the base's tag."""
    m = re.search(r"python:(3\.\d+)-slim", build_args()["BASE"])
    assert m
    return m.group(1)


def test_one_python_minor_for_the_base_the_lock_and_the_build() -> None:
    """A lock resolved for another minor would fail the build with hash mismatches (wheels are
    per CPython minor), and a venv points at its interpreter by path."""
    minor = python_minor()
    header = LOCK.read_text().splitlines()[0]
    assert f"for CPython {minor} " in header, f"requirements.lock: {header!r}: run scripts/lock"
    lock_script = (ROOT / "scripts" / "lock").read_text()
    assert re.search(rf'^PYTHON_VERSION = "{re.escape(minor)}"', lock_script, re.M)
    image_script = (ROOT / "scripts" / "image").read_text()
    assert re.search(rf"^PY={re.escape(minor)}$", image_script, re.M)
    assert f"python{minor} -m venv" in DOCKERFILE


def test_the_build_backend_is_pinned_with_its_hash() -> None:
    text = (ROOT / "deploy" / "image" / "build-backend.lock").read_text()
    pins = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", " "))]
    (pin,) = pins
    name, version = pin.rstrip(" \\").split("==")
    assert re.search(r"--hash=sha256:[0-9a-f]{64}", text)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    (req,) = [Requirement(r) for r in requires]
    assert req.name == name and req.specifier.contains(version), (requires, pin)
    assert "--no-build-isolation" in DOCKERFILE and "build-backend.lock" in DOCKERFILE


def test_metric_lists_are_where_dcgm_exporter_charts_look() -> None:
    final = final_stage()
    copies = [a for w, a in final if w == "COPY" and "/etc/dcgm-exporter/" in a]
    (copy,) = copies
    *sources, dest = copy.split()
    assert dest == "/etc/dcgm-exporter/"
    assert {"/etc/dcgm-exporter/" + Path(s).name: ROOT / s for s in sources} == IMAGE_FILES
    default = load_metric_list(str(IMAGE_FILES["/etc/dcgm-exporter/default-counters.csv"]))
    dcp = load_metric_list(str(IMAGE_FILES["/etc/dcgm-exporter/dcp-metrics-included.csv"]))
    # dcgm-exporter 4.x: the two lists have the same active rows (profiling included).
    def rows(m: MetricList) -> list[tuple[str, str, str]]:
        return [(r.field.name, r.prom_type, r.help) for r in (*m.metrics, *m.labels)]

    assert rows(dcp) == rows(default)
    assert any(r.field.name.startswith("DCGM_FI_PROF_") for r in dcp.metrics)


def test_dependencies_are_pinned_with_hashes_and_match_pyproject() -> None:
    assert "--require-hashes" in DOCKERFILE and "requirements.lock" in DOCKERFILE
    pins: dict[str, str] = {}
    current = ""
    for line in LOCK.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(" "):
            assert re.fullmatch(r"\s+--hash=sha256:[0-9a-f]{64}( \\)?", line), line
            assert current, line
            continue
        name, version = line.rstrip(" \\").split("==")
        pins[name] = version
        current = name
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("kubernetes", "cloudwatch"):
        wanted += project["optional-dependencies"][extra]
    for spec in wanted:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements.lock: run scripts/lock"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} violates {spec}: run scripts/lock"


def test_dockerignore_lets_in_exactly_what_the_dockerfile_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied: set[str] = set()
    for word, args in instructions():
        if word == "COPY" and not args.startswith("--from"):
            copied.update(p.rstrip("/").removeprefix("./") for p in args.split()[:-1])
    assert copied == allowed - {"Dockerfile"}


def test_pruned_site_packages_still_do_what_podgpu_needs(tmp_path: Path) -> None:
    """Run the Dockerfile's prune script on a copy of botocore, then use it from a fresh
    interpreter as podgpu does (no boto3 or kubernetes client): podgpu's Logs client
    resolves the endpoint from the rule set and puts an event into the Logs stand-in, and an STS
    client (IRSA) loads."""
    import botocore  # type: ignore[import-untyped]  # botocore ships no type hints

    site = tmp_path / "site-packages"
    for mod in (botocore,):
        src = Path(mod.__file__).parent
        shutil.copytree(src, site / src.name, ignore=shutil.ignore_patterns("__pycache__"))
    before = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    subprocess.run(["sh", str(ROOT / "deploy/image/prune-site-packages.sh"), str(site)],
                   check=True, timeout=60)
    after = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    assert after < before * 0.6, (before, after)
    logs = LogsStandIn().start()
    try:
        code = f"""
import botocore, botocore.session
assert botocore.__file__.startswith({str(site)!r}), botocore.__file__
from podgpu.sinks.cloudwatch.destinations import CloudWatchDestination
from podgpu.sinks.cloudwatch.logsapi import LogsApi
assert LogsApi(region="us-east-1", endpoint_url=None).url == "https://logs.us-east-1.amazonaws.com"
d = CloudWatchDestination(log_group="g", log_stream="s", region="us-east-1", endpoint_url={logs.url!r})
assert d.send([(1, "pruned-ok")]) == 0
botocore.session.Session().create_client("sts", region_name="us-east-1")
"""
        env = {**environ_without_aws(), **DUMMY_AWS,
               "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        assert logs.messages == ["pruned-ok"]
    finally:
        logs.stop()
    assert os.path.getsize(LOCK) > 0
