"""`podgpu emf`: the EMF sink fed by scraping Prometheus endpoints instead of a local snapshot.

For teams that keep NVIDIA's dcgm-exporter (or any exporter): one bridge per node (a sidecar or a
DaemonSet) scrapes its own node's endpoints and sends EMF through the same declarations engine,
encoder, queue and sender as `podgpu serve` (src/podgpu/sinks/cloudwatch/), replacing the
CloudWatch agent's central Deployment that scrapes every node. See docs/cloudwatch.md.

parse (text -> families; the only prometheus_client importer) -> series (labels as a Prometheus
scrape and the agent would give them, and the agent's type rules) -> scrape (HTTP, per-target
health) -> run (the loop, /metrics and /health, `main`).
"""
