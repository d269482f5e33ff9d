"""Reading fields of a Kubernetes API object (JSON as the API serves it) without trusting their
types: a field of the wrong type counts as absent, so one odd object cannot fail a list.

Pure and dependency-free, so the parsers (workload.py, podwatch.py, services.py, nodeinfo.py)
and their tests import no HTTP or TLS code with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object from the API, or an empty one when it is anything else."""
    return value if isinstance(value, Mapping) else {}


def sequence(value: Any) -> list[Any]:
    """A JSON array from the API, or an empty one when it is anything else."""
    return value if isinstance(value, list) else []


def text(value: Any) -> str:
    """A JSON string from the API, or '' when it is anything else."""
    return value if isinstance(value, str) else ""
