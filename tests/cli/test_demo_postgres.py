"""``txmq demo --orders-db postgresql://...``: the order service keeps its orders in PostgreSQL
(the check-back reads them there, and the killed instance's open transaction is rolled back by
the server when its connection drops) and the demo is still consistent.

Method: a throwaway PostgreSQL cluster (initdb + pg_ctl on a free port, its own socket dir,
run as an unprivileged user when the test runs as root), then the demo against it with an
embedded broker. Skipped when PostgreSQL's binaries or psycopg are missing.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

PG_BIN_DIRS = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13)]


def _bin(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([*PG_BIN_DIRS, os.environ["PATH"]]))
    if found is None:
        pytest.skip(f"PostgreSQL's {name} is not installed")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def postgres_url() -> Iterator[str]:
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    user = None
    # Not under pytest's tmp_path: its root-only parent would lock the server's user out.
    work = Path(tempfile.mkdtemp(prefix="txmq-pg-"))
    work.chmod(0o755)
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        user = "postgres" if _has_user("postgres") else "nobody"
        entry = pwd.getpwnam(user)
        os.chown(work, entry.pw_uid, entry.pw_gid)
    data, port = work / "data", _free_port()

    def pg(*argv: str) -> None:
        subprocess.run(argv, user=user, check=True, capture_output=True, timeout=120)

    pg(initdb, "-D", str(data), "-A", "trust", "-U", "txmq", "-E", "UTF8", "--no-sync")
    opts = f"-p {port} -k {work} -c listen_addresses=127.0.0.1"
    pg(pg_ctl, "-D", str(data), "-l", str(work / "log"), "-w", "-t", "60", "-o", opts, "start")
    try:
        yield f"postgresql://txmq@127.0.0.1:{port}/postgres"
    finally:
        pg(pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        shutil.rmtree(work)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_demo_with_orders_in_postgresql(postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    args = ["demo", "--orders", "30", "--seed", "5", "--no-spark", "--orders-db", postgres_url]
    r = subprocess.run(
        [sys.executable, "-m", "txmq.cli", *args, "--work-dir", str(tmp_path / "work")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "CONSISTENT" in r.stdout and "INCONSISTENT" not in r.stdout
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert row is not None and 0 < row[0] < 30  # some orders were rolled back
    assert not (tmp_path / "work" / "orders.db").exists()
