"""The release workflow, checked by actionlint (the real tool: type-checks
expressions, action inputs, `run:` scripts) and for what a release must do: on a version tag,
refuse a version that exists, build linux/amd64 and linux/arm64 without a shared cache, push to
GHCR, sign and attest the pushed digest, make an SBOM of OS packages and Python distributions,
verify as docs/deploy.md tells users to, pull and run both platforms; every action pinned by
commit and every helper image by digest."""

from __future__ import annotations

import re
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
    step: dict[str, Any]
    (step,) = [s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@")]
    return step


def test_release_on_a_tag_builds_both_architectures_with_sbom_and_provenance() -> None:
    wf = yaml.safe_load(RELEASE.read_text())
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert set(on) == {"push"} and on["push"]["tags"] and "branches" not in on["push"]
    (job,) = wf["jobs"].values()
    assert job["permissions"] == {"contents": "read", "packages": "write", "id-token": "write",
                                  "attestations": "write"}
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


def steps() -> list[dict[str, Any]]:
    (job,) = yaml.safe_load(RELEASE.read_text())["jobs"].values()
    return list(job["steps"])


def index(uses_or_name: str) -> int:
    (i,) = [i for i, s in enumerate(steps())
            if s.get("uses", "").startswith(uses_or_name) or s.get("name") == uses_or_name
            or s.get("id") == uses_or_name]
    return i


def test_an_existing_version_is_refused_before_anything_is_built() -> None:
    """Re-running the job must not push a new digest under an old version: the tag is looked
    up first and only "not found" goes on; no moving X.Y tag is pushed."""
    i = index("Refuse to overwrite an existing tag")
    run = steps()[i]["run"]
    # imagetools reads an OCI index with attestations (docker manifest inspect has answered
    # "manifest unknown" for such images on ghcr.io, which would let a release overwrite one)
    assert "docker buildx imagetools inspect" in run and "exit 1" in run
    assert "manifest unknown|name unknown|not found" in run  # anything else (auth) stops too
    assert i < index("bases") < index("build")
    (meta,) = [s for s in steps() if s.get("id") == "meta"]
    assert meta["with"]["tags"].split() == ["type=semver,pattern={{version}}"]


def test_no_shared_build_cache() -> None:
    w = build_step(yaml.safe_load(RELEASE.read_text()))["with"]
    assert w["no-cache"] is True and "cache-from" not in w and "cache-to" not in w
    assert "type=gha" not in RELEASE.read_text()


DIGEST_REF = re.compile(r"^[\w.-]+(\.[\w.-]+)+/[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")


def test_helper_images_are_pinned_by_digest() -> None:
    """QEMU's binfmt image and BuildKit's: tag for the reader, digest for the machine."""
    qemu = steps()[index("docker/setup-qemu-action@")]["with"]
    assert DIGEST_REF.match(qemu["image"]), qemu
    buildx = steps()[index("docker/setup-buildx-action@")]["with"]
    (image,) = [o.removeprefix("image=") for o in buildx["driver-opts"].split()
                if o.startswith("image=")]
    assert DIGEST_REF.match(image), image
    assert buildx["cache-binary"] is False
    # nothing else names an image by tag alone
    for ref in re.findall(r"docker\.io/[\w./:@-]+", RELEASE.read_text()):
        assert DIGEST_REF.match(ref), ref


def test_the_pushed_digest_is_signed_attested_and_verified() -> None:
    digest = "${{ steps.build.outputs.digest }}"
    sign = steps()[index("Sign the image (keyless)")]
    assert sign["run"].startswith("cosign sign --yes") and digest in sign["env"]["IMAGE"]
    assert steps()[index("sigstore/cosign-installer@")]["with"]["cosign-release"]
    prov = steps()[index("actions/attest-build-provenance@")]["with"]
    assert prov["subject-digest"] == digest and prov["push-to-registry"] is True
    sbom = steps()[index("actions/attest-sbom@")]["with"]
    assert sbom["subject-digest"] == digest and sbom["sbom-path"].endswith(".spdx.json")
    gen = steps()[index("anchore/sbom-action@")]["with"]
    assert digest in gen["image"] and gen["syft-version"].startswith("v")  # not "latest"
    check = steps()[index("The SBOM lists the OS packages and the Python distributions")]["run"]
    assert "pkg:deb/" in check and "pkg:pypi/" in check
    verify = steps()[index("Verify the signature and the provenance as users do")]
    assert "cosign verify" in verify["run"] and "gh attestation verify" in verify["run"]
    assert "--custom-trusted-root" in verify["run"] and "--bundle" in verify["run"]
    assert index("build") < index("Sign the image (keyless)") < index(
        "Verify the signature and the provenance as users do")
    # the documented commands take the same flags as the ones the release runs
    docs = (ROOT / "docs" / "deploy.md").read_text()
    for command in ("gh attestation verify", "cosign verify"):
        assert flags(docs, command) == flags(verify["run"], command), command
        assert "--bundle" in flags(docs, "gh attestation verify")


def flags(text: str, command: str) -> set[str]:
    """The --flags of the first `command` line in `text`, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    (line,) = [ln for ln in joined.splitlines() if ln.strip().startswith(command)][:1]
    return set(re.findall(r"(--[a-z-]+)", line))


def test_both_pulled_platforms_are_run() -> None:
    run = steps()[index("Smoke both pulled platforms (arm64 under QEMU)")]["run"]
    assert 'for platform in linux/amd64 linux/arm64' in run
    assert '--platform "$platform"' in run and "--pull never" in run
    assert "aarch64" in run  # the arm64 one is checked to really be arm64
    assert index("Anonymous pull of the pushed image (the package must be public)") < index(
        "Smoke both pulled platforms (arm64 under QEMU)")
