"""Simulated hours of pods coming and going on exclusive, time-sliced and MIG
GPUs (accelerated clock, missed and jittered cycles). Every pod's integrals equal the values
computed in continuous time from the schedule within 0.5 %; on each GPU the pods' energy plus
the unattributed energy equals the device counter's increase within 1 %."""

from __future__ import annotations

import functools

from podgpu.accounting import Options, State, advance
from podgpu.model import Snapshot
from tests.fakes.churn_node import ChurnNode, Gpu, expected, schedule

HOURS = 4.0
GPUS = [Gpu(0, "exclusive"), Gpu(1, "shared", slots=3), Gpu(2, "mig", profiles=(3, 2, 1, 1)),
        Gpu(3, "shared", slots=2)]


@functools.cache
def run() -> tuple[State, ChurnNode, Snapshot, Snapshot]:
    pods = schedule(GPUS, HOURS)
    node = ChurnNode(GPUS, pods)
    state, prev, first = State(), None, None
    opts = Options(grace_seconds=10 * 3600)  # keep every pod to compare at the end
    for snap in node.snapshots(HOURS):
        state = advance(state, prev, snap, opts)
        first = first or snap
        prev = snap
    assert prev is not None and first is not None
    return state, node, first, prev


def test_every_pods_integrals_match_the_schedule_within_half_a_percent() -> None:
    state, node, _, _ = run()
    want, _ = expected(GPUS, node.pods)
    got = {e.ref.pod: e for e in state.entries.values()}
    assert set(got) == {p.name for p in node.pods}
    kinds = {p.name: GPUS[p.gpu].kind for p in node.pods}
    assert {"exclusive", "shared", "mig"} <= set(kinds.values())
    for name, w in want.items():
        e = got[name]
        for label, have, exp in (("allocated", e.allocated_seconds, w.allocated),
                                 ("used", e.used_seconds, w.used),
                                 ("energy", e.energy_joules, w.energy),
                                 ("memory", e.memory_byte_seconds, w.memory)):
            if exp == 0:
                assert have == 0, (name, label)
                continue
            assert abs(have - exp) / exp < 0.005, (name, kinds[name], label, have, exp)


def test_energy_on_each_gpu_adds_up_to_the_device_counter() -> None:
    state, node, first, last = run()
    for g in GPUS:
        dev = node.devices[g.index]
        counter = [s.values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] for snap in (first, last)
                   for s in snap.samples if s.device == dev]
        increase = (float(counter[1]) - float(counter[0])) / 1000.0
        pods = sum(e.energy_joules for e in state.entries.values() if e.device.uuid == dev.uuid)
        unheld = state.unattributed[dev.uuid].joules if dev.uuid in state.unattributed else 0.0
        assert pods > 0.5 * increase, g
        assert abs(pods + unheld - increase) / increase < 0.01, (g, pods, unheld, increase)
