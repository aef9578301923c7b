"""Fix mypyc 2.4.1's free-instance race in the C it generates, before the C compile.

mypyc keeps one freed object per generator, environment and closure class for reuse (the
"free instance", python/mypy#19316). On a GIL build of CPython the slot is one per process
(``CPyThreadLocal`` is empty there), and the generated deallocator publishes the object to it
*before* clearing its fields::

    if (X_free_instance == NULL) {
        X_free_instance = self;
        Py_CLEAR(self->seg);            // may run a finalizer that releases the GIL
        self->segment_size = CPY_INT_TAG; ...
        return;
    }

Clearing a field can drop the last reference to an object whose finalizer releases the GIL
(``OsFile.__del__`` closes its descriptor) or calls the same function again; either way a new
generator can be set up in ``self`` meanwhile, and the rest of the clearing then wipes that live
generator's fields (``AttributeError: attribute 'segment_size' of 'iter_raw_gen' undefined``,
or a walk that ends early). docs/adr/0007 "The free-instance race" and
docs/upstream/mypyc-free-instance-race.md have the whole story.

``patch`` rewrites each such deallocator to clear the fields first and take the slot only if it
is still empty afterwards (no Python code runs between that test and the store); otherwise the
object is freed as usual. ``check`` accepts the generated C only if every line that names a
free-instance slot has one of the shapes known here and every slot has exactly one patched
deallocator, so a mypyc upgrade that emits anything else fails the build (``PatchError``, one
line) instead of bringing the race back.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

MARK = "/* txmq: fields cleared before the slot is taken (mypyc_patch.py) */"

_SLOT = r"(?P<slot>\w+_free_instance)"

# The deallocator's reuse branch as mypyc 2.4.1's emit_reuse_dealloc writes it.
_UNPATCHED = re.compile(
    rf"^    if \({_SLOT} == NULL\) \{{\n"
    r"        (?P=slot) = self;\n"
    r"(?P<body>(?:        .*\n)*?)"
    r"        return;\n"
    r"    \}\n",
    re.M,
)
_PATCHED = re.compile(
    rf"^    if \({_SLOT} == NULL\) \{{\n"
    rf"        {re.escape(MARK)}\n"
    r"(?P<body>(?:        .*\n)*?)"
    r"        if \((?P=slot) == NULL\) \{\n"
    r"            (?P=slot) = self;\n"
    r"            return;\n"
    r"        \}\n"
    r"    \}\n",
    re.M,
)

# What the clearing may do: reset a field, drop a reference (Py_CLEAR sets the field to NULL
# before the decref), drop a boxed int after resetting its field. No return, goto or call else.
_FIELD = r"self->[\w.]+"
_BODY_LINE = re.compile(
    rf"(Py_CLEAR\({_FIELD}\);"
    rf"|{_FIELD} = -?[\w.]+;"
    rf"|if \(CPyTagged_CheckLong\({_FIELD}\)\) \{{"
    rf"|CPyTagged __tmp = {_FIELD};"
    r"|Py_XDECREF\(CPyTagged_LongAsObject\(__tmp\)\);"
    r"|\} else \{"
    r"|\})"
)

# Every line that names a slot: its declaration, the setup that takes the object back, and the
# patched deallocator. Anything else is a shape this module does not know.
_KNOWN_LINES = {
    "declaration": re.compile(rf" *(extern )?CPyThreadLocal \w+ \*{_SLOT};"),
    "setup": re.compile(rf"    if \({_SLOT} != NULL\) \{{"),
    "setup take": re.compile(rf"        self = {_SLOT};"),
    "setup empty": re.compile(rf"        {_SLOT} = NULL;"),
    "dealloc": re.compile(rf"    if \({_SLOT} == NULL\) \{{"),
    "dealloc recheck": re.compile(rf"        if \({_SLOT} == NULL\) \{{"),
    "dealloc publish": re.compile(rf"            {_SLOT} = self;"),
}


class PatchError(Exception):
    """The generated C is not what this patch expects (one line: file, line, what)."""


def _reorder(match: re.Match[str], where: str) -> str:
    slot, body = match["slot"], match["body"]
    for line in body.splitlines():
        if not _BODY_LINE.fullmatch(line.strip()):
            raise PatchError(f"{where}: {slot}'s deallocator clears with {line.strip()!r}")
    return (
        f"    if ({slot} == NULL) {{\n        {MARK}\n{body}"
        f"        if ({slot} == NULL) {{\n            {slot} = self;\n            return;\n"
        "        }\n    }\n"
    )


def patch(text: str, name: str) -> str:
    """``text`` (the C file ``name``) with every unpatched reuse deallocator reordered."""
    return _UNPATCHED.sub(lambda m: _reorder(m, name), text)


def check(text: str, name: str) -> Counter[str]:
    """How many lines of each known shape name a slot in ``text``; PatchError on any other.

    Raises:
        PatchError: a line names a slot in an unknown shape (an unpatched deallocator too).
    """
    shapes: Counter[str] = Counter()
    for n, line in enumerate(text.splitlines(), 1):
        if "_free_instance" not in line:
            continue
        shape = next((k for k, p in _KNOWN_LINES.items() if p.fullmatch(line)), None)
        if shape is None:
            raise PatchError(f"{name}:{n}: unexpected use of a free instance: {line.strip()!r}")
        shapes[shape] += 1
    return shapes


def fingerprints(directory: Path) -> dict[Path, tuple[str, int]]:
    """SHA-256 and mtime (ns) of every C file below ``directory``: taken before mypyc writes."""
    return {
        p: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in directory.rglob("*.c")
    }


def apply(files: Iterable[Path], before: dict[Path, tuple[str, int]] | None = None) -> int:
    """Patch the generated C ``files`` in place; the number of patched deallocators, which then
    covers every slot declared in them. A file that comes out as it was ``before`` mypyc rewrote
    it unpatched gets its time back, so the C compile skips it as unchanged.

    Raises:
        PatchError: the generated code is not in the shape this patch expects.
    """
    shapes: Counter[str] = Counter()
    slots: dict[str, Counter[str]] = {"setup": Counter(), "dealloc": Counter()}
    for path in files:
        text = path.read_text()
        fixed = patch(text, path.name)
        if fixed != text:
            path.write_text(fixed)
            old = (before or {}).get(path)
            if old is not None and old[0] == hashlib.sha256(fixed.encode()).hexdigest():
                os.utime(path, ns=(old[1], old[1]))
        shapes += check(fixed, path.name)
        slots["setup"].update(m["slot"] for m in _KNOWN_LINES["setup"].finditer(fixed))
        slots["dealloc"].update(m["slot"] for m in _PATCHED.finditer(fixed))
    patched = sum(slots["dealloc"].values())
    lines = ("dealloc", "dealloc recheck", "dealloc publish")
    if patched == 0 or set(slots["dealloc"]) != set(slots["setup"]):
        raise PatchError(
            f"{patched} patched deallocators for {len(slots['setup'])} free-instance slots: "
            "mypyc's generated code changed shape"
        )
    if max(slots["dealloc"].values()) > 1 or any(shapes[k] != patched for k in lines):
        raise PatchError(f"free-instance lines {dict(shapes)} do not match {patched} deallocators")
    return patched
