"""On a GPU machine: what `podgpu serve` opens ahead of its flags (podgpu/ahead.py) on real NVML.

    PYTHONPATH=/tmp/site:src python3 -m bench.ahead_check

Runs the open as serve does (C init, pynvml given, the GPUs' warm-up, the backend the default
flags make, opened on the open's thread), then checks what the fakes of the tests cannot:
- NVML's C init through libnvidia-ml.so.1 worked (the thread's shutdown is NVML's own), and
  after its attach threads a handle asked for through pynvml comes at once;
- the first read has DCGM_FI_PROF_GR_ENGINE_ACTIVE only if 100 ms have passed since the sample
  taken ahead (GPM's first window is not waited for; printed either way), and a read 0.1 s
  later has it on every GPU;
- once the backend is closed NVML is down again ("Uninitialized"): the open's thread gave back
  both of its inits (the C one and pynvml's), so NVML was initialised exactly as often as the
  backend inited it.
Prints one line per check and the seconds each step took; exits 1 if a check fails.
"""

from __future__ import annotations

import sys
import threading
import time

T0 = time.perf_counter()


def main() -> int:
    from podgpu.ahead import OpenAhead
    from podgpu.backends.nvml_c import c_init

    ok = True
    shutdown = c_init()
    print(f"C init through libnvidia-ml.so.1: {'ok' if shutdown else 'FAILED'}")
    if shutdown is None:
        return 1
    for thread in threading.enumerate():
        if thread.name.startswith("podgpu-attach-"):
            thread.join()
    import pynvml

    pynvml.nvmlInit()
    t = time.perf_counter()
    pynvml.nvmlDeviceGetHandleByIndex(0)
    print(f"GPU 0's handle through pynvml after the C attach: {(time.perf_counter() - t) * 1e3:.2f}"
          " ms (the first ask costs 7-9 ms)")
    pynvml.nvmlShutdown()
    shutdown()
    ahead = OpenAhead.early([])
    from podgpu.config import OPTIONS, serve_parser, settings_from
    from podgpu.fields.catalog import BY_NAME
    from podgpu.options import go_flags

    settings = settings_from(serve_parser().parse_args(go_flags([], OPTIONS)))
    ahead.begin(settings)
    assert ahead.backend is not None
    ahead.wait(ahead.backend)
    opened = time.perf_counter() - T0
    field = BY_NAME["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    first = ahead.backend.read([field])
    read = time.perf_counter() - T0
    why = [s.missing.get(field.name, s.values.get(field.name)) for s in first.samples]
    print(f"open done at {opened:.3f} s, first read at {read:.3f} s: {why}")
    time.sleep(0.1)
    values = [s.values.get(field.name) for s in ahead.backend.read([field]).samples]
    good = bool(values) and all(v is not None for v in values)
    ok &= good
    print(f"{field.name} 0.1 s later: {values} ({'ok' if good else 'FAILED'})")
    ahead.backend.close()
    try:
        pynvml.nvmlDeviceGetCount()
        print("NVML still up after the backend closed: FAILED (an init was not given back)")
        ok = False
    except pynvml.NVMLError_Uninitialized:
        print("NVML down after the backend closed: ok (every init given back)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
