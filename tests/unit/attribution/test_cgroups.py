"""`/proc/<pid>/cgroup` -> pod UID and container id: literal text, then a crafted /proc tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podgpu.attribution.cgroups import CgroupIdentity, CgroupReader, parse_cgroup

PROC = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
C64 = "3f1e0a3b1c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7"
UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
UID_ = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # systemd driver, v2, containerd (burstable and guaranteed)
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
         f"cri-containerd-{C64}.scope\n", CgroupIdentity(UID, C64)),
        (f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{C64}.scope",
         CgroupIdentity(UID, C64)),
        # systemd, v1: one line per controller; CRI-O and docker scopes
        (f"5:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
         f"/crio-{C64}.scope\n1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/"
         f"kubepods-besteffort-pod{UID_}.slice/crio-{C64}.scope\n", CgroupIdentity(UID, C64)),
        (f"0::/kubepods.slice/kubepods-pod{UID_}.slice/docker-{C64}.scope",
         CgroupIdentity(UID, C64)),
        # cgroupfs driver, v1 and v2: dashes in the UID, bare container id
        (f"4:memory:/kubepods/burstable/pod{UID}/{C64}", CgroupIdentity(UID, C64)),
        (f"0::/kubepods/besteffort/pod{UID}/{C64}", CgroupIdentity(UID, C64)),
        (f"0::/kubepods/pod{UID}/{C64}", CgroupIdentity(UID, C64)),
        # kind / a kubelet with --cgroup-root: the pod slice is nested one level deeper
        (f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
         f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{C64}.scope",
         CgroupIdentity(UID, C64)),
        # private cgroup namespace: leading ../ entries
        (f"0::/../../kubepods-burstable-pod{UID_}.slice/cri-containerd-{C64}.scope",
         CgroupIdentity(UID, C64)),
        # dcgm-exporter's own test shapes
        ("0::/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/container123",
         CgroupIdentity("a9c80282-3f6b-4d5b-84d5-a137a6668011", "")),
        ("0::/kubepods.slice/kubepods-besteffort.slice/"
         "kubepods-besteffort-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice",
         CgroupIdentity("a9c80282-3f6b-4d5b-84d5-a137a6668011", "")),
        # static pod: md5 UID without dashes
        (f"0::/kubepods/burstable/pod6c9b1e0f2a3d4c5b8e7f9a0b1c2d3e4f/{C64}",
         CgroupIdentity("6c9b1e0f2a3d4c5b8e7f9a0b1c2d3e4f", C64)),
        # a v1 line without the container wins over an earlier one without it
        (f"3:cpu:/kubepods/pod{UID}\n2:memory:/kubepods/pod{UID}/{C64}\n",
         CgroupIdentity(UID, C64)),
        # not in a pod
        ("0::/system.slice/containerd.service\n", None),
        ("0::/docker/" + C64 + "\n", None),
        ("0::/\n", None),
        ("", None),
        ("garbage without colons\n", None),
        # `kubepods` itself must not be read as `pod<uid>`
        ("0::/kubepods.slice/kubepods-burstable.slice\n", None),
        # too short to be a UID
        ("0::/kubepods/burstable/pod1234/abc\n", None),
    ],
)
def test_parse_cgroup(text: str, expected: CgroupIdentity | None) -> None:
    assert parse_cgroup(text) == expected


def test_reader_resolves_every_fixture_shape() -> None:
    reader = CgroupReader(str(PROC))
    got = reader.resolve([4101, 4102, 4103, 4104, 4105, 4106, 4107, 4108, 4199])
    assert got == {
        4101: CgroupIdentity(UID, C64),
        4102: CgroupIdentity("a9c80282-3f6b-4d5b-84d5-a137a6668011",
                             "aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233"),
        4103: CgroupIdentity("7d0e4c1a-22b3-4c5d-8e9f-0a1b2c3d4e5f",
                             "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        4105: CgroupIdentity("5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9",
                             "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"),
        4106: CgroupIdentity("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                             "aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233"),
        4107: CgroupIdentity("6c9b1e0f2a3d4c5b8e7f9a0b1c2d3e4f",
                             "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        4108: CgroupIdentity(UID, ""),
    }
    assert reader.errors == 0  # 4104 (host daemon) and 4199 (exited) are not errors


def test_reader_caches_while_a_pid_stays_and_rereads_after_it_left(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    f = tmp_path / "7" / "cgroup"
    f.write_text(f"0::/kubepods/pod{UID}/{C64}\n")
    reader = CgroupReader(str(tmp_path))
    assert reader.resolve([7])[7].container_id == C64
    f.write_text(f"0::/kubepods/pod{UID}/{'b' * 64}\n")
    assert reader.resolve([7])[7].container_id == C64  # cached while pid 7 stays on the GPU
    assert reader.resolve([]) == {}  # pid 7 gone: forgotten
    assert reader.resolve([7])[7].container_id == "b" * 64  # a new process with that pid


def test_unreadable_cgroup_file_counts_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "9" / "cgroup").mkdir(parents=True)  # EISDIR: an OSError that is not "exited"
    reader = CgroupReader(str(tmp_path))
    assert reader.resolve([9]) == {}
    assert reader.resolve([]) == {}
    assert reader.resolve([9]) == {}
    assert reader.errors == 2
    assert len([r for r in caplog.records if "cannot read" in r.message]) == 1  # logged once


def _permission_denied_case(root: Path) -> tuple[int, str]:
    """Resolve pid 9 whose cgroup file cannot be read; (errors, log text)."""
    import logging

    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = _Keep()
    logging.getLogger("podgpu").addHandler(handler)
    try:
        reader = CgroupReader(str(root))
        assert reader.resolve([9]) == {}
        return reader.errors, "\n".join(records)
    finally:
        logging.getLogger("podgpu").removeHandler(handler)


def test_permission_denied_hints_at_host_pid() -> None:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="podgpu-proc-"))
    root.chmod(0o755)
    (root / "9").mkdir(mode=0o755)
    (root / "9" / "cgroup").write_text("0::/\n")
    (root / "9" / "cgroup").chmod(0)
    if os.geteuid() != 0:
        errors, text = _permission_denied_case(root)
        assert errors == 1 and "hostPID" in text
        return
    # root reads any file: check as an unprivileged user in a child process (CI runs as root)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            errors, text = _permission_denied_case(root)
            code = 0 if errors == 1 and "hostPID" in text else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
