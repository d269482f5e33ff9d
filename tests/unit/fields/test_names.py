"""The generated DCGM name table and XID catalog, checked against the hand-written catalog."""

from __future__ import annotations

from podgpu.fields import names
from podgpu.fields.catalog import ALIASES, CATALOG, dcgm_id, lookup
from podgpu.fields.xid import catalog as xid_catalog


def test_every_catalog_field_id_agrees_with_go_dcgms_table() -> None:
    ids = names.ids()
    disagree = [(f.name, f.id, ids[f.name]) for f in CATALOG if f.name in ids and ids[f.name] != f.id]
    assert disagree == []
    # every catalog name (DCGM_EXP_* included) is a name dcgm-exporter would accept
    assert [f.name for f in CATALOG if f.name not in ids] == []


def test_every_alias_resolves_to_the_same_id_as_its_target() -> None:
    ids = names.ids()
    for alias, target in ALIASES.items():
        if alias in ids:
            assert ids[alias] == dcgm_id(target), alias


def test_table_kinds_and_size() -> None:
    assert names.kind("DCGM_FI_DEV_GPU_TEMP") == "current"
    assert names.kind("dcgm_gpu_temp") == "legacy"
    assert names.kind("DCGM_FI_DEV_GPU_TEMP_CELSIUS") == "later"
    assert len(names.ids()) > 1000
    assert "ec245c09fe3e" in names.source()


def test_1x_names_resolve_to_the_fields_dcgm_exporter_reads() -> None:
    f = lookup("dcgm_fb_used")
    assert f is not None and f.name == "DCGM_FI_DEV_FB_USED"


def test_xid_catalog_is_complete_from_0() -> None:
    codes = sorted(xid_catalog())
    assert codes == list(range(len(codes))) and len(codes) >= 170
    assert all(text.strip() for text in xid_catalog().values())
