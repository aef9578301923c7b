"""The broker's clock: ``wall_ms``.

Owns: reading the wall clock for the broker layer (cores get it injected as ``now_ms``).
Why a module of its own: it is compiled (docs/adr/0007), so each reading (about five per
transaction, from compiled and interpreted callers) runs no Python frame (issue 17, eleventh
pass); parts.py, which wires it in, is not compiled.
"""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
