"""The kernel changes waiting for a GPU (bench/pending/*.patch) still apply to the committed kernels
and compile for sm_90a without spills, so the next GPU session can run bench/ab_patch.py on them as
they are (no GPU needed here)."""
import importlib.util
import shutil

import pytest

from gemmtrace import registry
from gemmtrace.build import build
from gemmtrace.paths import KERNELS_DIR, ROOT

PATCHES = sorted((ROOT / "bench" / "pending").glob("*.patch"))


def _ab_patch():
    spec = importlib.util.spec_from_file_location("ab_patch", ROOT / "bench" / "ab_patch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMTRACE_CACHE", str(tmp_path / "gtcache"))


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_pending_patch_applies_and_compiles_without_spills(tmp_path, cache, patch):
    ab = _ab_patch()
    folder = ab.patched_copy(patch, tmp_path / "sm90")
    changed = [f.name for f in folder.iterdir() if f.read_bytes() != (KERNELS_DIR / "sm90" / f.name).read_bytes()]
    assert changed, f"{patch.name} changed no kernel file"
    variant = ab.register_patched("v8", folder)  # v8 includes the shared persistent body
    try:
        r = build(variant)
        assert {res.profiled for res in r.resources} == {True, False}
        for res in r.resources:
            assert res.spills == 0 and res.stack_bytes == 0, f"{patch.name}: {res}"
    finally:
        registry.KERNELS.pop(variant, None)


def test_a_patch_that_does_not_apply_is_refused(tmp_path):
    ab = _ab_patch()
    bad = tmp_path / "bad.patch"
    bad.write_text(
        "diff --git a/kernels/sm90/v8_dynamic.cu b/kernels/sm90/v8_dynamic.cu\n"
        "--- a/kernels/sm90/v8_dynamic.cu\n+++ b/kernels/sm90/v8_dynamic.cu\n"
        "@@ -1,2 +1,2 @@\n-a line that is not in the file\n+its replacement\n context that is not there either\n"
    )
    with pytest.raises(ValueError, match="does not apply"):
        ab.patched_copy(bad, tmp_path / "sm90")
    assert ab.kernel_hunks("diff --git a/gemmtrace/x.py b/gemmtrace/x.py\n--- a\n") == ""
