"""`StageStatus`: how a part that can be off or failing stands this cycle.

A typed value instead of a string whose prefix callers test (`"unavailable: <why>"`): /health,
the live view and `podgpu top` ask `.unavailable` and print `str(status)`, which keeps the text
they showed before ('ok', 'disabled', 'unavailable: <why>').
"""

from __future__ import annotations

from typing import Literal, NamedTuple

StageState = Literal["ok", "disabled", "unavailable"]


class StageStatus(NamedTuple):
    state: StageState = "ok"
    reason: str = ""
    """Why it is unavailable (empty otherwise)."""

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def unavailable(self) -> bool:
        return self.state == "unavailable"

    @staticmethod
    def failed(reason: str) -> StageStatus:
        return StageStatus("unavailable", reason)

    def __str__(self) -> str:
        return f"{self.state}: {self.reason}" if self.reason else self.state


OK = StageStatus()
DISABLED = StageStatus("disabled")
