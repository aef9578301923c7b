"""Compile the broker's hot modules (txmq/compiled.py's COMPILED) to C with mypyc, in place.

Run by the Makefile after the editable install (``make .venv/.installed``, ``make test``,
``make demo``, ``make compiled``): the ``.so`` files land next to their ``.py`` files in src/
(not in git) and are imported instead of them; txmq/compiled.py refuses them once a source
changes (docs/adr/0007). Usage, from the repository's root with the venv's Python:

    .venv/bin/python mypyc_build.py           # build (incremental: mypyc rewrites changed C only)
    .venv/bin/python mypyc_build.py --clean   # remove every compiled module: run interpreted

TXMQ_COMPILE=0 in the environment does ``--clean`` instead of a build. Without a C compiler or
Python's headers it prints one ``txmq:`` line, removes any compiled module and exits 0: the
modules run interpreted (slower, same behaviour). A failed compile exits 1 and leaves none.
Between mypyc's C generation and the C compile, ``mypyc_patch.py`` fixes mypyc 2.4.1's
free-instance race in the generated deallocators (docs/adr/0007); generated code in a shape it
does not know fails the build with one ``txmq:`` line, and the build record says it was applied.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))

import mypyc_patch  # noqa: E402

from txmq import compiled  # noqa: E402  (src/ is not on the path before the line above)

# The shared library's name (src/txmq__mypyc.*.so): one per build, whatever the module list.
GROUP = "txmq"


def clean() -> list[Path]:
    """Remove every compiled module and the build record; the removed files."""
    suffixes = tuple(EXTENSION_SUFFIXES)
    gone = [p for p in (compiled.SRC / "txmq").rglob("*.*") if p.name.endswith(suffixes)]
    gone += [p for p in compiled.SRC.glob("*__mypyc.*") if p.name.endswith(suffixes)]
    for path in gone:
        path.unlink()
    compiled.RECORD.unlink(missing_ok=True)
    return gone


def missing_toolchain() -> str | None:
    """What is missing to compile C extensions here, or None."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return f"no Python headers ({sysconfig.get_paths()['include']}/Python.h)"
    return None


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    hashes = compiled.source_hashes()  # before mypyc reads them: an edit meanwhile is stale
    compiled.RECORD.unlink(missing_ok=True)
    os.chdir(ROOT)
    before = mypyc_patch.fingerprints(Path("build"))  # what the last build compiled, patched
    extensions = mypycify(
        ["--config-file", "pyproject.toml", *(f"src/{p}" for p in compiled.COMPILED)],
        opt_level="3",
        multi_file=True,
        group_name=GROUP,
    )
    # Between mypyc's C and the C compile: its free-instance race fixed (mypyc_patch.py).
    sources = [Path(s) for ext in extensions for s in ext.sources if s.endswith(".c")]
    patched = mypyc_patch.apply(sources, before)
    setup(
        name="txmq-compiled",
        script_args=["-q", "build_ext", "--inplace", "-j", str(os.cpu_count() or 1)],
        package_dir={"": "src"},
        ext_modules=extensions,
    )
    record = {**hashes, compiled.PATCHED: f"{patched} free-instance deallocators reordered"}
    compiled.RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def main() -> int:
    if sys.argv[1:] == ["--clean"] or os.environ.get("TXMQ_COMPILE") == "0":
        clean()
        print("txmq: no compiled modules: the broker runs interpreted")
        return 0
    if sys.argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    lack = missing_toolchain()
    if lack is not None:
        clean()
        print(f"txmq: {lack}: the broker runs interpreted, slower (docs/adr/0007)")
        return 0
    try:
        build()
    except mypyc_patch.PatchError as exc:
        clean()
        print(
            f"txmq: mypyc_patch.py cannot fix the generated C ({exc}); nothing compiled is left",
            file=sys.stderr,
        )
        return 1
    except (SystemExit, Exception) as exc:  # mypyc's errors and setuptools' exit both
        clean()
        print(
            f"txmq: compiling with mypyc failed ({exc}); nothing compiled is left", file=sys.stderr
        )
        return 1
    print(f"txmq: {compiled.mode()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
