"""Who holds each device (kubelet PodResources) and whose processes run on it (cgroups)."""

from podgpu.attribution.base import Attribution, Attributor

__all__ = ["Attribution", "Attributor"]
