"""Everything simulated, in one place: a GPU node without a GPU.

`backend` (the `SimulatedBackend`: deterministic devices and gpu-burn-like values), `scenario`
(simulated pods and processes, and the `SimulatedAttributor` that stands in for the kubelet), and
`node` (a synthetic node of a cluster shape on a fake clock, used by `podgpu plan`). Nothing in
the real data path imports this package except through the commands that ask for `--simulate`.
"""
