"""The modules the build compiles to C with mypyc (docs/adr/0007), and whether they are current.

Owns: ``COMPILED``, the one list of compiled modules (``mypyc_build.py`` and the Makefile read
it); ``mode``, what this process runs (compiled or interpreted); ``check``, which refuses a
compiled build made from other sources than the ``.py`` files next to it. Why: an extension
module (``.so``) shadows the ``.py`` of the same name, so a stale one would silently run old
code after an edit. How: ``mypyc_build.py`` writes the SHA-256 of every compiled source into
``compiled.json`` (beside this file, not in git) once a build succeeded, and that it fixed
mypyc's free-instance race (``PATCHED``), and of the modules they import (``IMPORTED``: mypyc
inlines their constants); ``check`` hashes them again (~55 files, about a millisecond).
Must not: be compiled itself, or import a compiled module (it judges them), but
``txmq.checks`` (``invariant``, which ``txmq.errors`` re-exports: a stale one still imports and
is named here like any other).
"""

from __future__ import annotations

import hashlib
import json
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Final

from txmq.errors import TxmqError

# Paths below src/. The gRPC-facing modules (server.py, consume.py, decode.py) stay interpreted:
# grpc.aio picks how to run a handler with inspect.iscoroutinefunction / isasyncgenfunction,
# which are False for compiled functions, and mypyc compiles no async generators. A handler
# that decode.py's Python coroutine awaits (produce_rpcs.py) is a plain awaitable and compiles.
COMPILED: Final = (
    "txmq/checks.py",  # invariant: a C call from compiled modules (errors.py stays interpreted)
    "txmq/model.py",
    "txmq/format/record.py",
    "txmq/format/properties.py",
    "txmq/protocol/mapping.py",
    "txmq/protocol/wire.py",
    "txmq/store/checkpoint.py",
    "txmq/store/commit_log.py",
    "txmq/store/consume_queue.py",
    "txmq/store/disk.py",
    "txmq/store/dispatch.py",
    "txmq/store/flush.py",
    "txmq/store/index.py",
    "txmq/store/reader.py",
    "txmq/store/recent.py",
    "txmq/store/segment.py",
    "txmq/store/store.py",
    "txmq/store/replica.py",  # ship and append_shipped: once per follower round, both sides
    "txmq/txn/book.py",
    "txmq/txn/coordinator.py",
    "txmq/txn/ids.py",
    "txmq/txn/ledger.py",
    "txmq/txn/records.py",
    "txmq/txn/steps.py",
    "txmq/txn/values.py",
    "txmq/txn/views.py",
    "txmq/broker/calls.py",  # the handler lookup and deserializer gRPC calls (not inspects)
    "txmq/broker/clock.py",
    "txmq/broker/clients.py",  # note_publisher per transaction
    "txmq/broker/consume_rpcs.py",  # a receive up to its replies, AckMessage (issue 17)
    "txmq/broker/delivery.py",
    "txmq/broker/durable.py",
    "txmq/broker/election.py",  # InSync: several calls per follower round and per SYNC ack
    "txmq/broker/filter.py",
    "txmq/broker/flow.py",
    "txmq/broker/metrics.py",
    "txmq/broker/offsets.py",
    "txmq/broker/produce.py",
    "txmq/broker/produce_rpcs.py",  # coroutines that decode.py's Python wrapper awaits
    "txmq/broker/receipt.py",
    "txmq/broker/replies.py",
    "txmq/broker/replication.py",  # fetch and acknowledge; its gRPC handlers: replica_rpcs.py
    "txmq/broker/topics.py",  # ensure, settled: three calls per transaction
    "txmq/broker/waiters.py",
)

