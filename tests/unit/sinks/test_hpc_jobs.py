"""--hpc-job-mapping-dir: a GPU (or MIG instance) with jobs gets each series once per job with
`hpc_job` among the attributes; other GPUs are unchanged."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from podgpu.attribution.hpcjobs import HpcJobMapper
from tests.unit.sinks.golden import pods_snapshot, render_default


def util_series(body: bytes, metric: str = "DCGM_FI_DEV_FB_USED") -> list[dict[str, str]]:
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == metric:
            return [s.labels for s in fam.samples]
    return []


def test_jobs_multiply_series_of_their_gpu_and_mig_instance_only(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("1001\n1002\n")  # GPU 0, held by train-0
    (tmp_path / "3.9").write_text("mig-7\n")  # GPU 3's instance 9
    (tmp_path / "3").write_text("parent-only\n")  # the parent key does not apply to its instance
    base = pods_snapshot()
    snap = base._replace(hpc_jobs=tuple(sorted(HpcJobMapper(str(tmp_path)).read().items())))
    before, after = util_series(render_default(base)), util_series(render_default(snap))

    def by_gpu(rows: list[dict[str, str]], gpu: str) -> list[dict[str, str]]:
        return [r for r in rows if r["gpu"] == gpu]

    gpu0 = by_gpu(after, "0")
    assert sorted(r["hpc_job"] for r in gpu0) == ["1001", "1002"]
    for r in gpu0:  # everything else as without jobs, pod labels included
        assert {k: v for k, v in r.items() if k != "hpc_job"} == by_gpu(before, "0")[0]
    gpu3 = by_gpu(after, "3")  # the instance: its plain and its labelled series, each with the job
    assert len(gpu3) == len(by_gpu(before, "3")) == 2
    assert {r.get("hpc_job") for r in gpu3} == {"mig-7"}
    assert by_gpu(after, "1") == by_gpu(before, "1") and by_gpu(after, "2") == by_gpu(before, "2")


def test_hpc_job_sits_among_the_attributes_in_key_order() -> None:
    base = pods_snapshot()
    snap = base._replace(hpc_jobs=(("0", ("j1",)),))
    line = next(ln for ln in render_default(snap).decode().splitlines()
                if ln.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0"'))
    names = [kv.split("=", 1)[0] for kv in line[line.index("{") + 1:line.rindex("}")].split(",")]
    assert names[-4:] == ["container", "hpc_job", "namespace", "pod"], names
