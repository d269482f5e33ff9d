"""GPU backends: each turns devices into one `Sample` per device per cycle (the `Backend`
protocol of backends/base.py). The package imports nothing itself: the open ahead of the flags
(podgpu/ahead.py) loads the few NVML modules it needs before the model is imported."""