# The interpreted modules the compiled ones import. mypyc inlines their literal ``Final``
# constants (limits.py's bounds, say) into the C it generates, so an edit of one of them leaves
# a build running the old values until it is rebuilt: their hashes are recorded and checked as
# the compiled sources' are. tests/unit/test_compiled.py checks this list against the imports.
IMPORTED: Final = (
    "txmq/broker/data.py",
    "txmq/broker/delay.py",
    "txmq/broker/kept_end.py",
    "txmq/broker/leadership.py",
    "txmq/broker/membership.py",
    "txmq/broker/preferred.py",
    "txmq/errors.py",
    "txmq/frozen.py",
    "txmq/limits.py",
    "txmq/store/acked.py",
    "txmq/store/ballast.py",
    "txmq/store/config.py",
    "txmq/store/epochs.py",
    "txmq/store/health.py",
    "txmq/store/recovery.py",
    "txmq/store/repair.py",
    "txmq/store/retention.py",
    "txmq/store/space.py",
    "txmq/thread_names.py",
    "txmq/txn/bundle.py",
    "txmq/txn/replay.py",
)

SRC: Final = Path(__file__).resolve().parent.parent
RECORD: Final = SRC / "txmq" / "compiled.json"
# The record's entry saying the build fixed mypyc's free-instance race in the generated C
# (mypyc_patch.py, docs/adr/0007): a build without it may reuse a generator another thread runs.
PATCHED: Final = "mypyc_patch"


class StaleBuildError(TxmqError):
    """A compiled module does not match its source (an edit since the build, a partial build)."""


def source_hashes() -> dict[str, str]:
    """SHA-256 of every compiled module's source and of every module they import
    (``IMPORTED``), by path below src/."""
    return {
        path: hashlib.sha256((SRC / path).read_bytes()).hexdigest()
        for path in (*COMPILED, *IMPORTED)
    }


def extensions(path: str) -> list[Path]:
    """The extension modules that would be imported instead of ``path`` (a ``.py`` below src/)."""
    stem = (SRC / path).with_suffix("")
    return [p for p in (stem.with_name(stem.name + s) for s in EXTENSION_SUFFIXES) if p.exists()]


def compiled_modules() -> list[str]:
    """The listed modules that have an extension module (what imports as C)."""
    return [path for path in COMPILED if extensions(path)]


def mode() -> str:
    """What this tree runs: "compiled (mypyc, N modules)" or "interpreted"."""
    n = len(compiled_modules())
    return f"compiled (mypyc, {n} modules)" if n else "interpreted"


def problems() -> list[str]:
    """Why the compiled build cannot be trusted (empty: it matches the sources, or none)."""
    built = compiled_modules()
    listed = {(SRC / p).with_suffix("") for p in COMPILED}
    strays = [
        str(p.relative_to(SRC))
        for p in (SRC / "txmq").rglob("*.*")
        if p.name.endswith(tuple(EXTENSION_SUFFIXES))
        and p.with_name(p.name.split(".", 1)[0]) not in listed
    ]
    found = [f"{p} is not in txmq/compiled.py's list" for p in strays]
    if not built:
        return found
    if len(built) < len(COMPILED):
        missing = sorted(set(COMPILED) - set(built))
        found.append(f"a partial build: {', '.join(missing)} not compiled")
    try:
        recorded = json.loads(RECORD.read_bytes())
    except (OSError, ValueError):
        return [*found, f"no build record ({RECORD.name})"]
    if PATCHED not in recorded:
        found.append("built without mypyc_patch.py (mypyc's free-instance race)")
    hashes = source_hashes()
    found += [f"{p} changed since it was compiled" for p in built if recorded.get(p) != hashes[p]]
    found += [
        f"{p} changed since the build inlined its constants"
        for p in IMPORTED
        if recorded.get(p) != hashes[p]
    ]
    return found


def check() -> None:
    """Raise StaleBuildError naming what is stale and how to fix it, if anything is.

    Raises:
        StaleBuildError: a compiled module does not match its source.
    """
    found = problems()
    if found:
        raise StaleBuildError(
            f"the compiled modules in {SRC} do not match their sources ({'; '.join(found)}): "
            "run `make compiled` to rebuild them, or `make interpreted` to remove them"
        )
