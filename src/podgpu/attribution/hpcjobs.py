"""HPC job mapping: `DCGM_HPC_JOB_MAPPING_DIR` / `--hpc-job-mapping-dir`, as dcgm-exporter has it.

On Slurm nodes a prolog writes one file per GPU into a directory, named by the GPU's index (`0`,
`1`) or, for a MIG instance, `<gpu>.<gpu instance id>` (`2.0`, `3.10`); each line of a file is one
job id. dcgm-exporter (internal/pkg/transformation/hpc.go at d5e5f51) re-reads the directory for
every scrape and gives each series of a GPU with jobs one copy per job carrying `hpc_job="<id>"`;
GPUs without a file keep their series unchanged. A directory missing at start is logged once and
ignored until it appears; one that disappears later is logged and ignored.

podgpu reads the directory once per collect cycle (never per scrape), bounded: regular files only
(through the bounded file reader), at most `MAX_FILES` files of `MAX_FILE_BYTES` each, and at most
`MAX_JOBS_PER_GPU` jobs per file: every job multiplies all of that GPU's series, so the bytes read
alone would not bound the output (8 files of 64 KiB of job ids are 1.64 M series). A job id
longer than `MAX_JOB_ID_CHARS` is skipped, not cut short (two long ids cut short could become
one): each job id is copied into every series of its GPU, so 8 files of 64 ids of 1,000
characters made `/metrics` 15.9 MB. A cut or a skip is logged once per file and shown in
`/health`'s `hpc_job_mapping` entry (status `degraded`). Blank lines are skipped
(dcgm-exporter would emit `hpc_job=""`, which Prometheus reads as no label, i.e. a duplicate of
the unlabelled series).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from podgpu.files import FileReadError, read_head

log = logging.getLogger(__name__)

JOB_FILE = re.compile(r"[0-9]+(?:\.[0-9]+)?")
"""A mapping file's name: a GPU index, or `<gpu>.<gpu instance id>` for a MIG instance."""
MAX_FILES = 1024
MAX_FILE_BYTES = 64 * 1024
MAX_JOBS_PER_GPU = 64
"""Jobs kept per mapping file. Slurm shares a GPU between jobs only through sharding or MPS,
a handful at a time; each job is a full copy of the GPU's series (about 40 by default)."""

MAX_JOB_ID_CHARS = 128
"""Longest job id kept. Slurm's are a number with an array (`1234_7`) or het-job (`1234+1`)
suffix, under 25 characters; other schedulers' ids stay well under 128."""

JobMap = Mapping[str, tuple[str, ...]]
"""Mapping-file key (`"0"`, `"2.1"`) -> job ids in file order."""


def parse_jobs(text: str) -> tuple[str, ...]:
    """One job id per line; surrounding whitespace and blank lines dropped, order kept, each once."""
    out: dict[str, None] = {}
    for line in text.splitlines():
        job = line.strip()
        if job:
            out.setdefault(job, None)
    return tuple(out)


class HpcJobMapper:
    """Reads the mapping directory; `read()` never raises (problems are logged once each)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._missing_at_start = not os.path.isdir(directory)
        self._logged: set[str] = set()
        self.over: dict[str, int] = {}
        """Files whose jobs were cut at MAX_JOBS_PER_GPU in the last read -> jobs listed."""
        self.long: dict[str, int] = {}
        """Files with job ids over MAX_JOB_ID_CHARS in the last read -> ids skipped."""
        if self._missing_at_start:
            log.warning("HPC job mapping directory %s not found; hpc_job labels appear once it "
                        "exists", directory)
        else:
            log.info("HPC job mapping from %s", directory)

    def _once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._logged and len(self._logged) < 256:
            self._logged.add(key)
            log.warning(msg, *args)

    def read(self) -> JobMap:
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            if not self._missing_at_start:
                self._once("gone", "HPC job mapping directory %s is gone; no hpc_job labels",
                           self.directory)
            return {}
        except OSError as exc:
            self._once("dir", "cannot read HPC job mapping directory %s: %s", self.directory,
                       exc.strerror or exc)
            return {}
        self._missing_at_start = False
        self._logged.discard("gone")
        out: dict[str, tuple[str, ...]] = {}
        cut: dict[str, int] = {}
        long: dict[str, int] = {}
        for entry in sorted(entries, key=lambda e: e.name)[:MAX_FILES]:
            if not JOB_FILE.fullmatch(entry.name):
                continue
            jobs = self._read_file(entry.path, entry.name)
            kept = tuple(j for j in jobs if len(j) <= MAX_JOB_ID_CHARS)
            if len(kept) < len(jobs):
                long[entry.name] = len(jobs) - len(kept)
                self._once(f"long:{entry.name}", "HPC job file %s has %d job id(s) over %d "
                           "characters; skipped (each id is copied into every series of that "
                           "GPU)", entry.path, len(jobs) - len(kept), MAX_JOB_ID_CHARS)
                jobs = kept
            if len(jobs) > MAX_JOBS_PER_GPU:
                cut[entry.name] = len(jobs)
                self._once(f"jobs:{entry.name}", "HPC job file %s lists %d jobs; the first %d "
                           "are used (each job copies every series of that GPU)", entry.path,
                           len(jobs), MAX_JOBS_PER_GPU)
                jobs = jobs[:MAX_JOBS_PER_GPU]
            if jobs:
                out[entry.name] = jobs
        self.over, self.long = cut, long
        return out

    @property
    def cut(self) -> bool:
        """Whether the last read left jobs out (too many for a GPU, or ids too long)."""
        return bool(self.over or self.long)

    def health(self) -> dict[str, object]:
        """`/health`'s `hpc_job_mapping` entry: `ok`, or which files were cut."""
        parts = []
        if self.over:
            files = ", ".join(f"{k} ({n} jobs)" for k, n in sorted(self.over.items())[:8])
            parts.append(f"jobs cut at {MAX_JOBS_PER_GPU} per GPU: {files}")
        if self.long:
            files = ", ".join(f"{k} ({n} ids)" for k, n in sorted(self.long.items())[:8])
            parts.append(f"job ids over {MAX_JOB_ID_CHARS} characters skipped: {files}")
        return {"status": "; ".join(parts) or "ok", "directory": self.directory}

    def _read_file(self, path: str, name: str) -> tuple[str, ...]:
        try:
            data, more = read_head(path, MAX_FILE_BYTES)
        except FileReadError as exc:
            if exc.errno is not None:  # not "a directory or FIFO named like a GPU", which
                # dcgm-exporter skips too
                self._once(f"open:{name}", "cannot read HPC job file %s: %s", path, exc)
            return ()
        if more:
            self._once(f"size:{name}", "HPC job file %s is over %d KiB; its first %d KiB used",
                       path, MAX_FILE_BYTES // 1024, MAX_FILE_BYTES // 1024)
            data = data[:MAX_FILE_BYTES].rsplit(b"\n", 1)[0]
        return parse_jobs(data.decode("utf-8", errors="replace"))
