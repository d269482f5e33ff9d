"""`podgpu serve` imports what its configuration uses and nothing more: a bare agent loads no TLS
layer, no bcrypt, no YAML parser, no RE2 and none of the extras' clients (Kubernetes, CloudWatch,
the bridge's parser, the terminal UI); a web config with TLS and basic auth brings exactly its
own. Start-up time and memory are measured in bench/startup.py; this pins which modules load.

The module list is read from the real process: `PYTHONPROFILEIMPORTTIME=1` (the environment form
of `python -X importtime`) makes CPython write one `import time:` line per module to stderr,
also for imports after start (the first scrape, the first password check), until SIGTERM. A
package imported through `importlib.import_module` (as PyYAML and h2 are) has no line of its own,
but its submodules do, so a layer counts as loaded when the module or any submodule is.
`ssl` itself is not in the lists: asyncio's event loop imports it whatever the configuration.
"""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt

from tests.harness import Serve, scrape, unverified_tls
from tests.tlsutil import Pki

# What each configuration-dependent part imports when (and only when) it is configured.
TLS = {"podgpu.http.tls", "podgpu.http.websecurity"}
PASSWORDS = {"bcrypt"}
YAML = {"yaml"}
REGEX = {"re2", "podgpu.re2compat"}
KUBERNETES = {"podgpu.attribution.kubelet", "podgpu.attribution.podwatch",
              "podgpu.attribution.kubeapi", "http.client", "h2", "google.protobuf"}
EXTRAS = {"botocore", "boto3", "prometheus_client", "rich", "grpc", "podgpu.sinks.cloudwatch"}
# podgpu's packaged files (field tables, the metric list, the landing page) are read beside their
# modules: importlib.resources would cost ~15 modules at every start
RESOURCES = {"importlib.resources"}


def imported(stderr: str) -> set[str]:
    """Module names from CPython's `import time: self | cumulative | name` lines."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                names.add(name)
    return names


def loaded(layer: set[str], mods: set[str]) -> list[str]:
    """The names in `layer` that `mods` holds, themselves or through a submodule."""
    return sorted(n for n in layer if any(m == n or m.startswith(n + ".") for m in mods))


def modules_of(args: list[str], *, tls: bool = False,
               headers: dict[str, str] | None = None) -> set[str]:
    """Start serve, scrape /metrics once (200), stop it: every module it imported meanwhile."""
    with Serve(args, env={"PYTHONPROFILEIMPORTTIME": "1"}, tls=tls) as s:
        status, body = scrape(s.url + "/metrics", headers=headers,
                              context=unverified_tls() if tls else None)
        assert status == 200, body[:200]
        assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    return imported(s.stderr)


def test_a_bare_agent_imports_no_optional_layer() -> None:
    mods = modules_of(["--simulate", "1", "--simulate-scenario", "none", "-c", "1000"])
    assert "podgpu.http.server" in mods and "h11" in mods  # the probe sees the listener load
    for layer in (TLS, PASSWORDS, YAML, REGEX, KUBERNETES, EXTRAS, RESOURCES):
        assert loaded(layer, mods) == [], layer


def test_a_web_config_brings_tls_yaml_and_bcrypt_and_nothing_else(tmp_path: Path) -> None:
    pki = Pki(tmp_path, "lean")
    server = pki.leaf("server", server=True)
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
                      f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    token = base64.b64encode(b"prometheus:pw").decode()
    mods = modules_of(["--simulate", "1", "--simulate-scenario", "none", "-c", "1000",
                       "--web-config-file", str(config)],
                      tls=True, headers={"Authorization": f"Basic {token}"})
    for layer in (TLS, YAML, PASSWORDS):
        assert loaded(layer, mods) == sorted(layer)
    for layer in (REGEX, KUBERNETES, EXTRAS):
        assert loaded(layer, mods) == []


def test_a_label_allowlist_brings_re2_only_with_the_pods_it_filters() -> None:
    # the built-in simulated scenario has pods (and their label allowlist) but no Kubernetes
    # clients; its allowlist is a user regex, so RE2 loads
    mods = modules_of(["--simulate", "1", "-c", "1000", "--kubernetes-enable-pod-labels",
                       "--kubernetes-pod-label-allowlist-regex", "^app$"])
    assert loaded(REGEX, mods) == sorted(REGEX)
    assert loaded(EXTRAS, mods) == []
