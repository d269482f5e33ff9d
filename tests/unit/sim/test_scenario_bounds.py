"""Hostile scenario files are one ConfigError naming the file, never a traceback or a
gigabyte (non-UTF-8, JSON nested 100k deep, YAML nested 50k deep, `processes: 5000000`)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from podgpu.errors import ConfigError
from podgpu.sim.scenario import MAX_PROCESSES, load_scenario


def one_pod(**gpu: object) -> dict[str, object]:
    return {"pods": [{"namespace": "ns", "name": "p", "containers": [
        {"name": "c", "gpus": [{"gpu": 0, **gpu}]}]}]}


LATIN1 = b'{"pods": [{"namespace": "caf\xe9"}]}'


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("latin1.json", LATIN1, f"not UTF-8 text (byte {LATIN1.index(0xE9)}:"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested more than 32 levels deep"),
    ("deep.yaml", b"- " * 50_000 + b"x\n", "nested more than 32 levels deep"),
    ("indented.yaml", b"".join(b"  " * i + b"a:\n" for i in range(40)),
     "nested more than 32 levels deep"),
    ("flowdeep.yaml", b"[" * 50_000 + b"]" * 50_000, "nested more than 32 levels deep"),
    ("big.json", b" " * (1 << 20) + b"{}", "larger than 1 MiB"),
    ("nan.json", json.dumps(one_pod()).replace('"gpu": 0', '"gpu": 0, "share": NaN').encode(),
     "NaN is not a number JSON allows"),
    ("procs.json", json.dumps(one_pod(processes=5_000_000)).encode(),
     "processes: expected an integer in 0..4096, got 5000000"),
    ("xid.yaml", b"pods: []\nxids: [{gpu: 0, xid: 31, every: .nan}]\n", "xids[0].every"),
    ("bigint.json", json.dumps(one_pod(gpu=10**30)).encode(), "expected an integer in 0..63"),
    ("badyaml.yaml", b"pods: [\n  - {a: 1\n", "not valid YAML"),
    ("alias.yaml", b"pods: &a [*a]\n", "pods[0]"),
])
def test_hostile_scenario_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes,
                                                     needle: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    tracemalloc.start()
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = str(info.value)
    assert message.startswith(str(path)) and needle in message, message
    assert "\n" not in message and len(message) < 400
    assert peak < 64 << 20  # the 5,000,000 processes were refused, not built


def test_the_process_total_is_bounded_across_entries(tmp_path: Path) -> None:
    pods = [{"namespace": "ns", "name": f"p{i}", "containers": [
        {"name": "c", "gpus": [{"gpu": i, "processes": 1000}]}]} for i in range(5)]
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"pods": pods}))
    with pytest.raises(ConfigError, match=f"more than {MAX_PROCESSES} simulated processes"):
        load_scenario(str(path))


def test_serve_exits_2_with_one_line_for_a_deep_scenario(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    res = subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "2",
                          "--simulate-scenario", str(path), "-a", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"podgpu: {path}: nested more than 32 levels deep; a scenario needs 6"]
