"""podgpu top without a network: URL handling, keys, sorting and filtering, the plain-text view."""

from __future__ import annotations

import pytest

from podgpu.errors import ConfigError
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess, Sample, Snapshot
from podgpu.sinks.live import render_json
from podgpu.sinks.live.page import pod_cells
from podgpu.sinks.live.schema import SnapshotView
from podgpu.sinks.live.view import ViewOptions, build_view
from podgpu.top import NodeResult, TopState, apply_key, clean, plain_text, pod_rows, snapshot_url
from podgpu.topdoc import parse

GIB = 1 << 30


def view(node: str, pods: dict[str, tuple[float, int]], taken_at: float = 1000.0) -> SnapshotView:
    """One GPU per pod; each pod's process uses (utilization ratio, memory bytes); the document
    as `podgpu top` reads it off the wire (rendered, then parsed and checked)."""
    samples, allocs, procs = [], [], []
    for i, (name, (util, mem)) in enumerate(sorted(pods.items())):
        d = Device(i, f"GPU-{node}-{i}", f"0:{i}", f"nvidia{i}", "NVIDIA H100 80GB HBM3")
        ref = ContainerRef("ns", name, "main")
        samples.append(Sample(d, {"DCGM_FI_DEV_GPU_UTIL": round(util * 100),
                                  "DCGM_FI_DEV_FB_USED": mem >> 20, "DCGM_FI_DEV_FB_FREE": 1000}))
        allocs.append(Allocation(d.key, ref, "nvidia.com/gpu", d.key))
        procs.append(GpuProcess(d.key, 100 + i, mem, util * 100, ref))
    snap = Snapshot(taken_at, tuple(samples), allocations=tuple(allocs), processes=tuple(procs), cycle=4)
    return parse(render_json(build_view(snap, ViewOptions(node, "simulated", "1", 1.0))))


@pytest.mark.parametrize(("arg", "url"), [
    ("node1", "http://node1:9400/api/v1/snapshot"),
    ("node1:9500", "http://node1:9500/api/v1/snapshot"),
    ("http://10.0.0.1:9400/", "http://10.0.0.1:9400/api/v1/snapshot"),
    ("https://proxy/podgpu/n1", "https://proxy:9400/podgpu/n1/api/v1/snapshot"),
    ("http://h:1/api/v1/snapshot", "http://h:1/api/v1/snapshot"),
    ("[::1]:9400", "http://[::1]:9400/api/v1/snapshot"),
])
def test_snapshot_url(arg: str, url: str) -> None:
    assert snapshot_url(arg) == url


@pytest.mark.parametrize("arg", ["ftp://h", "http://", "h:notaport", "h:99999"])
def test_bad_urls_name_the_argument(arg: str) -> None:
    with pytest.raises(ConfigError, match="top: URL"):
        snapshot_url(arg)


def test_keys() -> None:
    s = TopState()
    s1 = apply_key(s, "s")
    assert s1 is not None and s1.sort == "memory"
    assert apply_key(apply_key(apply_key(s1, "s"), "s"), "s").sort == "util"  # type: ignore[arg-type, union-attr]
    s2 = apply_key(s, "/")
    for k in "inf":
        s2 = apply_key(s2, k)  # type: ignore[arg-type]
    assert s2 is not None and s2.typing == "inf" and s2.filter == ""
    s2 = apply_key(apply_key(s2, "\x7f"), "\r")  # type: ignore[arg-type]
    assert s2 is not None and s2.filter == "in" and s2.typing is None
    s3 = apply_key(apply_key(s2, "/"), "\x1b")  # type: ignore[arg-type]
    assert s3 is not None and s3.filter == "in" and s3.typing is None  # Esc keeps the old filter
    s4 = apply_key(s3, "i")
    assert s4 is not None and s4.idle_only
    s5 = apply_key(s4, "c")
    assert s5 == TopState()
    assert apply_key(s, "q") is None
    assert apply_key(apply_key(s, "/"), "q") == TopState(typing="q")  # type: ignore[arg-type]


def test_pods_sorted_filtered_and_idle_only_across_nodes() -> None:
    a = NodeResult("http://a", view("a", {"busy": (0.9, 2 * GIB), "idle": (0.0, 5 * GIB)}))
    b = NodeResult("http://b", view("b", {"mid": (0.5, GIB), "infer": (0.7, 3 * GIB)}))
    dead = NodeResult("http://c", None, "timed out")
    rows = pod_rows([a, b, dead], TopState())
    assert [(n, p["pod"]) for n, p in rows] == [("a", "busy"), ("b", "infer"), ("b", "mid"), ("a", "idle")]
    assert [p["pod"] for _, p in pod_rows([a, b], TopState(sort="memory"))] == ["idle", "infer", "busy", "mid"]
    assert [p["pod"] for _, p in pod_rows([a, b], TopState(sort="name"))] == ["busy", "idle", "infer", "mid"]
    assert [n for n, _ in pod_rows([b, a], TopState(sort="node"))] == ["a", "a", "b", "b"]
    assert [p["pod"] for _, p in pod_rows([a, b], TopState(filter="INF"))] == ["infer"]
    assert [p["pod"] for _, p in pod_rows([a, b], TopState(filter="b"))] == ["busy", "infer", "mid"]
    assert [p["pod"] for _, p in pod_rows([a, b], TopState(idle_only=True))] == ["idle"]


def test_plain_text_shows_nodes_dead_nodes_and_the_page_cells() -> None:
    a = view("node-a", {"train": (1.0, 70 * GIB), "idle": (0.0, GIB)}, taken_at=1000.0)
    text = plain_text([NodeResult("http://a", a), NodeResult("http://b:9400/api/v1/snapshot", None,
                                                             "Connection refused")],
                      TopState(), now=1001.5, width=160)
    assert "\x1b" not in text
    assert "node-a  simulated  cycle 4  1.5 s ago  ok" in text
    assert "b:9400  DEAD: Connection refused" in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    rows = [line.split() for line in lines[start + 1:] if line.strip()]
    expected = [["node-a", *" ".join(pod_cells(p)).split()] for p in a["pods"]]
    expected = sorted(expected, key=lambda r: r[2] != "train")  # busiest first
    expected[1].append("IDLE")
    assert rows == expected


def test_stale_node_is_flagged() -> None:
    a = view("n", {"p": (0.5, GIB)}, taken_at=1000.0)
    text = plain_text([NodeResult("u", a)], TopState(), now=1000.0 + 3 * 1.0 + 2.5, width=120)
    assert "STALE" in text.splitlines()[0]


def test_pod_strings_cannot_drive_the_terminal_or_rich_markup() -> None:
    assert clean("a\x1b[2Jb\x07") == "a\\x1b[2Jb\\x07"
    v = view("n", {"[bold red]x[/bold red]": (0.5, GIB)})
    text = plain_text([NodeResult("u", v)], TopState(), now=1000.0, width=160)
    assert "[bold red]x[/bold red]" in text


@pytest.mark.parametrize("flags", [["--timeout", "nan"], ["--timeout", "inf"], ["--timeout", "0"],
                                   ["--interval", "nan"], ["--interval", "-1"],
                                   ["--width", "1000000000"]])
def test_out_of_range_flags_are_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    import argparse

    from podgpu.top import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert run(parser.parse_args(["--once", *flags, "127.0.0.1:1"])) == 2
    assert capsys.readouterr().err.startswith("podgpu: top: --timeout must be in (0, 3600]")
