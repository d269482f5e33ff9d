"""The release workflow, checked by actionlint (the real tool: type-checks
expressions, action inputs, `run:` scripts) and for what a release must do: on a version tag,
build linux/amd64 and linux/arm64, push to GHCR with an SBOM and provenance, under the name the
manifests use."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.render import KUSTOMIZE_ROOT, ROOT, tool

WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("actionlint"), "-no-color", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_actionlint_passes_every_workflow() -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert RELEASE in files
    out = actionlint(*files)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_is_not_a_no_op(tmp_path: Path) -> None:
    """Control: a typo in an expression and an unknown runner label fail."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(RELEASE.read_text().replace("steps.meta.outputs.tags", "steps.meta.output.tags")
                   .replace("runs-on: ubuntu-24.04", "runs-on: ubuntu-2404"))
    out = actionlint(bad)
    assert out.returncode != 0
    assert "output" in out.stdout and "ubuntu-2404" in out.stdout, out.stdout


def build_step(wf: dict[str, Any]) -> dict[str, Any]:
    (job,) = wf["jobs"].values()
    (step,) = [s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@")]
    return step


def test_release_on_a_tag_builds_both_architectures_with_sbom_and_provenance() -> None:
    wf = yaml.safe_load(RELEASE.read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert set(on) == {"push"} and on["push"]["tags"] and "branches" not in on["push"]
    (job,) = wf["jobs"].values()
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    w = build_step(wf)["with"]
    assert set(w["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert w["push"] is True and w["sbom"] is True and w["provenance"].startswith("mode=")
    for step in job["steps"]:  # every action pinned by a full commit
        if "uses" in step:
            ref = step["uses"].split("@", 1)[1]
            assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), step["uses"]
    text = RELEASE.read_text()
    assert "ghcr.io/${OWNER,,}/podgpu" in text


def test_manifests_name_no_image_that_does_not_exist() -> None:
    """Nothing has published an image (no tag was pushed), so the manifests name none: their
    reference is in the reserved .invalid domain (RFC 2606: it never resolves, and the pod's
    pull error shows the name), and docs/deploy.md says how to build, push and name yours."""
    ds = yaml.safe_load((KUSTOMIZE_ROOT / "base" / "daemonset.yaml").read_text())
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    registry = c["image"].split("/")[0]
    assert registry.endswith(".invalid"), c["image"]
    assert "images" not in yaml.safe_load((KUSTOMIZE_ROOT / "base" / "kustomization.yaml")
                                          .read_text())
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert c["image"].split(":")[0] in docs and "scripts/image" in docs
    assert "kustomize edit" not in docs  # a tool the project neither ships nor installs


def test_release_checks_an_anonymous_pull() -> None:
    """GHCR makes a new organisation package private: the workflow pulls the pushed digest with
    no credentials (an empty DOCKER_CONFIG) and fails with the fix when it cannot."""
    (job,) = yaml.safe_load(RELEASE.read_text())["jobs"].values()
    (step,) = [s for s in job["steps"] if "anonymous" in s.get("name", "").lower()]
    assert "DOCKER_CONFIG" in step["run"] and "steps.build.outputs.digest" in str(step)
    assert "public" in step["run"]


def test_release_builds_on_the_bases_ci_tests() -> None:
    """CI runs scripts/image, which (without a registry) builds on bases it makes from Debian
    packages; the release runs the same script for both architectures, which pushes those bases,
    and builds the published image on them (build-args from that step's outputs)."""
    (job,) = yaml.safe_load(RELEASE.read_text())["jobs"].values()
    (bases,) = [s for s in job["steps"] if s.get("id") == "bases"]
    run = bases["run"]
    assert "scripts/image" in run and "PODGPU_IMAGE_BASE=debian" in run
    assert "PODGPU_IMAGE_PLATFORMS=linux/amd64,linux/arm64" in run
    assert "PODGPU_IMAGE_BASE_PUSH=" in run and 'PODGPU_IMAGE_BASES_OUT="$GITHUB_OUTPUT"' in run
    args = build_step(yaml.safe_load(RELEASE.read_text()))["with"]["build-args"]
    assert "BASE=${{ steps.bases.outputs.BASE }}" in args.splitlines()
    assert "BUILD_BASE=${{ steps.bases.outputs.BUILD_BASE }}" in args.splitlines()
    steps = [s.get("id") or s.get("name") or s.get("uses") for s in job["steps"]]
    assert steps.index("bases") < steps.index("build")
    script = (ROOT / "scripts" / "image").read_text()
    assert "PODGPU_IMAGE_BASES_OUT" in script and "BUILD_BASE=%s" in script
