"""podgpu's accounting rule for what each holder has of a GPU, offered to the Container
Insights events (sinks/cloudwatch/insights_shares.py ShareRule), so the console's per-pod numbers
and the accounting counters split a GPU the same way. Passed in by the wiring: the sinks do not
import accounting, which renders through them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from podgpu.accounting.integrate import holder_weights
from podgpu.accounting.shares import cycle_rates, mig_fraction

if TYPE_CHECKING:
    from podgpu.model import Device, Snapshot
    from podgpu.sinks.cloudwatch.insights_shares import HolderShare


class AccountingShares:
    """cycle_rates and holder_weights per physical GPU; mig_fraction for a device."""

    def holders(self, snapshot: Snapshot) -> dict[str, list[HolderShare]]:
        out: dict[str, list[HolderShare]] = {}
        for gpu, rates in cycle_rates(snapshot).items():
            weights = holder_weights(rates)
            out[gpu] = [(*rate, w) for (_, rate), w in zip(rates, weights, strict=True)]
        return out

    def fraction(self, device: Device) -> float:
        return mig_fraction(device)
