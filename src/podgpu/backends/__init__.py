"""GPU backends: each turns devices into one `Sample` per device per cycle."""

from podgpu.backends.base import Backend, Reading

__all__ = ["Backend", "Reading"]
