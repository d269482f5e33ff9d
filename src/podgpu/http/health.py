"""/health: 200 only while the last collection is fresh and the backend is healthy (unlike
dcgm-exporter 4.x, whose /health is always 200). Pure function of the published state."""

from __future__ import annotations

from typing import Any

from podgpu.http.publish import Published


def stale_after(interval: float) -> float:
    """How old the last snapshot may be before /health fails: three missed cycles plus slack."""
    return 3.0 * interval + 2.0


def health(published: Published | None, now: float, interval: float, backend: str
           ) -> tuple[int, dict[str, Any]]:
    if published is None:
        return 503, {"status": "unhealthy", "reasons": ["no collection has completed yet"],
                     "backend": backend}
    snap = published.snapshot
    reasons: list[str] = []
    age = max(0.0, now - snap.taken_at)
    limit = stale_after(interval)
    if age > limit:
        reasons.append(f"last collection {age:.1f} s ago (limit {limit:.1f} s)")
    st = snap.stage("backend")
    if st is not None and not st.ok and not snap.lost_devices:
        reasons.append(f"backend: {st.error or 'failed'}")
    for dev, why in snap.lost_devices:
        reasons.append(f"{dev}: {why}")
    if not snap.samples and not snap.lost_devices:
        reasons.append("no GPU devices")
    body: dict[str, Any] = {
        "status": "unhealthy" if reasons else "ok",
        "reasons": reasons,
        "backend": backend,
        "devices": len(snap.samples),
        "lost_devices": [d for d, _ in snap.lost_devices],
        "last_collect_age_seconds": round(age, 3),
        "kubelet": snap.attribution_status,
        "cycle": snap.cycle,
    }
    return (503 if reasons else 200), body
