"""mypyc_patch.py, the build's fix of mypyc's free-instance race (docs/adr/0007), on C in the
shape mypyc 2.4.1 generates: each reuse deallocator is reordered (fields cleared, then the slot
taken only if still empty), a patched file is left alone, and any other shape fails the build
with a message naming the file and line. Runs on either build (no compiler needed).
The compiled behaviour itself: test_compiled_generators.py."""

from __future__ import annotations

import os
from pathlib import Path

import mypyc_patch
import pytest
from mypyc_patch import PatchError

DECLARATION = "CPyThreadLocal m___g_genObject *m___g_gen_free_instance;\n"

DEALLOC = """\
static void
m___g_gen_dealloc(m___g_genObject *self)
{
    PyObject_GC_UnTrack(self);
    if (m___g_gen_free_instance == NULL) {
        m___g_gen_free_instance = self;
        Py_CLEAR(self->___mypyc_generator_frame_attribute__seg);
        if (CPyTagged_CheckLong(self->___mypyc_generator_frame_attribute__size)) {
            CPyTagged __tmp = self->___mypyc_generator_frame_attribute__size;
            self->___mypyc_generator_frame_attribute__size = CPY_INT_TAG;
            Py_XDECREF(CPyTagged_LongAsObject(__tmp));
        } else {
            self->___mypyc_generator_frame_attribute__size = CPY_INT_TAG;
        }
        self->___mypyc_generator_frame_attribute__timeout = -113.0;
        self->___mypyc_next_label__ = -113;
        return;
    }
    CPy_TRASHCAN_BEGIN(self, m___g_gen_dealloc)
    CPyDef_m___g_gen_clear((PyObject *)self);
    Py_TYPE(self)->tp_free((PyObject *)self);
    CPy_TRASHCAN_END(self)
    done: ;
}
"""

SETUP = """\
PyObject *CPyDef_m_____mypyc__g_gen_setup(PyObject *cpy_r_type)
{
    m___g_genObject *self;
    if (m___g_gen_free_instance != NULL) {
        self = m___g_gen_free_instance;
        m___g_gen_free_instance = NULL;
        Py_SET_REFCNT(self, 1);
        PyObject_GC_Track(self);
        return (PyObject *)self;
    }
    self = (m___g_genObject *)type->tp_alloc(type, 0);
    return (PyObject *)self;
}
"""


def _generated(tmp_path: Path, dealloc: str = DEALLOC) -> Path:
    path = tmp_path / "__native_m.c"
    path.write_text(DECLARATION + dealloc + SETUP)
    return path


def test_the_deallocator_clears_first_and_takes_the_slot_only_if_still_empty(
    tmp_path: Path,
) -> None:
    path = _generated(tmp_path)
    assert mypyc_patch.apply([path]) == 1
    text = path.read_text()
    clear = text.index("Py_CLEAR(self->___mypyc_generator_frame_attribute__seg)")
    publish = text.index("            m___g_gen_free_instance = self;\n            return;\n")
    recheck = text.index("        if (m___g_gen_free_instance == NULL) {\n")
    assert clear < recheck < publish and text.count("free_instance = self;") == 1
    assert text.count("self->___mypyc_next_label__ = -113;") == 1
    # A rebuild hands the patch its own output (mypyc keeps unchanged files): left as it is.
    mtime = path.stat().st_mtime_ns
    assert mypyc_patch.apply([path]) == 1
    assert path.read_text() == text and path.stat().st_mtime_ns == mtime


def test_a_file_mypyc_rewrote_as_it_was_keeps_its_time_so_gcc_skips_it(tmp_path: Path) -> None:
    """mypyc rewrites a file it generates the same (unpatched) C for, since ours differs; once
    patched again it is what was compiled last time, so it gets that time back."""
    path = _generated(tmp_path)
    mypyc_patch.apply([path])
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = mypyc_patch.fingerprints(tmp_path)
    patched = path.read_text()
    path.write_text(DECLARATION + DEALLOC + SETUP)  # what mypyc writes, with a new time
    assert mypyc_patch.apply([path], before) == 1
    assert path.read_text() == patched and path.stat().st_mtime_ns == 1_000_000_000
    path.write_text(DECLARATION + DEALLOC.replace("-113;", "-114;") + SETUP)  # a real change
    assert mypyc_patch.apply([path], before) == 1
    assert path.stat().st_mtime_ns > 1_000_000_000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # A deallocator that calls something while clearing: its order is not ours to vouch for.
        (
            ("        return;\n    }\n", "        CPy_Something(self);\n        return;\n    }\n"),
            "__native_m.c: m___g_gen_free_instance's deallocator clears with "
            "'CPy_Something(self);'",
        ),
        # mypyc publishing the object another way: an unpatched deallocator stays, by its line.
        (
            (
                "        m___g_gen_free_instance = self;\n",
                "        m___g_gen_free_instance = (m___g_genObject *)self;\n",
            ),
            "__native_m.c:7: unexpected use of a free instance: "
            "'m___g_gen_free_instance = (m___g_genObject *)self;'",
        ),
        # No reuse deallocator left for a slot that setup still takes from.
        (
            ("    if (m___g_gen_free_instance == NULL) {\n", "    if (0) {\n"),
            "__native_m.c:7: unexpected use of a free instance: 'm___g_gen_free_instance = self;'",
        ),
    ],
)
def test_any_other_shape_fails_the_build_naming_it(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = _generated(tmp_path, DEALLOC.replace(*change))
    with pytest.raises(PatchError) as caught:
        mypyc_patch.apply([path])
    assert str(caught.value) == message


def test_generated_code_without_any_patched_deallocator_fails(tmp_path: Path) -> None:
    path = tmp_path / "__native_m.c"
    path.write_text(DECLARATION + SETUP)
    with pytest.raises(PatchError, match="0 patched deallocators for 1 free-instance slots"):
        mypyc_patch.apply([path])
