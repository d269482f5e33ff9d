"""Simulated GPU models: what each looks like through NVML (capacities, value ranges,
capabilities), and `--simulate N[xMODEL]`."""

from __future__ import annotations

from dataclasses import dataclass

from podgpu.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What one GPU model looks like through NVML: capacities, value ranges, capabilities."""

    name: str
    fb_total_mib: int
    fb_reserved_mib: int
    power_limit_w: float
    idle_w: float
    busy_w: float
    sm_clock: tuple[int, int]  # idle, busy MHz
    mem_clock: int
    temp: tuple[int, int]  # idle, busy C
    mem_temp: bool
    gpm: bool
    nvlink: bool
    fan: bool
    retired_pages: bool
    vbios: str


MODELS: dict[str, ModelSpec] = {
    "H100": ModelSpec("NVIDIA H100 80GB HBM3", 81559, 573, 700.0, 72.0, 655.0, (345, 1980), 2619,
                      (31, 62), True, True, True, False, False, "96.00.99.00.01"),
    "H200": ModelSpec("NVIDIA H200", 143771, 615, 700.0, 80.0, 632.0, (345, 1980), 3201,
                      (33, 64), True, True, True, False, False, "96.00.B6.00.02"),
    "A100": ModelSpec("NVIDIA A100-SXM4-80GB", 81920, 569, 400.0, 55.0, 385.0, (210, 1410), 1593,
                      (30, 66), True, False, True, False, False, "92.00.45.00.03"),
    "A10G": ModelSpec("NVIDIA A10G", 23028, 280, 300.0, 26.0, 299.0, (210, 1710), 6250,
                      (28, 65), False, False, False, True, True, "94.02.75.00.01"),
}
DEFAULT_MODEL = "H100"


def parse_simulate(spec: str) -> tuple[int, ModelSpec]:
    """`N` or `NxMODEL` (e.g. `4`, `8xH200`) -> (count, model). Raises ConfigError."""
    count_text, _, model_text = spec.strip().partition("x")
    if not count_text.isdigit() or not 1 <= int(count_text) <= 64:
        raise ConfigError(
            f"--simulate {spec!r}: expected N or NxMODEL with N in 1..64, e.g. 4 or 8xH200"
        )
    model_key = (model_text or DEFAULT_MODEL).upper()
    if model_key not in MODELS:
        raise ConfigError(
            f"--simulate {spec!r}: unknown model {model_text!r}; known: {', '.join(MODELS)}"
        )
    return int(count_text), MODELS[model_key]


__all__ = ["DEFAULT_MODEL", "MODELS", "ModelSpec", "parse_simulate"]
