"""What the benchmarks and the tests that run a real `podgpu serve` share: a free loopback port, the
agent as a child process (started, ready through `/health/ready`, its stderr kept, stopped with
SIGTERM), one scrape, a raw socket read to its close, percentiles, and the RSS, threads, file
descriptors and CPU time of a pid read from `/proc` (once, or their peaks on a thread).

bench/ imports this module (run it from the repository root: `python -m bench.load`); nothing here
imports bench/."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DEFAULT_READY_TIMEOUT = 30.0  # seconds; a loaded 2-core machine needs more than the usual 2
DEFAULT_STOP_TIMEOUT = 15.0  # seconds between SIGTERM and SIGKILL


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (the usual race: bind it soon)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unverified_tls() -> ssl.SSLContext:
    """A client context that takes any certificate (the benches' self-signed ones)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank, rounded to 0.01; 0.0 for no values."""
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2) if s else 0.0


def proc_sample(pid: int) -> dict[str, float]:
    """RSS and peak RSS in KiB, threads, open fds and user+system CPU seconds of `pid`."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":" in line)
    if "VmRSS" not in status:  # a zombie: exited, not yet reaped
        raise ProcessLookupError(f"process {pid} has exited (no memory left to sample)")
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"rss_kib": int(status["VmRSS"].split()[0]), "hwm_kib": int(status["VmHWM"].split()[0]),
            "threads": int(status["Threads"]), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "cpu_s": (int(stat[11]) + int(stat[12])) / ticks}


def rss_fds(pid: int) -> tuple[float, int]:
    """RSS in MiB and the number of open file descriptors of `pid`."""
    s = proc_sample(pid)
    return s["rss_kib"] / 1024, int(s["fds"])


class PeakSampler:
    """The largest RSS (MiB, to 0.1) and open-descriptor count of `pid`, sampled on a thread
    every `every` seconds while the `with` block runs (or until the process is gone)."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid = pid
        self.every = every
        self.rss_mib_max = 0.0
        self.fds_max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss, fds = rss_fds(self.pid)
            except OSError:  # gone, or a zombie (ProcessLookupError)
                return
            self.rss_mib_max = max(self.rss_mib_max, round(rss, 1))
            self.fds_max = max(self.fds_max, fds)
            self._stop.wait(self.every)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


T = TypeVar("T")


def wait_for(cond: Callable[[], T | None], timeout: float = 10.0, what: str = "condition",
             interval: float = 0.02) -> T:
    """Poll `cond` until it returns something true and return that; fail after `timeout` seconds
    naming `what`. The one polling helper of the tests and benches: a condition that can end the
    wait early (a process that exited) raises from inside `cond`."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def http_get(url: str, headers: Mapping[str, str] | None = None, *, timeout: float = 5.0,
             context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """One GET: the status, the headers and the body as sent; HTTP errors are answers here, not
    exceptions. The one GET helper of the tests and benches."""
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return int(r.status), dict(r.headers), bytes(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), dict(e.headers), bytes(e.read())


def scrape(url: str, *, gzip: bool = False, timeout: float = 5.0,
           context: ssl.SSLContext | None = None,
           headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """`http_get` without the headers; `gzip` asks for a gzipped body (returned still gzipped)."""
    hdrs = {**(headers or {}), **({"Accept-Encoding": "gzip"} if gzip else {})}
    status, _, body = http_get(url, hdrs, timeout=timeout, context=context)
    return status, body


def read_all(s: socket.socket) -> tuple[bytes, bool]:
    """Everything a raw socket gets until the peer closes; True when it ended with a reset, not a
    FIN."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return b"".join(chunks), True
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


class Serve:
    """`python -m podgpu serve ARGS --address 127.0.0.1:PORT` as a child process.

    `src` runs other podgpu sources (a `git archive` of an older commit) through PYTHONPATH. stderr
    goes to a temporary file, read back by `stop()`; `tls` scrapes readiness over HTTPS without
    verifying the certificate."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None,
                 src: Path | None = None, port: int | None = None, tls: bool = False,
                 node_name: str = "bench-node", stdout: int | IO[bytes] = subprocess.DEVNULL) -> None:
        self.port = port or free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "podgpu", "serve", *args, "--address", f"127.0.0.1:{self.port}"]
        full_env = {**os.environ, "NODE_NAME": node_name, **(env or {})}
        if src is not None:
            full_env["PYTHONPATH"] = str(src)
        self._tls = unverified_tls() if tls else None
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 -- closed by stop()
        self.proc = subprocess.Popen(self.cmd, stdout=stdout, stderr=self._err, env=full_env)
        self.pid = self.proc.pid
        self.exit_status: int | None = None
        self.stderr = ""

    def wait_ready(self, timeout: float = DEFAULT_READY_TIMEOUT) -> None:
        """Until `/health/ready` answers 200; RuntimeError with the agent's stderr if it exits."""
        def ready() -> bool:
            if self.proc.poll() is not None:
                rc, err = self.stop()
                raise RuntimeError(f"podgpu serve exited {rc} before it was ready:\n{err}")
            try:
                return scrape(self.url + "/health/ready", timeout=1, context=self._tls)[0] == 200
            except OSError:
                return False

        try:
            wait_for(ready, timeout, "podgpu serve's /health/ready", interval=0.05)
        except AssertionError:
            rc, err = self.stop()
            raise RuntimeError(f"podgpu serve was not ready in {timeout} s (exit {rc}):\n{err}") from None

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> tuple[int, str]:
        """SIGTERM, SIGKILL after `timeout` seconds; the exit status and everything on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.exit_status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_status = self.proc.wait()
        if not self._err.closed:
            self._err.seek(0)
            self.stderr = self._err.read().decode(errors="replace")
            self._err.close()
        return self.exit_status, self.stderr

    def __enter__(self) -> Serve:
        self.wait_ready()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
