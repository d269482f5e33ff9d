"""What every outbound peer call shares: one deadline for the whole call (deadline.py), one
capped body reader (capped.py) and one background retry loop with backoff (backoff.py).

A peer (the Kubernetes API, the kubelet, CloudWatch Logs, a scrape target, Prometheus for
`podgpu report`, the NVIDIA driver) can make a call fail, never make it hang or grow podgpu.
"""
