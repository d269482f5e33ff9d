"""dcgm-exporter's `-m NAMESPACE:NAME`: the metric list read from a ConfigMap through the
Kubernetes API (apiserver.py's `connect`), the answer capped at MAX_CONFIGMAP_BYTES and under one
deadline."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from podgpu.attribution.apiserver import connect, reason
from podgpu.attribution.kubeapi import ApiAccessError, KubeApiError, KubeConfig, NotInCluster

MAX_CONFIGMAP_BYTES = 2 * 1024 * 1024
"""Of the `-m` ConfigMap answer read (Kubernetes caps a ConfigMap's data at 1 MiB)."""


def read_configmap(namespace: str, name: str, key: str = "metrics", *,
                   configuration: KubeConfig | None = None,
                   environ: Mapping[str, str] | None = None) -> str:
    """The text under `key` of ConfigMap NAMESPACE/NAME (dcgm-exporter's `-m`).

    RBAC: `get` on that ConfigMap (a Role in its namespace is enough). A missing ConfigMap, key
    or content is the user's input: ConfigError (exit 2). No API access at all is
    AttributionError (exit 1), as dcgm-exporter also stops rather than fall back to a file once
    `-m` is set. A connection broken before the answer is tried once more (the Kubernetes
    client's one retry policy, `Connection`).
    """
    from podgpu.errors import AttributionError, ConfigError

    where = f"--configmap-data {namespace}:{name}"
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps/{quote(name, safe='')}"
    try:
        conn = connect(configuration, environ)
    except (NotInCluster, ApiAccessError) as exc:
        raise AttributionError(f"{where}: no Kubernetes API access: {exc}") from None
    try:
        body = conn.get_json(path, timeout=30.0, max_bytes=MAX_CONFIGMAP_BYTES)
    except Exception as exc:
        if isinstance(exc, KubeApiError) and exc.status == 404:
            raise ConfigError(f"{where}: ConfigMap {name!r} not found in namespace "
                              f"{namespace!r}") from None
        why = reason(exc, f"get on configmaps in {namespace!r}")
        raise AttributionError(f"{where}: cannot read it: {why}") from None
    finally:
        conn.close()
    data = body.get("data") or {}
    if not isinstance(data, dict):
        raise AttributionError(f"{where}: cannot read it: the answer's data is not an object")
    if key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise ConfigError(f"{where}: the ConfigMap has no {key!r} key (keys: {keys})")
    text = str(data[key])
    if not text.strip():
        raise ConfigError(f"{where}: the {key!r} key is empty")
    return text
