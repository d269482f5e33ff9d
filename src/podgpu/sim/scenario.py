"""Simulated pods on the simulated node: allocations and GPU processes without a cluster,
so the demo and dashboard tests show per-pod data.

A scenario lists pods, their containers and the GPUs each holds (by simulated GPU index; a
`replica` makes it a time-slicing share, `GPU-<uuid>::N`). Each held GPU runs `processes`
processes of that container using `share` of the GPU: per process, `share / processes` of the
device's GPU_UTIL and FB_USED, so the per-pod series add up to the device series. File format
(JSON, or YAML with PyYAML installed):

    pods:
      - namespace: ml
        name: train-0
        labels: {app: trainer}
        containers:
          - name: trainer
            gpus: [{gpu: 0}]
      - namespace: inference
        name: infer-a
        containers:
          - name: server
            gpus: [{gpu: 1, replica: 0, share: 0.6}]

Optional per pod: `uid` (default derived from namespace/name); per GPU: `replica`, `share`
(0..1, default 1), `processes` (default 1), `resource` (default nvidia.com/gpu). Optional at the
top: `xids` (injected XID errors), `lost_gpus` (GPUs falling off the bus, sim/lost.py) and `mig`
(GPUs with MIG on; a pod holds an instance with `instance: N`, sim/mig.py).

Bounded, so a hostile or mistaken file is a one-line error, never a traceback or a
gigabyte: files up to MAX_FILE_BYTES of UTF-8, nesting no deeper than the format needs, at most
MAX_PODS pods, MAX_PROCESSES simulated processes in all, strings up to MAX_TEXT characters.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podgpu.attribution.base import Attribution
from podgpu.attribution.enrich import EnrichOptions, shape_ref
from podgpu.errors import ConfigError
from podgpu.files import FileReadError, read_bytes
from podgpu.model import Allocation, ContainerRef, Device, GpuProcess
from podgpu.sim.lost import LostGpu, check_lost_gpu_count, parse_lost_gpus
from podgpu.sim.mig import ScenarioMig, check_instance, parse_mig
from podgpu.sim.scenariofile import MAX_FILE_BYTES, decode_scenario

_UID_NS = uuid.UUID("0d4b8f0e-6c1a-4b8e-9f57-3a1c2e5d7b90")
_FIRST_PID = 104_000
MAX_PODS = 4096
MAX_CONTAINERS = 64
"""Per pod."""
MAX_GPU = 63
"""Highest GPU index: --simulate allows 64 GPUs."""
MAX_REPLICA = 1023
MAX_PROCESSES = 4096
"""In the whole scenario: each is a GpuProcess per cycle."""
MAX_LABELS = 64
MAX_TEXT = 253
"""Kubernetes names and label values are shorter; a longer string is a mistake."""
MAX_XIDS = 1024
MAX_SECONDS = 366 * 86_400.0


@dataclass(frozen=True, slots=True)
class ScenarioGpu:
    gpu: int
    replica: int | None = None
    share: float = 1.0
    processes: int = 1
    resource: str = "nvidia.com/gpu"
    instance: int | None = None
    """The MIG GPU instance id held on `gpu` (sim/mig.py), None for the whole GPU."""


@dataclass(frozen=True, slots=True)
class ScenarioContainer:
    ref: ContainerRef
    container_id: str
    gpus: tuple[ScenarioGpu, ...]


@dataclass(frozen=True, slots=True)
class ScenarioXid:
    """An XID injected on `gpu` every `every` seconds, first at `offset` seconds after start."""

    gpu: int
    xid: int
    every: float
    offset: float = 0.0

    def times(self, elapsed: float) -> int:
        """How many times it has happened in the first `elapsed` seconds."""
        if elapsed < self.offset:
            return 0
        return int((elapsed - self.offset) // self.every) + 1


@dataclass(frozen=True, slots=True)
class Scenario:
    """Validated scenario. `source` names the file (or 'built-in default') in errors."""

    containers: tuple[ScenarioContainer, ...]
    source: str = "built-in default"
    xids: tuple[ScenarioXid, ...] = ()
    """Injected XID errors: DCGM_FI_DEV_XID_ERRORS and the windowed counts move."""
    lost_gpus: tuple[LostGpu, ...] = ()
    """GPUs that fall off the bus (sim/lost.py)."""
    mig: tuple[ScenarioMig, ...] = ()
    """GPUs with MIG on and their instances' profiles (sim/mig.py)."""

    def busy_gpus(self) -> set[int]:
        """GPUs whose processes use them: the simulated backend runs the burn pattern on these."""
        return {g.gpu for c in self.containers for g in c.gpus if g.share > 0 and g.processes}

    def busy_instances(self) -> set[tuple[int, int | None]]:
        """(gpu, GPU instance id) of the MIG instances whose processes use them."""
        return {(g.gpu, g.instance) for c in self.containers for g in c.gpus
                if g.instance is not None and g.share > 0 and g.processes}

    def check_gpu_count(self, count: int) -> None:
        """Raise ConfigError when the scenario names a GPU the simulated node does not have."""
        check_lost_gpu_count(self.lost_gpus, count, self.source)
        for xi, x in enumerate(self.xids):
            if x.gpu >= count:
                raise ConfigError(f"{self.source}: xids[{xi}].gpu: gpu {x.gpu} does not exist; "
                                  f"the simulated node has {count} GPU(s), 0..{count - 1}")
        for ci, c in enumerate(self.containers):
            for g in c.gpus:
                if g.gpu >= count:
                    raise ConfigError(
                        f"{self.source}: {c.ref.namespace}/{c.ref.pod} container "
                        f"{c.ref.container!r} (entry {ci}): gpu {g.gpu} does not exist; the "
                        f"simulated node has {count} GPU(s), 0..{count - 1}"
                    )

    def allocations(self, devices: tuple[Device, ...]) -> tuple[Allocation, ...]:
        """What a kubelet would list for these pods, as device-plugin UUID ids."""
        by_index = {(d.index, d.mig_gi_id): d for d in devices}
        out: list[Allocation] = []
        for c in self.containers:
            for g in c.gpus:
                dev = by_index.get((g.gpu, g.instance))
                if dev is None:
                    continue
                plugin_id = dev.mig_uuid or dev.uuid  # the device plugin's id: GPU or MIG UUID
                dev_id = plugin_id if g.replica is None else f"{plugin_id}::{g.replica}"
                out.append(Allocation(dev.key, c.ref, g.resource, dev_id, g.replica))
        return tuple(sorted(out, key=lambda a: (a.device_key, a.container.namespace,
                                                a.container.pod, a.container.container,
                                                a.device_id)))

    def processes(
        self,
        devices: tuple[Device, ...],
        usage: Callable[[Device], tuple[float, int]],
    ) -> tuple[GpuProcess, ...]:
        """Processes of every held GPU; `usage(device)` = (GPU_UTIL %, FB_USED bytes) now."""
        by_index = {(d.index, d.mig_gi_id): d for d in devices}
        out: list[GpuProcess] = []
        pid = _FIRST_PID
        used: dict[tuple[int, int | None], float] = defaultdict(float)  # share handed out so far
        for c in self.containers:
            for g in c.gpus:
                dev = by_index.get((g.gpu, g.instance))
                if dev is None:
                    pid += g.processes
                    continue
                util, fb_bytes = usage(dev)
                # Cumulative rounding, so the parts of one GPU add up to exactly its FB_USED.
                before = used[(g.gpu, g.instance)]
                used[(g.gpu, g.instance)] += g.share
                mem = round(fb_bytes * (before + g.share)) - round(fb_bytes * before)
                for k in range(g.processes):
                    part = mem // g.processes + (mem % g.processes if k == 0 else 0)
                    out.append(GpuProcess(
                        device_key=dev.key,
                        pid=pid,
                        used_memory_bytes=part,
                        sm_util_percent=None if dev.is_mig  # NVML has none with MIG on
                        else round(util * g.share / g.processes, 6),
                        container=c.ref,
                        container_id=c.container_id,
                    ))
                    pid += 1
        return tuple(out)


