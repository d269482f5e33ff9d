"""podgpu's own exception tree.

Foreign errors (NVML, gRPC, HTTP, OS) are translated into these at the one module that talks to
each external system, so callers only ever catch podgpu errors.
"""

from __future__ import annotations


class PodgpuError(Exception):
    """Base of every error podgpu raises on purpose."""


class ConfigError(PodgpuError):
    """A flag, environment variable or config file holds a bad value. Exit status 2."""


class MetricListError(ConfigError):
    """A metric list (dcgm-exporter CSV) is malformed; the message names file, line and problem."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


class BackendError(PodgpuError):
    """The GPU backend cannot work at all (no library, no driver, no permission)."""


class ListenError(PodgpuError):
    """The HTTP port cannot be opened (in use, no permission). Exit status 1."""


class AttributionError(PodgpuError):
    """The kubelet, the cgroup tree or the Kubernetes API could not be read."""


def exit_status(exc: PodgpuError) -> int:
    """The one mapping from an error to the process exit status: 2 for bad input (the user fixes
    a flag, variable or file), 1 for a runtime failure (the node or the network is at fault)."""
    return 2 if isinstance(exc, ConfigError) else 1
