"""``txmq demo --orders-db postgresql://...``: the order service keeps its orders in PostgreSQL
(the check-back reads them there, and the killed instance's open transaction is rolled back by
the server when its connection drops) and the demo is still consistent.

Method: a throwaway PostgreSQL cluster (initdb + pg_ctl on a free port, its own socket dir,
run as an unprivileged user when the test runs as root), then the demo against it with an
embedded broker. PostgreSQL's programs come from the session's ``postgres_bin`` fixture
(tests/tools.py: Debian's postgresql, installed when missing).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT
from tests.postgres import postgres_server


@pytest.fixture
def postgres_url(postgres_bin: Path) -> Iterator[str]:
    with postgres_server(postgres_bin) as (url, _port):
        yield url


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
