"""A throwaway PostgreSQL server for tests: initdb + pg_ctl from Debian's ``postgresql`` package
on a free port, its own socket directory, run as an unprivileged user when the tests run as
root (PostgreSQL refuses root). Skips the test when the binaries or psycopg are missing.

Used by the demo's PostgreSQL test (one server per test) and the audit tests (one per module).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_BIN_DIRS = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13)]
PG_TIMEOUT_S = 120


def _bin(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([*PG_BIN_DIRS, os.environ["PATH"]]))
    if found is None:
        pytest.skip(f"PostgreSQL's {name} is not installed")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextmanager
def postgres_server() -> Iterator[tuple[str, int]]:
    """A running server with user ``txmq`` (trust auth); yields (libpq URL of database
    ``postgres``, port). Stopped and deleted on exit."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    user = None
    # Not under pytest's tmp_path: its root-only parent would lock the server's user out.
    work = Path(tempfile.mkdtemp(prefix="txmq-pg-"))
    work.chmod(0o755)
    if os.geteuid() == 0:
        user = "postgres" if _has_user("postgres") else "nobody"
        entry = pwd.getpwnam(user)
        os.chown(work, entry.pw_uid, entry.pw_gid)
    data, port = work / "data", free_port()

    def pg(*argv: str) -> None:
        subprocess.run(argv, user=user, check=True, capture_output=True, timeout=PG_TIMEOUT_S)

    pg(initdb, "-D", str(data), "-A", "trust", "-U", "txmq", "-E", "UTF8", "--no-sync")
    opts = f"-p {port} -k {work} -c listen_addresses=127.0.0.1"
    pg(pg_ctl, "-D", str(data), "-l", str(work / "log"), "-w", "-t", "60", "-o", opts, "start")
    try:
        yield f"postgresql://txmq@127.0.0.1:{port}/postgres", port
    finally:
        pg(pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        shutil.rmtree(work)
