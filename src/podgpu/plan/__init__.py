"""`podgpu plan`: what per-pod GPU metrics cost in CloudWatch and Prometheus, before deploying.

podgpu.sim.node (a synthetic node of the cluster shape, run through podgpu's own simulated
backend, labels and EMF encoder for two minutes) -> model (scale one node-minute to the cluster
and the month, three ways side by side) -> cli (flags, table or JSON). No I/O: pure computation on the shape.
"""
