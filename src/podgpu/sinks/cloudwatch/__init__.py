"""CloudWatch: EMF documents from snapshots, driven by the CloudWatch agent's own declarations.

declarations (the agent's config) -> series (labels as the agent would see them) -> window (one
interval's samples) -> encode (EMF JSON) -> queue (bounded, spooled) -> sender -> destinations.
`sink.EmfSink` ties them together; docs/cloudwatch.md explains the whole path.
"""

from podgpu.sinks.cloudwatch.declarations import EmfConfig, load_emf_config, parse_emf_config
from podgpu.sinks.cloudwatch.sink import EmfSink

__all__ = ["EmfConfig", "EmfSink", "load_emf_config", "parse_emf_config"]
