"""podgpu: per-pod NVIDIA GPU metrics for Kubernetes, dcgm-exporter compatible."""

__version__ = "0.1.0"
