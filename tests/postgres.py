"""A throwaway PostgreSQL server for tests: initdb + pg_ctl from Debian's ``postgresql`` package
(the session's ``postgres_bin`` fixture, tests/tools.py) on a free port, its own socket
directory, run as an unprivileged user when the tests run as root (PostgreSQL refuses root).
Skips the test when psycopg is missing.

Used by the demo's PostgreSQL test (one server per test) and the audit tests (one per module).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ports import free_port

PG_TIMEOUT_S = 120


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[tuple[str, int]]:
    """A running server with user ``txmq`` (trust auth), from the programs in ``bin_dir`` (the
    session's ``postgres_bin`` fixture); yields (libpq URL of database ``postgres``, port).
    Stopped and deleted on exit."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = str(bin_dir / "initdb"), str(bin_dir / "pg_ctl")
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
