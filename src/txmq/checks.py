"""``invariant``, the check of a programmer invariant (TigerStyle's assertions, kept under -O).

Owns: the one definition of ``invariant``; ``txmq.errors`` re-exports it, and every module
imports it from there. Why its own module: the build compiles it with mypyc (txmq/compiled.py),
so a compiled module's check is a C call (~26 per transaction in the store loop) where a call
into an interpreted ``errors.py`` cost a Python frame each; ``errors.py`` stays interpreted
(its exception classes are subclassed, pickled and walked by ``from_code``).
Must not: import anything (every module, ``txmq.errors`` included, imports this one).
"""

from __future__ import annotations


def invariant(condition: bool, message: str) -> None:
    """Check a programmer invariant even under ``python -O``.

    ``assert`` disappears with ``-O``; storage invariants must not. A failure here means the code
    is wrong, and the only safe reaction is to stop (TigerStyle): callers never catch it.
    """
    if not condition:
        raise AssertionError(message)
