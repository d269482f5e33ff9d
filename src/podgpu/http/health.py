"""/health: is the *exporter* working? Pure function of the published state.

dcgm-exporter's Helm chart points both liveness and readiness at `/health`. A 503 there restarts
the pod in a loop and, while it is not ready, drops it from the Service's endpoints, so the
healthy GPUs of that node stop being scraped too. So `/health` answers 503 only when restarting
podgpu could help: no collection has completed yet, or the last one is stale (the collect loop is
stuck). Lost GPUs, every GPU of the node included, a failing backend, or a missing kubelet keep it
at 200 with `status: degraded` and the reasons in `warnings`: a restart does not bring a GPU back,
and a one-GPU node whose GPU fell off the bus must keep exporting its XID 79 and health FAIL
instead of crash-looping (dcgm-exporter answers 200 there too). The metrics say the same
(`podgpu_devices{state="lost"}`, `podgpu_collect_success`).

`/health/gpus` is the strict variant: 503 as soon as any GPU is lost or the backend failed. Use it
for alerting or a node-problem probe, never for liveness.

Decision record: docs/decisions/0006-health-freshness.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podgpu.http.publish import Published

if TYPE_CHECKING:
    from podgpu.model import Snapshot


API_WATCHES = (("pod_watch",), ("emf", "container_insights", "services"),
               ("emf", "container_insights", "node"))
"""Where /health's body shows the Kubernetes API callers: the pod list/watch, and Container
Insights' Service watch and Node read."""


def watch_warnings(body: dict[str, Any]) -> list[str]:
    """A warning per API caller in `body` that is `failing: ...` or `unavailable: ...`: pods,
    owners or Services are missing from the series or the events until it works again, which a
    restart does not bring about (so "degraded", never a 503)."""
    out = []
    for path in API_WATCHES:
        entry: Any = body
        for key in path:
            entry = entry.get(key) if isinstance(entry, dict) else None
        status = str(entry.get("status", "")) if isinstance(entry, dict) else ""
        if status.startswith(("failing", "unavailable")):
            out.append(f"{'.'.join(path)}: {status}")
    return out


def stale_after(interval: float) -> float:
    """How old the last snapshot may be before /health fails: three missed cycles plus slack."""
    return 3.0 * interval + 2.0


def health(published: Published[Snapshot] | None, now: float, interval: float, backend: str, *,
           strict: bool = False) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body). `reasons` make it 503; `warnings` are reported with 200 (or,
    with `strict`, also make it 503)."""
    if published is None:
        return 503, {"status": "unhealthy", "reasons": ["no collection has completed yet"],
                     "warnings": [], "backend": backend}
    snap = published.snapshot
    reasons: list[str] = []
    warnings: list[str] = []
    age = max(0.0, now - snap.taken_at)
    limit = stale_after(interval)
    if age > limit:
        reasons.append(f"last collection {age:.1f} s ago (limit {limit:.1f} s)")
    st = snap.stage("backend")
    backend_failed = st is not None and not st.ok and not snap.lost_devices
    gpus = len({s.device.uuid for s in snap.samples if s.lost is None})  # a MIG GPU counts once
    instances = sum(1 for s in snap.samples if s.lost is None and s.device.is_mig)
    if backend_failed:
        warnings.append(f"backend: {st.error if st is not None and st.error else 'failed'}")
    elif not snap.samples and not snap.lost_devices:
        warnings.append("no GPU devices")
    for dev, why in snap.lost_devices:
        warnings.append(f"{dev}: {why}")
    if snap.attribution_status.unavailable:
        warnings.append(f"kubelet {snap.attribution_status}")
    failing = bool(reasons) or (strict and bool(warnings) and not
                                all(w.startswith("kubelet ") for w in warnings))
    status = "unhealthy" if failing else ("degraded" if warnings else "ok")
    body: dict[str, Any] = {
        "status": status,
        "reasons": reasons,
        "warnings": warnings,
        "backend": backend,
        "devices": gpus,
        "mig_instances": instances,
        "lost_devices": [d for d, _ in snap.lost_devices],
        "last_collect_age_seconds": round(age, 3),
        "kubelet": str(snap.attribution_status),
        "cycle": snap.cycle,
    }
    return (503 if failing else 200), body
