"""HTTP: /metrics (pre-rendered bytes), /health (real state), / (landing page)."""