class SimulatedAttributor:
    """The `Attributor` of a simulated node: the scenario's allocations, processes as given."""

    def __init__(self, scenario: Scenario, options: EnrichOptions | None = None) -> None:
        self._scenario = scenario
        self._opts = options or EnrichOptions()

    def start(self) -> None:
        return None

    def close(self) -> None:
        return None

    def health_parts(self) -> dict[str, Callable[[], dict[str, object]]]:
        return {}

    def attribute(self, devices: tuple[Device, ...], processes: tuple[GpuProcess, ...]
                  ) -> Attribution:
        allocs = tuple(
            a._replace(container=shape_ref(a.container, self._opts, process=False))
            for a in self._scenario.allocations(devices)
        )
        procs = tuple(
            p._replace(container=shape_ref(p.container, self._opts, process=True))
            if p.container is not None else p
            for p in processes
        )
        return Attribution(allocations=allocs, processes=procs)


# --- building and loading


DEFAULT_SCENARIO: dict[str, Any] = {
    "pods": [
        {"namespace": "ml", "name": "train-0", "labels": {"app": "trainer"},
         "containers": [{"name": "trainer", "gpus": [{"gpu": 0}]}]},
        {"namespace": "inference", "name": "infer-a", "labels": {"app": "infer"},
         "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 0, "share": 0.6}]}]},
        {"namespace": "inference", "name": "infer-b", "labels": {"app": "infer"},
         "containers": [{"name": "server", "gpus": [{"gpu": 1, "replica": 1, "share": 0.4}]}]},
    ],
    "xids": [{"gpu": 1, "xid": 31, "every": 1800, "offset": 600}],
}
"""One exclusive pod (GPU 0), two pods time-slicing GPU 1 (60/40), GPU 2 and up idle; an
application page fault (XID 31) on GPU 1 every 30 minutes, first 10 minutes after start."""


def default_scenario(count: int) -> Scenario:
    """The built-in scenario, without the GPUs a node of `count` GPUs does not have."""
    s = parse_scenario(DEFAULT_SCENARIO)
    kept = []
    for c in s.containers:
        gpus = tuple(g for g in c.gpus if g.gpu < count)
        if gpus:
            kept.append(ScenarioContainer(c.ref, c.container_id, gpus))
    return Scenario(tuple(kept), s.source, tuple(x for x in s.xids if x.gpu < count))


def load_scenario(path: str) -> Scenario:
    """Read and validate a scenario file. Raises ConfigError naming the file and the field."""
    p = Path(path)
    try:
        raw = read_bytes(p, MAX_FILE_BYTES)
    except FileReadError as exc:
        if str(exc).startswith("larger than"):
            raise ConfigError(f"{path}: {exc}; a scenario is a short list of pods") from None
        raise ConfigError(f"--simulate-scenario {path}: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return parse_scenario(decode_scenario(text, path, yaml=p.suffix.lower() in (".yaml", ".yml")),
                          source=path)


def parse_scenario(data: Any, source: str = "built-in default") -> Scenario:
    """Validate a decoded scenario document. Raises ConfigError naming source and field path."""

    def fail(where: str, problem: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {problem}")

    def obj(value: Any, where: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise fail(where, f"expected a mapping, got {type(value).__name__}")
        unknown = set(value) - allowed
        if unknown:
            raise fail(where, f"unknown field(s) {sorted(map(str, unknown))}; "
                              f"known: {sorted(allowed)}")
        missing = required - set(value)
        if missing:
            raise fail(where, f"missing field(s) {sorted(missing)}")
        return value

    def text(value: Any, where: str) -> str:
        if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
            raise fail(where, f"expected a non-empty string of at most {MAX_TEXT} characters")
        return value

    def integer(value: Any, where: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(where, f"expected an integer in {low}..{high}, got {_short(value)}")
        return value

    def sized(value: Any, where: str, most: int) -> list[Any]:
        if not isinstance(value, list):
            raise fail(where, "expected a list")
        if len(value) > most:
            raise fail(where, f"{len(value)} entries; at most {most}")
        return value

    top = obj(data, "top level", {"pods", "xids", "lost_gpus", "mig"}, {"pods"})
    mig = parse_mig(top.get("mig"), source, max_gpu=MAX_GPU)
    pods = sized(top["pods"], "pods", MAX_PODS)
    processes = 0
    containers: list[ScenarioContainer] = []
    holders: dict[tuple[int, int | None], list[tuple[str, int | None]]] = defaultdict(list)
    shares: dict[tuple[int, int | None], float] = defaultdict(float)
    names: set[tuple[str, str]] = set()
    for pi, pod in enumerate(pods):
        pw = f"pods[{pi}]"
        pod = obj(pod, pw, {"namespace", "name", "uid", "labels", "containers"},
                  {"namespace", "name", "containers"})
        ns, name = text(pod["namespace"], f"{pw}.namespace"), text(pod["name"], f"{pw}.name")
        if (ns, name) in names:
            raise fail(f"{pw}.name", f"pod {ns}/{name} appears twice")
        names.add((ns, name))
        uid = text(pod["uid"], f"{pw}.uid") if "uid" in pod else str(
            uuid.uuid5(_UID_NS, f"{ns}/{name}"))
        labels = pod.get("labels") or {}
        if not isinstance(labels, Mapping) or len(labels) > MAX_LABELS or not all(
                isinstance(k, str) and isinstance(v, str) and len(k) <= MAX_TEXT
                and len(v) <= MAX_TEXT for k, v in labels.items()):
            raise fail(f"{pw}.labels", f"expected at most {MAX_LABELS} strings mapped to strings "
                                       f"of at most {MAX_TEXT} characters")
        if not sized(pod["containers"], f"{pw}.containers", MAX_CONTAINERS):
            raise fail(f"{pw}.containers", "expected a non-empty list")
        for ci, cont in enumerate(pod["containers"]):
            cw = f"{pw}.containers[{ci}]"
            cont = obj(cont, cw, {"name", "gpus"}, {"name", "gpus"})
            cname = text(cont["name"], f"{cw}.name")
            gpus: list[ScenarioGpu] = []
            for gi, g in enumerate(sized(cont["gpus"], f"{cw}.gpus", MAX_GPU + 1)):
                gw = f"{cw}.gpus[{gi}]"
                g = obj(g, gw, {"gpu", "instance", "replica", "share", "processes", "resource"},
                        {"gpu"})
                inst = integer(g["instance"], f"{gw}.instance", 1, 7) if "instance" in g else None
                profile = check_instance(mig, integer(g["gpu"], f"{gw}.gpu", 0, MAX_GPU), inst,
                                         f"{source}: {gw}")
                share = g.get("share", 1.0)
                if isinstance(share, bool) or not isinstance(share, (int, float)) \
                        or not 0 <= share <= 1:
                    raise fail(f"{gw}.share", f"expected a number in 0..1, got {_short(share)}")
                sg = ScenarioGpu(
                    gpu=integer(g["gpu"], f"{gw}.gpu", 0, MAX_GPU),
                    replica=integer(g["replica"], f"{gw}.replica", 0, MAX_REPLICA)
                    if g.get("replica") is not None else None,
                    share=float(share),
                    processes=integer(g.get("processes", 1), f"{gw}.processes", 0, MAX_PROCESSES),
                    resource=text(g["resource"], f"{gw}.resource") if "resource" in g
                    else f"nvidia.com/mig-{profile}" if profile else "nvidia.com/gpu",
                    instance=inst,
                )
                held = (sg.gpu, sg.instance)
                processes += sg.processes
                if processes > MAX_PROCESSES:
                    raise fail(f"{gw}.processes", f"more than {MAX_PROCESSES} simulated processes "
                                                  "in the scenario")
                what = f"gpu {sg.gpu}" + (f" instance {inst}" if inst else "")
                if (sg.replica is None and holders[held]) or any(
                        r is None or r == sg.replica for _, r in holders[held]):
                    raise fail(gw, f"{what} is already held by {holders[held][0][0]}; "
                                   "a GPU held by several containers needs a distinct replica "
                                   "on each")
                holders[held].append((f"{ns}/{name}/{cname}", sg.replica))
                shares[held] += sg.share
                if shares[held] > 1.0 + 1e-9:
                    raise fail(f"{gw}.share", f"shares of {what} add up to more than 1")
                gpus.append(sg)
            ref = ContainerRef(namespace=ns, pod=name, container=cname, pod_uid=uid,
                               pod_labels=tuple(sorted(labels.items())))
            cid = hashlib.sha256(f"{uid}/{cname}".encode()).hexdigest()
            containers.append(ScenarioContainer(ref, cid, tuple(gpus)))
    xids: list[ScenarioXid] = []
    for xi, x in enumerate(sized(top.get("xids") or [], "xids", MAX_XIDS)):
        xw = f"xids[{xi}]"
        x = obj(x, xw, {"gpu", "xid", "every", "offset"}, {"gpu", "xid", "every"})
        every, offset = x["every"], x.get("offset", 0)
        for key, v, low in (("every", every, 1), ("offset", offset, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not low <= v <= MAX_SECONDS:  # also refuses nan
                raise fail(f"{xw}.{key}", f"expected seconds in {low}..{MAX_SECONDS:g}, got "
                                          f"{_short(v)}")
        xids.append(ScenarioXid(integer(x["gpu"], f"{xw}.gpu", 0, MAX_GPU),
                                integer(x["xid"], f"{xw}.xid", 1, 999), float(every),
                                float(offset)))
    lost = parse_lost_gpus(top.get("lost_gpus"), source, max_gpu=MAX_GPU, max_seconds=MAX_SECONDS)
    return Scenario(tuple(containers), source, tuple(xids), lost, mig)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


__all__ = ["DEFAULT_SCENARIO", "MAX_FILE_BYTES", "MAX_PROCESSES", "Scenario", "ScenarioContainer",
           "ScenarioGpu", "ScenarioXid", "SimulatedAttributor", "decode_scenario",
           "default_scenario", "load_scenario", "parse_scenario"]
